/*
 * test_config.c - config.c: defaults with an empty environment, each
 * variable's good and bad values (table-driven: a bad value must give -1
 * and one line naming the variable and the value), byte suffixes, the
 * MOEFT_KV selectors, a MOEFT_PROFILE file with a syntax error, the
 * unknown-variable check and the one-line summary.
 */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "media.h"
#include "kvsnap.h"
#include "testutil.h"
#include "wal.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

/* The environment config_load sees: a small table instead of getenv. */
static const char *env_names[8], *env_values[8];
static unsigned env_n;

static void env_clear(void)
{
	env_n = 0;
}

static void env_set(const char *name, const char *value)
{
	env_names[env_n] = name;
	env_values[env_n++] = value;
}

static const char *env_get(const char *name)
{
	unsigned i;

	for (i = 0; i < env_n; i++)
		if (strcmp(env_names[i], name) == 0)
			return env_values[i];
	return NULL;
}

static int load1(struct moeft_config *c, const char *name, const char *value,
		 char *err, size_t errlen)
{
	env_clear();
	env_set(name, value);
	return config_load(c, env_get, err, errlen);
}

/* ---- defaults ------------------------------------------------------------ */

static void test_defaults(void)
{
	struct moeft_config c;
	struct passwd *pw = getpwuid(geteuid());
	char err[256] = "x", by_name[512], by_uid[512];

	env_clear();
	CU_ASSERT_EQUAL_FATAL(config_load(&c, env_get, err, sizeof err), 0);
	CU_ASSERT_STRING_EQUAL(err, "");
	/* A directory named by the login name (from /etc/passwd) or the uid:
	 * a log per process in it (logname.h). */
	snprintf(by_name, sizeof by_name, "/dev/shm/moeft-%s", pw ? pw->pw_name : "?");
	snprintf(by_uid, sizeof by_uid, "/dev/shm/moeft-%u", (unsigned)geteuid());
	if (strcmp(c.wal_path, by_name) != 0 && strcmp(c.wal_path, by_uid) != 0)
		fprintf(stderr, "\ndefault wal path: %s\n", c.wal_path);
	CU_ASSERT(strcmp(c.wal_path, by_name) == 0 || strcmp(c.wal_path, by_uid) == 0);
	CU_ASSERT_EQUAL(c.wal_dir, 1);
	CU_ASSERT_EQUAL(c.wal_size, GiB);
	CU_ASSERT_EQUAL(c.numa_node, -1);
	CU_ASSERT_EQUAL(c.window, 16);
	CU_ASSERT_EQUAL(c.ring_bytes, 64 * MiB);
	CU_ASSERT_STRING_EQUAL(c.profile, "auto");
	CU_ASSERT_STRING_EQUAL(c.kv_rules, "");
	CU_ASSERT_EQUAL(c.kv_count, 0);
	CU_ASSERT_EQUAL(c.log_level, WAL_LOG_WARN);
	CU_ASSERT_EQUAL(c.disable, 0);
	CU_ASSERT_EQUAL(c.strict, 0);
	CU_ASSERT_EQUAL(c.force_fresh, 0);
	CU_ASSERT_EQUAL(c.commit_async, 0);
	CU_ASSERT_EQUAL(c.restore_at_step, 0);
}

/* A variable set to "" is unset. */
static void test_empty_is_unset(void)
{
	static const char *const names[] = {
		"MOEFT_WAL", "MOEFT_WAL_SIZE", "MOEFT_NUMA_NODE", "MOEFT_WINDOW", "MOEFT_COMMIT",
		"MOEFT_PROFILE", "MOEFT_KV", "MOEFT_KV_TRACK", "MOEFT_LOG", "MOEFT_DISABLE",
		"MOEFT_STRICT", "MOEFT_RESTORE_AT", "MOEFT_KERNEL_IMAGE", "MOEFT_FORCE_FRESH",
		"MOEFT_RING",
	};
	struct moeft_config c;
	char err[256];
	size_t i;

	for (i = 0; i < NELEM(names); i++) {
		CU_ASSERT_EQUAL(load1(&c, names[i], "", err, sizeof err), 0);
		CU_ASSERT_EQUAL(c.window, 16);
		CU_ASSERT_EQUAL(c.ring_bytes, 64 * MiB);
		CU_ASSERT_EQUAL(c.wal_size, GiB);
		CU_ASSERT_STRING_EQUAL(c.profile, "auto");
	}
}

/* ---- each variable, good and bad ------------------------------------------ */

enum field { F_NONE, F_WAL, F_SIZE, F_WINDOW, F_COMMIT, F_PROFILE, F_KV, F_LOG, F_DISABLE,
	     F_STRICT, F_RESTORE_AT, F_FORCE_FRESH, F_KV_TRACK, F_RING };

static const struct vcase {
	const char *name, *value;
	int rc;
	enum field field;
	uint64_t want;          /* the field's value when rc == 0 */
	const char *msg;        /* the whole message when rc == -1 */
} cases[] = {
	/* MOEFT_WAL */
	{ "MOEFT_WAL", "/dev/shm/serve.wal", 0, F_WAL, 0, NULL },
	{ "MOEFT_WAL", "/dev/dax0.0", 0, F_WAL, 0, NULL },
	{ "MOEFT_WAL", "serve.wal", -1, F_NONE, 0,
	  "MOEFT_WAL='serve.wal': must be an absolute path (a server started elsewhere must log to the same place)" },
	{ "MOEFT_WAL", "./serve.wal", -1, F_NONE, 0,
	  "MOEFT_WAL='./serve.wal': must be an absolute path (a server started elsewhere must log to the same place)" },
	{ "MOEFT_WAL", "/", -1, F_NONE, 0, "MOEFT_WAL='/': must not be the root directory" },
	{ "MOEFT_WAL", "//", -1, F_NONE, 0, "MOEFT_WAL='//': must not be the root directory" },
	/* MOEFT_WAL_SIZE */
	{ "MOEFT_WAL_SIZE", "1G", 0, F_SIZE, GiB, NULL },
	{ "MOEFT_WAL_SIZE", "1g", 0, F_SIZE, GiB, NULL },
	{ "MOEFT_WAL_SIZE", "3GiB", 0, F_SIZE, 3 * GiB, NULL },
	{ "MOEFT_WAL_SIZE", "64MiB", 0, F_SIZE, 64 * MiB, NULL },
	{ "MOEFT_WAL_SIZE", "1024M", 0, F_SIZE, GiB, NULL },
	{ "MOEFT_WAL_SIZE", "1M", 0, F_SIZE, MiB, NULL },
	{ "MOEFT_WAL_SIZE", "1048576", 0, F_SIZE, MiB, NULL },
	{ "MOEFT_WAL_SIZE", "1052672", 0, F_SIZE, MiB + 4 * KiB, NULL },
	{ "MOEFT_WAL_SIZE", "2048k", 0, F_SIZE, 2 * MiB, NULL },
	{ "MOEFT_WAL_SIZE", "1T", 0, F_SIZE, TiB, NULL },
	{ "MOEFT_WAL_SIZE", "1t", 0, F_SIZE, TiB, NULL },
	{ "MOEFT_WAL_SIZE", "0", -1, F_NONE, 0, "MOEFT_WAL_SIZE='0': must be from 1M to 1T" },
	{ "MOEFT_WAL_SIZE", "1020K", -1, F_NONE, 0, "MOEFT_WAL_SIZE='1020K': must be from 1M to 1T" },
	{ "MOEFT_WAL_SIZE", "1025G", -1, F_NONE, 0, "MOEFT_WAL_SIZE='1025G': must be from 1M to 1T" },
	{ "MOEFT_WAL_SIZE", "1073741825", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE='1073741825': must be a multiple of 4K (4096 bytes)" },
	{ "MOEFT_WAL_SIZE", "1050000", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE='1050000': must be a multiple of 4K (4096 bytes)" },
	{ "MOEFT_WAL_SIZE", "1.5G", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE='1.5G': must be a byte count with an optional K, M, G or T suffix (binary: 1K = 1024)" },
	{ "MOEFT_WAL_SIZE", "1GB", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE='1GB': must be a byte count with an optional K, M, G or T suffix (binary: 1K = 1024)" },
	{ "MOEFT_WAL_SIZE", "1P", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE='1P': must be a byte count with an optional K, M, G or T suffix (binary: 1K = 1024)" },
	{ "MOEFT_WAL_SIZE", "-1G", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE='-1G': must be a byte count with an optional K, M, G or T suffix (binary: 1K = 1024)" },
	{ "MOEFT_WAL_SIZE", " 1G", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE=' 1G': must be a byte count with an optional K, M, G or T suffix (binary: 1K = 1024)" },
	{ "MOEFT_WAL_SIZE", "G", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE='G': must be a byte count with an optional K, M, G or T suffix (binary: 1K = 1024)" },
	{ "MOEFT_WAL_SIZE", "99999999999999999999", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE='99999999999999999999': must be a byte count with an optional K, M, G or T suffix (binary: 1K = 1024)" },
	{ "MOEFT_WAL_SIZE", "17179869184T", -1, F_NONE, 0,
	  "MOEFT_WAL_SIZE='17179869184T': must be a byte count with an optional K, M, G or T suffix (binary: 1K = 1024)" },
	/* MOEFT_NUMA_NODE (which nodes exist is the machine's business) */
	{ "MOEFT_NUMA_NODE", "abc", -1, F_NONE, 0, "MOEFT_NUMA_NODE: 'abc' is not a node number" },
	{ "MOEFT_NUMA_NODE", "-1", -1, F_NONE, 0, "MOEFT_NUMA_NODE: '-1' is not a node number" },
	{ "MOEFT_NUMA_NODE", "0x1", -1, F_NONE, 0, "MOEFT_NUMA_NODE: '0x1' is not a node number" },
	/* MOEFT_RING */
	{ "MOEFT_RING", "64K", 0, F_RING, 64 * KiB, NULL },
	{ "MOEFT_RING", "4M", 0, F_RING, 4 * MiB, NULL },
	{ "MOEFT_RING", "1G", 0, F_RING, GiB, NULL },
	{ "MOEFT_RING", "268435456", 0, F_RING, 256 * MiB, NULL },
	{ "MOEFT_RING", "32K", -1, F_NONE, 0, "MOEFT_RING='32K': must be a power of two from 64K to 1G (a byte count with an optional K, M or G suffix, binary: 1K = 1024)" },
	{ "MOEFT_RING", "2G", -1, F_NONE, 0, "MOEFT_RING='2G': must be a power of two from 64K to 1G (a byte count with an optional K, M or G suffix, binary: 1K = 1024)" },
	{ "MOEFT_RING", "3M", -1, F_NONE, 0, "MOEFT_RING='3M': must be a power of two from 64K to 1G (a byte count with an optional K, M or G suffix, binary: 1K = 1024)" },
	{ "MOEFT_RING", "0", -1, F_NONE, 0, "MOEFT_RING='0': must be a power of two from 64K to 1G (a byte count with an optional K, M or G suffix, binary: 1K = 1024)" },
	{ "MOEFT_RING", "64MB", -1, F_NONE, 0, "MOEFT_RING='64MB': must be a power of two from 64K to 1G (a byte count with an optional K, M or G suffix, binary: 1K = 1024)" },
	/* MOEFT_WINDOW */
	{ "MOEFT_WINDOW", "1", 0, F_WINDOW, 1, NULL },
	{ "MOEFT_WINDOW", "16", 0, F_WINDOW, 16, NULL },
	{ "MOEFT_WINDOW", "65536", 0, F_WINDOW, 65536, NULL },
	{ "MOEFT_WINDOW", "0", -1, F_NONE, 0, "MOEFT_WINDOW='0': must be an integer from 1 to 65536" },
	{ "MOEFT_WINDOW", "65537", -1, F_NONE, 0, "MOEFT_WINDOW='65537': must be an integer from 1 to 65536" },
	{ "MOEFT_WINDOW", "-4", -1, F_NONE, 0, "MOEFT_WINDOW='-4': must be an integer from 1 to 65536" },
	{ "MOEFT_WINDOW", "16x", -1, F_NONE, 0, "MOEFT_WINDOW='16x': must be an integer from 1 to 65536" },
	{ "MOEFT_WINDOW", "1e3", -1, F_NONE, 0, "MOEFT_WINDOW='1e3': must be an integer from 1 to 65536" },
	{ "MOEFT_WINDOW", "18446744073709551617", -1, F_NONE, 0,
	  "MOEFT_WINDOW='18446744073709551617': must be an integer from 1 to 65536" },
	/* MOEFT_KV_TRACK */
	{ "MOEFT_KV_TRACK", "slots", 0, F_KV_TRACK, 0, NULL },
	{ "MOEFT_KV_TRACK", "hash", 0, F_KV_TRACK, 1, NULL },
	{ "MOEFT_KV_TRACK", "Hash", -1, F_NONE, 0, "MOEFT_KV_TRACK='Hash': must be slots or hash" },
	{ "MOEFT_KV_TRACK", "1", -1, F_NONE, 0, "MOEFT_KV_TRACK='1': must be slots or hash" },
	/* MOEFT_COMMIT */
	{ "MOEFT_COMMIT", "wait", 0, F_COMMIT, 0, NULL },
	{ "MOEFT_COMMIT", "async", 0, F_COMMIT, 1, NULL },
	{ "MOEFT_COMMIT", "Async", -1, F_NONE, 0, "MOEFT_COMMIT='Async': must be wait or async" },
	{ "MOEFT_COMMIT", "1", -1, F_NONE, 0, "MOEFT_COMMIT='1': must be wait or async" },
	/* MOEFT_RESTORE_AT */
	{ "MOEFT_RESTORE_AT", "init", 0, F_RESTORE_AT, 0, NULL },
	{ "MOEFT_RESTORE_AT", "step", 0, F_RESTORE_AT, 1, NULL },
	{ "MOEFT_RESTORE_AT", "first-step", -1, F_NONE, 0,
	  "MOEFT_RESTORE_AT='first-step': must be init or step" },
	/* MOEFT_KERNEL_IMAGE */
	{ "MOEFT_KERNEL_IMAGE", "/proc/self/exe", 0, F_NONE, 0, NULL },
	{ "MOEFT_KERNEL_IMAGE", "/nonexistent/moeft.fatbin", -1, F_NONE, 0,
	  "MOEFT_KERNEL_IMAGE='/nonexistent/moeft.fatbin': No such file or directory" },
	{ "MOEFT_KERNEL_IMAGE", "/tmp", -1, F_NONE, 0,
	  "MOEFT_KERNEL_IMAGE='/tmp': must be a module image file of 1 byte to 256 MiB" },
	{ "MOEFT_KERNEL_IMAGE", "/dev/null", -1, F_NONE, 0,
	  "MOEFT_KERNEL_IMAGE='/dev/null': must be a module image file of 1 byte to 256 MiB" },
	/* MOEFT_PROFILE */
	{ "MOEFT_PROFILE", "auto", 0, F_PROFILE, 0, NULL },
	{ "MOEFT_PROFILE", "vllm", 0, F_PROFILE, 0, NULL },
	{ "MOEFT_PROFILE", "sglang", 0, F_PROFILE, 0, NULL },
	{ "MOEFT_PROFILE", "torch", 0, F_PROFILE, 0, NULL },
	{ "MOEFT_PROFILE", "llamacpp", 0, F_PROFILE, 0, NULL },
	{ "MOEFT_PROFILE", "vlm", -1, F_NONE, 0,
	  "MOEFT_PROFILE: unknown profile 'vlm' (built-in: auto, vllm, sglang, torch, llamacpp; "
	  "a file must be given as a path with a '/', e.g. ./vlm)" },
	{ "MOEFT_PROFILE", "VLLM", -1, F_NONE, 0,
	  "MOEFT_PROFILE: unknown profile 'VLLM' (built-in: auto, vllm, sglang, torch, llamacpp; "
	  "a file must be given as a path with a '/', e.g. ./VLLM)" },
	{ "MOEFT_PROFILE", "/nonexistent/moeft.rules", -1, F_NONE, 0,
	  "MOEFT_PROFILE: /nonexistent/moeft.rules: cannot open: No such file or directory" },
	{ "MOEFT_PROFILE", "/", -1, F_NONE, 0, "MOEFT_PROFILE: /: not a regular file" },
	/* MOEFT_KV */
	{ "MOEFT_KV", "size=1G", 0, F_KV, 1, NULL },
	{ "MOEFT_KV", "size=1G,ordinal=2,block=2M", 0, F_KV, 1, NULL },
	{ "MOEFT_KV", "size=3221225472;size=512M,block=4K;", 0, F_KV, 2, NULL },
	{ "MOEFT_KV", " size = 1G , block = 1G ; ; size=64K ", 0, F_KV, 2, NULL },
	{ "MOEFT_KV", "sise=1G", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='sise=1G': unknown key 'sise' (expected size, ordinal, block)" },
	{ "MOEFT_KV", "size=1G;block=4K", -1, F_NONE, 0,
	  "MOEFT_KV selector 2='block=4K': size= is required" },
	{ "MOEFT_KV", "size=1G,size=2G", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=1G,size=2G': duplicate key 'size'" },
	{ "MOEFT_KV", "size=1G,ordinal", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=1G,ordinal': 'ordinal' is not KEY=VALUE (keys: size, ordinal, block)" },
	{ "MOEFT_KV", "size=0", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=0': size='0' must be a positive byte count with an optional K, M, G or T suffix" },
	{ "MOEFT_KV", "size=1Q", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=1Q': size='1Q' must be a positive byte count with an optional K, M, G or T suffix" },
	{ "MOEFT_KV", "size=1G,ordinal=-1", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=1G,ordinal=-1': ordinal='-1' must be an integer from 0 to 65535" },
	{ "MOEFT_KV", "size=1G,ordinal=65536", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=1G,ordinal=65536': ordinal='65536' must be an integer from 0 to 65535" },
	{ "MOEFT_KV", "size=1G,block=3K", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=1G,block=3K': block='3K' must be a power of two from 4K to 1G" },
	{ "MOEFT_KV", "size=1G,block=2K", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=1G,block=2K': block='2K' must be a power of two from 4K to 1G" },
	{ "MOEFT_KV", "size=4G,block=2G", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=4G,block=2G': block='2G' must be a power of two from 4K to 1G" },
	{ "MOEFT_KV", "size=4K", 0, F_KV, 1, NULL },
	{ "MOEFT_KV", "size=4K,block=8K", -1, F_NONE, 0,
	  "MOEFT_KV selector 1='size=4K,block=8K': block (8K) is larger than size (4K)" },
	/* MOEFT_LOG */
	{ "MOEFT_LOG", "error", 0, F_LOG, WAL_LOG_ERROR, NULL },
	{ "MOEFT_LOG", "warn", 0, F_LOG, WAL_LOG_WARN, NULL },
	{ "MOEFT_LOG", "info", 0, F_LOG, WAL_LOG_INFO, NULL },
	{ "MOEFT_LOG", "debug", 0, F_LOG, WAL_LOG_DEBUG, NULL },
	{ "MOEFT_LOG", "DEBUG", 0, F_LOG, WAL_LOG_DEBUG, NULL },
	{ "MOEFT_LOG", "verbose", -1, F_NONE, 0, "MOEFT_LOG='verbose': must be error, warn, info or debug" },
	{ "MOEFT_LOG", "3", -1, F_NONE, 0, "MOEFT_LOG='3': must be error, warn, info or debug" },
	{ "MOEFT_LOG", "warning", -1, F_NONE, 0, "MOEFT_LOG='warning': must be error, warn, info or debug" },
	/* MOEFT_DISABLE, MOEFT_STRICT */
	{ "MOEFT_DISABLE", "1", 0, F_DISABLE, 1, NULL },
	{ "MOEFT_DISABLE", "true", 0, F_DISABLE, 1, NULL },
	{ "MOEFT_DISABLE", "YES", 0, F_DISABLE, 1, NULL },
	{ "MOEFT_DISABLE", "on", 0, F_DISABLE, 1, NULL },
	{ "MOEFT_DISABLE", "0", 0, F_DISABLE, 0, NULL },
	{ "MOEFT_DISABLE", "False", 0, F_DISABLE, 0, NULL },
	{ "MOEFT_DISABLE", "no", 0, F_DISABLE, 0, NULL },
	{ "MOEFT_DISABLE", "off", 0, F_DISABLE, 0, NULL },
	{ "MOEFT_DISABLE", "2", -1, F_NONE, 0,
	  "MOEFT_DISABLE='2': must be 0, 1, true, false, yes, no, on or off" },
	{ "MOEFT_DISABLE", "y", -1, F_NONE, 0,
	  "MOEFT_DISABLE='y': must be 0, 1, true, false, yes, no, on or off" },
	{ "MOEFT_STRICT", "on", 0, F_STRICT, 1, NULL },
	{ "MOEFT_STRICT", "0", 0, F_STRICT, 0, NULL },
	{ "MOEFT_STRICT", "ture", -1, F_STRICT, 1,     /* unparsable counts as set */
	  "MOEFT_STRICT='ture': must be 0, 1, true, false, yes, no, on or off" },
	{ "MOEFT_FORCE_FRESH", "1", 0, F_FORCE_FRESH, 1, NULL },
	{ "MOEFT_FORCE_FRESH", "no", 0, F_FORCE_FRESH, 0, NULL },
	{ "MOEFT_FORCE_FRESH", "force", -1, F_NONE, 0,
	  "MOEFT_FORCE_FRESH='force': must be 0, 1, true, false, yes, no, on or off" },
};

static uint64_t field_value(const struct moeft_config *c, enum field f)
{
	switch (f) {
	case F_SIZE: return c->wal_size;
	case F_WINDOW: return c->window;
	case F_RING: return c->ring_bytes;
	case F_COMMIT: return (uint64_t)c->commit_async;
	case F_RESTORE_AT: return (uint64_t)c->restore_at_step;
	case F_KV: return c->kv_count;
	case F_LOG: return (uint64_t)c->log_level;
	case F_DISABLE: return (uint64_t)c->disable;
	case F_STRICT: return (uint64_t)c->strict;
	case F_FORCE_FRESH: return (uint64_t)c->force_fresh;
	case F_KV_TRACK: return (uint64_t)c->kv_hash;
	default: return 0;
	}
}

static void test_variables(void)
{
	size_t i;

	for (i = 0; i < NELEM(cases); i++) {
		const struct vcase *t = &cases[i];
		struct moeft_config c;
		char err[512] = "";
		int rc = load1(&c, t->name, t->value, err, sizeof err);

		if (rc != t->rc || (t->msg && strcmp(err, t->msg) != 0))
			fprintf(stderr, "\n%s='%s': rc %d, err '%s'\n", t->name, t->value, rc, err);
		CU_ASSERT_EQUAL(rc, t->rc);
		if (t->rc == 0) {
			CU_ASSERT_STRING_EQUAL(err, "");
		} else {
			CU_ASSERT_STRING_EQUAL(err, t->msg);
			CU_ASSERT_EQUAL(strncmp(err, t->name, strlen(t->name)), 0);
		}
		if (t->field == F_WAL) {
			CU_ASSERT_STRING_EQUAL(c.wal_path, t->value);
		} else if (t->field == F_PROFILE) {
			CU_ASSERT_STRING_EQUAL(c.profile, t->value);
		} else if (t->field != F_NONE) {
			CU_ASSERT_EQUAL(field_value(&c, t->field), t->want);
		}
		/* A bad value leaves its field at the default. */
		if (t->rc < 0) {
			CU_ASSERT_EQUAL(c.window, 16);
			CU_ASSERT_EQUAL(c.wal_size, GiB);
			CU_ASSERT_EQUAL(c.numa_node, -1);
			CU_ASSERT_STRING_EQUAL(c.profile, "auto");
			CU_ASSERT_EQUAL(c.kv_count, 0);
			CU_ASSERT_STRING_EQUAL(c.kv_rules, "");
			CU_ASSERT_EQUAL(c.log_level, WAL_LOG_WARN);
			CU_ASSERT_EQUAL(c.wal_path[0], '/');
			CU_ASSERT_EQUAL(c.wal_dir, 1);
		}
	}
}

/* MOEFT_WAL naming a directory: a trailing '/', or a directory there now
 * (logname.h names the log in it at the start). */
static void test_wal_directory(void)
{
	static const struct {
		const char *value, *path;
		int dir;
	} dirs[] = {
		{ "/dev/shm/serve.wal", "/dev/shm/serve.wal", 0 },
		{ "/nonexistent/logs/", "/nonexistent/logs", 1 },
		{ "/nonexistent/logs//", "/nonexistent/logs", 1 },
		{ "/nonexistent/logs", "/nonexistent/logs", 0 },
		{ "/tmp", "/tmp", 1 },
		{ "/tmp/", "/tmp", 1 },
	};
	struct moeft_config c;
	char err[256];
	size_t i;

	for (i = 0; i < NELEM(dirs); i++) {
		CU_ASSERT_EQUAL(load1(&c, "MOEFT_WAL", dirs[i].value, err, sizeof err), 0);
		CU_ASSERT_STRING_EQUAL(c.wal_path, dirs[i].path);
		CU_ASSERT_EQUAL(c.wal_dir, dirs[i].dir);
	}
}

/* A too-long MOEFT_WAL, and a node number checked against this machine. */
static void test_wal_too_long_and_numa(void)
{
	struct moeft_config c;
	struct wal_error werr;
	char path[PATH_MAX + 16], err[512];
	int node;

	path[0] = '/';
	memset(path + 1, 'a', PATH_MAX);
	path[PATH_MAX + 1] = '\0';
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_WAL", path, err, sizeof err), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "MOEFT_WAL='/aaaa"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "...': longer than 4095 bytes"));
	path[PATH_MAX - 1] = '\0';
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_WAL", path, err, sizeof err), 0);
	CU_ASSERT_EQUAL(strlen(c.wal_path), PATH_MAX - 1);

	/* Node 0 exists wherever NUMA is available; node 4095 hardly ever. */
	node = media_parse_numa_node("0", "MOEFT_NUMA_NODE", &werr);
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_NUMA_NODE", "0", err, sizeof err), node < 0 ? -1 : 0);
	CU_ASSERT_EQUAL(c.numa_node, node < 0 ? -1 : 0);
	if (node < 0) {
		CU_ASSERT_STRING_EQUAL(err, werr.msg);
	}
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_NUMA_NODE", "4095", err, sizeof err), -1);
	CU_ASSERT_EQUAL(strncmp(err, "MOEFT_NUMA_NODE: ", 17), 0);
	CU_ASSERT_EQUAL(c.numa_node, -1);
}

static void test_kv_selectors(void)
{
	struct moeft_config c;
	char err[512], many[1100];
	int i;

	CU_ASSERT_EQUAL_FATAL(load1(&c, "MOEFT_KV", "size=1G,ordinal=2,block=2M; size=512M ;size=5000,block=4K",
				    err, sizeof err), 0);
	CU_ASSERT_STRING_EQUAL(c.kv_rules, "size=1G,ordinal=2,block=2M; size=512M ;size=5000,block=4K");
	CU_ASSERT_EQUAL_FATAL(c.kv_count, 3);
	CU_ASSERT_EQUAL(c.kv[0].size, GiB);
	CU_ASSERT_EQUAL(c.kv[0].ordinal, 2);
	CU_ASSERT_EQUAL(c.kv[0].block, 2 * MiB);
	CU_ASSERT_EQUAL(c.kv[1].size, 512 * MiB);
	CU_ASSERT_EQUAL(c.kv[1].ordinal, -1);
	CU_ASSERT_EQUAL(c.kv[1].block, 0);	/* by the pool's size (kv_default_chunk) */
	CU_ASSERT_EQUAL(c.kv[2].size, 5000);
	CU_ASSERT_EQUAL(c.kv[2].block, 4 * KiB);

	/* 16 selectors fit, the 17th does not. */
	many[0] = '\0';
	for (i = 0; i < 16; i++)
		strcat(many, "size=1G;");
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_KV", many, err, sizeof err), 0);
	CU_ASSERT_EQUAL(c.kv_count, 16);
	strcat(many, "size=2G");
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_KV", many, err, sizeof err), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "MOEFT_KV='size=1G;size=1G;"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "...': more than 16 selectors"));
	CU_ASSERT_EQUAL(c.kv_count, 0);

	memset(many, ';', 1024);
	many[1024] = '\0';
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_KV", many, err, sizeof err), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "': longer than 1023 bytes"));
}

/* A pool without block= is cut in 4 KiB chunks up to 2^16 of them, then
 * in larger ones, never past 64 KiB. */
static void test_default_chunk(void)
{
	CU_ASSERT_EQUAL(kv_default_chunk(5000), 4 * KiB);
	CU_ASSERT_EQUAL(kv_default_chunk(12 * MiB), 4 * KiB);
	CU_ASSERT_EQUAL(kv_default_chunk(256 * MiB), 4 * KiB);
	CU_ASSERT_EQUAL(kv_default_chunk(256 * MiB + 1), 8 * KiB);
	CU_ASSERT_EQUAL(kv_default_chunk(GiB), 16 * KiB);
	CU_ASSERT_EQUAL(kv_default_chunk(4 * GiB), 64 * KiB);
	CU_ASSERT_EQUAL(kv_default_chunk(80 * GiB), 64 * KiB);
}

/* A MOEFT_PROFILE file is parsed at load time: its errors carry the path
 * and the line. */
static void test_profile_file(void)
{
	static const char good[] = "use vllm\nrouting *my_gate* ids=p2 rows=p3 k=p4\n";
	static const char broken[] = "# my rules\nuse vllm\nrouting *my_gate* ids=p2 rowz=p3 k=p4\n";
	struct moeft_config c;
	char path[256], want[768], err[512];

	test_path(path, sizeof path, "cfgprof");
	CU_ASSERT_EQUAL_FATAL(test_spew(path, good, strlen(good)), 0);
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_PROFILE", path, err, sizeof err), 0);
	CU_ASSERT_STRING_EQUAL(c.profile, path);

	CU_ASSERT_EQUAL_FATAL(test_spew(path, broken, strlen(broken)), 0);
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_PROFILE", path, err, sizeof err), -1);
	snprintf(want, sizeof want, "MOEFT_PROFILE: %s:3:26: unknown key 'rowz' for routing "
		 "(expected ids, rows, k, stride, experts, weights, when, triton)", path);
	CU_ASSERT_STRING_EQUAL(err, want);
	CU_ASSERT_STRING_EQUAL(c.profile, "auto");
	unlink(path);
}

/* MOEFT_STRICT, MOEFT_DISABLE and MOEFT_LOG hold even when a later
 * variable is bad, and only the first bad variable is reported. */
static void test_flags_survive_errors(void)
{
	struct moeft_config c;
	char err[512];

	env_clear();
	env_set("MOEFT_WINDOW", "0");
	env_set("MOEFT_STRICT", "1");
	env_set("MOEFT_DISABLE", "yes");
	env_set("MOEFT_LOG", "debug");
	env_set("MOEFT_WAL_SIZE", "7");
	CU_ASSERT_EQUAL(config_load(&c, env_get, err, sizeof err), -1);
	CU_ASSERT_STRING_EQUAL(err, "MOEFT_WAL_SIZE='7': must be from 1M to 1T");
	CU_ASSERT_EQUAL(c.strict, 1);
	CU_ASSERT_EQUAL(c.disable, 1);
	CU_ASSERT_EQUAL(c.log_level, WAL_LOG_DEBUG);
	CU_ASSERT_EQUAL(c.window, 16);

	/* Everything at once, all good. */
	env_clear();
	env_set("MOEFT_WAL", "/mnt/cxl/moeft.wal");
	env_set("MOEFT_WAL_SIZE", "8G");
	env_set("MOEFT_WINDOW", "32");
	env_set("MOEFT_PROFILE", "sglang");
	env_set("MOEFT_KV", "size=2G,block=128K");
	env_set("MOEFT_LOG", "info");
	env_set("MOEFT_STRICT", "yes");
	CU_ASSERT_EQUAL(config_load(&c, env_get, err, sizeof err), 0);
	CU_ASSERT_STRING_EQUAL(c.wal_path, "/mnt/cxl/moeft.wal");
	CU_ASSERT_EQUAL(c.wal_size, 8 * GiB);
	CU_ASSERT_EQUAL(c.window, 32);
	CU_ASSERT_STRING_EQUAL(c.profile, "sglang");
	CU_ASSERT_EQUAL(c.kv_count, 1);
	CU_ASSERT_EQUAL(c.log_level, WAL_LOG_INFO);
	CU_ASSERT_EQUAL(c.strict, 1);
	CU_ASSERT_EQUAL(c.disable, 0);
}

/* A value with control characters or of great length still gives one
 * short line; a small or absent err buffer is fine. */
static void test_message_hygiene(void)
{
	struct moeft_config c;
	char err[512], tiny[12], longval[300];

	CU_ASSERT_EQUAL(load1(&c, "MOEFT_WINDOW", "1\n2\t3", err, sizeof err), -1);
	CU_ASSERT_STRING_EQUAL(err, "MOEFT_WINDOW='1?2?3': must be an integer from 1 to 65536");
	memset(longval, '9', sizeof longval - 1);
	longval[sizeof longval - 1] = '\0';
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_WINDOW", longval, err, sizeof err), -1);
	CU_ASSERT(strlen(err) < 160);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "999...': must be an integer from 1 to 65536"));
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_WINDOW", "0", tiny, sizeof tiny), -1);
	CU_ASSERT_STRING_EQUAL(tiny, "MOEFT_WINDO");
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_WINDOW", "0", NULL, 0), -1);
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_PROFILE", "nope", NULL, 0), -1);
	CU_ASSERT_EQUAL(load1(&c, "MOEFT_NUMA_NODE", "x", NULL, 0), -1);
}

/* get == NULL reads the real environment. */
static void test_real_environment(void)
{
	struct moeft_config c;
	char err[256];

	CU_ASSERT_EQUAL_FATAL(setenv("MOEFT_WINDOW", "7", 1), 0);
	CU_ASSERT_EQUAL(config_load(&c, NULL, err, sizeof err), 0);
	CU_ASSERT_EQUAL(c.window, 7);
	unsetenv("MOEFT_WINDOW");
}

/* ---- unknown variables ---------------------------------------------------- */

static void test_unknown_vars(void)
{
	char *envp[] = {
		"PATH=/usr/bin", "MOEFT_WINDOWS=4", "MOEFT_WAL=/x", "MOEFT_FOO=1",
		"MOEFT_Window=3", "MOEFT_=x", "moeft_wal=/y", "MOEFT_KV", "MOEFT_LGO=debug",
		"MOEFT_WALSIZE=1G", "XMOEFT_WAL=1", "MOEFT_STRICT=1", NULL
	};
	char *none[] = { "HOME=/root", "MOEFT_WAL_SIZE=1G", NULL };
	char out[512], tiny[20];
	int n;

	n = config_unknown_vars(envp, out, sizeof out);
	CU_ASSERT_EQUAL(n, 6);
	CU_ASSERT_STRING_EQUAL(out,
		"MOEFT_WINDOWS (did you mean MOEFT_WINDOW?), MOEFT_FOO, "
		"MOEFT_Window (did you mean MOEFT_WINDOW?), MOEFT_, "
		"MOEFT_LGO (did you mean MOEFT_LOG?), MOEFT_WALSIZE (did you mean MOEFT_WAL_SIZE?)");
	CU_ASSERT_EQUAL(config_unknown_vars(none, out, sizeof out), 0);
	CU_ASSERT_STRING_EQUAL(out, "");
	CU_ASSERT_EQUAL(config_unknown_vars(NULL, out, sizeof out), 0);
	/* A short buffer: truncated, terminated, the count still whole. */
	CU_ASSERT_EQUAL(config_unknown_vars(envp, tiny, sizeof tiny), 6);
	CU_ASSERT_EQUAL(strlen(tiny), sizeof tiny - 1);
	CU_ASSERT_EQUAL(config_unknown_vars(envp, NULL, 0), 6);
}

/* ---- summary ------------------------------------------------------------ */

static void test_describe(void)
{
	struct moeft_config c;
	char err[256], line[1024];

	env_clear();
	env_set("MOEFT_WAL", "/dev/dax0.0");
	env_set("MOEFT_WAL_SIZE", "1052672");
	env_set("MOEFT_KV", "size=1G,ordinal=0");
	env_set("MOEFT_DISABLE", "on");
	CU_ASSERT_EQUAL_FATAL(config_load(&c, env_get, err, sizeof err), 0);
	config_describe(&c, line, sizeof line);
	CU_ASSERT_STRING_EQUAL(line, "wal=/dev/dax0.0 size=1028K numa=none window=16 commit=wait ring=64M restore-at=init profile=auto "
			       "kv=size=1G,ordinal=0 kv-track=slots log=warn strict=off disable=on force-fresh=off");
	c.wal_size = 2 * TiB;
	c.numa_node = 2;
	c.kv_count = 0;
	c.log_level = WAL_LOG_ERROR;
	c.strict = 1;
	c.disable = 0;
	c.commit_async = 1;
	c.restore_at_step = 1;
	c.kv_hash = 1;
	config_describe(&c, line, sizeof line);
	CU_ASSERT_STRING_EQUAL(line, "wal=/dev/dax0.0 size=2T numa=2 window=16 commit=async ring=64M restore-at=step profile=auto "
			       "kv=none kv-track=hash log=error strict=on disable=off force-fresh=off");
}

static CU_TestInfo default_tests[] = {
	{ "empty environment", test_defaults },
	{ "empty value is unset", test_empty_is_unset },
	{ "get == NULL reads the environment", test_real_environment },
	CU_TEST_INFO_NULL
};

static CU_TestInfo var_tests[] = {
	{ "each variable: good and bad values", test_variables },
	{ "MOEFT_WAL naming a directory", test_wal_directory },
	{ "MOEFT_WAL length, MOEFT_NUMA_NODE on this machine", test_wal_too_long_and_numa },
	{ "MOEFT_KV selectors and limits", test_kv_selectors },
	{ "a pool's chunk size by default", test_default_chunk },
	{ "MOEFT_PROFILE file with a syntax error", test_profile_file },
	{ "strict/disable/log survive a later error", test_flags_survive_errors },
	{ "one short line whatever the value", test_message_hygiene },
	CU_TEST_INFO_NULL
};

static CU_TestInfo misc_tests[] = {
	{ "unknown MOEFT_* variables", test_unknown_vars },
	{ "one-line summary", test_describe },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ .pName = "defaults", .pTests = default_tests },
	{ .pName = "variables", .pTests = var_tests },
	{ .pName = "misc", .pTests = misc_tests },
	CU_SUITE_INFO_NULL
};

int main(void)
{
	return cu_run(suites);
}

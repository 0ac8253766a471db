/*
 * config.c - read and validate the MOEFT_* variables.  See config.h; the
 * variables and their values are documented in PROFILES.md.
 *
 * This runs in the preload's constructor inside someone else's process, so
 * it stays away from anything that could block or load code: the login
 * name comes from /etc/passwd directly rather than through NSS (which may
 * dlopen modules or ask a directory server), and variables are read with
 * secure_getenv so a set-id program never takes a log path from its caller.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/stat.h>

#include "config.h"
#include "decimal.h"
#include "logname.h"
#include "media.h"
#include "profile.h"
#include "wal.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

#define WAL_SIZE_DEFAULT GiB
#define WAL_SIZE_MIN MiB
#define WAL_SIZE_MAX TiB
#define WAL_SIZE_ALIGN (4 * KiB)
#define WINDOW_DEFAULT 16u
#define WINDOW_MAX 65536u
/* The capture ring: routing that comes faster than the consumer drains it
 * is dropped (a window with a gap), never waited for.  64 MiB holds a
 * prefill step of 8192 tokens x top-8 ids and weights over 48 layers, a
 * consumer late by one such step on a loaded host. */
#define RING_DEFAULT (64 * MiB)
#define RING_MAX GiB
#define KV_ORDINAL_MAX 65535
#define KV_BLOCK_MIN (4 * KiB)
#define KV_BLOCK_MAX GiB
#define SHOWN_MAX 80           /* bytes of a bad value echoed in a message */

const char *const config_vars[] = {
	"MOEFT_WAL", "MOEFT_WAL_SIZE", "MOEFT_NUMA_NODE", "MOEFT_WINDOW", "MOEFT_COMMIT",
	"MOEFT_PROFILE", "MOEFT_KV", "MOEFT_KV_TRACK", "MOEFT_LOG", "MOEFT_DISABLE", "MOEFT_STRICT",
	"MOEFT_RESTORE_AT", "MOEFT_KERNEL_IMAGE", "MOEFT_FORCE_FRESH", "MOEFT_RING",
	/* Set by `moeft restore` for the process it starts: the plan the
	 * preload follows, and the manifest for the application's own
	 * recovery hook (the preload never reads it). */
	"MOEFT_RESTORE", "MOEFT_RESTORE_MANIFEST", NULL
};

static const char *const log_names[] = { "error", "warn", "info", "debug" };

/* ---- messages ---------------------------------------------------------- */

/* "NAME='value': what is accepted", the value cut short and stripped of
 * control characters so the message stays one line. */
__attribute__((format(printf, 5, 6)))
static int bad(char *err, size_t errlen, const char *name, const char *value,
	       const char *fmt, ...)
{
	char shown[SHOWN_MAX + 4];
	size_t i, n;
	va_list ap;

	for (i = 0; value[i] && i < SHOWN_MAX; i++)
		shown[i] = (unsigned char)value[i] < 0x20 || value[i] == 0x7f ? '?' : value[i];
	strcpy(shown + i, value[i] ? "..." : "");
	if (!err || !errlen)
		return -1;
	snprintf(err, errlen, "%s='%s': ", name, shown);
	n = strlen(err);
	va_start(ap, fmt);
	vsnprintf(err + n, errlen - n, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- value parsers ----------------------------------------------------- */

/* Decimal byte count with an optional binary suffix: K, M, G, T (either
 * case), optionally followed by "iB". */
static int parse_bytes(const char *s, uint64_t *v)
{
	unsigned shift = 0;

	if (parse_decimal(&s, UINT64_MAX, v) < 0)
		return -1;
	switch (*s) {
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	}
	if (shift) {
		s++;
		if ((s[0] == 'i' || s[0] == 'I') && (s[1] == 'b' || s[1] == 'B'))
			s += 2;
	}
	if (*s || (shift && *v > UINT64_MAX >> shift))
		return -1;
	*v <<= shift;
	return 0;
}

static int parse_bool(const char *s, int *v)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };
	size_t i;

	for (i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return *v = 1, 0;
		if (strcasecmp(s, no[i]) == 0)
			return *v = 0, 0;
	}
	return -1;
}

/* Largest binary unit that divides v exactly, for messages and summaries. */
static const char *fmt_bytes(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (u < 3 && v && v % 1024 == 0) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu", (unsigned long long)v);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)v, units[u]);
	return buf;
}

/* ---- the default log path ---------------------------------------------- */

/* A directory per user, a log per process in it (logname.h): processes
 * of one name on other devices, or of other names, never share a log. */
static void default_wal_dir(struct moeft_config *c)
{
	logname_default_dir(c->wal_path, sizeof c->wal_path);
	c->wal_dir = 1;
}

/* ---- one function per variable ----------------------------------------- */

/* A directory (a path ending in '/', or one that is a directory now)
 * holds a log per process (logname.h); anything else is the log. */
static int load_wal(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	size_t n = strlen(v);
	struct stat st;
	int dir;

	if (v[0] != '/')
		return bad(err, errlen, "MOEFT_WAL", v,
			   "must be an absolute path (a server started elsewhere must log to the same place)");
	dir = v[n - 1] == '/' || (stat(v, &st) == 0 && S_ISDIR(st.st_mode));
	while (n > 1 && v[n - 1] == '/')
		n--;
	if (dir && n == 1)
		return bad(err, errlen, "MOEFT_WAL", v, "must not be the root directory");
	if (n >= sizeof c->wal_path)
		return bad(err, errlen, "MOEFT_WAL", v, "longer than %zu bytes",
			   sizeof c->wal_path - 1);
	memcpy(c->wal_path, v, n);
	c->wal_path[n] = '\0';
	c->wal_dir = dir;
	return 0;
}

static int load_wal_size(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	uint64_t size;

	if (parse_bytes(v, &size) < 0)
		return bad(err, errlen, "MOEFT_WAL_SIZE", v,
			   "must be a byte count with an optional K, M, G or T suffix (binary: 1K = 1024)");
	if (size < WAL_SIZE_MIN || size > WAL_SIZE_MAX)
		return bad(err, errlen, "MOEFT_WAL_SIZE", v, "must be from 1M to 1T");
	if (size % WAL_SIZE_ALIGN)
		return bad(err, errlen, "MOEFT_WAL_SIZE", v, "must be a multiple of 4K (4096 bytes)");
	c->wal_size = size;
	return 0;
}

static int load_numa(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	struct wal_error werr;
	int node = media_parse_numa_node(v, "MOEFT_NUMA_NODE", &werr);

	if (node < 0) {
		if (err && errlen)
			snprintf(err, errlen, "%s", werr.msg);
		return -1;
	}
	c->numa_node = node;
	return 0;
}

static int load_window(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	const char *p = v;
	uint64_t w;

	if (parse_decimal(&p, UINT64_MAX, &w) < 0 || *p || w < 1 || w > WINDOW_MAX)
		return bad(err, errlen, "MOEFT_WINDOW", v, "must be an integer from 1 to %u",
			   WINDOW_MAX);
	c->window = (unsigned)w;
	return 0;
}

static int load_ring(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	uint64_t size;

	if (parse_bytes(v, &size) < 0 || size < CONFIG_RING_MIN || size > RING_MAX ||
	    (size & (size - 1)))
		return bad(err, errlen, "MOEFT_RING", v, "must be a power of two from 64K to 1G "
			   "(a byte count with an optional K, M or G suffix, binary: 1K = 1024)");
	c->ring_bytes = size;
	return 0;
}

static int load_commit(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	if (strcmp(v, "wait") == 0 || strcmp(v, "async") == 0) {
		c->commit_async = v[0] == 'a';
		return 0;
	}
	return bad(err, errlen, "MOEFT_COMMIT", v, "must be wait or async");
}

static int load_kv_track(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	if (strcmp(v, "slots") == 0 || strcmp(v, "hash") == 0) {
		c->kv_hash = v[0] == 'h';
		return 0;
	}
	return bad(err, errlen, "MOEFT_KV_TRACK", v, "must be slots or hash");
}

static int load_restore_at(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	if (strcmp(v, "init") == 0 || strcmp(v, "step") == 0) {
		c->restore_at_step = v[0] == 's';
		return 0;
	}
	return bad(err, errlen, "MOEFT_RESTORE_AT", v, "must be init or step");
}

/* The largest module image moeft's kernels may come in. */
#define KERNEL_IMAGE_MAX (256 * MiB)

static int load_kernel_image(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	size_t n = strlen(v);
	struct stat st;

	if (n >= sizeof c->kernel_image)
		return bad(err, errlen, "MOEFT_KERNEL_IMAGE", v, "longer than %zu bytes",
			   sizeof c->kernel_image - 1);
	if (stat(v, &st) < 0)
		return bad(err, errlen, "MOEFT_KERNEL_IMAGE", v, "%s", strerror(errno));
	if (!S_ISREG(st.st_mode) || st.st_size == 0 || (uint64_t)st.st_size > KERNEL_IMAGE_MAX)
		return bad(err, errlen, "MOEFT_KERNEL_IMAGE", v, "must be a module image file "
			   "of 1 byte to %llu MiB", (unsigned long long)(KERNEL_IMAGE_MAX / MiB));
	memcpy(c->kernel_image, v, n + 1);
	return 0;
}

static int load_restore(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	size_t n = strlen(v);

	if (v[0] != '/')
		return bad(err, errlen, "MOEFT_RESTORE", v,
			   "must be an absolute path (it is set by moeft restore)");
	if (n >= sizeof c->restore_plan)
		return bad(err, errlen, "MOEFT_RESTORE", v, "longer than %zu bytes",
			   sizeof c->restore_plan - 1);
	memcpy(c->restore_plan, v, n + 1);
	return 0;
}

/* Parsing the profile now, not when the first kernel is named, puts a
 * file's syntax errors (with their line numbers) into the startup line. */
static int load_profile(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	struct profile p = { 0 };
	char perr[512];
	size_t n = strlen(v);

	if (n >= sizeof c->profile)
		return bad(err, errlen, "MOEFT_PROFILE", v, "longer than %zu bytes",
			   sizeof c->profile - 1);
	if (profile_load(v, &p, perr, sizeof perr) < 0) {
		profile_free(&p);
		if (err && errlen)
			snprintf(err, errlen, "MOEFT_PROFILE: %s", perr);
		return -1;
	}
	profile_free(&p);
	memcpy(c->profile, v, n + 1);
	return 0;
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = '\0';
	return s;
}

/* One selector "size=BYTES[,ordinal=N][,block=BYTES]" (cut in place). */
static int load_selector(struct kv_selector *sel, char *item, unsigned nr,
			 char *err, size_t errlen)
{
	char shown[CONFIG_KV_TEXT_MAX], what[32], bbuf[24], sbuf[24];
	char *field, *save = NULL;
	unsigned seen = 0;

	snprintf(shown, sizeof shown, "%s", item);
	snprintf(what, sizeof what, "MOEFT_KV selector %u", nr);
	sel->ordinal = -1;
	sel->block = 0;
	for (field = strtok_r(item, ",", &save); field; field = strtok_r(NULL, ",", &save)) {
		char *key = trim(field), *val = strchr(key, '=');
		unsigned bit;
		uint64_t x;

		if (!val)
			return bad(err, errlen, what, shown, "'%s' is not KEY=VALUE (keys: size, ordinal, block)",
				   key);
		*val++ = '\0';
		val = trim(val);
		key = trim(key);
		if (strcmp(key, "size") == 0)
			bit = 1;
		else if (strcmp(key, "ordinal") == 0)
			bit = 2;
		else if (strcmp(key, "block") == 0)
			bit = 4;
		else
			return bad(err, errlen, what, shown, "unknown key '%s' (expected size, ordinal, block)",
				   key);
		if (seen & bit)
			return bad(err, errlen, what, shown, "duplicate key '%s'", key);
		seen |= bit;
		if (bit == 2) {
			const char *p = val;

			if (parse_decimal(&p, UINT64_MAX, &x) < 0 || *p || x > KV_ORDINAL_MAX)
				return bad(err, errlen, what, shown,
					   "ordinal='%s' must be an integer from 0 to %d", val, KV_ORDINAL_MAX);
			sel->ordinal = (int32_t)x;
		} else if (parse_bytes(val, &x) < 0 || x == 0) {
			return bad(err, errlen, what, shown,
				   "%s='%s' must be a positive byte count with an optional K, M, G or T suffix",
				   key, val);
		} else if (bit == 1) {
			sel->size = x;
		} else if (x < KV_BLOCK_MIN || x > KV_BLOCK_MAX || (x & (x - 1))) {
			return bad(err, errlen, what, shown,
				   "block='%s' must be a power of two from 4K to 1G", val);
		} else {
			sel->block = x;
		}
	}
	if (!(seen & 1))
		return bad(err, errlen, what, shown, "size= is required");
	if (sel->block && sel->block > sel->size)
		return bad(err, errlen, what, shown, "block (%s) is larger than size (%s)",
			   fmt_bytes(sel->block, bbuf, sizeof bbuf),
			   fmt_bytes(sel->size, sbuf, sizeof sbuf));
	return 0;
}

static int load_kv(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	char buf[CONFIG_KV_TEXT_MAX], *item, *save = NULL;
	size_t n = strlen(v);
	unsigned nr = 0;

	if (n >= sizeof buf)
		return bad(err, errlen, "MOEFT_KV", v, "longer than %zu bytes", sizeof buf - 1);
	memcpy(buf, v, n + 1);
	/* kv_count stays 0 until every selector is good. */
	for (item = strtok_r(buf, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
		item = trim(item);
		if (!*item)
			continue;
		if (nr == CONFIG_KV_MAX)
			return bad(err, errlen, "MOEFT_KV", v, "more than %d selectors", CONFIG_KV_MAX);
		if (load_selector(&c->kv[nr], item, nr + 1, err, errlen) < 0)
			return -1;
		nr++;
	}
	c->kv_count = nr;
	memcpy(c->kv_rules, v, n + 1);
	return 0;
}

static int load_log(struct moeft_config *c, const char *v, char *err, size_t errlen)
{
	int i;

	for (i = 0; i < 4; i++)
		if (strcasecmp(v, log_names[i]) == 0) {
			c->log_level = WAL_LOG_ERROR + i;
			return 0;
		}
	return bad(err, errlen, "MOEFT_LOG", v, "must be error, warn, info or debug");
}

static int load_flag(int *flag, const char *name, const char *v, char *err, size_t errlen)
{
	if (parse_bool(v, flag) < 0)
		return bad(err, errlen, name, v, "must be 0, 1, true, false, yes, no, on or off");
	return 0;
}

static const char *lookup(const char *(*get)(const char *), const char *name)
{
	const char *v = get ? get(name) : secure_getenv(name);

	return v && *v ? v : NULL;
}

int config_load(struct moeft_config *c, const char *(*get)(const char *name),
		char *err, size_t errlen)
{
	const char *v;

	memset(c, 0, sizeof *c);
	default_wal_dir(c);
	c->wal_size = WAL_SIZE_DEFAULT;
	c->numa_node = -1;
	c->window = WINDOW_DEFAULT;
	c->ring_bytes = RING_DEFAULT;
	strcpy(c->profile, "auto");
	c->log_level = WAL_LOG_WARN;
	if (err && errlen)
		err[0] = '\0';

	if ((v = lookup(get, "MOEFT_STRICT")) && load_flag(&c->strict, "MOEFT_STRICT", v, err, errlen) < 0) {
		c->strict = 1;
		return -1;
	}
	if ((v = lookup(get, "MOEFT_DISABLE")) && load_flag(&c->disable, "MOEFT_DISABLE", v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_LOG")) && load_log(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_WAL")) && load_wal(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_WAL_SIZE")) && load_wal_size(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_NUMA_NODE")) && load_numa(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_WINDOW")) && load_window(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_COMMIT")) && load_commit(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_RING")) && load_ring(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_PROFILE")) && load_profile(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_KV")) && load_kv(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_KV_TRACK")) && load_kv_track(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_RESTORE")) && load_restore(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_RESTORE_AT")) && load_restore_at(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_KERNEL_IMAGE")) && load_kernel_image(c, v, err, errlen) < 0)
		return -1;
	if ((v = lookup(get, "MOEFT_FORCE_FRESH")) &&
	    load_flag(&c->force_fresh, "MOEFT_FORCE_FRESH", v, err, errlen) < 0)
		return -1;
	return 0;
}

/* ---- unknown variables ------------------------------------------------- */

/* Case-blind edit distance (insert, delete, substitute, swap two neighbours:
 * the usual typos), capped: names longer than 48 bytes are never anyone's
 * typo of ours. */
static unsigned distance(const char *a, size_t la, const char *b)
{
	unsigned d[49][49], i, j;
	size_t lb = strlen(b);

	if (la > 48 || lb > 48)
		return 99;
	for (i = 0; i <= la; i++)
		d[i][0] = i;
	for (j = 0; j <= lb; j++)
		d[0][j] = j;
	for (i = 1; i <= la; i++)
		for (j = 1; j <= lb; j++) {
			char ca = (char)toupper((unsigned char)a[i - 1]);
			unsigned v = d[i - 1][j - 1] + (ca != b[j - 1]);

			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && ca == b[j - 2] &&
			    toupper((unsigned char)a[i - 2]) == b[j - 1] && d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[la][lb];
}

int config_unknown_vars(char **envp, char *out, size_t len)
{
	size_t used = 0;
	int count = 0;

	if (len)
		out[0] = '\0';
	for (; envp && *envp; envp++) {
		const char *e = *envp, *best = NULL;
		size_t n = strcspn(e, "=");
		unsigned bestd, d;
		int i, known = 0;

		if (strncmp(e, "MOEFT_", 6) != 0)
			continue;
		/* Two edits turn any short name into another: allow one there. */
		bestd = n - 6 <= 4 ? 2 : 3;
		for (i = 0; config_vars[i]; i++) {
			if (strlen(config_vars[i]) == n && memcmp(e, config_vars[i], n) == 0)
				known = 1;
			else if ((d = distance(e, n, config_vars[i])) < bestd) {
				bestd = d;
				best = config_vars[i];
			}
		}
		if (known)
			continue;
		if (used < len) {
			int w = best ? snprintf(out + used, len - used, "%s%.*s (did you mean %s?)",
						count ? ", " : "", (int)n, e, best)
				     : snprintf(out + used, len - used, "%s%.*s",
						count ? ", " : "", (int)n, e);
			if (w > 0)
				used += (size_t)w;
		}
		count++;
	}
	return count;
}

/* ---- summary ----------------------------------------------------------- */

void config_describe(const struct moeft_config *c, char *out, size_t len)
{
	char size[24], ring[24], numa[16];

	if (c->numa_node < 0)
		snprintf(numa, sizeof numa, "none");
	else
		snprintf(numa, sizeof numa, "%d", c->numa_node);
	snprintf(out, len,
		 "wal=%s size=%s numa=%s window=%u commit=%s ring=%s restore-at=%s profile=%s "
		 "kv=%s kv-track=%s log=%s strict=%s disable=%s force-fresh=%s",
		 c->wal_path, fmt_bytes(c->wal_size, size, sizeof size), numa, c->window,
		 c->commit_async ? "async" : "wait", fmt_bytes(c->ring_bytes, ring, sizeof ring),
		 c->restore_at_step ? "step" : "init",
		 c->profile, c->kv_count ? c->kv_rules : "none", c->kv_hash ? "hash" : "slots",
		 log_names[c->log_level >= 0 && c->log_level <= 3 ? c->log_level : 1],
		 c->strict ? "on" : "off", c->disable ? "on" : "off",
		 c->force_fresh ? "on" : "off");
}

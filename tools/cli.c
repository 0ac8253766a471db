/*
 * cli.c - helpers shared by the moeft subcommands (see cli.h).
 */
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "decimal.h"
#include "guard.h"
#include "json.h"
#include "logname.h"
#include "media.h"

struct cli_env cli_env = { .numa_node = -1 };

static void log_line(int level, const char *msg)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };

	fprintf(stderr, "moeft: %s: %s\n",
		level >= 0 && level <= WAL_LOG_DEBUG ? names[level] : "log", msg);
}

int cli_env_load(void)
{
	static const char *const levels[] = { "error", "warn", "info", "debug" };
	const char *v = getenv("MOEFT_LOG");
	int level = WAL_LOG_WARN;

	if (v) {
		for (level = WAL_LOG_ERROR; level <= WAL_LOG_DEBUG; level++)
			if (!strcmp(v, levels[level]))
				break;
		if (level > WAL_LOG_DEBUG) {
			fprintf(stderr, "moeft: MOEFT_LOG: '%s' is not a log level "
				"(error, warn, info or debug)\n", v);
			return EXIT_USAGE;
		}
	}
	wal_set_log(log_line, level);

	v = getenv("MOEFT_NUMA_NODE");
	if (v) {
		struct wal_error err;
		int node = media_parse_numa_node(v, "MOEFT_NUMA_NODE", &err);

		if (node < 0) {
			fprintf(stderr, "moeft: %s\n", err.msg);
			return EXIT_USAGE;
		}
		cli_env.numa_node = node;
	}
	return 0;
}

void cli_usage_error(struct cli_opts *o, const char *fmt, ...)
{
	va_list ap;

	if (o->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(o->err, sizeof o->err, fmt, ap);
	va_end(ap);
}

/* The long option spelled by `arg` ("--name[=value]", maybe abbreviated)
 * if it is the one whose val is `val`. */
static const struct option *spelled(const char *arg, int val, const struct option *opts)
{
	size_t len;

	if (strncmp(arg, "--", 2) != 0)
		return NULL;
	arg += 2;
	len = strcspn(arg, "=");
	for (; opts->name; opts++)
		if (opts->val == val && len && !strncmp(opts->name, arg, len))
			return opts;
	return NULL;
}

/*
 * Describe why getopt_long stopped.  glibc sets optopt to 0 for an unknown
 * long option and to the option's val for the other errors; the element
 * before optind tells a long option from a short one, which may sit inside
 * a cluster like -jx.
 */
static void option_error(struct cli_opts *o, int c, char **argv, const struct option *opts)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	const struct option *p;

	if (!optopt)
		cli_usage_error(o, "unknown option '%.*s'", (int)strcspn(arg, "="), arg);
	else if ((p = spelled(arg, optopt, opts)))
		cli_usage_error(o, c == ':' ? "option '--%s' needs a value"
					    : "option '--%s' takes no value", p->name);
	else
		cli_usage_error(o, c == ':' ? "option '-%c' needs a value" : "unknown option '-%c'",
				optopt);
}

int cli_getopt(struct cli_opts *o, int argc, char **argv, const struct option *opts)
{
	char shorts[64] = ":";
	size_t n = 1;
	int c;

	for (const struct option *p = opts; p->name && n + 2 < sizeof shorts; p++) {
		if (!((p->val >= 'a' && p->val <= 'z') || (p->val >= 'A' && p->val <= 'Z')))
			continue;
		shorts[n++] = (char)p->val;
		if (p->has_arg == required_argument)
			shorts[n++] = ':';
	}
	shorts[n] = '\0';
	opterr = 0;
	c = getopt_long(argc, argv, shorts, opts, NULL);
	if (c == '?' || c == ':') {
		option_error(o, c, argv, opts);
		return '?';
	}
	return c;
}

int cli_parse_u64(struct cli_opts *o, const char *opt, const char *text,
		  uint64_t min, uint64_t max, uint64_t *out)
{
	const char *p = text;
	uint64_t v = 0;

	if (!*p || strspn(p, "0123456789") != strlen(p)) {
		cli_usage_error(o, "%s: '%s' is not a whole number", opt, text);
		return -1;
	}
	if (parse_decimal(&p, max, &v) < 0 || v < min) {
		cli_usage_error(o, "%s: %s is out of range (%llu to %llu)", opt, text,
				(unsigned long long)min, (unsigned long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

int cli_parse_double(struct cli_opts *o, const char *opt, const char *text,
		     double min, double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	/* strtod alone would take leading spaces, hex floats, "inf" and "nan" */
	if (((*text >= '0' && *text <= '9') || *text == '.') && !strpbrk(text, "xX"))
		v = strtod(text, &end);
	else
		v = NAN;
	if (isnan(v) || *end || errno) {
		cli_usage_error(o, "%s: '%s' is not a number", opt, text);
		return -1;
	}
	if (!(v >= min && v <= max)) {
		cli_usage_error(o, "%s: %s is out of range (%g to %g)", opt, text, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

int cli_path_opt(struct cli_opts *o, const char *opt, const char *path, size_t max)
{
	size_t n = strlen(path);

	if (!max)
		max = PATH_MAX;
	if (!n)
		cli_usage_error(o, "%s: the path is empty", opt);
	else if (n >= max)
		cli_usage_error(o, "%s: the path is too long (%zu bytes, at most %zu)", opt, n,
				max - 1);
	return n && n < max ? 0 : -1;
}

void cli_print_usage(const struct cli_command *cmd, FILE *f)
{
	fputs(cmd->usage, f);
}

static int fail(const struct cli_command *cmd, int json, int code, int hint, const char *msg)
{
	fprintf(stderr, "moeft %s: %s\n", cmd->name, msg);
	if (hint)
		fprintf(stderr, "Try 'moeft %s --help'.\n", cmd->name);
	if (json) {
		struct json j;

		fflush(stdout);
		json_init(&j, stdout);
		json_obj_begin(&j);
		json_kv_str(&j, "status", "error");
		json_kv_str(&j, "error", msg);
		json_obj_end(&j);
	}
	return code;
}

int cli_fail(const struct cli_command *cmd, int json, int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return fail(cmd, json, code, 0, msg);
}

int cli_parse_done(struct cli_opts *o)
{
	return o->err[0] ? fail(o->cmd, o->json, EXIT_USAGE, 1, o->err) : 0;
}

void cli_default_path(char *buf, size_t len, const char *name)
{
	char dir[PATH_MAX];

	logname_default_dir(dir, sizeof dir);
	snprintf(buf, len, "%s-%s.wal", dir, name);
}

int cli_fresh_path(const char *path, char *msg, size_t len)
{
	struct stat st;

	if (guard_check(path, NULL, msg, len) < 0)
		return -1;
	if (stat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(msg, len, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (S_ISCHR(st.st_mode) || (S_ISREG(st.st_mode) && st.st_size == 0))
		return 0;
	if (S_ISREG(st.st_mode))
		snprintf(msg, len, "%s exists and is not empty; refusing to write over it", path);
	else
		snprintf(msg, len, "%s: not a regular file or a device-DAX node", path);
	return -1;
}

const char *cli_parent(char *buf, size_t len, const char *path)
{
	snprintf(buf, len, "%s", path);
	return dirname(buf);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

void cli_rm_tree(const char *dir)
{
	nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

double cli_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

const char *cli_fmt_bytes(char *buf, size_t len, uint64_t bytes)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	while (v >= 1024 && u < 3) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, v >= 100 || v == (double)(uint64_t)v ? "%.0f %s" : "%.1f %s",
		 v, units[u]);
	return buf;
}

const char *cli_fmt_time(char *buf, size_t len, uint64_t ns)
{
	time_t t = (time_t)(ns / 1000000000u);
	struct tm tm;

	if (!localtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "@%llu", (unsigned long long)(ns / 1000000000u));
	return buf;
}

void cli_row(FILE *f, const char *label, const char *fmt, ...)
{
	va_list ap;

	fprintf(f, "%-11s", label);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
}

/*
 * bench_window.c - moeft bench window: what a committed window costs in
 * bytes, against the bytes the application wrote, on the CPU fixture.
 *
 * The serving program (--serve, demo/serve.c's options) decodes --windows
 * windows of --window steps into a KV pool of at least --pool-mib MiB
 * (--kv-pool-mib: an engine sizes its pool to memory, and writes a small
 * part of it per window), once without the preload and once with it
 * (MOEFT_LOG=info: its exit summary gives the counts).  The figures, per
 * committed decode window:
 *
 *   written_bytes   KV bytes the program wrote: its tokens x layers x K
 *                   and V x hidden x 4 bytes, over its steps, x the window
 *   read_bytes      pool bytes a window's snapshot read, past the first
 *                   window: (kv_read_bytes - kv_first_read_bytes) per
 *                   boundary after the first; read_per_written against
 *                   written
 *   first_read_bytes  what the first snapshot read: the pool, whole, once
 *                   (kv_first_read_bytes; snapshot.h)
 *   staged_bytes    bytes the snapshot staged for the KV store (kv_bytes
 *                   per decode window): changed chunks, whole
 *   pinned_bytes    the pinned staging area; pinned_per_written
 *   extra_passes    passes past a boundary's first, while the serving
 *                   streams waited (a window larger than the staging)
 *   ring_overflows  capture entries the ring dropped (gaps)
 *
 * and the wall time of the two runs (one each).  The pieces: fxrun.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "fxrun.h"
#include "json.h"

/* The model: 4 layers, hidden size 256, 8 sequences, in serve's blocks of
 * 16 tokens; one KV allocation. */
#define LAYERS 4
#define HIDDEN 256
#define BLOCK_TOKENS 16
#define STR(x) #x
#define XSTR(x) STR(x)
#define SERVE_OUT 1024

struct figures {
	uint64_t pool_mib, windows, window, steps;
	uint64_t pool_bytes, tokens, decode_windows, boundaries, skipped, overflows;
	uint64_t read_bytes, first_read_bytes, staged_bytes, pinned_bytes, passes;
	double written_per_window;	/* bytes */
	double wall_s[2];		/* without, with the preload */
};

/* The unsigned value after "key=" in text (preceded by a space, or at its
 * start): 0, or -1 when absent. */
static int field(const char *text, const char *key, uint64_t *v)
{
	size_t n = strlen(key);

	for (const char *p = text; (p = strstr(p, key)); p += n)
		if ((p == text || p[-1] == ' ') && p[n] == '=') {
			char *end;

			errno = 0;
			*v = strtoull(p + n + 1, &end, 10);
			return errno || end == p + n + 1 ? -1 : 0;
		}
	return -1;
}

/* The preload's exit summary, from the preloaded run's stderr. */
static int read_summary(struct fxrun *c, struct figures *f)
{
	static const char *const keys[] = { "decode_windows", "boundaries", "skipped", "gaps",
					     "kv_bytes", "kv_read_bytes", "kv_first_read_bytes",
					     "kv_pinned_bytes", "kv_passes" };
	uint64_t *const into[] = { &f->decode_windows, &f->boundaries, &f->skipped,
				   &f->overflows, &f->staged_bytes, &f->read_bytes,
				   &f->first_read_bytes, &f->pinned_bytes, &f->passes };
	char buf[16384], *line;
	FILE *fp = fopen(c->err, "r");
	size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;

	if (fp)
		fclose(fp);
	buf[n] = '\0';
	if (!(line = strstr(buf, "moeft: summary: "))) {
		snprintf(c->msg, sizeof c->msg, "the preloaded run printed no summary: '%.300s'",
			 buf);
		return -1;
	}
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (field(line, keys[i], into[i]) < 0) {
			snprintf(c->msg, sizeof c->msg, "the preload's summary has no %s: '%.300s'",
				 keys[i], line);
			return -1;
		}
	if (!f->decode_windows || f->boundaries < 2 || f->first_read_bytes > f->read_bytes) {
		snprintf(c->msg, sizeof c->msg, "the preloaded run committed fewer than two decode "
			 "windows: '%.300s'", line);
		return -1;
	}
	return 0;
}

static int measure(struct fxrun *c, struct figures *f)
{
	char steps[32], pool[32], out[2][SERVE_OUT];
	char *argv[] = { c->serve, "--mode=eager", "--kv-layout=one", "--layers=" XSTR(LAYERS),
			 "--hidden=" XSTR(HIDDEN), "--seqs=8", steps, pool, NULL };
	uint64_t blocks;

	snprintf(steps, sizeof steps, "--steps=%" PRIu64, f->steps);
	snprintf(pool, sizeof pool, "--kv-pool-mib=%" PRIu64, f->pool_mib);
	for (int pre = 0; pre < 2; pre++)
		if (fxrun_run(c, argv, pre ? FXRUN_PRELOAD | FXRUN_KEEP_ERR : 0, out[pre], sizeof out[pre],
			      &f->wall_s[pre]) < 0)
			return -1;
	if (field(out[0], "tokens", &f->tokens) < 0 || field(out[0], "kv-blocks", &blocks) < 0) {
		snprintf(c->msg, sizeof c->msg, "%s printed no tokens= or kv-blocks=: '%.200s'",
			 c->serve, out[0]);
		return -1;
	}
	if (strcmp(out[0], out[1])) {
		snprintf(c->msg, sizeof c->msg, "%s printed '%.200s' with the preload, '%.200s' "
			 "without", c->serve, out[1], out[0]);
		return -1;
	}
	/* One token writes its K and V rows of HIDDEN floats in each layer. */
	f->pool_bytes = blocks * LAYERS * 2 * BLOCK_TOKENS * HIDDEN * sizeof(float);
	f->written_per_window = (double)f->tokens * LAYERS * 2 * HIDDEN * sizeof(float) /
				(double)f->steps * (double)f->window;
	return read_summary(c, f);
}

static double per(double a, double b)
{
	return b > 0 ? a / b : NAN;
}

/* Pool bytes a snapshot read per window after the first. */
static double read_per_window(const struct figures *f)
{
	return per((double)(f->read_bytes - f->first_read_bytes), (double)(f->boundaries - 1));
}

static void print_text(const struct fxrun *c, const struct figures *f, const char *cpu)
{
	double read = read_per_window(f);
	double staged = per((double)f->staged_bytes, (double)f->decode_windows);

	printf("moeft bench window: %s\n", c->preload);
	printf("machine: %s, %ld CPUs; CUDA: the CPU fixture in %s (its device code runs on "
	       "the host)\n\n", cpu, sysconf(_SC_NPROCESSORS_ONLN), c->fixture);
	printf("%s: KV pool %.0f MiB (%d layers, one allocation), %" PRIu64 " steps, "
	       "window %" PRIu64 " steps\n", c->serve, (double)f->pool_bytes / 1048576.0, LAYERS,
	       f->steps, f->window);
	printf("  %" PRIu64 " decode windows committed, %" PRIu64 " snapshots, %" PRIu64
	       " boundaries skipped\n\n", f->decode_windows, f->boundaries, f->skipped);
	printf("per window                 bytes   per byte written\n");
	printf("  written by the program %10.0f\n", f->written_per_window);
	printf("  read by the snapshot   %10.0f   %10.1f   (goal <= 2)\n", read,
	       per(read, f->written_per_window));
	printf("  staged for the store   %10.0f   %10.1f\n", staged,
	       per(staged, f->written_per_window));
	printf("  pinned staging         %10" PRIu64 "   %10.1f   (goal <= 4)\n", f->pinned_bytes,
	       per((double)f->pinned_bytes, f->written_per_window));
	printf("  ring overflows         %10" PRIu64 "                (goal 0)\n", f->overflows);
	printf("passes past the boundaries' first (staging short of a window): %" PRIu64 "\n",
	       f->passes);
	printf("read once, by the first window's snapshot (the pool whole): %" PRIu64 " bytes\n\n",
	       f->first_read_bytes);
	printf("wall time: %.3f s without the preload, %.3f s with it: %.3fx\n", f->wall_s[0],
	       f->wall_s[1], per(f->wall_s[1], f->wall_s[0]));
}

static void print_json(const struct fxrun *c, const struct figures *f, const char *cpu)
{
	double read = read_per_window(f);
	double staged = per((double)f->staged_bytes, (double)f->decode_windows);
	struct json j;

	json_init(&j, stdout);
	json_obj_begin(&j);
	json_kv_str(&j, "status", "ok");
	bench_machine_json(&j, cpu);
	json_kv_str(&j, "cuda", "fixture");
	json_kv_str(&j, "preload", c->preload);
	json_kv_str(&j, "serve", c->serve);
	json_kv_u64(&j, "pool_bytes", f->pool_bytes);
	json_kv_u64(&j, "steps", f->steps);
	json_kv_u64(&j, "window", f->window);
	json_kv_u64(&j, "decode_windows", f->decode_windows);
	json_kv_u64(&j, "snapshots", f->boundaries);
	json_kv_u64(&j, "snapshots_skipped", f->skipped);
	json_kv_double(&j, "written_bytes", f->written_per_window);
	json_kv_double(&j, "read_bytes", read);
	json_kv_double(&j, "read_per_written", per(read, f->written_per_window));
	json_kv_u64(&j, "first_read_bytes", f->first_read_bytes);
	json_kv_double(&j, "staged_bytes", staged);
	json_kv_double(&j, "staged_per_written", per(staged, f->written_per_window));
	json_kv_u64(&j, "pinned_bytes", f->pinned_bytes);
	json_kv_double(&j, "pinned_per_written",
		       per((double)f->pinned_bytes, f->written_per_window));
	json_kv_u64(&j, "ring_overflows", f->overflows);
	json_kv_u64(&j, "extra_passes", f->passes);
	json_kv_double(&j, "serve_s_base", f->wall_s[0]);
	json_kv_double(&j, "serve_s_preload", f->wall_s[1]);
	json_kv_double(&j, "serve_ratio", per(f->wall_s[1], f->wall_s[0]));
	json_obj_end(&j);
}

int bench_window(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pool-mib", required_argument, NULL, 'm' },
		{ "windows", required_argument, NULL, 'n' },
		{ "window", required_argument, NULL, 'w' },
		FXRUN_OPTIONS,
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct figures f = { .pool_mib = 1024, .windows = 8, .window = 16 };
	struct fxrun *c = calloc(1, sizeof *c);
	const char *serve = NULL;
	char cpu[128], window[40];
	const char *add[] = { "MOEFT_LOG=info", window, NULL };
	int ch, ret;

	if (!c)
		return cli_fail(cmd, 0, EXIT_USAGE, "out of memory");
	while ((ch = cli_getopt(&o, argc, argv, opts)) != -1) {
		if (fxrun_option(c, ch, optarg, &serve))
			continue;
		switch (ch) {
		case 'm': cli_parse_u64(&o, "--pool-mib", optarg, 8, 16384, &f.pool_mib); break;
		case 'n': cli_parse_u64(&o, "--windows", optarg, 2, 4096, &f.windows); break;
		case 'w': cli_parse_u64(&o, "--window", optarg, 1, 65536, &f.window); break;
		case 'j': o.json = 1; break;
		case 'h':
			cli_print_usage(cmd, stdout);
			ret = EXIT_OK;
			goto out;
		}
	}
	if (optind == argc || strcmp(argv[optind], "window"))
		cli_usage_error(&o, "missing what to measure: 'window'");
	else if (optind + 1 < argc)
		cli_usage_error(&o, "unexpected argument '%s'", argv[optind + 1]);
	fxrun_pieces(&o, c, serve);
	if ((ret = cli_parse_done(&o)))
		goto out;
	/* The last window's steps never commit: one more window of them. */
	f.steps = (f.windows + 1) * f.window;
	if (f.steps > 1000000) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "--windows x --window: %" PRIu64 " steps, "
			       "the serving program takes at most 1000000", f.steps);
		goto out;
	}
	snprintf(window, sizeof window, "MOEFT_WINDOW=%" PRIu64, f.window);
	if (fxrun_setup(c, "window", add) < 0 || measure(c, &f) < 0) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "%s", c->msg);
		goto out;
	}
	bench_cpu_model(cpu, sizeof cpu);
	if (o.json)
		print_json(c, &f, cpu);
	else
		print_text(c, &f, cpu);
	ret = EXIT_OK;
out:
	fxrun_done(c);
	free(c);
	return ret;
}

/*
 * bench_launch.c - moeft bench launch: what the interposer costs a
 * launch, and a serving step, on the CPU fixture.
 *
 * The pieces (fxrun.h): --fixture DIR, --serve PROG (a serving program
 * speaking demo/serve.c's: --mode, --steps), --preload LIB, and --bench
 * PROG, a launch micro-benchmark speaking tests/bench/launch_bench.c's
 * protocol.  tests/bench/launch.sh passes a build tree's.
 *
 * Method: every figure compares a run without the preload against one
 * with it, in the same invocation, the two alternating.  The benchmark
 * (tests/bench/launch_bench.c) times --launches cudaLaunchKernel calls
 * of a kernel no rule owns and of one a built-in rule owns, best of 3
 * inside a run; this file keeps the best of ROUNDS runs of each side.
 * The serving program runs its default model for --steps steps in
 * eager and in graph mode; its figure is the process's wall time, best
 * of SERVE_ROUNDS.  If valgrind is on PATH, callgrind counts the
 * instructions of min(--launches, CG_LAUNCHES) no-rule launches (the
 * launch calls only, see launch_bench.c) with and without the preload;
 * the difference per launch is the interposer's instruction cost.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "child.h"
#include "fxrun.h"
#include "json.h"

#define ROUNDS 5		/* launch_bench runs per side */
#define SERVE_ROUNDS 3		/* serve runs per side and mode */
#define CG_LAUNCHES 20000ul	/* at most, under callgrind */
#define PATH_LEN PATH_MAX

struct ctx {
	struct fxrun fx;
	char bench[PATH_LEN];
	char valgrind[PATH_LEN];	/* "" when not on PATH */
	char cgout[PATH_LEN];		/* in fx.dir */
};

struct figures {
	unsigned long launches, cg_launches, steps;
	double norule_ns[2], rule_ns[2];	/* [0] without, [1] with */
	double eager_s[2], graph_s[2];
	double cg_instr[2];		/* per launch; NAN when not measured */
};

/* ---- the pieces ------------------------------------------------------- */

/* Check the pieces named on the command line, as usage errors. */
static void check_pieces(struct cli_opts *o, struct ctx *c, const char *bench,
			  const char *serve)
{
	fxrun_pieces(o, &c->fx, serve);
	if (!bench)
		cli_usage_error(o, "--bench PROG is required (the launch micro-benchmark)");
	else if (child_find(bench, c->bench, sizeof c->bench) < 0)
		cli_usage_error(o, "--bench %s: %s", bench, strerror(errno));
	child_find("valgrind", c->valgrind, sizeof c->valgrind);
}

static int run(struct ctx *c, char *const argv[], int preload, char *out, size_t outlen,
	       double *wall)
{
	return fxrun_run(&c->fx, argv, preload ? FXRUN_PRELOAD : 0, out, outlen, wall);
}

/* ---- measurements -------------------------------------------------------- */

static int launch_rounds(struct ctx *c, struct figures *f)
{
	char n[32], out[512];
	char *argv[] = { c->bench, "--launches", n, "--repeats", "3", NULL };

	snprintf(n, sizeof n, "%lu", f->launches);
	for (int r = 0; r < ROUNDS; r++)
		for (int pre = 0; pre < 2; pre++) {
			const char *a, *b;
			double wall;

			if (run(c, argv, pre, out, sizeof out, &wall) < 0)
				return -1;
			if (!(a = strstr(out, " norule_ns=")) || !(b = strstr(out, " rule_ns="))) {
				snprintf(c->fx.msg, sizeof c->fx.msg,
					 "%s printed no figures: '%.200s'",
					 c->bench, out);
				return -1;
			}
			bench_keep_min(&f->norule_ns[pre], strtod(a + 11, NULL));
			bench_keep_min(&f->rule_ns[pre], strtod(b + 9, NULL));
		}
	return 0;
}

static int serve_rounds(struct ctx *c, struct figures *f)
{
	char steps[32];
	char *eager[] = { c->fx.serve, "--mode=eager", steps, NULL };
	char *graph[] = { c->fx.serve, "--mode=graph", steps, NULL };

	snprintf(steps, sizeof steps, "--steps=%lu", f->steps);
	for (int r = 0; r < SERVE_ROUNDS; r++)
		for (int pre = 0; pre < 2; pre++) {
			double wall;

			if (run(c, eager, pre, NULL, 0, &wall) < 0)
				return -1;
			bench_keep_min(&f->eager_s[pre], wall);
			if (run(c, graph, pre, NULL, 0, &wall) < 0)
				return -1;
			bench_keep_min(&f->graph_s[pre], wall);
		}
	return 0;
}

/* The "summary:" (or "totals:") count of a callgrind output file. */
static int cg_total(const char *path, double *total)
{
	FILE *fp = fopen(path, "r");
	char line[256];
	int found = 0;

	while (fp && fgets(line, sizeof line, fp)) {
		if (!strncmp(line, "summary:", 8) || (!found && !strncmp(line, "totals:", 7))) {
			*total = strtod(strchr(line, ':') + 1, NULL);
			found = 1;
		}
	}
	if (fp)
		fclose(fp);
	return found ? 0 : -1;
}

/* Instructions per no-rule launch, with and without the preload.  A
 * failure leaves them NAN and says why on stderr: valgrind is optional. */
static void callgrind(struct ctx *c, struct figures *f)
{
	char n[32], out[PATH_LEN + 32];
	char *argv[] = { c->valgrind, "--tool=callgrind", "-q", out, "--collect-atstart=no",
			 "--toggle-collect=norule_batch*", c->bench, "--callgrind",
			 "--launches", n, NULL };

	f->cg_launches = f->launches < CG_LAUNCHES ? f->launches : CG_LAUNCHES;
	snprintf(n, sizeof n, "%lu", f->cg_launches);
	snprintf(out, sizeof out, "--callgrind-out-file=%s", c->cgout);
	for (int pre = 0; pre < 2; pre++) {
		double wall, total;

		unlink(c->cgout);
		if (run(c, argv, pre, NULL, 0, &wall) == 0) {
			if (cg_total(c->cgout, &total) == 0) {
				f->cg_instr[pre] = total / (double)f->cg_launches;
				continue;
			}
			snprintf(c->fx.msg, sizeof c->fx.msg, "%s: no instruction count", c->cgout);
		}
		fprintf(stderr, "moeft bench launch: callgrind not measured: %s\n", c->fx.msg);
		f->cg_instr[0] = f->cg_instr[1] = NAN;
		break;
	}
	unlink(c->cgout);
}

/* ---- output -------------------------------------------------------------- */

static double ratio(const double v[2])
{
	return v[0] > 0 ? v[1] / v[0] : NAN;
}

static void print_text(const struct ctx *c, const struct figures *f, const char *cpu)
{
	printf("moeft bench launch: %s\n", c->fx.preload);
	printf("machine: %s, %ld CPUs; CUDA: the CPU fixture in %s\n\n", cpu,
	       sysconf(_SC_NPROCESSORS_ONLN), c->fx.fixture);
	printf("cudaLaunchKernel, %lu launches per run, best of %d runs per side\n",
	       f->launches, ROUNDS);
	printf("  %-22s %11s %11s %8s\n", "", "without", "with", "ratio");
	printf("  %-22s %8.1f ns %8.1f ns %8.3f   (goal <= 1.05)\n", "kernel of no rule",
	       f->norule_ns[0], f->norule_ns[1], ratio(f->norule_ns));
	printf("  %-22s %8.1f ns %8.1f ns %8.3f\n", "kernel a rule owns", f->rule_ns[0],
	       f->rule_ns[1], ratio(f->rule_ns));
	printf("\n%s, default model, %lu steps, wall time, best of %d\n", c->fx.serve,
	       f->steps, SERVE_ROUNDS);
	printf("  %-22s %8.1f ms %8.1f ms %8.3f\n", "eager", f->eager_s[0] * 1e3,
	       f->eager_s[1] * 1e3, ratio(f->eager_s));
	printf("  %-22s %8.1f ms %8.1f ms %8.3f\n", "graph", f->graph_s[0] * 1e3,
	       f->graph_s[1] * 1e3, ratio(f->graph_s));
	if (!c->valgrind[0])
		printf("\ncallgrind: valgrind is not on PATH, not measured\n");
	else if (isnan(f->cg_instr[0]))
		printf("\ncallgrind: failed, not measured\n");
	else
		printf("\ncallgrind, %lu no-rule launches: %.1f instructions per launch without, "
		       "%.1f with: %.1f added (goal < 200)\n", f->cg_launches, f->cg_instr[0],
		       f->cg_instr[1], f->cg_instr[1] - f->cg_instr[0]);
}

static void print_json(const struct ctx *c, const struct figures *f, const char *cpu)
{
	struct json j;

	json_init(&j, stdout);
	json_obj_begin(&j);
	json_kv_str(&j, "status", "ok");
	bench_machine_json(&j, cpu);
	json_kv_str(&j, "cuda", "fixture");
	json_kv_str(&j, "preload", c->fx.preload);
	json_kv_str(&j, "bench", c->bench);
	json_kv_str(&j, "serve", c->fx.serve);
	json_kv_u64(&j, "launches", f->launches);
	json_kv_u64(&j, "rounds", ROUNDS);
	json_kv_double(&j, "norule_ns_base", f->norule_ns[0]);
	json_kv_double(&j, "norule_ns_preload", f->norule_ns[1]);
	json_kv_double(&j, "norule_ratio", ratio(f->norule_ns));
	json_kv_double(&j, "rule_ns_base", f->rule_ns[0]);
	json_kv_double(&j, "rule_ns_preload", f->rule_ns[1]);
	json_kv_double(&j, "rule_ratio", ratio(f->rule_ns));
	json_kv_u64(&j, "serve_steps", f->steps);
	json_kv_u64(&j, "serve_rounds", SERVE_ROUNDS);
	json_kv_double(&j, "serve_eager_s_base", f->eager_s[0]);
	json_kv_double(&j, "serve_eager_s_preload", f->eager_s[1]);
	json_kv_double(&j, "serve_eager_ratio", ratio(f->eager_s));
	json_kv_double(&j, "serve_graph_s_base", f->graph_s[0]);
	json_kv_double(&j, "serve_graph_s_preload", f->graph_s[1]);
	json_kv_double(&j, "serve_graph_ratio", ratio(f->graph_s));
	json_kv_u64(&j, "callgrind_launches", c->valgrind[0] ? f->cg_launches : 0);
	json_kv_double(&j, "callgrind_instr_base", f->cg_instr[0]);
	json_kv_double(&j, "callgrind_instr_preload", f->cg_instr[1]);
	json_kv_double(&j, "callgrind_instr_per_launch", f->cg_instr[1] - f->cg_instr[0]);
	json_obj_end(&j);
}

/* ---- the command --------------------------------------------------------- */

int bench_launch(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "launches", required_argument, NULL, 'n' },
		{ "steps", required_argument, NULL, 'S' },
		{ "bench", required_argument, NULL, 'b' },
		FXRUN_OPTIONS,
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct figures f = { .launches = 100000, .steps = 512, .cg_instr = { NAN, NAN } };
	const char *bench = NULL, *serve = NULL;
	struct ctx *c = calloc(1, sizeof *c);
	char cpu[128];
	uint64_t v;
	int ch, ret;

	if (!c)
		return cli_fail(cmd, 0, EXIT_USAGE, "out of memory");
	while ((ch = cli_getopt(&o, argc, argv, opts)) != -1) {
		if (fxrun_option(&c->fx, ch, optarg, &serve))
			continue;
		switch (ch) {
		case 'n':
			if (cli_parse_u64(&o, "--launches", optarg, 1000, 100000000, &v) == 0)
				f.launches = (unsigned long)v;
			break;
		case 'S':
			if (cli_parse_u64(&o, "--steps", optarg, 1, 100000, &v) == 0)
				f.steps = (unsigned long)v;
			break;
		case 'b': bench = optarg; break;
		case 'j': o.json = 1; break;
		case 'h':
			cli_print_usage(cmd, stdout);
			ret = EXIT_OK;
			goto out;
		}
	}
	if (optind == argc || strcmp(argv[optind], "launch"))
		cli_usage_error(&o, "missing what to measure: 'launch'");
	else if (optind + 1 < argc)
		cli_usage_error(&o, "unexpected argument '%s'", argv[optind + 1]);
	check_pieces(&o, c, bench, serve);
	if ((ret = cli_parse_done(&o)))
		goto out;
	/* A directory of its own: what the runs remove is only ever this run's. */
	if (fxrun_setup(&c->fx, "launch", NULL) < 0 || launch_rounds(c, &f) < 0 ||
	    serve_rounds(c, &f) < 0) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "%s", c->fx.msg);
		goto out;
	}
	snprintf(c->cgout, sizeof c->cgout, "%s/callgrind.out", c->fx.dir);
	if (c->valgrind[0])
		callgrind(c, &f);
	bench_cpu_model(cpu, sizeof cpu);
	if (o.json)
		print_json(c, &f, cpu);
	else
		print_text(c, &f, cpu);
	ret = EXIT_OK;
out:
	fxrun_done(&c->fx);
	free(c);
	return ret;
}

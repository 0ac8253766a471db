/*
 * bench_launch.c - moeft bench launch: what the interposer costs a
 * launch, and a serving step, on the CPU fixture.
 *
 * The pieces come from a build tree, found next to the moeft executable
 * (/proc/self/exe is BUILD/tools/moeft): BUILD/preload/libmoeft.so,
 * BUILD/tests/fixture (the test-only libcudart.so.13 and libcuda.so.1),
 * BUILD/tests/bench/launch_bench and BUILD/tests/serve/serve.  --preload
 * and --fixture name the first two elsewhere.
 *
 * Method: every figure compares a run without the preload against one
 * with it, in the same invocation, the two alternating.  launch_bench
 * (tests/bench/launch_bench.c) times --launches cudaLaunchKernel calls
 * of a kernel no rule owns and of one a built-in rule owns, best of 3
 * inside a run; this file keeps the best of ROUNDS runs of each side.
 * The test serving program runs its default model for --steps steps in
 * eager and in graph mode; its figure is the process's wall time, best
 * of SERVE_ROUNDS.  If valgrind is on PATH, callgrind counts the
 * instructions of min(--launches, CG_LAUNCHES) no-rule launches (the
 * launch calls only, see launch_bench.c) with and without the preload;
 * the difference per launch is the interposer's instruction cost.
 *
 * Preloaded runs get MOEFT_WAL (a file in /dev/shm, removed after each
 * run), MOEFT_WAL_SIZE=16M (creating the default 1 GiB log would dominate
 * a short run's wall time) and MOEFT_STRICT=1 (a preload that fails to
 * start ends the run instead of measuring nothing).  Every child loses
 * the caller's LD_PRELOAD, LD_LIBRARY_PATH and MOEFT_* variables and gets
 * LD_LIBRARY_PATH=the fixture.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "bench.h"
#include "json.h"

#define ROUNDS 5		/* launch_bench runs per side */
#define SERVE_ROUNDS 3		/* serve runs per side and mode */
#define CG_LAUNCHES 20000ul	/* at most, under callgrind */
#define WAL_SIZE "16M"
#define PATH_LEN 4096

extern char **environ;

struct ctx {
	const struct cli_command *cmd;
	char preload[PATH_LEN], fixture[PATH_LEN], bench[PATH_LEN], serve[PATH_LEN];
	char valgrind[PATH_LEN];	/* "" when not on PATH */
	char wal[PATH_LEN], cgout[PATH_LEN];
	char **env[2];			/* without, with the preload */
	char msg[PATH_LEN + 512];	/* why a run failed */
};

struct figures {
	unsigned long launches, cg_launches, steps;
	double norule_ns[2], rule_ns[2];	/* [0] without, [1] with */
	double eager_s[2], graph_s[2];
	double cg_instr[2];		/* per launch; NAN when not measured */
};

/* ---- finding the pieces ------------------------------------------------ */

/* BUILD from /proc/self/exe = BUILD/tools/moeft; -1 if it cannot be read. */
static int build_root(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	char *slash;

	if (n <= 0)
		return -1;
	buf[n] = '\0';
	for (int i = 0; i < 2; i++) {
		if (!(slash = strrchr(buf, '/')))
			return -1;
		*slash = '\0';
	}
	if (!*buf)
		strcpy(buf, "/");
	return 0;
}

static int join(char *out, const char *dir, const char *name)
{
	int n = snprintf(out, PATH_LEN, "%s/%s", dir, name);

	return n > 0 && n < PATH_LEN ? 0 : -1;
}

/* valgrind's path from PATH into out; 0 if found. */
static int find_valgrind(char *out)
{
	const char *path = getenv("PATH");

	while (path && *path) {
		size_t n = strcspn(path, ":");
		int w = snprintf(out, PATH_LEN, "%.*s/valgrind", (int)n, path);

		if (n && w > 0 && w < PATH_LEN && access(out, X_OK) == 0)
			return 0;
		path += n + (path[n] == ':');
	}
	out[0] = '\0';
	return -1;
}

/* 0, or the exit status after saying what is missing. */
static int locate(struct ctx *c, int json, const char *preload, const char *fixture)
{
	char root[PATH_LEN], lib[PATH_LEN];
	int have_root = build_root(root, sizeof root) == 0;
	const struct {
		char *path;
		const char *given, *rel, *what;
		int mode;
	} need[] = {
		{ c->preload, preload, "preload/libmoeft.so", "the preload (libmoeft.so)", R_OK },
		{ c->fixture, fixture, "tests/fixture", "the CPU fixture's directory", X_OK },
		{ c->bench, NULL, "tests/bench/launch_bench", "the launch micro-benchmark", X_OK },
		{ c->serve, NULL, "tests/serve/serve", "the test serving program", X_OK },
	};

	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
		if (need[i].given) {
			if (strlen(need[i].given) >= PATH_LEN)
				return cli_fail(c->cmd, json, EXIT_USAGE, "path too long: %s",
						need[i].given);
			strcpy(need[i].path, need[i].given);
		} else if (!have_root || join(need[i].path, root, need[i].rel) < 0) {
			return cli_fail(c->cmd, json, EXIT_USAGE, "missing %s: cannot find the "
					"build tree of this moeft from /proc/self/exe",
					need[i].what);
		}
		if (access(need[i].path, need[i].mode) != 0)
			return cli_fail(c->cmd, json, EXIT_USAGE, "missing %s: %s: %s (run "
					"moeft from a build tree with the tests built%s)",
					need[i].what, need[i].path, strerror(errno),
					i < 2 ? ", or name it with --preload/--fixture" : "");
	}
	if (join(lib, c->fixture, "libcudart.so.13") < 0 || access(lib, R_OK) != 0)
		return cli_fail(c->cmd, json, EXIT_USAGE, "missing the CPU fixture: no "
				"libcudart.so.13 in %s", c->fixture);
	find_valgrind(c->valgrind);
	return 0;
}

/* ---- children ------------------------------------------------------------ */

static int dropped(const char *var)
{
	return !strncmp(var, "LD_PRELOAD=", 11) || !strncmp(var, "LD_LIBRARY_PATH=", 16) ||
	       !strncmp(var, "MOEFT_", 6);
}

static void free_env(char **env)
{
	for (char **e = env; e && *e; e++)
		free(*e);
	free(env);
}

/* The caller's environment less dropped(), plus LD_LIBRARY_PATH and, when
 * `preload`, the preload's variables.  NULL when out of memory. */
static char **make_env(const struct ctx *c, int preload)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	if (!(env = calloc(n + 6, sizeof *env)))
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!dropped(environ[i]) && !(env[k++] = strdup(environ[i])))
			goto fail;
	if (asprintf(&env[k++], "LD_LIBRARY_PATH=%s", c->fixture) < 0)
		goto fail;
	if (!preload)
		return env;
	if (asprintf(&env[k++], "LD_PRELOAD=%s", c->preload) < 0 ||
	    asprintf(&env[k++], "MOEFT_WAL=%s", c->wal) < 0 ||
	    !(env[k++] = strdup("MOEFT_WAL_SIZE=" WAL_SIZE)) ||
	    !(env[k++] = strdup("MOEFT_STRICT=1")))
		goto fail;
	return env;
fail:
	env[k > 0 ? k - 1 : 0] = NULL;
	free_env(env);
	return NULL;
}

/*
 * Run argv, with the preload or not, to its end: its stdout into out
 * (NUL-terminated) or to /dev/null, its stderr to ours, the wall time
 * into *wall.  0, or -1 with c->msg set.  The log of a preloaded run is
 * removed before and after it.
 */
/* The log of a run under the preload, and its KV store beside it. */
static void remove_log(const struct ctx *c)
{
	char kv[PATH_LEN + 3];

	unlink(c->wal);
	snprintf(kv, sizeof kv, "%s.kv", c->wal);
	unlink(kv);
}

static int run(struct ctx *c, char *const argv[], int preload, char *out, size_t outlen,
	       double *wall)
{
	posix_spawn_file_actions_t fa;
	int fd[2] = { -1, -1 }, status, err;
	size_t got = 0;
	double t;
	pid_t pid;

	if (preload)
		remove_log(c);
	if (out ? pipe2(fd, O_CLOEXEC) < 0 : (fd[0] = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0) {
		snprintf(c->msg, sizeof c->msg, "%s: cannot make its stdout: %s", argv[0],
			 strerror(errno));
		return -1;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out ? fd[1] : fd[0], STDOUT_FILENO);
	t = bench_now();
	err = posix_spawn(&pid, argv[0], &fa, NULL, argv, c->env[preload]);
	posix_spawn_file_actions_destroy(&fa);
	if (out)
		close(fd[1]);
	while (!err && out && got + 1 < outlen) {
		ssize_t n = read(fd[0], out + got, outlen - 1 - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (out)
		out[got] = '\0';
	close(fd[0]);	/* more than outlen: the child gets SIGPIPE */
	if (err) {
		snprintf(c->msg, sizeof c->msg, "cannot run %s: %s", argv[0], strerror(err));
		return -1;
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			status = -1;
			break;
		}
	*wall = bench_now() - t;
	if (preload)
		remove_log(c);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char how[64];

		if (status != -1 && WIFSIGNALED(status))
			snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
		else
			snprintf(how, sizeof how, "exited with status %d",
				 status == -1 ? -1 : WEXITSTATUS(status));
		snprintf(c->msg, sizeof c->msg, "%s %s %s the preload", argv[0], how,
			 preload ? "with" : "without");
		return -1;
	}
	return 0;
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
				snprintf(c->msg, sizeof c->msg, "%s printed no figures: '%.200s'",
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
	char *eager[] = { c->serve, "--mode=eager", steps, NULL };
	char *graph[] = { c->serve, "--mode=graph", steps, NULL };

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
			snprintf(c->msg, sizeof c->msg, "%s: no instruction count", c->cgout);
		}
		fprintf(stderr, "moeft bench launch: callgrind not measured: %s\n", c->msg);
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
	printf("moeft bench launch: %s\n", c->preload);
	printf("machine: %s, %ld CPUs; CUDA: the CPU fixture in %s\n\n", cpu,
	       sysconf(_SC_NPROCESSORS_ONLN), c->fixture);
	printf("cudaLaunchKernel, %lu launches per run, best of %d runs per side\n",
	       f->launches, ROUNDS);
	printf("  %-22s %11s %11s %8s\n", "", "without", "with", "ratio");
	printf("  %-22s %8.1f ns %8.1f ns %8.3f   (goal <= 1.05)\n", "kernel of no rule",
	       f->norule_ns[0], f->norule_ns[1], ratio(f->norule_ns));
	printf("  %-22s %8.1f ns %8.1f ns %8.3f\n", "kernel a rule owns", f->rule_ns[0],
	       f->rule_ns[1], ratio(f->rule_ns));
	printf("\ntest serving program, default model, %lu steps, wall time, best of %d\n",
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
	json_kv_str(&j, "preload", c->preload);
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
		{ "preload", required_argument, NULL, 'p' },
		{ "fixture", required_argument, NULL, 'f' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct figures f = { .launches = 100000, .steps = 512, .cg_instr = { NAN, NAN } };
	const char *preload = NULL, *fixture = NULL;
	struct ctx *c;
	char cpu[128];
	uint64_t v;
	int ch, ret;

	while ((ch = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (ch) {
		case 'n':
			if (cli_parse_u64(&o, "--launches", optarg, 1000, 100000000, &v) == 0)
				f.launches = (unsigned long)v;
			break;
		case 'S':
			if (cli_parse_u64(&o, "--steps", optarg, 1, 100000, &v) == 0)
				f.steps = (unsigned long)v;
			break;
		case 'p': preload = optarg; break;
		case 'f': fixture = optarg; break;
		case 'j': o.json = 1; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind == argc || strcmp(argv[optind], "launch"))
		cli_usage_error(&o, "missing what to measure: 'launch'");
	else if (optind + 1 < argc)
		cli_usage_error(&o, "unexpected argument '%s'", argv[optind + 1]);
	if ((ret = cli_parse_done(&o)))
		return ret;

	if (!(c = calloc(1, sizeof *c)))
		return cli_fail(cmd, o.json, EXIT_USAGE, "out of memory");
	c->cmd = cmd;
	if ((ret = locate(c, o.json, preload, fixture)))
		goto out;
	snprintf(c->wal, sizeof c->wal, "/dev/shm/moeft-bench-launch-%ld.wal", (long)getpid());
	snprintf(c->cgout, sizeof c->cgout, "/dev/shm/moeft-bench-launch-%ld.callgrind",
		 (long)getpid());
	if (!(c->env[0] = make_env(c, 0)) || !(c->env[1] = make_env(c, 1))) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "out of memory");
		goto out;
	}
	if (launch_rounds(c, &f) < 0 || serve_rounds(c, &f) < 0) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "%s", c->msg);
		goto out;
	}
	if (c->valgrind[0])
		callgrind(c, &f);
	bench_cpu_model(cpu, sizeof cpu);
	if (o.json)
		print_json(c, &f, cpu);
	else
		print_text(c, &f, cpu);
	ret = EXIT_OK;
out:
	free_env(c->env[0]);
	free_env(c->env[1]);
	free(c);
	return ret;
}

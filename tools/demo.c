/*
 * demo.c - moeft demo: moeft's main job, shown on a serving program.
 *
 * CMD (the demo serving program unless given; demo/README.md says what
 * another must do) decodes --steps steps three times:
 *   1. uninterrupted, without the preload: the reference stdout and time;
 *   2. under LD_PRELOAD=LIB, writing the log, with --journal: SIGKILLed
 *      once the journal shows KILL_AT of the steps done;
 *   3. `moeft restore --wal LOG --preload LIB -- CMD ...`, run as this
 *      very executable (/proc/self/exe), so the real restore path runs:
 *      it writes the last committed window's state, then CMD resumes
 *      after that window, under the preload, and finishes.
 * The report: whether 3's stdout equals 1's (RESULT), the steps decoded
 * before the kill less the step 3 resumed at (RPO), and the restore's
 * time, from its messages (RTO), against decoding the lost steps again.
 * The children get the caller's environment less LD_PRELOAD and MOEFT_*
 * (child.h), plus what each run needs: the figures are the defaults'.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "child.h"
#include "cli.h"
#include "demo.h"
#include "json.h"
#include "kvstore.h"
#include "launch.h"

#define DEFAULT_STEPS 600
#define MIN_STEPS 32		/* two windows: a kill at KILL_AT lands past one */
#define KILL_AT 0.6		/* of the steps done when the journal shows it */
#define WINDOW 16		/* MOEFT_WINDOW of the runs: the RPO's bound */
#define POLL_US 1000		/* polling a child: its journal, an interrupt */
#define ERR_MAX 65536		/* of the restore's messages, read for figures */

struct demo {
	const struct cli_command *cmd;
	int json;
	unsigned long steps;
	const char *lib;
	char preload[PATH_MAX], serve[PATH_MAX], self[PATH_MAX];
	char dir[64];			/* temporary: outputs, journal, the log */
	char wal[PATH_MAX];		/* the log: --wal, or in dir */
	char journal[PATH_MAX], steps_arg[32], journal_arg[PATH_MAX + 16];
	char **cmdv;			/* CMD ARGS --steps=N */
	char **cmdj;			/* ... --journal=J */
	char **restorev;		/* moeft restore ... -- cmdj */
	char **env_plain, **env_preload;
	int keep;			/* leave dir behind: the outputs differ */
};

struct figures {
	double full_ms, rest_ms;	/* wall times of runs 1 and 3 */
	unsigned long killed, resume;
	double offline_s, copy_s;	/* NAN when the restore did not say */
	char window[256];		/* restore's "window W (steps ...)" */
	int equal;
};

/* ---- options ----------------------------------------------------------------- */

/* The default CMD, or why there is none (recorded as a usage error). */
static void default_serve(struct cli_opts *o, struct demo *d)
{
	static const char *const give = "; give one: moeft demo -- CMD [ARGS...]";

	if (launch_find_serve(d->serve, sizeof d->serve) < 0)
		cli_usage_error(o, "no serving program: %s is missing (moeft was built without "
				"nvcc)%s", d->serve[0] ? d->serve : "moeft-serve", give);
	else if (access("/dev/nvidiactl", F_OK) < 0)
		cli_usage_error(o, "no serving program: %s needs a GPU and there is none here "
				"(no /dev/nvidiactl)%s", d->serve, give);
}

/* --wal PATH: a file the preload can create afresh, kept afterwards. */
static void check_wal(struct cli_opts *o, struct demo *d, const char *path)
{
	char msg[PATH_MAX + 128], buf[PATH_MAX], kv[PATH_MAX];
	const char *dir;
	struct stat st;

	if (cli_path_opt(o, "--wal", path, sizeof kv - 3) < 0 ||
	    kvs_path(path, kv, sizeof kv) < 0)
		return;
	dir = cli_parent(buf, sizeof buf, path);
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		cli_usage_error(o, "--wal %s: no such directory: %s", path, dir);
	else if (cli_fresh_path(path, msg, sizeof msg) < 0)
		cli_usage_error(o, "--wal %s", msg);
	/* the preload formats a KV store of another log it finds there */
	else if (cli_fresh_path(kv, msg, sizeof msg) < 0)
		cli_usage_error(o, "--wal %s: its KV store: %s", path, msg);
	else
		strcpy(d->wal, path);
}

/* The options into d: CMD's argument count (0: the default CMD), or -1
 * with the exit status in *code (--help, a usage error). */
static int parse(struct demo *d, int argc, char **argv, int *code)
{
	static const struct option opts[] = {
		{ "engine", required_argument, NULL, 'e' },
		{ "preload", required_argument, NULL, 'p' },
		{ "steps", required_argument, NULL, 's' },
		{ "wal", required_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = d->cmd };
	char msg[PATH_MAX + 128];
	const char *wal = NULL;
	char **cmd = NULL;
	uint64_t v;
	int c;

	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'e':
			if (strcmp(optarg, "serve"))
				cli_usage_error(&o, "--engine %s: not an engine moeft demo knows "
						"(serve, vllm)", optarg);
			break;
		case 'p': d->lib = optarg; break;
		case 's':
			if (cli_parse_u64(&o, "--steps", optarg, MIN_STEPS, 1000000, &v) == 0)
				d->steps = (unsigned long)v;
			break;
		case 'w': wal = optarg; break;
		case 'j': o.json = 1; break;
		case 'h':
			cli_print_usage(d->cmd, stdout);
			*code = EXIT_OK;
			return -1;
		}
	}
	d->json = o.json;
	/* first: of all the errors, one about an existing log must be seen */
	if (wal)
		check_wal(&o, d, wal);
	if (optind > 0 && !strcmp(argv[optind - 1], "--")) {
		if (optind == argc)
			cli_usage_error(&o, "a command is missing after \"--\"");
		else
			cmd = &argv[optind];
	} else if (optind < argc) {
		cli_usage_error(&o, "unexpected argument '%s' (a command goes after \"--\")",
				argv[optind]);
	}
	if (!d->lib) {
		if (launch_find_preload(d->preload, sizeof d->preload) < 0)
			cli_usage_error(&o, "--preload LIB is required: no %s",
					d->preload[0] ? d->preload : "libmoeft.so beside moeft");
		d->lib = d->preload;
	}
	if (launch_check_lib(d->lib, msg, sizeof msg) < 0)
		cli_usage_error(&o, "--preload %s", msg);
	if (cmd && child_find(cmd[0], d->serve, sizeof d->serve) < 0)
		cli_usage_error(&o, "%s: %s", cmd[0], errno == ENOENT && !strchr(cmd[0], '/') ?
				"not found in PATH" : strerror(errno));
	else if (!cmd)
		default_serve(&o, d);
	if (readlink("/proc/self/exe", d->self, sizeof d->self - 1) <= 0)
		cli_usage_error(&o, "/proc/self/exe: %s", strerror(errno));
	if ((*code = cli_parse_done(&o)))
		return -1;
	return cmd ? (int)(argv + argc - cmd) : 0;
}

/* ---- the runs ---------------------------------------------------------------- */

/* a[0..na) then b[0..nb), NULL-terminated; NULL when out of memory. */
static char **cat_argv(char *const a[], size_t na, char *const b[], size_t nb)
{
	char **v = calloc(na + nb + 1, sizeof *v);

	if (v) {
		memcpy(v, a, na * sizeof *v);
		memcpy(v + na, b, nb * sizeof *v);
	}
	return v;
}

/* The argument vectors and environments of the runs, CMD being cmd[0]
 * (d->serve: its path) and cmd[1..ncmd); 0, or -1 out of memory. */
static int prepare(struct demo *d, char *const cmd[], size_t ncmd)
{
	char *tail[] = { d->steps_arg, d->journal_arg };
	char *head[] = { d->self, "restore", "--wal", d->wal, "--preload", (char *)d->lib, "--" };
	char window[32], preload[PATH_MAX + 16], wal[PATH_MAX + 16];
	const char *plain_add[] = { window, NULL };
	const char *preload_add[] = { window, preload, wal, NULL };

	snprintf(d->steps_arg, sizeof d->steps_arg, "--steps=%lu", d->steps);
	snprintf(d->journal_arg, sizeof d->journal_arg, "--journal=%s", d->journal);
	snprintf(window, sizeof window, "MOEFT_WINDOW=%d", WINDOW);
	snprintf(preload, sizeof preload, "LD_PRELOAD=%s", d->lib);
	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", d->wal);
	d->cmdv = cat_argv(cmd, ncmd, tail, 1);
	d->cmdj = cat_argv(cmd, ncmd, tail, 2);
	if (!d->cmdv || !d->cmdj)
		return -1;
	d->cmdv[0] = d->cmdj[0] = d->serve;
	d->restorev = cat_argv(head, sizeof head / sizeof head[0], d->cmdj, ncmd + 2);
	d->env_plain = child_env(plain_add);
	d->env_preload = child_env(preload_add);
	return d->restorev && d->env_plain && d->env_preload ? 0 : -1;
}

/* Open NAME in the demo's directory for a child's output; -1 on error. */
static int out_file(const struct demo *d, const char *name)
{
	char path[PATH_MAX + 32];

	snprintf(path, sizeof path, "%s/%s", d->dir, name);
	return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
}

/* Copy the file NAME of the demo's directory to stderr: a child's messages. */
static void show_file(const struct demo *d, const char *name)
{
	char path[PATH_MAX + 32], buf[4096];
	size_t n;
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", d->dir, name);
	if (!(f = fopen(path, "r")))
		return;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		fwrite(buf, 1, n, stderr);
	fclose(f);
}

/*
 * An interrupt (Ctrl-C, SIGTERM, SIGHUP) kills the child that runs, the
 * demo stops after it and removes its directory, and then the signal ends
 * moeft as it would have: nothing is left behind in /dev/shm.  The handler
 * only notes the signal: the waits poll, and kill only a child they have
 * not reaped, whose pid cannot have been reused.
 */
volatile sig_atomic_t demo_interrupted;

static void on_interrupt(int sig)
{
	demo_interrupted = sig;
}

void demo_catch_interrupts(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa = { .sa_handler = on_interrupt };

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
}

/* After the directory is gone: end by the signal that interrupted. */
void demo_end_if_interrupted(void)
{
	int sig = demo_interrupted;

	if (!sig)
		return;
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Wait for pid, killing it if an interrupt comes first: its status. */
static int wait_child(pid_t pid)
{
	int status;
	pid_t r;

	while ((r = waitpid(pid, &status, WNOHANG)) == 0 || (r < 0 && errno == EINTR)) {
		if (demo_interrupted)
			kill(pid, SIGKILL);
		usleep(POLL_US);
	}
	return r == pid ? status : -1;
}

/*
 * Run argv to its end with env, stdout and stderr into the files out and
 * err of the demo's directory; its wall time into *ms.  0 when it exited
 * 0, else -1 after saying how `what` (the run, named) ended, with its
 * messages.
 */
static int run(struct demo *d, char **argv, char **env, const char *out, const char *err,
	       const char *what, double *ms)
{
	int ofd = out_file(d, out), efd = out_file(d, err), status = -1, e = EIO;
	double t = cli_now() * 1e3;
	char how[64];
	pid_t pid;

	if (ofd >= 0 && efd >= 0 && !(e = child_spawn(&pid, argv, env, ofd, efd)))
		status = wait_child(pid);
	*ms = cli_now() * 1e3 - t;
	if (ofd >= 0)
		close(ofd);
	if (efd >= 0)
		close(efd);
	if (demo_interrupted)
		return -1;
	if (e) {
		cli_fail(d->cmd, d->json, 0, "cannot run %s: %s", argv[0], strerror(e));
		return -1;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	cli_fail(d->cmd, d->json, 0, "%s %s; its messages:", what,
		 child_how(how, sizeof how, status));
	show_file(d, err);
	return -1;
}

/* Steps the journal shows done: its lines that begin with "step ". */
struct journal {
	int fd;
	unsigned long steps;
	size_t col;		/* of the next byte in its line */
	int step;		/* the line so far matches "step " */
};

static void journal_read(struct journal *j)
{
	static const char tag[] = "step ";
	char buf[4096];
	ssize_t n;

	while ((n = read(j->fd, buf, sizeof buf)) > 0) {
		for (ssize_t i = 0; i < n; i++, j->col++) {
			if (buf[i] == '\n') {
				j->col = (size_t)-1;	/* the next byte is column 0 */
				continue;
			}
			if (j->col == 0)
				j->step = 1;
			if (j->col < sizeof tag - 1 && buf[i] != tag[j->col])
				j->step = 0;
			else if (j->col == sizeof tag - 2 && j->step)
				j->steps++;
		}
	}
}

/* Run 2: CMD under the preload, killed mid-decode; the steps it did. */
static int crash(struct demo *d, struct figures *f)
{
	unsigned long at = (unsigned long)((double)d->steps * KILL_AT);
	struct journal j = { .fd = -1 };
	int efd = out_file(d, "preload.err"), status = -1, e = EIO;
	char how[64];
	pid_t pid;

	if (efd >= 0 && !(e = child_spawn(&pid, d->cmdj, d->env_preload, -1, efd))) {
		/* the journal appears once CMD opens it */
		while (waitpid(pid, &status, WNOHANG) == 0) {
			if (j.fd < 0)
				j.fd = open(d->journal, O_RDONLY | O_CLOEXEC);
			if (j.fd >= 0)
				journal_read(&j);
			if (j.steps >= at || demo_interrupted) {
				kill(pid, SIGKILL);
				status = child_wait(pid);
				break;
			}
			usleep(POLL_US);
		}
	}
	if (efd >= 0)
		close(efd);
	if (j.fd >= 0) {
		journal_read(&j);	/* steps done before the kill landed */
		close(j.fd);
	}
	f->killed = j.steps;
	if (demo_interrupted)
		return -1;
	if (e) {
		cli_fail(d->cmd, d->json, 0, "cannot run %s: %s", d->cmdj[0], strerror(e));
		return -1;
	}
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		return 0;
	cli_fail(d->cmd, d->json, 0, "under the preload, %s %s before the kill, at step %lu of "
		 "%lu%s; its messages:", d->cmdj[0], child_how(how, sizeof how, status), j.steps,
		 d->steps, WIFEXITED(status) && !WEXITSTATUS(status) ? " (more --steps?)" : "");
	show_file(d, "preload.err");
	return -1;
}

/* The figures in the restore's messages (tools/restore.c, the preload's
 * restore log line); what is missing stays as it was. */
static void restore_figures(const struct demo *d, struct figures *f)
{
	char path[PATH_MAX + 32], *buf = malloc(ERR_MAX + 1), *p, *end;
	size_t n = 0;
	FILE *fp;

	snprintf(path, sizeof path, "%s/restore.err", d->dir);
	if (!buf || !(fp = fopen(path, "r"))) {
		free(buf);
		return;
	}
	n = fread(buf, 1, ERR_MAX, fp);
	fclose(fp);
	buf[n] = '\0';
	if ((p = strstr(buf, "resume at step ")))
		f->resume = strtoul(p + 15, NULL, 10);
	if ((p = strstr(buf, "KV restored in ")))
		f->copy_s = strtod(p + 15, NULL);
	if ((p = strstr(buf, " routing records; ")))
		f->offline_s = strtod(p + 18, NULL);
	if ((p = strstr(buf, "moeft restore: window ")) && (end = strstr(p, " ->")))
		snprintf(f->window, sizeof f->window, "%.*s", (int)(end - p - 15), p + 15);
	free(buf);
}

/* Whether the files a and b of the demo's directory hold the same bytes. */
static int same_output(const struct demo *d, const char *a, const char *b)
{
	char pa[PATH_MAX + 32], pb[PATH_MAX + 32], ba[4096], bb[4096];
	FILE *fa, *fb;
	int same = 0;
	size_t na, nb;

	snprintf(pa, sizeof pa, "%s/%s", d->dir, a);
	snprintf(pb, sizeof pb, "%s/%s", d->dir, b);
	fa = fopen(pa, "r");
	fb = fopen(pb, "r");
	while (fa && fb) {
		na = fread(ba, 1, sizeof ba, fa);
		nb = fread(bb, 1, sizeof bb, fb);
		if (na != nb || memcmp(ba, bb, na))
			break;
		if (!na) {
			same = 1;
			break;
		}
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return same;
}

/* ---- the report -------------------------------------------------------------- */

/* Steps lost: done before the kill, not restored. */
static unsigned long rpo(const struct figures *f)
{
	return f->killed > f->resume ? f->killed - f->resume : 0;
}

/* Decoding the lost progress again: ms, and how many times the restore. */
static double redo_ms(const struct demo *d, const struct figures *f)
{
	return f->full_ms * (double)f->killed / (double)d->steps;
}

static double speedup(const struct demo *d, const struct figures *f)
{
	double r = f->offline_s + f->copy_s;

	return r > 0 ? redo_ms(d, f) / 1e3 / r : NAN;
}

static void print_cmd(const struct demo *d, FILE *out)
{
	for (char **a = d->cmdv; a[1]; a++)	/* all but --steps */
		fprintf(out, "%s%s", a == d->cmdv ? "" : " ", *a);
}

static void print_text(const struct demo *d, const struct figures *f)
{
	char off[32] = "?", copy[32] = "?";

	if (!isnan(f->offline_s))
		snprintf(off, sizeof off, "%.3f", f->offline_s);
	if (!isnan(f->copy_s))
		snprintf(copy, sizeof copy, "%.3f", f->copy_s);
	if (f->window[0])
		printf("  moeft restore: %s\n", f->window);
	else
		printf("  moeft restore: no committed window: CMD started afresh\n");
	printf("  resumed at step %lu; finished the remaining %lu steps in %.0f ms\n\n",
	       f->resume, d->steps - f->resume, f->rest_ms);
	if (!f->equal) {
		printf("RESULT: the outputs DIFFER (kept in %s: want, got, restore.err)\n", d->dir);
		return;
	}
	printf("RESULT: the restored run's output equals the uninterrupted run's (every token, "
	       "KV CRC)\n");
	printf("RPO: %lu steps lost of %lu decoded (window: %d steps)\n", rpo(f), f->killed,
	       WINDOW);
	printf("RTO: %s s to read and verify the log and write the state, %s s to copy the KV "
	       "in;\n", off, copy);
	printf("     without moeft the program would start over: %lu steps to decode again, "
	       "about\n     %.0f ms here (%.0fx the restore)\n", f->killed, redo_ms(d, f),
	       isnan(speedup(d, f)) ? 0 : speedup(d, f));
}

static void print_json(const struct demo *d, const struct figures *f)
{
	char cmd[4096];
	FILE *m = fmemopen(cmd, sizeof cmd, "w");
	struct json j;

	cmd[0] = '\0';
	if (m) {
		print_cmd(d, m);
		fclose(m);
	}
	json_init(&j, stdout);
	json_obj_begin(&j);
	json_kv_str(&j, "status", "ok");
	json_kv_str(&j, "result", f->equal ? "equal" : "differ");
	json_kv_str(&j, "cmd", cmd);
	json_kv_str(&j, "preload", d->lib);
	json_kv_u64(&j, "steps", d->steps);
	json_kv_u64(&j, "window_steps", WINDOW);
	json_kv_double(&j, "reference_ms", f->full_ms);
	json_kv_u64(&j, "killed_step", f->killed);
	json_kv_u64(&j, "resume_step", f->resume);
	json_kv_u64(&j, "rpo_steps", rpo(f));
	json_kv_double(&j, "restore_offline_s", f->offline_s);
	json_kv_double(&j, "restore_copy_s", f->copy_s);
	json_kv_double(&j, "resumed_run_ms", f->rest_ms);
	json_kv_double(&j, "redo_ms", redo_ms(d, f));
	json_kv_double(&j, "restore_speedup", speedup(d, f));
	json_kv_str(&j, "kept_dir", d->keep ? d->dir : NULL);
	json_obj_end(&j);
}

/* ---- the command --------------------------------------------------------------- */

static int demo_runs(struct demo *d)
{
	struct figures f = { .offline_s = NAN, .copy_s = NAN };
	char what[PATH_MAX + 64];

	if (!d->json) {
		printf("moeft demo: ");
		print_cmd(d, stdout);
		printf(", %lu decode steps\n", d->steps);
		fflush(stdout);
	}
	snprintf(what, sizeof what, "uninterrupted, without the preload, %s", d->serve);
	if (run(d, d->cmdv, d->env_plain, "want", "want.err", what, &f.full_ms) < 0)
		return EXIT_USAGE;
	if (!d->json)
		printf("  uninterrupted run, no preload:           %.0f ms\n", f.full_ms);
	fflush(stdout);
	if (crash(d, &f) < 0)
		return EXIT_BAD;
	if (!d->json)
		printf("  run under the preload, SIGKILL at step:  %lu\n", f.killed);
	fflush(stdout);
	if (run(d, d->restorev, d->env_plain, "got", "restore.err", "moeft restore",
		&f.rest_ms) < 0)
		return EXIT_BAD;
	restore_figures(d, &f);
	f.equal = same_output(d, "want", "got");
	d->keep = !f.equal;
	if (d->json)
		print_json(d, &f);
	else
		print_text(d, &f);
	return f.equal ? EXIT_OK : EXIT_BAD;
}

/* --engine's value before "--": which demo runs ("serve" when none). */
static const char *engine_of(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--engine") && i + 1 < argc)
			return argv[i + 1];
		if (!strncmp(argv[i], "--engine=", 9))
			return argv[i] + 9;
	}
	return "serve";
}

static int demo(const struct cli_command *cmd, int argc, char **argv)
{
	struct demo *d;
	/* The default CMD, d->serve: a model big enough to show the RTO. */
	char *def[] = { NULL, "--mode=graph", "--seqs=32", "--layers=8" };
	int ncmd, ret;

	if (!strcmp(engine_of(argc, argv), "vllm"))
		return demo_vllm(cmd, argc, argv);
	if (!(d = calloc(1, sizeof *d)))
		return cli_fail(cmd, 0, EXIT_USAGE, "out of memory");
	d->cmd = cmd;
	d->steps = DEFAULT_STEPS;
	if ((ncmd = parse(d, argc, argv, &ret)) < 0) {
		free(d);
		return ret;
	}
	demo_catch_interrupts();
	snprintf(d->dir, sizeof d->dir, "/dev/shm/moeft-demo.XXXXXX");
	if (!mkdtemp(d->dir)) {
		ret = cli_fail(cmd, d->json, EXIT_USAGE, "cannot make a directory in /dev/shm: %s",
			       strerror(errno));
		free(d);
		return ret;
	}
	snprintf(d->journal, sizeof d->journal, "%s/journal", d->dir);
	if (!d->wal[0])
		snprintf(d->wal, sizeof d->wal, "%s/serve.wal", d->dir);
	if (ncmd ? prepare(d, argv + argc - ncmd, (size_t)ncmd) :
		   prepare(d, def, sizeof def / sizeof def[0]))
		ret = cli_fail(cmd, d->json, EXIT_USAGE, "out of memory");
	else
		ret = demo_runs(d);
	if (!d->keep)
		cli_rm_tree(d->dir);
	child_env_free(d->env_plain);
	child_env_free(d->env_preload);
	free(d->cmdv);
	free(d->cmdj);
	free(d->restorev);
	free(d);
	demo_end_if_interrupted();
	return ret;
}

const struct cli_command cmd_demo = {
	.name = "demo",
	.summary = "crash a serving program (or a real vLLM) under the preload, restore it, report",
	.run = demo,
	.usage =
	"Usage: moeft demo [--engine serve] [--preload LIB] [--steps N] [--wal PATH]\n"
	"                  [--json] [-- CMD [ARGS...]]\n"
	"       moeft demo --engine vllm --model MODEL [--python PY] [--clients N]\n"
	"                  [--tokens N] [--wait S] [--preload LIB] [--json]\n"
	"                  [-- SERVER ARGS...]\n"
	"\n"
	"moeft's main job, shown on a serving program (--engine serve, the default)\n"
	"or on a real vLLM (--engine vllm).\n"
	"\n"
	"--engine serve: CMD decodes N steps uninterrupted without the preload (the\n"
	"reference); then again under LD_PRELOAD=LIB, writing its log, until a\n"
	"SIGKILL once 60% of the steps are done; then 'moeft restore --wal LOG\n"
	"--preload LIB -- CMD ...' (this moeft) restores the last committed window\n"
	"and CMD finishes from there.  The report: whether the restored run's\n"
	"output equals the reference's (RESULT), the steps lost (RPO: steps done\n"
	"before the kill less the step resumed at; the window is 16 steps), and the\n"
	"restore's time (RTO) against decoding those steps again.\n"
	"\n"
	"CMD runs as 'CMD [ARGS...] --steps=N [--journal=PATH]'.  It must print on\n"
	"stdout the same bytes when restored as when uninterrupted, append a line\n"
	"'step T ...' to PATH as each step completes, and, when\n"
	"MOEFT_RESTORE_MANIFEST names moeft restore's manifest, resume at its\n"
	"resume_step with the tokens before it from the journal (demo/README.md).\n"
	"The default is the demo serving program, 'moeft-serve --mode=graph\n"
	"--seqs=32 --layers=8', installed beside moeft (LIBEXECDIR/moeft; in a\n"
	"build tree, BUILD/demo); it needs a GPU.  CMD runs with the caller's\n"
	"environment less LD_PRELOAD and MOEFT_* (LD_LIBRARY_PATH stays).\n"
	"\n"
	"  -p, --preload LIB  libmoeft.so (default: the one installed beside moeft;\n"
	"                     in a build tree, BUILD/preload/libmoeft.so)\n"
	"  -s, --steps N      decode steps, 32 to 1000000 (default 600)\n"
	"  -w, --wal PATH     the log: a new (or empty) file, never an existing log,\n"
	"                     nor beside a KV store (PATH.kv); kept afterwards with\n"
	"                     its KV store and PATH.restore/\n"
	"                     (default: in a temporary directory in /dev/shm)\n"
	"  -j, --json         print one JSON object instead of the report\n"
	"  -h, --help         show this help\n"
	"\n"
	"--engine vllm: 'moeft run --gateway' (this moeft) starts vLLM's OpenAI\n"
	"server, 'PY -m vllm.entrypoints.openai.api_server --model MODEL --port P\n"
	"--seed 0 --kv-transfer-config {moeft.vllm's MoeftConnector} [SERVER\n"
	"ARGS...]', under the preload, its logs in a temporary directory in\n"
	"/dev/shm.  N clients stream greedy completions of their own prompts\n"
	"through the gateway, twice: uninterrupted (the reference), then with\n"
	"SIGKILL to the server's process group once the leading client has 40% of\n"
	"its tokens; moeft run restores the server and starts it again, and the\n"
	"gateway carries the clients' streams over.  The report: whether every\n"
	"client got the reference text with status 200 and no error (RESULT), the\n"
	"longest wait for a token (PAUSE), what the restarted server computed of\n"
	"the tokens the gateway sent again (RECOMPUTE), and that SIGTERM to moeft\n"
	"run left none of the server's processes (STOP).  PY must import vLLM and\n"
	"moeft.vllm (python/; tools/setup.sh --vllm makes such a Python, and\n"
	"tools/demo.sh --engine vllm runs this demo with it on a tiny model).\n"
	"\n"
	"  -m, --model MODEL  the model vLLM serves: a directory or a name\n"
	"  -P, --python PY    the Python of vLLM (default: python3 in PATH)\n"
	"  -c, --clients N    streaming clients, 1 to 64 (default 8)\n"
	"  -t, --tokens N     tokens each client asks for, 16 to 4096 (default 256)\n"
	"  -W, --wait S       seconds the server may take to start, 10 to 86400\n"
	"                     (default 600)\n"
	"\n"
	"Exit status: 0 the restored run's output equals the reference's (with\n"
	"--engine vllm: every client's text, and moeft run stopped cleanly), 1 it\n"
	"differs or a run under the preload failed, 2 usage or environment error\n"
	"(CMD failing without the preload, or the server not starting, included).\n",
};

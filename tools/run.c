/*
 * run.c - moeft run: a server under the preload, brought back after every
 * crash.
 *
 * Each start is a moeft restore (restore.c) in a child of its own process
 * group: it restores the logs when they hold a state and then becomes the
 * server, or refuses, and then says so through a pipe that the server's
 * exec would have closed.  The server's death by a signal it was not sent
 * is a crash: what is left of its processes is killed, their shared
 * memory in /dev/shm removed (leftovers.h), and the next start restores.
 * Any other end is the server's own, and its status is moeft run's.
 *
 * moeft run is a child subreaper: a server process whose parent died is
 * moeft run's to kill and to reap, even when it left the process group.
 * Signals are taken synchronously (sigtimedwait), so no handler runs and
 * the loop stays single-threaded, which the fork of each start needs.
 *
 * With --gateway, moeft gateway runs beside the server as another child,
 * in a process group of its own: the server's crash does not touch it,
 * it is started again when it dies, and stopped after the server.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "child.h"
#include "cli.h"
#include "launch.h"
#include "leftovers.h"
#include "logname.h"
#include "procs.h"

#define DEFAULT_RESTARTS 5
#define DEFAULT_WINDOW_S 600.0
#define DEFAULT_GRACE_S 30.0
#define KILL_WAIT_S 10.0	/* for processes to go after SIGKILL */
#define TICK_NS 50000000L	/* how often the loops look again */
#define NOTE_EVERY_S 1.0	/* how often the server's shared files are noted */

struct run {
	const struct cli_command *cmd;
	char **cmdv;
	const char *preload;
	char wal[PATH_MAX];
	uint64_t max_restarts;
	double window_s, grace_s;
	double *restarted;	/* when each restart of the window was, oldest first */
	size_t nrestarted;
	pid_t pid;		/* the server: moeft restore, then CMD; its group's id */
	int status;		/* its wait status once it ended */
	int ended;
	int stopping;		/* the signal passed to it; 0: none */
	double deadline;	/* while stopping: when its group gets SIGKILL */
	struct leftovers left;
	sigset_t signals;	/* the ones taken by sigtimedwait */
	const char *gateway;	/* --gateway HOST:PORT; NULL: none */
	char backend[320];	/* the server's URL, for the gateway */
	pid_t gw;		/* the gateway's process; 0: none */
	int gw_status, gw_ended;
	int failed;		/* an exit status that overrides CMD's */
};

extern char **environ;

/* The default directory of a server's logs: one per command line, so the
 * same command finds its logs again, in the preload's default directory:
 * /dev/shm/moeft-USER/run-NAME-HASH (NAME CMD's file name, HASH its
 * arguments'). */
static int default_dir(struct run *r)
{
	char base[PATH_MAX - 96], role[64];
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a over the arguments */

	logname_default_dir(base, sizeof base);
	logname_role_of(r->cmdv[0], role, sizeof role);
	for (char **a = r->cmdv; *a; a++)
		for (const char *c = *a; ; c++) {
			h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
			if (!*c)
				break;
		}
	if (mkdir(base, 0700) < 0 && errno != EEXIST)
		return cli_fail(r->cmd, 0, EXIT_USAGE, "%s: %s", base, strerror(errno));
	snprintf(r->wal, sizeof r->wal, "%s/run-%s-%016" PRIx64, base, role, h);
	return 0;
}

/* The directory of logs: made when missing (not its parents), else it
 * must be a directory; the preload checks who owns it. */
static int log_dir(struct run *r)
{
	struct stat st;

	if (mkdir(r->wal, 0700) == 0)
		return 0;
	if (errno != EEXIST)
		return cli_fail(r->cmd, 0, EXIT_USAGE, "--wal %s: %s", r->wal, strerror(errno));
	if (lstat(r->wal, &st) < 0 || !S_ISDIR(st.st_mode))
		return cli_fail(r->cmd, 0, EXIT_USAGE, "--wal %s: not a directory (moeft run keeps "
				"the logs of the server's processes in one)", r->wal);
	return 0;
}

/* In the child: moeft restore --wal DIR --preload LIB [--force-fresh] --
 * CMD, which returns only when it did not start CMD. */
static int restore_then_exec(struct run *r, int fresh)
{
	size_t n = 0, k = 0;
	char **argv;

	while (r->cmdv[n])
		n++;
	if (!(argv = calloc(n + 8, sizeof *argv)))
		return EXIT_USAGE;
	argv[k++] = (char *)cmd_restore.name;
	argv[k++] = "--wal";
	argv[k++] = r->wal;
	argv[k++] = "--preload";
	argv[k++] = (char *)r->preload;
	if (fresh)
		argv[k++] = "--force-fresh";
	argv[k++] = "--";
	memcpy(argv + k, r->cmdv, n * sizeof *argv);
	optind = 0;		/* getopt afresh */
	return cmd_restore.run(&cmd_restore, (int)(k + n), argv);
}

/*
 * Start the server: 0 once CMD runs (r->pid), or the status of the
 * restore that refused to start it, after its own message.
 */
static int start(struct run *r, int fresh)
{
	unsigned char refused;
	sigset_t none;
	ssize_t n;
	int pipefd[2];
	pid_t pid;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return cli_fail(r->cmd, 0, EXIT_USAGE, "pipe: %s", strerror(errno));
	fflush(NULL);
	if ((pid = fork()) < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return cli_fail(r->cmd, 0, EXIT_USAGE, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		close(pipefd[0]);
		setpgid(0, 0);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		refused = (unsigned char)restore_then_exec(r, fresh);
		refused = refused ? refused : EXIT_USAGE;
		if (write(pipefd[1], &refused, 1) < 0)
			_exit(EXIT_USAGE);
		_exit(refused);
	}
	setpgid(pid, pid);	/* in both, so that it is set before either goes on */
	close(pipefd[1]);
	while ((n = read(pipefd[0], &refused, 1)) < 0 && errno == EINTR)
		;
	close(pipefd[0]);
	r->pid = pid;
	r->ended = 0;
	if (n == 1) {
		r->status = child_wait(pid);
		r->ended = 1;
		return refused;
	}
	return 0;
}

struct group {
	pid_t pgid, self, gateway;
	int sig;		/* sent to each; 0: only counted */
	size_t alive;
};

/* A process of the server: in its group, or orphaned to us (which only
 * the server's processes can be: we start no other).  A zombie counts
 * until it is reaped: while its pid is there, the restore takes it for a
 * writer of its log that has not ended. */
static int of_server(const struct proc_info *p, void *arg)
{
	struct group *g = arg;

	if (p->pid != g->self && p->pid != g->gateway &&
	    (p->pgrp == g->pgid || p->ppid == g->self)) {
		g->alive++;
		if (g->sig)
			kill(p->pid, g->sig);
	}
	return 0;
}

/* How many of the server's processes live; sig sent to each (0: none). */
static size_t server_processes(const struct run *r, int sig)
{
	struct group g = { r->pid, getpid(), r->gw, sig, 0 };

	procs_each(of_server, &g);
	return g.alive;
}

/* Reap every child that ended: the server's end is noted in r. */
static void reap(struct run *r)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (pid == r->pid) {
			r->status = status;
			r->ended = 1;
		} else if (pid == r->gw) {
			r->gw_status = status;
			r->gw_ended = 1;
			r->gw = 0;
		}
}

/* One signal for the loop, or 0 after TICK_NS without one. */
static int next_signal(struct run *r)
{
	struct timespec tick = { 0, TICK_NS };
	int sig;

	while ((sig = sigtimedwait(&r->signals, NULL, &tick)) < 0 && errno == EINTR)
		;
	return sig < 0 ? 0 : sig;
}

static void gateway_ended(struct run *r);

/*
 * After the server's main process ended: the rest of its processes get
 * grace_s to go on their own (a crash: none), then SIGKILL, again at each
 * look (a process may fork or be orphaned to us meanwhile), until they
 * are gone or their count stayed KILL_WAIT_S.  A stop signal cuts the
 * grace, and stops moeft run once they are gone.
 */
static void end_server(struct run *r, double grace_s)
{
	double deadline = cli_now() + grace_s, since = 0;
	size_t alive, before = 0;
	int sig;

	while ((alive = server_processes(r, 0))) {
		double t = cli_now();

		if (t >= deadline) {
			server_processes(r, SIGKILL);
			if (alive != before)
				since = t;
			before = alive;
			if (t - since >= KILL_WAIT_S) {
				fprintf(stderr, "moeft run: %zu processes of %s do not go after SIGKILL; "
					"going on without them\n", alive, r->cmdv[0]);
				break;
			}
		}
		/* Orphans reaped at each look: their SIGCHLD may have merged
		 * with one taken before. */
		sig = next_signal(r);
		reap(r);
		if (r->gw_ended)
			gateway_ended(r);
		if (sig == SIGTERM || sig == SIGINT) {
			r->stopping = r->stopping ? r->stopping : sig;
			deadline = 0;
		}
	}
	reap(r);
}

/* The server's URL for the gateway: --backend, else what CMD's --host
 * and --port say (vLLM's and SGLang's flags), 127.0.0.1 for a wildcard
 * host, port 8000 (vLLM's) when none. */
static void backend_of(struct run *r, const char *given)
{
	const char *host = "127.0.0.1", *port = "8000";

	if (given) {
		snprintf(r->backend, sizeof r->backend, "%s", given);
		return;
	}
	for (char **a = r->cmdv + 1; *a; a++) {
		if (!strcmp(*a, "--port") && a[1])
			port = *++a;
		else if (!strncmp(*a, "--port=", 7))
			port = *a + 7;
		else if (!strcmp(*a, "--host") && a[1])
			host = *++a;
		else if (!strncmp(*a, "--host=", 7))
			host = *a + 7;
	}
	if (!*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "::"))
		host = "127.0.0.1";
	snprintf(r->backend, sizeof r->backend, strchr(host, ':') ? "http://[%.200s]:%.16s" :
		 "http://%.200s:%.16s", host, port);
}

/* moeft gateway --listen GATEWAY --backend URL, with no signal blocked. */
static int start_gateway(struct run *r)
{
	char *argv[] = { "moeft", "gateway", "--listen", (char *)r->gateway, "--backend",
			 r->backend, NULL };
	posix_spawnattr_t at;
	sigset_t none;
	int err;

	sigemptyset(&none);
	if ((err = posix_spawnattr_init(&at)))
		return err;
	/* In a group of its own: a terminal's ^C reaches moeft run, which
	 * stops the server first and the gateway last. */
	err = posix_spawnattr_setsigmask(&at, &none);
	if (!err)
		err = posix_spawnattr_setpgroup(&at, 0);
	if (!err)
		err = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
	if (!err)
		err = posix_spawn(&r->gw, "/proc/self/exe", NULL, &at, argv, environ);
	posix_spawnattr_destroy(&at);
	r->gw_ended = 0;
	return err;
}

/* The gateway died: started again, unless it could not start at all
 * (its address: status 2), which stops the server and moeft run. */
static void gateway_ended(struct run *r)
{
	char how[64];
	int err;

	r->gw_ended = 0;
	if (r->stopping)
		return;
	child_how(how, sizeof how, r->gw_status);
	if (WIFEXITED(r->gw_status) && WEXITSTATUS(r->gw_status) == EXIT_USAGE) {
		fprintf(stderr, "moeft run: the gateway could not serve (above); stopping %s\n",
			r->cmdv[0]);
	} else if ((err = start_gateway(r))) {
		fprintf(stderr, "moeft run: the gateway %s, and cannot be started again: %s; "
			"stopping %s\n", how, strerror(err), r->cmdv[0]);
	} else {
		fprintf(stderr, "moeft run: the gateway %s; started it again\n", how);
		return;
	}
	r->failed = EXIT_USAGE;
	r->stopping = SIGTERM;
	r->deadline = cli_now() + r->grace_s;
	kill(r->pid, SIGTERM);
}

/* The gateway, if any, stopped: SIGTERM, SIGKILL after --grace. */
static void stop_gateway(struct run *r)
{
	double until = cli_now() + r->grace_s;

	if (!r->gw)
		return;
	kill(r->gw, SIGTERM);
	while (r->gw && cli_now() < until)
		if (next_signal(r) == SIGCHLD)
			reap(r);
	if (r->gw) {
		kill(r->gw, SIGKILL);
		child_wait(r->gw);
		r->gw = 0;
	}
}

/* Whether one more restart stays within --max-restarts per --window;
 * counted when it does. */
static int may_restart(struct run *r)
{
	double t = cli_now();
	size_t keep = 0;

	for (size_t i = 0; i < r->nrestarted; i++)
		if (t - r->restarted[i] < r->window_s)
			r->restarted[keep++] = r->restarted[i];
	r->nrestarted = keep;
	if (keep >= r->max_restarts)
		return 0;
	r->restarted[r->nrestarted++] = t;
	return 1;
}

/* The exit status that passes the server's wait status on. */
static int passed_on(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : EXIT_USAGE;
}

/* Run the server until it ends of its own or is stopped: its status. */
static int supervise(struct run *r)
{
	double noted = 0, t;
	char how[64], size[32];
	uint64_t bytes;
	size_t removed;
	int sig, ret;

	for (;;) {
		sig = next_signal(r);
		t = cli_now();
		if (sig == SIGCHLD) {
			reap(r);
		} else if ((sig == SIGTERM || sig == SIGINT) && !r->stopping) {
			r->stopping = sig;
			r->deadline = t + r->grace_s;
			kill(r->pid, sig);
		} else if (sig == SIGTERM || sig == SIGINT || (r->stopping && t >= r->deadline)) {
			server_processes(r, SIGKILL);	/* asked twice, or out of grace */
		} else if (!sig && t - noted >= NOTE_EVERY_S) {
			leftovers_note(&r->left, r->pid);
			noted = t;
		}
		if (r->gw_ended)
			gateway_ended(r);
		if (!r->ended)
			continue;

		/* A crash: a signal nobody here sent.  What the rest of the
		 * server uses is noted before they are killed with it. */
		if (WIFSIGNALED(r->status) && !r->stopping)
			leftovers_note(&r->left, r->pid);
		end_server(r, WIFSIGNALED(r->status) && !r->stopping ? 0 : r->grace_s);
		bytes = 0;
		if ((removed = leftovers_clean(&r->left, &bytes)))
			fprintf(stderr, "moeft run: removed %zu file%s (%s) the server's processes "
				"left in /dev/shm\n", removed, removed == 1 ? "" : "s",
				cli_fmt_bytes(size, sizeof size, bytes));
		if (!WIFSIGNALED(r->status) || r->stopping)
			return r->failed ? r->failed : passed_on(r->status);
		child_how(how, sizeof how, r->status);
		if (!may_restart(r)) {
			fprintf(stderr, "moeft run: %s (pid %d) %s, and was restarted %zu times "
				"within the last %.0f s already (--max-restarts %" PRIu64 "): not "
				"restarting it\n", r->cmdv[0], (int)r->pid, how, r->nrestarted,
				r->window_s, r->max_restarts);
			return EXIT_BAD;
		}
		fprintf(stderr, "moeft run: %s (pid %d) %s; restoring it from %s (restart %zu of "
			"at most %" PRIu64 " within %.0f s)\n", r->cmdv[0], (int)r->pid, how, r->wal,
			r->nrestarted, r->max_restarts, r->window_s);
		if ((ret = start(r, 0))) {
			fprintf(stderr, "moeft run: the restore did not start %s (above): not "
				"restarting it\n", r->cmdv[0]);
			return ret;
		}
	}
}

static int run_main(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wal", required_argument, NULL, 'w' },
		{ "preload", required_argument, NULL, 'p' },
		{ "fresh", no_argument, NULL, 'f' },
		{ "max-restarts", required_argument, NULL, 'm' },
		{ "window", required_argument, NULL, 'W' },
		{ "grace", required_argument, NULL, 'g' },
		{ "gateway", required_argument, NULL, 'G' },
		{ "backend", required_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct run r = { .cmd = cmd, .max_restarts = DEFAULT_RESTARTS,
			 .window_s = DEFAULT_WINDOW_S, .grace_s = DEFAULT_GRACE_S };
	char preload[PATH_MAX], msg[PATH_MAX + 128];
	const char *wal = NULL, *backend = NULL;
	int c, fresh = 0, ret;

	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'w': wal = optarg; break;
		case 'p': r.preload = optarg; break;
		case 'f': fresh = 1; break;
		case 'm': cli_parse_u64(&o, "--max-restarts", optarg, 0, 1000, &r.max_restarts);
			  break;
		case 'W': cli_parse_double(&o, "--window", optarg, 1, 1e7, &r.window_s); break;
		case 'g': cli_parse_double(&o, "--grace", optarg, 0, 3600, &r.grace_s); break;
		case 'G': r.gateway = optarg; break;
		case 'b': backend = optarg; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind < argc && optind > 0 && !strcmp(argv[optind - 1], "--"))
		r.cmdv = &argv[optind];
	else if (optind < argc)
		cli_usage_error(&o, "unexpected argument '%s' (the command goes after \"--\")",
				argv[optind]);
	else
		cli_usage_error(&o, "a command to run is required after \"--\"");
	if (wal)
		cli_path_opt(&o, "--wal", wal, sizeof r.wal);
	if (backend && !r.gateway)
		cli_usage_error(&o, "--backend is the gateway's: it needs --gateway HOST:PORT");
	else if (backend && strlen(backend) >= sizeof r.backend)
		cli_usage_error(&o, "--backend %.40s...: too long", backend);
	if (r.cmdv && !r.preload) {
		if (launch_find_preload(preload, sizeof preload) < 0)
			cli_usage_error(&o, "--preload LIB is required: no libmoeft.so beside moeft");
		r.preload = preload;
	}
	if (r.cmdv && r.preload && launch_check_preload(r.preload, msg, sizeof msg) < 0)
		cli_usage_error(&o, "--preload %s", msg);
	if ((ret = cli_parse_done(&o)))
		return ret;
	if (wal)
		snprintf(r.wal, sizeof r.wal, "%s", wal);
	else if ((ret = default_dir(&r)))
		return ret;
	if ((ret = log_dir(&r)))
		return ret;
	if (!(r.restarted = calloc(r.max_restarts + 1, sizeof *r.restarted)))
		return cli_fail(cmd, 0, EXIT_USAGE, "out of memory");

	sigemptyset(&r.signals);
	sigaddset(&r.signals, SIGCHLD);
	sigaddset(&r.signals, SIGTERM);
	sigaddset(&r.signals, SIGINT);
	sigprocmask(SIG_BLOCK, &r.signals, NULL);
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		ret = cli_fail(cmd, 0, EXIT_USAGE, "cannot adopt the server's orphans: %s",
			       strerror(errno));
	else if (!wal)
		fprintf(stderr, "moeft run: the logs of %s are in %s\n", r.cmdv[0], r.wal);
	if (!ret && r.gateway) {
		backend_of(&r, backend);
		if ((c = start_gateway(&r)))
			ret = cli_fail(cmd, 0, EXIT_USAGE, "cannot start the gateway: %s",
				       strerror(c));
	}
	if (!ret && !(ret = start(&r, fresh)))
		ret = supervise(&r);
	else if (r.ended)
		fprintf(stderr, "moeft run: the restore did not start %s (above)\n", r.cmdv[0]);
	stop_gateway(&r);
	leftovers_free(&r.left);
	free(r.restarted);
	return ret;
}

const struct cli_command cmd_run = {
	.name = "run",
	.summary = "run a server under the preload, restoring it after every crash",
	.usage =
	"Usage: moeft run [--wal DIR] [--gateway HOST:PORT [--backend URL]] [--preload LIB]\n"
	"                 [--fresh] [--max-restarts N] [--window SECONDS] [--grace SECONDS]\n"
	"                 -- CMD [ARGS...]\n"
	"\n"
	"Run CMD under the preload, its processes' logs in DIR, and bring it back\n"
	"whenever it dies of a signal it was not sent (kill -9, a segfault, the\n"
	"OOM killer): the rest of its processes are killed, the shared memory they\n"
	"left in /dev/shm removed (Python's and torch's files that they used and no\n"
	"live process uses), and CMD starts again as 'moeft restore --wal DIR --\n"
	"CMD' starts it, on the state of its last committed window.  The first\n"
	"start restores too when DIR holds a state (--fresh: it does not).  CMD\n"
	"runs in a process group of its own; every process it leaves behind is\n"
	"moeft run's to end, even one that left the group.\n"
	"\n"
	"When CMD exits, moeft run exits with its status once the rest of its\n"
	"processes are gone (after --grace, SIGKILL).  SIGTERM and SIGINT are\n"
	"passed to CMD, and moeft run exits after it, with its status (128 + the\n"
	"signal when it dies of it); a second one, or the end of --grace, kills\n"
	"its processes.\n"
	"\n"
	"With --gateway, moeft gateway serves CMD's clients on HOST:PORT (see\n"
	"'moeft gateway --help'): they keep their streams through CMD's crashes.\n"
	"It runs beside CMD, is started again when it dies, and stopped last.\n"
	"\n"
	"  -w, --wal DIR        the directory of the server's logs, made when missing\n"
	"                       (default: /dev/shm/moeft-USER/run-NAME-HASH, one per\n"
	"                       command line, NAME CMD's file name)\n"
	"  -G, --gateway HOST:PORT  serve CMD's clients there through a gateway\n"
	"  -b, --backend URL    CMD's server for the gateway (default: what CMD's\n"
	"                       --host and --port say, else http://127.0.0.1:8000)\n"
	"  -p, --preload LIB    libmoeft.so for CMD (default: the one beside moeft)\n"
	"  -f, --fresh          start CMD the first time without restoring\n"
	"  -m, --max-restarts N restarts allowed within --window (default 5; 0: none)\n"
	"  -W, --window SECONDS the span the restarts are counted in (default 600)\n"
	"  -g, --grace SECONDS  how long CMD's processes get to exit after CMD or a\n"
	"                       signal passed to it (default 30)\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: CMD's (128 + N when it died of signal N after a SIGTERM or\n"
	"SIGINT passed to it); 1 when it crashed once more than --max-restarts\n"
	"allows within --window; moeft restore's when a restore did not start it\n"
	"(its message says why: 1 the state is not whole, 2 the log, the preload\n"
	"or the environment would not restore); 2 a usage error, or a gateway that\n"
	"could not serve (CMD is stopped then).\n",
	.run = run_main,
};

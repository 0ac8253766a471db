/*
 * ls.c - moeft ls: the logs in directories of logs (MOEFT_WAL naming a
 * directory, or the preload's default one), one line each: whether a
 * process writes it now, the process that wrote it last, how that one
 * ended as far as the log can tell, the state a restore would bring back,
 * and whether a new run must leave that state alone (held.h).  Read-only; a
 * log that cannot be read is listed as such.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "held.h"
#include "json.h"
#include "logname.h"
#include "logset.h"
#include "media.h"
#include "record.h"
#include "report.h"

/* What one log says of itself. */
struct entry {
	const char *path;
	const char *error;        /* the log cannot be read: why */
	int live;                 /* a writer holds it now */
	uint32_t epoch, pid;      /* the latest writer's */
	uint64_t started_ns;
	int crash_signal;         /* a CRASH record of the latest epoch: its signal */
	struct held_state held;   /* its EXIT record; whether its state is held */
	int restorable;           /* a committed decode window: */
	int kv_partial;           /* ... whose KV was left partly for later */
	uint64_t window, first_step, last_step;
};

/* The latest epoch's EPOCH, CRASH and EXIT records, the last committed
 * decode window, and whether a new run leaves the log alone. */
static void read_entry(const struct report *rp, struct entry *e)
{
	struct rec_window_steps st;
	struct rec_epoch ep;
	struct rec_crash cr;
	struct wal_record rec;
	struct wal_iter it;

	e->epoch = rp->rec->epoch;
	wal_iter_init(&it, rp->r);
	while (wal_iter_next(&it, &rec)) {
		if (rec.epoch != e->epoch)
			continue;
		if (rec.type == WAL_REC_EPOCH && rec_epoch_decode(rec.payload, rec.len, &ep) == 0) {
			e->pid = ep.pid;
			e->started_ns = ep.start_ns;
		} else if (rec.type == WAL_REC_CRASH &&
			   rec_crash_decode(rec.payload, rec.len, &cr) == 0) {
			e->crash_signal = cr.signo;
		}
	}
	held_read(rp->r, &e->held);
	for (size_t i = rp->nwin; i-- > 0;)
		if (rp->win[i].state == WAL_WINDOW_INTACT && rec_decode_window(&rp->win[i], &st)) {
			e->restorable = 1;
			e->kv_partial = (st.flags & WINDOW_KV_PARTIAL) != 0;
			e->window = rp->win[i].id;
			e->first_step = st.first_step;
			e->last_step = st.first_step + st.steps - 1;
			break;
		}
}

static void entry_text(const struct entry *e)
{
	char t[32];

	if (e->error) {
		printf("%s\n    cannot be read: %s\n", e->path, e->error);
		return;
	}
	printf("%s\n    %s; epoch %" PRIu32 ", pid %" PRIu32 ", started %s; ", e->path,
	       e->live ? "in use by its writer" : "no writer", e->epoch, e->pid,
	       cli_fmt_time(t, sizeof t, e->started_ns));
	if (e->held.exited)
		printf("exited; ");
	else if (e->crash_signal)
		printf("crashed (signal %d); ", e->crash_signal);
	else if (!e->live)
		printf("ended without exiting (killed, or its exit handlers skipped); ");
	if (e->restorable && e->kv_partial)
		printf("last decode window %" PRIu64 " (steps %" PRIu64 "-%" PRIu64 ") is KV-partial: "
		       "a restore refuses it", e->window, e->first_step, e->last_step);
	else if (e->restorable)
		printf("restorable: window %" PRIu64 ", steps %" PRIu64 "-%" PRIu64
		       ", resume at step %" PRIu64, e->window, e->first_step, e->last_step,
		       e->last_step + 1);
	else
		printf("nothing to restore (no committed decode window)");
	if (e->held.held && !e->live)
		printf("; held: a new run leaves this log to a restore (MOEFT_FORCE_FRESH=1 lets "
		       "one replace it)");
	printf("\n");
}

static void entry_json(struct json *j, const struct entry *e)
{
	json_obj_begin(j);
	json_kv_str(j, "path", e->path);
	if (e->error) {
		json_kv_str(j, "status", "error");
		json_kv_str(j, "error", e->error);
		json_obj_end(j);
		return;
	}
	json_kv_str(j, "status", e->live ? "live" : e->held.exited ? "exited" :
				 e->crash_signal ? "crashed" : "ended");
	json_kv_u64(j, "epoch", e->epoch);
	json_kv_u64(j, "pid", e->pid);
	json_kv_u64(j, "started_ns", e->started_ns);
	if (e->crash_signal)
		json_kv_i64(j, "crash_signal", e->crash_signal);
	json_kv_bool(j, "restorable", e->restorable && !e->kv_partial);
	json_kv_bool(j, "held", e->held.held && !e->live);
	if (e->restorable) {
		json_kv_bool(j, "kv_partial", e->kv_partial);
		json_kv_u64(j, "window", e->window);
		json_kv_u64(j, "first_step", e->first_step);
		json_kv_u64(j, "last_step", e->last_step);
		json_kv_u64(j, "resume_step", e->last_step + 1);
	}
	json_obj_end(j);
}

/* One log: read it while holding it against a writer that starts now. */
static void list_one(const char *path, struct json *j)
{
	struct entry e = { .path = path };
	struct wal_error err = { 0 };
	struct report rp;
	int hold = -1, r;

	if ((r = media_hold(path, &hold, &err)) < 0)
		e.error = err.msg;
	e.live = r == 1;
	if (!e.error && report_load(&rp, path, &err) < 0)
		e.error = err.msg;
	else if (!e.error) {
		read_entry(&rp, &e);
		report_free(&rp);
	}
	if (hold >= 0)
		close(hold);
	if (j)
		entry_json(j, &e);
	else
		entry_text(&e);
}

static int ls(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	char def[PATH_MAX], msg[PATH_MAX + 128];
	struct logset set;
	struct json j;
	int c, ret, i, ndirs;

	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'j': o.json = 1; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	for (i = optind; i < argc; i++)
		cli_path_opt(&o, "DIR", argv[i], 0);
	if ((ret = cli_parse_done(&o)))
		return ret;
	logname_default_dir(def, sizeof def);
	ndirs = argc - optind;
	if (o.json) {
		json_init(&j, stdout);
		json_obj_begin(&j);
		json_key(&j, "logs");
		json_arr_begin(&j);
	}
	for (i = 0; i < (ndirs ? ndirs : 1); i++) {
		const char *dir = ndirs ? argv[optind + i] : def;

		/* The default directory is made by the first process that logs. */
		if (!ndirs && access(dir, F_OK) < 0)
			continue;
		if (access(dir, F_OK) < 0) {
			fprintf(stderr, "moeft %s: %s: %s\n", cmd->name, dir, strerror(errno));
			ret = EXIT_USAGE;
			continue;
		}
		if (logset_open(&set, dir, msg, sizeof msg) < 0) {
			fprintf(stderr, "moeft %s: %s\n", cmd->name, msg);
			ret = EXIT_USAGE;
			continue;
		}
		if (!set.dir) {
			fprintf(stderr, "moeft %s: %s: not a directory\n", cmd->name, dir);
			ret = EXIT_USAGE;
		}
		for (size_t k = 0; set.dir && k < set.n; k++)
			list_one(set.paths[k], o.json ? &j : NULL);
		logset_free(&set);
	}
	if (o.json) {
		json_arr_end(&j);
		json_obj_end(&j);
	}
	return ret;
}

const struct cli_command cmd_ls = {
	.name = "ls",
	.summary = "list the logs of directories of logs, their writers and what they hold",
	.usage =
	"Usage: moeft ls [--json] [DIR...]\n"
	"\n"
	"List the logs (*.wal) in each DIR, by default the preload's own directory\n"
	"(/dev/shm/moeft-<user>/): for each, whether a process writes it now, the\n"
	"epoch, pid and start of its latest writer, whether that writer exited\n"
	"(its exit record), crashed (a crash handler's record) or ended without\n"
	"either (killed, or its exit handlers skipped), the last committed decode\n"
	"window a restore would bring back, and whether that state is held: no\n"
	"exit came after it, so a new run on the log leaves it to a restore.\n"
	"\n"
	"  -j, --json       print one JSON object ({\"logs\":[...]}) instead of text\n"
	"  -h, --help       show this help\n"
	"\n"
	"Exit status: 0, also when a log cannot be read (it is listed so); 2 usage\n"
	"error, or a DIR that is no directory or cannot be read.\n",
	.run = ls,
};

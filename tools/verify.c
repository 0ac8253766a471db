/*
 * verify.c - moeft verify: is the committed part of a log intact?
 *
 * Exit 0 when every committed window verifies (a dropped uncommitted tail
 * is what a crash leaves behind, not damage), 1 when damage is found
 * inside the committed part, 2 when the log cannot be read at all.
 */
#include <limits.h>
#include <stdio.h>

#include "cli.h"
#include "json.h"
#include "logset.h"
#include "report.h"

/*
 * Verify one log, printing its text, or with json its JSON object: into
 * set, the array of a directory's logs, else as the whole output.  A log
 * that cannot be read is said on stderr (and as the whole output's JSON
 * error when it is alone).  Returns the log's exit status.
 */
static int verify_one(const struct cli_command *cmd, const char *path, int json,
		      struct json *set)
{
	struct wal_error err = { 0 };
	struct report rp;
	struct json j;
	int ret;

	if (!set && json) {
		json_init(&j, stdout);
		set = &j;
	}
	if ((ret = report_load(&rp, path, &err)) < 0) {
		int code = report_load_exit(ret);

		if (!json || (set == &j && code != EXIT_BAD))
			return cli_fail(cmd, json, code, "%s", err.msg);
		fprintf(stderr, "moeft %s: %s\n", cmd->name, err.msg);
		report_failed_json(set, path, ret, err.msg);
		return code;
	}
	if (json) {
		json_obj_begin(set);
		report_json(&rp, set);
		json_obj_end(set);
	} else {
		cli_row(stdout, "log", "%s", path);
		report_text(&rp, stdout);
		if (report_damaged(&rp))
			cli_row(stdout, "result", "DAMAGED: %llu finding(s); %llu of %zu committed "
				"windows lost records", (unsigned long long)rp.rec->damage_count,
				(unsigned long long)rp.rec->damaged_windows, rp.nwin);
		else
			cli_row(stdout, "result", "OK: the committed part is intact");
	}
	ret = report_damaged(&rp) ? EXIT_BAD : EXIT_OK;
	report_free(&rp);
	return ret;
}

/* A directory's logs one after the other, then the sum; the exit status
 * is the worst of theirs. */
static int verify_set(const struct cli_command *cmd, const struct logset *set, const char *dir,
		      int json)
{
	size_t i, bad = 0, unreadable = 0;
	struct json j;
	int ret = EXIT_OK, r;

	if (json) {
		json_init(&j, stdout);
		json_obj_begin(&j);
		json_kv_str(&j, "dir", dir);
		json_key(&j, "logs");
		json_arr_begin(&j);
	}
	for (i = 0; i < set->n; i++) {
		if (!json && i)
			putchar('\n');
		r = verify_one(cmd, set->paths[i], json, json ? &j : NULL);
		bad += r == EXIT_BAD;
		unreadable += r == EXIT_USAGE;
		ret = r > ret ? r : ret;
	}
	if (json) {
		json_arr_end(&j);
		json_kv_str(&j, "status", unreadable ? "error" : bad ? "damaged" : "ok");
		json_obj_end(&j);
	} else {
		printf("\n");
		cli_row(stdout, "logs", "%zu in %s", set->n, dir);
		if (!bad && !unreadable)
			cli_row(stdout, "result", "OK: every log's committed part is intact");
		else
			cli_row(stdout, "result", "%zu of %zu logs damaged, %zu that cannot be read",
				bad, set->n, unreadable);
	}
	return ret;
}

static int verify(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wal", required_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	const char *path = NULL;
	struct logset set;
	char msg[PATH_MAX + 128];
	int c, ret;

	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'w': path = optarg; break;
		case 'j': o.json = 1; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind < argc)
		cli_usage_error(&o, "unexpected argument '%s'", argv[optind]);
	if (!path)
		cli_usage_error(&o, "--wal PATH is required");
	else
		cli_path_opt(&o, "--wal", path, 0);
	if ((ret = cli_parse_done(&o)))
		return ret;
	if (logset_open(&set, path, msg, sizeof msg) < 0)
		return cli_fail(cmd, o.json, EXIT_USAGE, "%s", msg);
	if (logset_need_one(&set, path, msg, sizeof msg) < 0) {
		logset_free(&set);
		return cli_fail(cmd, o.json, EXIT_USAGE, "%s", msg);
	}
	if (set.dir) {
		ret = verify_set(cmd, &set, path, o.json);
		logset_free(&set);
		return ret;
	}
	logset_free(&set);
	return verify_one(cmd, path, o.json, NULL);
}

const struct cli_command cmd_verify = {
	.name = "verify",
	.summary = "check that the committed part of a log is intact",
	.usage =
	"Usage: moeft verify --wal PATH [--json]\n"
	"\n"
	"Recover the log at PATH read-only and check every committed window.\n"
	"A dropped uncommitted tail (what a crash leaves) is reported, not an error.\n"
	"A directory (MOEFT_WAL naming one: a log per process) has each of its logs\n"
	"(*.wal) checked, then their sum.\n"
	"\n"
	"  -w, --wal PATH   the log file or device-DAX node, or a directory of logs\n"
	"  -j, --json       print one JSON object instead of text\n"
	"  -h, --help       show this help\n"
	"\n"
	"Exit status: 0 intact, 1 damage inside the committed part (every finding\n"
	"and the damaged window ids are listed) or a log too damaged to recover,\n"
	"2 usage or I/O error, or not a moeft log; for a directory, the worst of\n"
	"its logs'.\n",
	.run = verify,
};

/*
 * verify.c - moeft verify: is the committed part of a log intact?
 *
 * Exit 0 when every committed window verifies (a dropped uncommitted tail
 * is what a crash leaves behind, not damage), 1 when damage is found
 * inside the committed part, 2 when the log cannot be read at all.
 */
#include "cli.h"
#include "json.h"
#include "report.h"

/* A moeft log with neither superblock nor checkpoint intact is damaged,
 * not an error of the tool: say so in the status as the exit code does. */
static void unrecoverable_json(const char *path, const char *msg)
{
	struct json j;

	json_init(&j, stdout);
	json_obj_begin(&j);
	json_kv_str(&j, "status", "damaged");
	json_kv_str(&j, "path", path);
	json_kv_str(&j, "error", msg);
	json_obj_end(&j);
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
	struct report rp;
	struct wal_error err = { 0 };
	const char *path = NULL;
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

	if ((ret = report_load(&rp, path, &err)) < 0) {
		int unrecoverable = ret == WAL_ECORRUPT;

		ret = cli_fail(cmd, o.json && !unrecoverable, report_load_exit(ret), "%s", err.msg);
		if (o.json && unrecoverable)
			unrecoverable_json(path, err.msg);
		return ret;
	}
	if (o.json) {
		struct json j;

		json_init(&j, stdout);
		json_obj_begin(&j);
		report_json(&rp, &j);
		json_obj_end(&j);
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

const struct cli_command cmd_verify = {
	.name = "verify",
	.summary = "check that the committed part of a log is intact",
	.usage =
	"Usage: moeft verify --wal PATH [--json]\n"
	"\n"
	"Recover the log at PATH read-only and check every committed window.\n"
	"A dropped uncommitted tail (what a crash leaves) is reported, not an error.\n"
	"\n"
	"  -w, --wal PATH   the log file or device-DAX node\n"
	"  -j, --json       print one JSON object instead of text\n"
	"  -h, --help       show this help\n"
	"\n"
	"Exit status: 0 intact, 1 damage inside the committed part (every finding\n"
	"and the damaged window ids are listed) or a log too damaged to recover,\n"
	"2 usage or I/O error, or not a moeft log.\n",
	.run = verify,
};

/*
 * moeft.c - the moeft command: dispatch to a subcommand.
 *
 * Each subcommand lives in its own file and parses its own options; this
 * file only knows their table, the top-level help and the version.
 */
#include <string.h>

#include "cli.h"

static const struct cli_command *const commands[] = {
	&cmd_verify, &cmd_inspect, &cmd_restore, &cmd_resubmit, &cmd_run, &cmd_gateway,
	&cmd_ls, &cmd_demo, &cmd_bench, &cmd_profile,
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
	fputs("Usage: moeft COMMAND [OPTIONS]\n"
	      "       moeft help COMMAND | --help | --version\n"
	      "\n"
	      "The write-ahead log of moeft in CXL-attached memory: check, inspect and\n"
	      "demonstrate it.\n"
	      "\n"
	      "Commands:\n", f);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-8s %s\n", commands[i]->name, commands[i]->summary);
	fputs("\n"
	      "Environment:\n"
	      "  MOEFT_LOG        library messages shown: error, warn (default), info, debug\n"
	      "  MOEFT_NUMA_NODE  NUMA node (e.g. a CXL memory node) for logs the tools create\n"
	      "\n"
	      "Run 'moeft COMMAND --help' for the options of a command.\n", f);
}

static const struct cli_command *find(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i]->name, name))
			return commands[i];
	return NULL;
}

static int bad_usage(const char *what, const char *arg)
{
	fprintf(stderr, "moeft: %s '%s'\nTry 'moeft --help'.\n", what, arg);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	const struct cli_command *cmd;
	int ret;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("moeft %s\n", MOEFT_VERSION);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "help")) {
		if (argc == 2) {
			usage(stdout);
			return EXIT_OK;
		}
		if (argc > 3)
			return bad_usage("unexpected argument", argv[3]);
		if (!(cmd = find(argv[2])))
			return bad_usage("unknown command", argv[2]);
		cli_print_usage(cmd, stdout);
		return EXIT_OK;
	}
	if (argv[1][0] == '-')
		return bad_usage("unknown option", argv[1]);
	if (!(cmd = find(argv[1])))
		return bad_usage("unknown command", argv[1]);
	if ((ret = cli_env_load()))
		return ret;
	return cmd->run(cmd, argc - 1, argv + 1);
}

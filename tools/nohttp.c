/*
 * nohttp.c - the HTTP commands in a moeft built with -Dhttp=disabled
 * (no libcurl, jansson or libmicrohttpd): they stay in the command table
 * and say why they cannot run, instead of vanishing from --help.
 */
#include "cli.h"
#include "demo.h"

static int not_built(const struct cli_command *cmd, int argc, char **argv)
{
	(void)argc, (void)argv;
	return cli_fail(cmd, 0, EXIT_USAGE,
			"this moeft was built without HTTP support (meson -Dhttp=disabled): "
			"rebuild with libcurl, jansson and libmicrohttpd");
}

const struct cli_command cmd_resubmit = {
	.name = "resubmit",
	.summary = "(not built: -Dhttp=disabled) send a restored server's requests again",
	.usage = "Usage: moeft resubmit ... (not built in this moeft: -Dhttp=disabled)\n",
	.run = not_built,
};

const struct cli_command cmd_gateway = {
	.name = "gateway",
	.summary = "(not built: -Dhttp=disabled) a proxy that keeps its clients through a crash",
	.usage = "Usage: moeft gateway ... (not built in this moeft: -Dhttp=disabled)\n",
	.run = not_built,
};

int demo_vllm(const struct cli_command *cmd, int argc, char **argv)
{
	return not_built(cmd, argc, argv);
}

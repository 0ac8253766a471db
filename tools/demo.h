/*
 * demo.h - what the two engines of moeft demo share: the demo serving
 * program's (demo.c) and a real vLLM's (demo_vllm.c).
 */
#ifndef MOEFT_DEMO_H
#define MOEFT_DEMO_H

#include <signal.h>

#include "cli.h"

/*
 * An interrupt (SIGINT, SIGTERM, SIGHUP) only sets demo_interrupted: the
 * demo's waits poll it, stop what runs, remove the demo's directory, and
 * demo_end_if_interrupted() then ends moeft by that signal, as it would
 * have ended it.
 */
extern volatile sig_atomic_t demo_interrupted;
void demo_catch_interrupts(void);
void demo_end_if_interrupted(void);

/* moeft demo --engine vllm ... (argv as moeft demo got it). */
int demo_vllm(const struct cli_command *cmd, int argc, char **argv);

#endif

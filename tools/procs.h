/*
 * procs.h - the processes of the machine, as /proc lists them: what a
 * supervisor needs to find every process of a server it started, the
 * ones that left for a process group of their own included.
 */
#ifndef MOEFT_PROCS_H
#define MOEFT_PROCS_H

#include <sys/types.h>

struct proc_info {
	pid_t pid, ppid, pgrp;
	char state;		/* 'R', 'S', ..., 'Z' a zombie */
};

/* Call fn for each process there is (gone ones skipped), until it returns
 * non-zero: then that value, else 0. */
int procs_each(int (*fn)(const struct proc_info *p, void *arg), void *arg);

#endif

/*
 * procstat.h - a process as /proc/PID/stat describes it: what the
 * supervisor (tools/procs.h) and the shared-memory lists (shmlist.h) both
 * need to know of another process.
 */
#ifndef MOEFT_PROCSTAT_H
#define MOEFT_PROCSTAT_H

#include <stdint.h>
#include <sys/types.h>

struct procstat {
	char state;		/* 'R', 'S', ..., 'Z' a zombie */
	pid_t ppid, pgrp;
	uint64_t start;		/* clock ticks after boot */
};

/* Process pid's: 0, or -1 when it is gone. */
int procstat_read(pid_t pid, struct procstat *st);

#endif

/*
 * procstat.c - /proc/PID/stat, parsed (procstat.h).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "procstat.h"

int procstat_read(pid_t pid, struct procstat *st)
{
	char path[64], buf[1024], *at;
	int ppid, pgrp;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* "PID (COMM) STATE PPID PGRP ...": COMM may hold anything, ')' and
	 * spaces too; the start time is field 22, the 20th after COMM. */
	if (!(at = strrchr(buf, ')')) ||
	    sscanf(at + 1, " %c %d %d", &st->state, &ppid, &pgrp) != 3)
		return -1;
	for (int field = 2; field < 22; field++)
		if (!(at = strchr(at + 1, ' ')))
			return -1;
	st->ppid = (pid_t)ppid;
	st->pgrp = (pid_t)pgrp;
	return sscanf(at + 1, "%" SCNu64, &st->start) == 1 ? 0 : -1;
}

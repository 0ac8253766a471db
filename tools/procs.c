/*
 * procs.c - the processes of the machine (procs.h).
 */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procs.h"

/* /proc/PID/stat into *p: 0, or -1 when the process is gone. */
static int stat_of(pid_t pid, struct proc_info *p)
{
	char path[64], buf[512], *end;
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
	/* "PID (COMM) STATE PPID PGRP ...": COMM may hold anything, ')' too */
	if (!(end = strrchr(buf, ')')) ||
	    sscanf(end + 1, " %c %d %d", &p->state, &ppid, &pgrp) != 3)
		return -1;
	p->pid = pid;
	p->ppid = (pid_t)ppid;
	p->pgrp = (pid_t)pgrp;
	return 0;
}

int procs_each(int (*fn)(const struct proc_info *p, void *arg), void *arg)
{
	DIR *d = opendir("/proc");
	struct proc_info p;
	struct dirent *e;
	int ret = 0;

	while (!ret && d && (e = readdir(d)))
		if (isdigit((unsigned char)e->d_name[0]) &&
		    stat_of((pid_t)atoi(e->d_name), &p) == 0)
			ret = fn(&p, arg);
	if (d)
		closedir(d);
	return ret;
}

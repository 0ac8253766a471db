/*
 * procs.c - the processes of the machine (procs.h).
 */
#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>

#include "procs.h"
#include "procstat.h"

/* Process pid into *p: 0, or -1 when it is gone. */
static int stat_of(pid_t pid, struct proc_info *p)
{
	struct procstat st;

	if (procstat_read(pid, &st) < 0)
		return -1;
	*p = (struct proc_info){ .pid = pid, .ppid = st.ppid, .pgrp = st.pgrp, .state = st.state };
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

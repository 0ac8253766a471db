/*
 * leftovers.c - what a killed server leaves in /dev/shm (leftovers.h).
 *
 * Which files a process uses is read from /proc: the paths of its
 * mappings (/proc/PID/maps) and of its open descriptors (/proc/PID/fd).
 * Processes of other users cannot be read, but neither can they open
 * these files, which their makers create private (mode 0600).
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "leftovers.h"
#include "procs.h"

#define SHM "/dev/shm/"

/* Names a server's shared memory goes by (leftovers.h). */
static int shared_name(const char *name)
{
	static const char *const prefixes[] = { "psm_", "sem.mp-", "torch_" };

	if (strchr(name, '/'))
		return 0;
	for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
		if (!strncmp(name, prefixes[i], strlen(prefixes[i])))
			return 1;
	return 0;
}

static int has(const struct leftovers *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->names[i], name))
			return 1;
	return 0;
}

static void add(struct leftovers *l, const char *name)
{
	char **more, *copy;

	if (has(l, name))
		return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;

		if (!(more = realloc(l->names, cap * sizeof *more)))
			return;
		l->names = more;
		l->cap = cap;
	}
	if ((copy = strdup(name)))
		l->names[l->n++] = copy;
}

/* path, a /proc link or a maps line's path, when it names a live file of
 * a shared name in /dev/shm: add it. */
static void consider(struct leftovers *l, const char *path)
{
	size_t n;

	if (strncmp(path, SHM, sizeof SHM - 1))
		return;
	path += sizeof SHM - 1;
	n = strlen(path);
	if (n > 10 && !strcmp(path + n - 10, " (deleted)"))
		return;
	if (shared_name(path))
		add(l, path);
}

/* Add the shared files process pid maps or holds open. */
static void used_by(struct leftovers *l, pid_t pid)
{
	char path[64], link[PATH_MAX], *line = NULL, *at;
	size_t cap = 0;
	ssize_t n;
	struct dirent *e;
	FILE *f;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
	if ((f = fopen(path, "re"))) {
		while ((n = getline(&line, &cap, f)) > 0) {
			if (line[n - 1] == '\n')
				line[n - 1] = '\0';
			if ((at = strstr(line, SHM)))
				consider(l, at);
		}
		free(line);
		fclose(f);
	}
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	if (!(d = opendir(path)))
		return;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' &&
		    (n = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1)) > 0) {
			link[n] = '\0';
			consider(l, link);
		}
	closedir(d);
}

struct scan {
	struct leftovers *l;
	pid_t pgid;		/* only this group's processes; 0: all */
};

static int scan_one(const struct proc_info *p, void *arg)
{
	struct scan *s = arg;

	if (!s->pgid || p->pgrp == s->pgid)
		used_by(s->l, p->pid);
	return 0;
}

void leftovers_note(struct leftovers *l, pid_t pgid)
{
	struct scan s = { l, pgid };

	if (pgid > 0)
		procs_each(scan_one, &s);
}

size_t leftovers_clean(struct leftovers *l, uint64_t *bytes)
{
	struct leftovers used = { 0 };
	struct scan all = { &used, 0 };
	size_t removed = 0;
	struct stat st;
	int dir;

	if (!l->n)
		return 0;
	procs_each(scan_one, &all);
	if ((dir = open(SHM, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		for (size_t i = 0; i < l->n; i++)
			if (!has(&used, l->names[i]) &&
			    fstatat(dir, l->names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISREG(st.st_mode) && st.st_uid == getuid() &&
			    unlinkat(dir, l->names[i], 0) == 0) {
				*bytes += (uint64_t)st.st_blocks * 512;
				removed++;
			}
		close(dir);
	}
	leftovers_free(&used);
	leftovers_free(l);
	return removed;
}

void leftovers_free(struct leftovers *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->names[i]);
	free(l->names);
	*l = (struct leftovers){ 0 };
}

/*
 * leftovers.c - what a killed server leaves in /dev/shm (leftovers.h).
 *
 * Which files a process uses is read from /proc: the paths of its
 * mappings (/proc/PID/maps) and of its open descriptors (/proc/PID/fd).
 * Processes of other users cannot be read, but neither can they open
 * these files, which their makers create private (mode 0600).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "leftovers.h"
#include "procs.h"
#include "shmlist.h"

#define SHM "/dev/shm/"
#define LIST_READ_MAX (4 << 20)	/* the preload compacts its lists long before */

static int has(const struct names *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i], name))
			return 1;
	return 0;
}

static void add(struct names *s, const char *name)
{
	char **more, *copy;

	if (has(s, name))
		return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;

		if (!(more = realloc(s->v, cap * sizeof *more)))
			return;
		s->v = more;
		s->cap = cap;
	}
	if ((copy = strdup(name)))
		s->v[s->n++] = copy;
}

static void names_free(struct names *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	*s = (struct names){ 0 };
}

/* path, a /proc link or a maps line's path, when it names a live file of
 * a shared name in /dev/shm: add it. */
static void consider(struct names *s, const char *path)
{
	size_t n;

	if (strncmp(path, SHM, sizeof SHM - 1))
		return;
	path += sizeof SHM - 1;
	n = strlen(path);
	if (n > 10 && !strcmp(path + n - 10, " (deleted)"))
		return;
	if (shmlist_transient(path))
		add(s, path);
}

/* Add the shared files that the process or thread at proc (/proc/PID, or
 * /proc/PID/task/TID) maps or holds open. */
static void used_at(struct names *s, const char *proc)
{
	char path[96], link[PATH_MAX], *line = NULL, *at;
	size_t cap = 0;
	ssize_t n;
	struct dirent *e;
	FILE *f;
	DIR *d;

	snprintf(path, sizeof path, "%s/maps", proc);
	if ((f = fopen(path, "re"))) {
		while ((n = getline(&line, &cap, f)) > 0) {
			if (line[n - 1] == '\n')
				line[n - 1] = '\0';
			if ((at = strstr(line, SHM)))
				consider(s, at);
		}
		free(line);
		fclose(f);
	}
	snprintf(path, sizeof path, "%s/fd", proc);
	if (!(d = opendir(path)))
		return;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' &&
		    (n = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1)) > 0) {
			link[n] = '\0';
			consider(s, link);
		}
	closedir(d);
}

/* Add the shared files process p uses.  A zombie's own entries are empty
 * even while its other threads run (its main thread called pthread_exit):
 * then the threads say. */
static void used_by(struct names *s, const struct proc_info *p)
{
	char proc[64], task[96];
	struct dirent *e;
	DIR *d;

	snprintf(proc, sizeof proc, "/proc/%d", (int)p->pid);
	if (p->state != 'Z') {
		used_at(s, proc);
		return;
	}
	snprintf(task, sizeof task, "%s/task", proc);
	if (!(d = opendir(task)))
		return;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' &&
		    snprintf(task, sizeof task, "%s/task/%s", proc, e->d_name) < (int)sizeof task)
			used_at(s, task);
	closedir(d);
}

struct scan {
	struct names *s;
	pid_t pgid;		/* only this group's processes; 0: all */
};

static int scan_one(const struct proc_info *p, void *arg)
{
	struct scan *s = arg;

	if (!s->pgid || p->pgrp == s->pgid)
		used_by(s->s, p);
	return 0;
}

void leftovers_note(struct leftovers *l, pid_t pgid)
{
	struct scan s = { &l->files, pgid };

	if (pgid > 0)
		procs_each(scan_one, &s);
}

/* The list name (in directory dir, an open descriptor or AT_FDCWD) read
 * whole: it (*len bytes), or NULL with errno, or with a reason in *why. */
static char *read_list(int dir, const char *name, size_t *len, const char **why)
{
	struct stat st;
	char *buf;
	int fd;

	*why = NULL;
	if ((fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return NULL;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 022)) {
		*why = "not a regular file of this user that only it may write";
	} else if (st.st_size > LIST_READ_MAX) {
		*why = "larger than the preload ever makes one";
	} else if ((buf = malloc((size_t)st.st_size ? (size_t)st.st_size : 1))) {
		if (pread(fd, buf, (size_t)st.st_size, 0) == st.st_size) {
			*len = (size_t)st.st_size;
			close(fd);
			return buf;
		}
		free(buf);
	}
	close(fd);
	return NULL;
}

static void add_name(void *arg, const char *name)
{
	add(arg, name);
}

void leftovers_note_lists(struct leftovers *l, const char *dir, const char *who)
{
	char path[PATH_MAX];
	const char *why;
	struct shmlist_owner o;
	struct dirent *e;
	size_t bad, len;
	char *buf;
	DIR *d;

	if (!(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		if (shmlist_parse_name(e->d_name, &o) < 0 || shmlist_alive(&o) != 0 ||
		    snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
			continue;	/* no list, its writers may run, or no path */
		if (!(buf = read_list(dirfd(d), e->d_name, &len, &why))) {
			if (why || errno != ENOENT)
				fprintf(stderr, "%s: %s: %s; left alone\n", who, path,
					why ? why : strerror(errno));
			continue;
		}
		if ((bad = shmlist_each(buf, len, add_name, &l->files)))
			fprintf(stderr, "%s: %s: line %zu is no name of shared memory the preload "
				"lists; the list is left alone\n", who, path, bad);
		else
			add(&l->lists, path);
		free(buf);
	}
	closedir(d);
}

struct left {
	int shm;	/* /dev/shm, open */
	size_t n;	/* names still there */
};

static void count_left(void *arg, const char *name)
{
	struct left *left = arg;
	struct stat st;

	if (fstatat(left->shm, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		left->n++;
}

/* Remove the list at path when none of its files is left in /dev/shm
 * (shm open there), with the copy a compaction may have left (PATH.new,
 * preload/shm.c). */
static void drop_list(int shm, const char *path)
{
	struct left left = { shm, 0 };
	char new[PATH_MAX + 8], *buf;
	const char *why;
	size_t len;

	if (!(buf = read_list(AT_FDCWD, path, &len, &why)))
		return;
	if (!shmlist_each(buf, len, count_left, &left) && !left.n && unlink(path) == 0 &&
	    snprintf(new, sizeof new, "%s.new", path) < (int)sizeof new)
		unlink(new);
	free(buf);
}

size_t leftovers_clean(struct leftovers *l, uint64_t *bytes)
{
	struct names used = { 0 };
	struct scan all = { &used, 0 };
	size_t removed = 0;
	struct stat st;
	int dir;

	if (l->files.n)
		procs_each(scan_one, &all);
	if ((dir = open(SHM, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		for (size_t i = 0; i < l->files.n; i++)
			if (!has(&used, l->files.v[i]) &&
			    fstatat(dir, l->files.v[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISREG(st.st_mode) && st.st_uid == getuid() &&
			    unlinkat(dir, l->files.v[i], 0) == 0) {
				*bytes += (uint64_t)st.st_blocks * 512;
				removed++;
			}
		for (size_t i = 0; i < l->lists.n; i++)
			drop_list(dir, l->lists.v[i]);
		close(dir);
	}
	names_free(&used);
	leftovers_free(l);
	return removed;
}

void leftovers_free(struct leftovers *l)
{
	names_free(&l->files);
	names_free(&l->lists);
}

/*
 * logset.c - the logs a --wal argument names (logset.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "logset.h"

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_log_name(const char *name)
{
	size_t n = strlen(name);

	return n > 4 && !strcmp(name + n - 4, ".wal");
}

static int add(struct logset *s, const char *dir, const char *name)
{
	char **grown = realloc(s->paths, (s->n + 1) * sizeof *s->paths);
	size_t len = strlen(dir) + strlen(name) + 2;

	if (!grown)
		return -1;
	s->paths = grown;
	if (!(s->paths[s->n] = malloc(len)))
		return -1;
	snprintf(s->paths[s->n++], len, "%s%s%s", dir,
		 *dir && dir[strlen(dir) - 1] != '/' ? "/" : "", name);
	return 0;
}

static int read_dir(struct logset *s, const char *path, char *err, size_t errlen)
{
	struct dirent *e;
	struct stat st;
	DIR *d;
	int fd, r = 0;

	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || !(d = fdopendir(fd))) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while (!r && (e = readdir(d)))
		if (is_log_name(e->d_name) && !fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) &&
		    S_ISREG(st.st_mode) && add(s, path, e->d_name) < 0) {
			snprintf(err, errlen, "out of memory");
			r = -1;
		}
	closedir(d);
	if (!r && s->n > 1)
		qsort(s->paths, s->n, sizeof *s->paths, by_name);
	return r;
}

int logset_open(struct logset *s, const char *path, char *err, size_t errlen)
{
	struct stat st;
	char *dir;
	size_t n;

	*s = (struct logset){ 0 };
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
		/* Not a directory: the log itself (its reader says what is wrong). */
		if (add(s, "", path) == 0)
			return 0;
		snprintf(err, errlen, "out of memory");
		logset_free(s);
		return -1;
	}
	s->dir = 1;
	/* Its logs' paths without doubled slashes. */
	n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		n--;
	if (!(dir = strndup(path, n)) || read_dir(s, dir, err, errlen) < 0) {
		if (!dir)
			snprintf(err, errlen, "out of memory");
		free(dir);
		logset_free(s);
		return -1;
	}
	free(dir);
	return 0;
}

int logset_need_one(const struct logset *s, const char *path, char *err, size_t errlen)
{
	if (s->n)
		return 0;
	snprintf(err, errlen, "%s: a directory with no moeft log in it (no file named *.wal)",
		 path);
	return -1;
}

void logset_free(struct logset *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->paths[i]);
	free(s->paths);
	*s = (struct logset){ 0 };
}

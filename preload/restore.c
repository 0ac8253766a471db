/*
 * restore.c - restore mode (restore.h): loading the plan (plan.h), opening
 * the pool images, matching allocations.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "restore.h"

/* Open q's image in dir to read: a regular file of exactly q's size.  0,
 * or -1 with err set. */
static int open_image(const char *dir, struct restore_pool *q, char *err, size_t errlen)
{
	const char *file = q->file;
	uint64_t size = q->size;
	char path[PATH_MAX];
	struct stat st;
	int fd;

	if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) {
		snprintf(err, errlen, "%s/%s: path too long", dir, file);
		return -1;
	}
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
		snprintf(err, errlen, "%s: not a file of %llu bytes", path, (unsigned long long)size);
		close(fd);
		return -1;
	}
	q->fd = fd;
	q->file_dev = (uint64_t)st.st_dev;
	q->file_ino = (uint64_t)st.st_ino;
	return 0;
}

/* The plan's text at path, NUL-terminated: NULL with err set when it
 * cannot be read, or is too long or binary. */
static char *read_plan(const char *path, char *err, size_t errlen)
{
	size_t n;
	char *text = restore_read_file(path, RESTORE_PLAN_MAX, &n, err, errlen);

	if (text && memchr(text, '\0', n)) {
		snprintf(err, errlen, "%s: not a plan (binary)", path);
		free(text);
		return NULL;
	}
	return text;
}

int restore_plan_load(const char *path, struct restore_plan *p, char *err, size_t errlen)
{
	char dir[PATH_MAX], what[200], *text;
	const char *slash = strrchr(path, '/');
	unsigned i;
	int ret;

	if (!slash || (size_t)(slash - path) >= sizeof dir) {
		snprintf(err, errlen, "%s: not an absolute path", path);
		return -1;
	}
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	if (!(text = read_plan(path, err, errlen)))
		return -1;
	ret = restore_plan_parse(text, p, what, sizeof what);
	free(text);
	if (ret < 0) {
		snprintf(err, errlen, "%s: %s", path, what);
		return -1;
	}
	for (i = 0; i < p->npools; i++)
		if (open_image(dir, &p->pools[i], err, errlen) < 0) {
			while (i--)
				close(p->pools[i].fd);
			restore_plan_free(p);
			return -1;
		}
	return 0;
}

const struct restore_pool *restore_match(struct restore_plan *p, uint64_t fingerprint,
					 uint64_t size, uint32_t ordinal, uint64_t base)
{
	struct alloc_ident want = { fingerprint, size, ordinal };
	unsigned i;

	for (i = 0; i < p->npools; i++) {
		struct restore_pool *q = &p->pools[i];
		struct alloc_ident has = { q->fingerprint, q->size, q->ordinal };

		if (!q->base && alloc_ident_eq(has, want)) {
			q->base = base;
			return q;
		}
	}
	return NULL;
}

int restore_claimed(const struct restore_plan *p, uint64_t base)
{
	unsigned i;

	for (i = 0; i < p->npools; i++)
		if (p->pools[i].base == base)
			return 1;
	return 0;
}

const struct restore_pool *restore_unmatched(const struct restore_plan *p)
{
	unsigned i;

	for (i = 0; i < p->npools; i++)
		if (!p->pools[i].base)
			return &p->pools[i];
	return NULL;
}

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

/* The regular file at path (not a link) open to read, *st its status.
 * The descriptor, or -1 with err set. */
static int open_regular(const char *path, struct stat *st, char *err, size_t errlen)
{
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0 || fstat(fd, st) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		close(fd);
		return -1;
	}
	return fd;
}

/* Open q's image in dir to read: a regular file of exactly q's size.  0,
 * or -1 with err set. */
static int open_image(const char *dir, struct restore_pool *q, char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct stat st;
	int fd;

	if (snprintf(path, sizeof path, "%s/%s", dir, q->file) >= (int)sizeof path) {
		snprintf(err, errlen, "%s/%s: path too long", dir, q->file);
		return -1;
	}
	if ((fd = open_regular(path, &st, err, errlen)) < 0)
		return -1;
	if ((uint64_t)st.st_size != q->size) {
		snprintf(err, errlen, "%s: not a file of %llu bytes", path,
			 (unsigned long long)q->size);
		close(fd);
		return -1;
	}
	q->fd = fd;
	q->file_dev = (uint64_t)st.st_dev;
	q->file_ino = (uint64_t)st.st_ino;
	return 0;
}

/* The KV store at store_path, which the maps point into, open to read in
 * p (once for all maps).  0, or -1 with err set. */
static int open_store(struct restore_plan *p, const char *store_path, char *err, size_t errlen)
{
	struct stat st;
	int fd;

	if (p->store_fd >= 0)
		return 0;
	if ((fd = open_regular(store_path, &st, err, errlen)) < 0)
		return -1;
	p->store_fd = fd;
	p->store_dev = (uint64_t)st.st_dev;
	p->store_ino = (uint64_t)st.st_ino;
	p->store_bytes = (uint64_t)st.st_size;
	return 0;
}

/* Read and check q's chunk map in dir: a map of this very pool, log and
 * window, into a store of p's size.  0, or -1 with err set. */
static int load_map(const char *dir, struct restore_plan *p, struct restore_pool *q,
		    const char *store_path, char *err, size_t errlen)
{
	char path[PATH_MAX], why[200];
	const struct kvmap *m = &q->map;
	uint8_t *buf;
	size_t len;
	int ret;

	if (snprintf(path, sizeof path, "%s/%s", dir, q->file) >= (int)sizeof path) {
		snprintf(err, errlen, "%s/%s: path too long", dir, q->file);
		return -1;
	}
	if (!kvmap_chunk_ok(q->chunk_bytes)) {
		snprintf(err, errlen, "%s: pool %u's chunks of %llu bytes are not ones a map holds",
			 path, q->no, (unsigned long long)q->chunk_bytes);
		return -1;
	}
	if (open_store(p, store_path, err, errlen) < 0)
		return -1;
	if (!(buf = (uint8_t *)restore_read_file(path, kvmap_file_bytes(q->size, q->chunk_bytes),
						 &len, err, errlen)))
		return -1;
	ret = kvmap_parse(buf, len, p->store_bytes, &q->map, why, sizeof why);
	free(buf);
	if (ret < 0) {
		snprintf(err, errlen, "%s: %s", path, why);
		return -1;
	}
	if (m->pool != q->no || m->log_id != p->log_id || m->window != p->window ||
	    m->size != q->size || m->chunk_bytes != q->chunk_bytes) {
		snprintf(err, errlen, "%s: a map of pool %u (%llu bytes, chunks of %llu) of log "
			 "%016llx window %llu, not of the plan's pool %u of window %llu", path,
			 m->pool, (unsigned long long)m->size, (unsigned long long)m->chunk_bytes,
			 (unsigned long long)m->log_id, (unsigned long long)m->window, q->no,
			 (unsigned long long)p->window);
		kvmap_free(&q->map);
		return -1;
	}
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

void restore_plan_close(struct restore_plan *p)
{
	for (unsigned i = 0; i < p->npools; i++)
		if (p->pools[i].fd >= 0)
			close(p->pools[i].fd);
	if (p->store_fd >= 0)
		close(p->store_fd);
	restore_plan_free(p);
	p->store_fd = -1;
}

/* The directory of the plan at path (absolute) into dir.  0, or -1 with
 * err set. */
static int plan_dir(const char *path, char dir[PATH_MAX], char *err, size_t errlen)
{
	const char *slash = strrchr(path, '/');

	if (!slash || (size_t)(slash - path) >= PATH_MAX) {
		snprintf(err, errlen, "%s: not an absolute path", path);
		return -1;
	}
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	return 0;
}

int restore_plan_load(const char *path, struct restore_plan *p, char *err, size_t errlen)
{
	char dir[PATH_MAX], what[200], *text;
	unsigned i;
	int ret;

	if (plan_dir(path, dir, err, errlen) < 0 || !(text = read_plan(path, err, errlen)))
		return -1;
	ret = restore_plan_parse(text, p, what, sizeof what);
	free(text);
	if (ret < 0) {
		snprintf(err, errlen, "%s: %s", path, what);
		return -1;
	}
	for (i = 0; i < p->npools; i++)
		if (!restore_file_is_map(p->pools[i].file) &&
		    open_image(dir, &p->pools[i], err, errlen) < 0) {
			restore_plan_close(p);
			return -1;
		}
	return 0;
}

int restore_plan_maps(const char *path, const char *store_path, struct restore_plan *p,
		      char *err, size_t errlen)
{
	char dir[PATH_MAX];

	if (plan_dir(path, dir, err, errlen) < 0)
		return -1;
	for (unsigned i = 0; i < p->npools; i++)
		if (restore_file_is_map(p->pools[i].file) && !p->pools[i].map.e &&
		    load_map(dir, p, &p->pools[i], store_path, err, errlen) < 0)
			return -1;
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

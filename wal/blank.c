/*
 * blank.c - whether a medium holds a log, may be taken over, or holds
 * something else (blank.h).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "blank.h"
#include "format.h"

static int zeros(const uint8_t *p, uint64_t n)
{
	return !n || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* [off, m->size) holds zeros only.  A file's holes are found with
 * SEEK_DATA / SEEK_HOLE; a medium without them (a device-DAX node) is read
 * whole. */
static int zeros_from(const struct media *m, uint64_t off)
{
	uint64_t end = m->size;
	off_t data, hole;

	if (m->kind == WAL_MEDIA_DEVDAX)
		return zeros(m->base + off, end - off);
	while (off < end) {
		data = lseek(m->fd, (off_t)off, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			return 1;               /* holes only from off on */
		if (data < 0 || (uint64_t)data < off)
			return zeros(m->base + off, end - off);
		if ((uint64_t)data >= end)
			return 1;
		hole = lseek(m->fd, data, SEEK_HOLE);
		if (hole <= data || (uint64_t)hole > end)
			hole = (off_t)end;
		if (!zeros(m->base + data, (uint64_t)(hole - data)))
			return 0;
		off = (uint64_t)hole;
	}
	return 1;
}

static int magic_at(const struct media *m, uint64_t off)
{
	return m->size >= off + sizeof SB_MAGIC &&
	       !memcmp(m->base + off, SB_MAGIC, sizeof SB_MAGIC);
}

int wal_medium_state(const struct media *m)
{
	if (magic_at(m, SB_COPY0_OFF) || magic_at(m, SB_COPY1_OFF))
		return WAL_MEDIUM_LOG;
	if (m->size > WAL_DATA_OFF && zeros_from(m, WAL_DATA_OFF))
		return WAL_MEDIUM_BLANK;
	return WAL_MEDIUM_FOREIGN;
}

int wal_medium_state_path(const char *path, struct wal_error *err)
{
	struct media m;
	struct stat st;
	int ret;

	/* An empty file is one wal_open makes a log in; media_open maps none. */
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
		return WAL_MEDIUM_BLANK;
	if ((ret = media_open(&m, path, MEDIA_READ, 0, -1, 0, err)) < 0)
		return ret;
	ret = wal_medium_state(&m);
	media_close(&m);
	return ret;
}

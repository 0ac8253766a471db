/*
 * guard.c - what a moeft command may write over or remove (guard.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "blank.h"
#include "guard.h"
#include "kvformat.h"

static int refuse(char *msg, size_t len, const char *path, const char *what)
{
	snprintf(msg, len, "%s %s; refusing to write over or remove it", path, what);
	return -1;
}

/* The file begins with a KV store's magic. */
static int kv_store(const char *path)
{
	char head[sizeof KVS_MAGIC];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = pread(fd, head, sizeof head, 0);
	close(fd);
	return n == (ssize_t)sizeof head && !memcmp(head, KVS_MAGIC, sizeof head);
}

int guard_check(const char *path, const struct stat *input, char *msg, size_t len)
{
	struct wal_error err = { 0 };
	struct stat st;
	int state;

	if (stat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(msg, len, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (input && st.st_dev == input->st_dev && st.st_ino == input->st_ino)
		return refuse(msg, len, path, "is the log this command reads");
	/* directories are the callers' business; FIFOs and sockets hold no log */
	if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
		return 0;
	if (S_ISREG(st.st_mode) && kv_store(path))
		return refuse(msg, len, path, "holds a moeft KV store");
	state = wal_medium_state_path(path, &err);
	if (state == WAL_MEDIUM_LOG)
		return refuse(msg, len, path, "holds a moeft log");
	if (state < 0) {
		snprintf(msg, len, "%s (cannot tell whether it holds a moeft log)", err.msg);
		return -1;
	}
	return 0;
}

/*
 * msg.c - the preload's messages (msg.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "msg.h"
#include "wal.h"

static atomic_int level = WAL_LOG_WARN;

void msg_set_level(int l)
{
	atomic_store_explicit(&level, l, memory_order_relaxed);
}

int msg_level(void)
{
	return atomic_load_explicit(&level, memory_order_relaxed);
}

void msg_log(int l, const char *fmt, ...)
{
	static const char prefix[] = "moeft: ";
	char line[1024];
	size_t n, off;
	va_list ap;
	int saved = errno;

	if (l > msg_level())
		return;
	memcpy(line, prefix, sizeof prefix - 1);
	va_start(ap, fmt);
	vsnprintf(line + sizeof prefix - 1, sizeof line - sizeof prefix, fmt, ap);
	va_end(ap);
	n = strlen(line);
	line[n++] = '\n';
	/* One write per line, so lines of several threads never interleave. */
	for (off = 0; off < n;) {
		ssize_t w = write(STDERR_FILENO, line + off, n - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	errno = saved;
}

void msg_line(int l, const char *line)
{
	msg_log(l, "%s", line);
}

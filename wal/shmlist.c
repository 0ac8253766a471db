/*
 * shmlist.c - the lists of shared-memory files a server's processes create
 * (shmlist.h): their names and the checks both writer and reader apply.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmlist.h"

int shmlist_transient(const char *name)
{
	static const char *const prefixes[] = { "psm_", "sem.mp-", "torch_" };
	size_t n = strlen(name);

	if (n > SHMLIST_NAME_MAX)
		return 0;
	for (const char *p = name; *p; p++)
		if (*p == '/' || *p <= ' ' || *p == 0x7f)
			return 0;
	for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
		if (n > strlen(prefixes[i]) && !strncmp(name, prefixes[i], strlen(prefixes[i])))
			return 1;
	return 0;
}

size_t shmlist_each(char *buf, size_t len, void (*fn)(void *arg, const char *name), void *arg)
{
	char *line = buf, *end = buf + len, *eol;
	size_t no = 1;

	for (; line < end; line = eol + 1, no++) {
		if (!(eol = memchr(line, '\n', (size_t)(end - line))))
			return no;
		*eol = '\0';
		if (strlen(line) != (size_t)(eol - line) || !shmlist_transient(line))
			return no;
	}
	for (line = buf; line < end; line += strlen(line) + 1)
		fn(arg, line);
	return 0;
}

int shmlist_proc_start(pid_t pid, uint64_t *start)
{
	char path[64], buf[1024], *at;
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
	/* "PID (COMM) STATE ...": COMM may hold anything, ')' and spaces too;
	 * the start time is field 22, the 20th after COMM. */
	if (!(at = strrchr(buf, ')')) || at[1] != ' ' || at[2] == 'Z' || at[2] == 'X')
		return -1;
	for (int field = 2; field < 22; field++)
		if (!(at = strchr(at + 1, ' ')))
			return -1;
	return sscanf(at + 1, "%" SCNu64, start) == 1 ? 0 : -1;
}

int shmlist_path(char *out, size_t len, const char *dir, pid_t pid, uint64_t start)
{
	int n = snprintf(out, len, "%s/%d.%" PRIu64 SHMLIST_SUFFIX, dir, (int)pid, start);

	return n > 0 && (size_t)n < len ? 0 : -1;
}

/* Digits only, no sign, no leading zero: the one spelling shmlist_path
 * writes, so that a list is never read under two names. */
static const char *number(const char *s, uint64_t *v)
{
	uint64_t x = 0;
	const char *p = s;

	if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
		return NULL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return NULL;
		x = x * 10 + (uint64_t)(*p - '0');
	}
	*v = x;
	return p;
}

int shmlist_parse_name(const char *name, pid_t *pid, uint64_t *start)
{
	uint64_t p, s;
	const char *at;

	if (!(at = number(name, &p)) || *at != '.' || !p || p > INT32_MAX ||
	    !(at = number(at + 1, &s)) || strcmp(at, SHMLIST_SUFFIX))
		return -1;
	*pid = (pid_t)p;
	*start = s;
	return 0;
}

/*
 * shmlist.c - the lists of shared-memory files a server's processes create
 * (shmlist.h): their names and the checks both writer and reader apply.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "media.h"
#include "procstat.h"
#include "shmlist.h"

int shmlist_transient(const char *name)
{
	static const char *const prefixes[] = { "psm_", "sem.mp-", "torch_" };
	size_t n = strlen(name);

	if (n > SHMLIST_NAME_MAX)
		return 0;
	for (const char *p = name; *p; p++)
		if (*p == '/' || (unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
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
		if (!(eol = memchr(line, '\n', (size_t)(end - line)))) {
			end = line;	/* a last line cut short: never a name */
			break;
		}
		*eol = '\0';
		if (strlen(line) != (size_t)(eol - line) || !shmlist_transient(line))
			return no;
	}
	for (line = buf; line < end; line += strlen(line) + 1)
		fn(arg, line);
	return 0;
}

/* A zombie's main thread is dead, but the process runs while another of
 * its threads does (its main thread called pthread_exit). */
static int threads_left(pid_t pid)
{
	char path[64], line[128];
	int threads = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "Threads: %d", &threads) == 1)
			break;
	fclose(f);
	return threads > 1;
}

static int runs(pid_t pid, char state)
{
	return (state != 'Z' && state != 'X') || threads_left(pid);
}

static int pid_ns(const char *proc, uint64_t *ns)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof path, "/proc/%s/ns/pid", proc);
	if (stat(path, &st) < 0)
		return -1;
	*ns = (uint64_t)st.st_ino;
	return 0;
}

int shmlist_self(struct shmlist_owner *o)
{
	struct procstat st;

	o->pid = getpid();
	o->pgid = getpgrp();
	if (procstat_read(o->pid, &st) < 0 || pid_ns("self", &o->ns) < 0)
		return -1;
	o->start = st.start;
	return 0;
}

int shmlist_alive(const struct shmlist_owner *o)
{
	struct procstat st;
	struct dirent *e;
	int alive = 0;
	uint64_t ns;
	DIR *d;

	if (pid_ns("self", &ns) < 0 || ns != o->ns)
		return -1;
	if (procstat_read(o->pid, &st) == 0 && st.start == o->start && runs(o->pid, st.state))
		return 1;
	if (!(d = opendir("/proc")))
		return 1;	/* cannot tell: as if it ran */
	while (!alive && (e = readdir(d))) {
		pid_t pid = (pid_t)atoi(e->d_name);

		alive = pid > 0 && procstat_read(pid, &st) == 0 && st.pgrp == o->pgid &&
			runs(pid, st.state);
	}
	closedir(d);
	return alive;
}

int shmlist_path(char *out, size_t len, const char *dir, const struct shmlist_owner *o)
{
	int n = snprintf(out, len, "%s/%d.%" PRIu64 ".%d.%" PRIu64 SHMLIST_SUFFIX, dir,
			 (int)o->pid, o->start, (int)o->pgid, o->ns);

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

int shmlist_parse_name(const char *name, struct shmlist_owner *o)
{
	uint64_t pid, pgid;
	const char *at;

	if (!(at = number(name, &pid)) || *at != '.' || !pid || pid > INT32_MAX ||
	    !(at = number(at + 1, &o->start)) || *at != '.' ||
	    !(at = number(at + 1, &pgid)) || *at != '.' || !pgid || pgid > INT32_MAX ||
	    !(at = number(at + 1, &o->ns)) || strcmp(at, SHMLIST_SUFFIX))
		return -1;
	o->pid = (pid_t)pid;
	o->pgid = (pid_t)pgid;
	return 0;
}

int shmlist_dir(const char *wal, int is_dir, int create, char *out, size_t len,
		struct wal_error *err)
{
	const char *slash = strrchr(wal, '/');
	struct stat st;
	int fd;

	if (is_dir) {
		if (snprintf(out, len, "%s", wal) >= (int)len)
			return -1;
	} else if (!slash || slash == wal || (size_t)(slash - wal) >= len ||
		   (stat(wal, &st) == 0 && !S_ISREG(st.st_mode))) {
		snprintf(err->msg, sizeof err->msg, "%s: no directory of its own", wal);
		return -1;
	} else {
		memcpy(out, wal, (size_t)(slash - wal));
		out[slash - wal] = '\0';
		create = 0;
	}
	if ((fd = media_open_dir(out, create, err)) < 0)
		return -1;
	close(fd);
	return 0;
}

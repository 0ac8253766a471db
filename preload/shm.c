/*
 * shm.c - shm_open and sem_open, interposed: the names of the shared-memory
 * files this process creates go into its list beside the logs
 * (wal/shmlist.h), so that a restore can remove what a killed server left
 * in /dev/shm.
 *
 * Only where MOEFT_WAL is a directory of logs (or unset: the default one),
 * the server's own: a single log's directory may be anyone's.  What the
 * call returns, and errno, are the C library's, untouched; a list that
 * cannot be written costs one line and the cleaning of those names, never
 * the call.  The list is appended under an flock of its file, which
 * threads of this process and a compaction (below) both respect.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "config.h"
#include "media.h"
#include "msg.h"
#include "shmlist.h"

/* A list past this size keeps only the names still in /dev/shm (torch
 * creates and at once unlinks one per tensor it shares). */
#define LIST_COMPACT_MIN (64u << 10)

static struct {
	pthread_once_t once;
	char dir[PATH_MAX];		/* "": names are not listed */
	int (*real_shm_open)(const char *, int, mode_t);
	sem_t *(*real_sem_open)(const char *, int, ...);
	atomic_uint_fast64_t compact_at;
	atomic_bool said;
} sl = { .once = PTHREAD_ONCE_INIT, .compact_at = LIST_COMPACT_MIN };

/* This process's list: 0 with its path, or -1 (gone from /proc?). */
static int own_list(char *path, size_t len)
{
	uint64_t start;

	return shmlist_proc_start(getpid(), &start) == 0 &&
	       shmlist_path(path, len, sl.dir, getpid(), start) == 0 ? 0 : -1;
}

/* At exit the process's names are its own business again: it unlinked
 * them, or another process uses them, or Python's tracker will. */
static void drop_list(void)
{
	char path[PATH_MAX];

	if (sl.dir[0] && own_list(path, sizeof path) == 0)
		unlink(path);
}

static void setup(void)
{
	static struct moeft_config cfg;
	struct wal_error err;
	int fd;

	*(void **)&sl.real_shm_open = dlsym(RTLD_NEXT, "shm_open");
	*(void **)&sl.real_sem_open = dlsym(RTLD_NEXT, "sem_open");
	/* A bad variable is the preload's start to report, not ours. */
	if (config_load(&cfg, NULL, NULL, 0) < 0 || cfg.disable || !cfg.wal_dir)
		return;
	if ((fd = media_open_dir(cfg.wal_path, 1, &err)) < 0) {
		msg_log(WAL_LOG_WARN, "shared memory: %s; what this process creates in /dev/shm "
			"is not removed after a crash", err.msg);
		return;
	}
	close(fd);
	snprintf(sl.dir, sizeof sl.dir, "%s", cfg.wal_path);
	atexit(drop_list);
}

static void cannot(const char *path, const char *what)
{
	if (msg_first(&sl.said))
		msg_log(WAL_LOG_WARN, "shared memory: cannot %s %s (%s); what this process creates "
			"in /dev/shm is not removed after a crash", what, path, strerror(errno));
}

/* The list at path, open and locked: its descriptor, or -1.  A compaction
 * may have put a new file in its place between the open and the lock. */
static int open_locked(const char *path)
{
	struct stat held, named;

	for (int tries = 0; tries < 8; tries++) {
		int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

		if (fd < 0)
			return -1;
		if (flock(fd, LOCK_EX) == 0 && fstat(fd, &held) == 0 &&
		    lstat(path, &named) == 0 && held.st_ino == named.st_ino &&
		    held.st_dev == named.st_dev) {
			if (S_ISREG(held.st_mode) && held.st_uid == geteuid())
				return fd;
			errno = EPERM;
			close(fd);
			return -1;
		}
		close(fd);
	}
	errno = EAGAIN;
	return -1;
}

/* Keep only the names of fd's list (size bytes, locked) still in
 * /dev/shm: written to PATH.new, renamed over the list.  A process killed
 * between leaves PATH.new, which a restore removes with the list. */
static void compact(int fd, const char *path, uint64_t size)
{
	char tmp[PATH_MAX + 8], *buf, *line, *end;
	uint64_t kept = 0;
	int shm, out;

	if (snprintf(tmp, sizeof tmp, "%s.new", path) >= (int)sizeof tmp ||
	    !(buf = malloc(size + 1)))
		return;
	if (pread(fd, buf, size, 0) != (ssize_t)size ||
	    (shm = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		free(buf);
		return;
	}
	buf[size] = '\0';
	unlink(tmp);
	if ((out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) >= 0) {
		for (line = buf; (end = strchr(line, '\n')); line = end + 1) {
			*end = '\0';
			if (faccessat(shm, line, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
				*end = '\n';
				if (write(out, line, (size_t)(end - line) + 1) != end - line + 1)
					break;
				kept += (uint64_t)(end - line) + 1;
			}
		}
		if (line == buf + size && close(out) == 0 && rename(tmp, path) == 0)
			atomic_store(&sl.compact_at, kept > LIST_COMPACT_MIN / 2 ?
				     2 * kept : LIST_COMPACT_MIN);
		else
			unlink(tmp);
	}
	close(shm);
	free(buf);
}

/* name, the file this process just created in /dev/shm, into its list. */
static void note(const char *name)
{
	char path[PATH_MAX], line[SHMLIST_NAME_MAX + 2];
	int fd, n, saved = errno;
	off_t end;

	if (!sl.dir[0] || !shmlist_transient(name))
		goto out;
	n = snprintf(line, sizeof line, "%s\n", name);
	if (own_list(path, sizeof path) < 0) {
		cannot("name the list of", "this process");
		goto out;
	}
	if ((fd = open_locked(path)) < 0) {
		cannot("open", path);
		goto out;
	}
	if ((end = lseek(fd, 0, SEEK_END)) < 0 || write(fd, line, (size_t)n) != n)
		cannot("append to", path);
	else if ((uint64_t)end + (uint64_t)n > atomic_load(&sl.compact_at))
		compact(fd, path, (uint64_t)end + (uint64_t)n);
	close(fd);
out:
	errno = saved;
}

/* A POSIX name, "/NAME", is the file NAME in /dev/shm (glibc takes the
 * leading '/' as optional); a semaphore's is sem.NAME. */
static void note_created(const char *prefix, const char *name)
{
	char file[SHMLIST_NAME_MAX + 1];

	while (*name == '/')
		name++;
	if (snprintf(file, sizeof file, "%s%s", prefix, name) < (int)sizeof file)
		note(file);
}

__attribute__((visibility("default")))
int shm_open(const char *name, int oflag, mode_t mode)
{
	int fd;

	pthread_once(&sl.once, setup);
	if (!sl.real_shm_open) {
		errno = ENOSYS;
		return -1;
	}
	fd = sl.real_shm_open(name, oflag, mode);
	if (fd >= 0 && (oflag & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL))
		note_created("", name);
	return fd;
}

__attribute__((visibility("default")))
sem_t *sem_open(const char *name, int oflag, ...)
{
	mode_t mode = 0;
	unsigned value = 0;
	sem_t *s;
	va_list ap;

	pthread_once(&sl.once, setup);
	if (!sl.real_sem_open) {
		errno = ENOSYS;
		return SEM_FAILED;
	}
	if (oflag & O_CREAT) {
		va_start(ap, oflag);
		mode = va_arg(ap, mode_t);
		value = va_arg(ap, unsigned);
		va_end(ap);
	}
	s = sl.real_sem_open(name, oflag, mode, value);
	if (s != SEM_FAILED && (oflag & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL))
		note_created("sem.", name);
	return s;
}

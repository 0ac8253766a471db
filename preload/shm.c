/*
 * shm.c - shm_open and sem_open, interposed: the names of the shared-memory
 * files this process creates go into its list beside its logs
 * (wal/shmlist.h), so that a restore can remove what a killed server left
 * in /dev/shm.
 *
 * What the call returns, and errno, are the C library's, untouched; a list
 * that cannot be written costs one line and the cleaning of those names,
 * never the call.  Only this process writes its list, under a mutex that
 * fork() takes first (pthread_atfork), so that no child starts with it
 * held or with the list half written.
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
#include <sys/mman.h>
#include <sys/stat.h>

#include "config.h"
#include "msg.h"
#include "shmlist.h"

/* A list past this size keeps only the names still in /dev/shm (torch
 * creates and at once unlinks one per tensor it shares). */
#define LIST_COMPACT_MIN (64u << 10)

typedef int (*shm_open_fn)(const char *, int, mode_t);
typedef sem_t *(*sem_open_fn)(const char *, int, ...);

static struct {
	pthread_once_t once;
	char dir[PATH_MAX];		/* "": names are not listed */
	_Atomic(void *) real_shm_open;	/* shm_open_fn */
	_Atomic(void *) real_sem_open;	/* sem_open_fn */
	pthread_mutex_t lock;		/* the fields below, and the list */
	pid_t pid;			/* whose list path is; 0: none yet */
	char path[PATH_MAX];
	uint64_t compact_at;
	atomic_bool said;
} sl = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER,
	 .compact_at = LIST_COMPACT_MIN };

/* The C library's function: looked up again while missing (before glibc
 * 2.34 it lives in librt, which a program may load late). */
static void *real(_Atomic(void *) *slot, const char *name)
{
	void *f = atomic_load_explicit(slot, memory_order_acquire);

	if (!f && (f = dlsym(RTLD_NEXT, name)))
		atomic_store_explicit(slot, f, memory_order_release);
	return f;
}

static void before_fork(void)
{
	pthread_mutex_lock(&sl.lock);
}

static void after_fork(void)
{
	pthread_mutex_unlock(&sl.lock);
}

/* At exit the process's names are its own business again: it unlinked
 * them, or another process uses them, or Python's tracker will. */
static void drop_list(void)
{
	pthread_mutex_lock(&sl.lock);
	if (sl.pid == getpid())
		unlink(sl.path);
	sl.pid = 0;
	pthread_mutex_unlock(&sl.lock);
}

static void setup(void)
{
	static struct moeft_config cfg;
	struct wal_error err;

	/* A bad variable is the preload's start to report, not ours. */
	if (config_load(&cfg, NULL, NULL, 0) < 0 || cfg.disable)
		return;
	if (shmlist_dir(cfg.wal_path, cfg.wal_dir, 1, sl.dir, sizeof sl.dir, &err) < 0) {
		sl.dir[0] = '\0';
		if (cfg.wal_dir)
			msg_log(WAL_LOG_WARN, "shared memory: %s; what this process creates in "
				"/dev/shm is not removed after a crash", err.msg);
		return;
	}
	pthread_atfork(before_fork, after_fork, after_fork);
	atexit(drop_list);
}

static void cannot(const char *what, const char *path, int err)
{
	if (msg_first(&sl.said))
		msg_log(WAL_LOG_WARN, "shared memory: cannot %s %s (%s); what this process creates "
			"in /dev/shm is not removed after a crash", what, path, strerror(err));
}

/* Keep only the names of fd's list (size bytes) still in /dev/shm: written
 * to PATH.new, renamed over the list.  A process killed between leaves
 * PATH.new, which a restore removes with the list. */
static void compact(int fd, uint64_t size)
{
	char tmp[PATH_MAX + 8], *buf, *line, *end;
	uint64_t kept = 0;
	int shm, out, ok = 1;

	if (snprintf(tmp, sizeof tmp, "%s.new", sl.path) >= (int)sizeof tmp ||
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
		for (line = buf; ok && (end = strchr(line, '\n')); line = end + 1) {
			*end = '\0';
			if (faccessat(shm, line, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
				*end = '\n';
				ok = write(out, line, (size_t)(end - line) + 1) == end - line + 1;
				kept += (uint64_t)(end - line) + 1;
			}
		}
		if (close(out) == 0 && ok && line == buf + size && rename(tmp, sl.path) == 0)
			sl.compact_at = kept > LIST_COMPACT_MIN / 2 ? 2 * kept : LIST_COMPACT_MIN;
		else
			unlink(tmp);
	}
	close(shm);
	free(buf);
}

/* This process's list (sl.path), named once per process: under sl.lock.
 * 0, or -1 (/proc could not say who we are). */
static int name_list(void)
{
	struct shmlist_owner me;

	if (sl.pid == getpid())
		return 0;
	if (shmlist_self(&me) < 0 || shmlist_path(sl.path, sizeof sl.path, sl.dir, &me) < 0)
		return -1;
	sl.pid = me.pid;
	sl.compact_at = LIST_COMPACT_MIN;
	return 0;
}

/* name, the file this process just created in /dev/shm, into its list. */
static void note(const char *name)
{
	char line[SHMLIST_NAME_MAX + 2];
	int fd, n = snprintf(line, sizeof line, "%s\n", name);
	ssize_t w;
	off_t end;

	pthread_mutex_lock(&sl.lock);
	if (name_list() < 0) {
		cannot("name the list of", "this process", errno);
	} else if ((fd = open(sl.path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
		cannot("open", sl.path, errno);
	} else {
		if ((end = lseek(fd, 0, SEEK_END)) < 0 || (w = write(fd, line, (size_t)n)) != n) {
			/* A full disk: no half name stays behind. */
			cannot("append to", sl.path, end < 0 || w < 0 ? errno : ENOSPC);
			if (end >= 0 && ftruncate(fd, end) < 0)
				cannot("cut back", sl.path, errno);
		} else if ((uint64_t)end + (uint64_t)n > sl.compact_at) {
			compact(fd, (uint64_t)end + (uint64_t)n);
		}
		close(fd);
	}
	pthread_mutex_unlock(&sl.lock);
}

/* A POSIX name, "/NAME", is the file NAME in /dev/shm (glibc takes the
 * leading '/' as optional); a semaphore's is sem.NAME. */
static void note_created(const char *prefix, const char *name)
{
	char file[SHMLIST_NAME_MAX + 1];
	int saved = errno;

	pthread_once(&sl.once, setup);
	while (*name == '/')
		name++;
	if (sl.dir[0] && snprintf(file, sizeof file, "%s%s", prefix, name) < (int)sizeof file &&
	    shmlist_transient(file))
		note(file);
	errno = saved;
}

__attribute__((visibility("default")))
int shm_open(const char *name, int oflag, mode_t mode)
{
	shm_open_fn f;
	int fd;

	*(void **)&f = real(&sl.real_shm_open, "shm_open");
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	fd = f(name, oflag, mode);
	if (fd >= 0 && (oflag & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL))
		note_created("", name);
	return fd;
}

__attribute__((visibility("default")))
sem_t *sem_open(const char *name, int oflag, ...)
{
	mode_t mode = 0;
	unsigned value = 0;
	sem_open_fn f;
	sem_t *s;
	va_list ap;

	*(void **)&f = real(&sl.real_sem_open, "sem_open");
	if (!f) {
		errno = ENOSYS;
		return SEM_FAILED;
	}
	if (oflag & O_CREAT) {
		va_start(ap, oflag);
		mode = va_arg(ap, mode_t);
		value = va_arg(ap, unsigned);
		va_end(ap);
	}
	s = f(name, oflag, mode, value);
	if (s != SEM_FAILED && (oflag & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL))
		note_created("sem.", name);
	return s;
}

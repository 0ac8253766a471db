/*
 * media.c - open, size, lock, map and NUMA-bind the medium under a log
 * (or the KV store, a file mapped in parts), and make stores to it
 * durable.  See media.h.
 *
 * Order of an open matters: lock before any creation or extension (so two
 * writers never both format), map and bind before the pages are reserved
 * (so a tmpfs file gets its pages on the bound node), reserve with
 * posix_fallocate (so a full tmpfs fails here instead of with SIGBUS on
 * some later store).  A part added to a file later follows the same order.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include <numa.h>
#include <numaif.h>

#include "decimal.h"
#include "diag.h"
#include "media.h"

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif

#define MEDIA_MIN_SIZE (64u << 10)
#define MEDIA_PAGE 4096u
#define DEVDAX_ALIGN (2u << 20)
#define CACHE_LINE 64u

static void media_reset(struct media *m)
{
	memset(m, 0, sizeof *m);
	m->fd = -1;
	m->numa_node = -1;
}

/* ---- NUMA ------------------------------------------------------------- */

static int check_node(int node, const char *what, struct wal_error *err)
{
	int max;

	if (numa_available() < 0)
		return wal_fail(err, WAL_ENUMA,
				"%s: NUMA node %d requested but NUMA is not available here",
				what, node);
	max = numa_max_node();
	if (node > max || !numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)node))
		return wal_fail(err, WAL_ENUMA,
				"%s: NUMA node %d does not exist (this machine has nodes 0-%d)",
				what, node, max);
	return 0;
}

int media_parse_numa_node(const char *text, const char *what, struct wal_error *err)
{
	const char *end = text;
	uint64_t v;
	int rc;

	if (!text || parse_decimal(&end, INT_MAX, &v) < 0 || *end)
		return wal_fail(err, WAL_EINVAL, "%s: '%s' is not a node number",
				what, text ? text : "");
	rc = check_node((int)v, what, err);
	return rc < 0 ? rc : (int)v;
}

int media_numa_node_cpuless(int node)
{
	struct bitmask *cpus;
	int rc;

	if (numa_available() < 0 || node < 0 || node > numa_max_node())
		return -1;
	cpus = numa_allocate_cpumask();
	rc = numa_node_to_cpus(node, cpus) < 0 ? -1 : numa_bitmask_weight(cpus) == 0;
	numa_bitmask_free(cpus);
	return rc;
}

/* Bind [p, p+len) to `node`: every page allocated there from now on comes
 * from it.  Pages a file already has stay where they are. */
static int bind_range(const char *path, void *p, uint64_t len, int node, struct wal_error *err)
{
	struct bitmask *mask = numa_allocate_nodemask();
	long rc;
	int e;

	numa_bitmask_setbit(mask, (unsigned)node);
	rc = mbind(p, len, MPOL_BIND, mask->maskp, mask->size + 1, MPOL_MF_MOVE);
	e = errno;
	numa_bitmask_free(mask);
	if (rc < 0)
		return wal_fail(err, WAL_ENUMA, "%s: binding %llu bytes to NUMA node %d: %s",
				path, (unsigned long long)len, node, strerror(e));
	return 0;
}

/* Bind the first mapping, and say what kind of node it went to. */
static int bind_node(struct media *m, const char *path, int node, struct wal_error *err)
{
	int rc = bind_range(path, m->base, m->size, node, err);

	if (rc < 0)
		return rc;
	m->numa_node = node;
	if (media_numa_node_cpuless(node) == 1)
		wal_logf(WAL_LOG_INFO, "%s: bound to NUMA node %d; node %d has no CPUs: "
			 "CXL or other far memory", path, node, node);
	else
		wal_logf(WAL_LOG_INFO, "%s: bound to NUMA node %d; node %d has CPUs",
			 path, node, node);
	return 0;
}

/* ---- Open ------------------------------------------------------------- */

int media_trust(const char *path, const struct stat *st, struct wal_error *err)
{
	if (st->st_uid != geteuid())
		return wal_fail(err, WAL_EUNSAFE, "%s: owned by uid %u, not by this user (uid %u); "
				"refusing to use it: its owner could read or change it", path,
				(unsigned)st->st_uid, (unsigned)geteuid());
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return wal_fail(err, WAL_EUNSAFE, "%s: writable by group or others (mode %04o); "
				"refusing to use it: others could read or change it", path,
				(unsigned)(st->st_mode & 07777));
	return 0;
}

static int link_refused(const char *path, struct wal_error *err)
{
	return wal_fail(err, WAL_EUNSAFE, "%s: a symbolic link; refusing to follow it", path);
}

int media_open_dir(const char *path, int create, struct wal_error *err)
{
	char parent[PATH_MAX];
	struct stat st;
	int fd, r;

	if (create && mkdir(path, 0700) < 0 && errno != EEXIST) {
		if (errno != ENOENT)
			return wal_fail(err, WAL_EIO, "%s: cannot create it: %s", path,
					strerror(errno));
		snprintf(parent, sizeof parent, "%s", path);
		return wal_fail(err, WAL_EIO, "%s: no such directory: %s (moeft makes the "
				"directory, not its parents)", path, dirname(parent));
	}
	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		r = errno;
		if (!lstat(path, &st) && S_ISLNK(st.st_mode))
			return link_refused(path, err);
		return wal_fail(err, WAL_EIO, "%s: %s", path,
				r == ENOTDIR ? "not a directory" : strerror(r));
	}
	if (fstat(fd, &st) < 0)
		r = wal_fail(err, WAL_EIO, "%s: %s", path, strerror(errno));
	else
		r = media_trust(path, &st, err);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* The directory of path, open, and the name in it. */
static int open_dir(const char *path, const char **name, struct wal_error *err)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	int fd;

	*name = slash ? slash + 1 : path;
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path) >= (int)sizeof dir)
		return wal_fail(err, WAL_EINVAL, "%s: path too long", path);
	fd = open(slash == path ? "/" : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return wal_fail(err, WAL_EIO, "%s: its directory: %s", path, strerror(errno));
	return fd;
}

/* A new file, unnamed until link_unnamed gives it its path: nobody can
 * see it half made. */
static int create_unnamed(struct media *m, const char *path, struct wal_error *err)
{
	const char *name;
	int dir = open_dir(path, &name, err), e;

	if (dir < 0)
		return dir;
	m->fd = openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	e = errno;
	close(dir);
	if (m->fd < 0)
		return wal_fail(err, WAL_EIO, "%s: cannot make an unnamed file in its directory "
				"(O_TMPFILE): %s", path, strerror(e));
	m->created = 1;
	return 1;
}

/* Link the unnamed file at path, durably, never over an existing one: 0,
 * 1 when another process made path first, or a negative wal_status. */
static int link_unnamed(const struct media *m, const char *path, struct wal_error *err)
{
	char proc[32];
	const char *name;
	int dir = open_dir(path, &name, err), e = 0;

	if (dir < 0)
		return dir;
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", m->fd);
	if (linkat(AT_FDCWD, proc, dir, name, AT_SYMLINK_FOLLOW) < 0 || fsync(dir) < 0)
		e = errno;
	close(dir);
	if (e == EEXIST)
		return 1;
	return e ? wal_fail(err, WAL_EIO, "%s: linking the new file in place: %s", path,
			    strerror(e)) : 0;
}

/*
 * Open and, for a writer, check and lock.  A missing file a writer may
 * create is made unnamed (1 returned), and locked before it can be seen.
 */
static int open_locked(struct media *m, const char *path, int mode, unsigned flags,
		       struct wal_error *err)
{
	int wr = mode != MEDIA_READ, made = 0, rc;
	struct stat st;

	m->fd = open(path, (wr ? O_RDWR | O_NOFOLLOW : O_RDONLY) | O_CLOEXEC);
	if (m->fd < 0 && errno == ENOENT && wr && (flags & WAL_OPEN_CREATE)) {
		if ((made = create_unnamed(m, path, err)) < 0)
			return made;
	} else if (m->fd < 0) {
		return errno == ELOOP && wr ? link_refused(path, err) :
		       wal_fail(err, WAL_EIO, "%s: %s", path, strerror(errno));
	} else if (wr) {
		if (fstat(m->fd, &st) < 0)
			return wal_fail(err, WAL_EIO, "%s: fstat: %s", path, strerror(errno));
		if (!S_ISCHR(st.st_mode) && (rc = media_trust(path, &st, err)) < 0)
			return rc;
	}
	if (wr && flock(m->fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK)
			return wal_fail(err, WAL_EBUSY, "%s: in use by another writer", path);
		return wal_fail(err, WAL_EIO, "%s: flock: %s", path, strerror(errno));
	}
	return made;
}

/* Read a decimal sysfs attribute such as a device-DAX node's size. */
static int read_sysfs_u64(const char *file, uint64_t *v)
{
	char buf[32];
	const char *end;
	ssize_t n;
	int fd, e;

	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	e = errno;
	close(fd);
	if (n < 0) {
		errno = e;
		return -1;
	}
	buf[n] = '\0';
	end = buf;
	if (parse_decimal(&end, UINT64_MAX, v) < 0 || (*end && *end != '\n')) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* A device-DAX node: size from sysfs, whole 2 MiB units, never truncated. */
static int size_devdax(struct media *m, const char *path, const struct stat *st,
		       struct wal_error *err)
{
	const char *name = strrchr(path, '/');
	char file[64], alt[PATH_MAX];
	uint64_t bytes;
	int e;

	snprintf(file, sizeof file, "/sys/dev/char/%u:%u/size",
		 major(st->st_rdev), minor(st->st_rdev));
	if (read_sysfs_u64(file, &bytes) < 0) {
		e = errno;
		snprintf(alt, sizeof alt, "/sys/bus/dax/devices/%s/size",
			 name ? name + 1 : path);
		if (read_sysfs_u64(alt, &bytes) < 0)
			return wal_fail(err, WAL_EIO, "%s: not a device-DAX node: %s: %s",
					path, file, strerror(e));
	}
	if (bytes < DEVDAX_ALIGN)
		return wal_fail(err, WAL_EIO, "%s: device-DAX size %llu is below 2 MiB",
				path, (unsigned long long)bytes);
	m->kind = WAL_MEDIA_DEVDAX;
	m->flush = 1;
	m->size = bytes - bytes % DEVDAX_ALIGN;
	return 0;
}

/*
 * A regular file keeps its size; an empty one is grown to `size` later.  A
 * file mapped in parts maps its first `size` bytes; one shorter than that
 * holds no whole first part and is emptied and grown like an empty one.
 */
static int size_file(struct media *m, const char *path, int mode, uint64_t size,
		     const struct stat *st, struct wal_error *err)
{
	uint64_t have = (uint64_t)st->st_size;
	unsigned min = mode == MEDIA_PARTS ? MEDIA_PAGE : MEDIA_MIN_SIZE;

	if (have && (mode != MEDIA_PARTS || have >= size)) {
		m->size = mode == MEDIA_PARTS ? size : have;
		return 0;
	}
	if (mode == MEDIA_READ)
		return wal_fail(err, WAL_ENOTLOG, "%s: empty file, not a moeft log", path);
	if (size < min || size % MEDIA_PAGE)
		return wal_fail(err, WAL_EINVAL,
				"%s: log size %llu is invalid: must be a multiple of %u "
				"and at least %u bytes", path, (unsigned long long)size,
				MEDIA_PAGE, min);
	if (have && ftruncate(m->fd, 0) < 0)
		return wal_fail(err, WAL_EIO, "%s: truncating: %s", path, strerror(errno));
	m->size = size;
	m->created = 1;
	return 0;
}

static int map_at(const char *path, int prot, int flags, int fd, uint64_t off, uint64_t len,
		  uint8_t **out, struct wal_error *err)
{
	void *p = mmap(NULL, len, prot, flags, fd, (off_t)off);

	if (p == MAP_FAILED)
		return wal_fail(err, WAL_EIO, "%s: mmap %llu bytes: %s", path,
				(unsigned long long)len, strerror(errno));
	*out = p;
	return 0;
}

/*
 * Map len bytes at off.  The first map of a file picks its kind: tmpfs
 * and ramfs are plain shared memory; elsewhere a writer asks for MAP_SYNC,
 * which only a DAX filesystem grants; without it stores survive the death
 * of the process but not the loss of power.  Later parts follow the
 * first, and a device-DAX node (its kind known from sysfs) maps shared.
 */
static int map_kind(struct media *m, const char *path, int mode, uint64_t off, uint64_t len,
		    uint8_t **out, struct wal_error *err)
{
	int prot = mode == MEDIA_READ ? PROT_READ : PROT_READ | PROT_WRITE;
	struct statfs sf;
	void *p;

	if (m->kind)
		return map_at(path, prot, m->kind == WAL_MEDIA_DAXFILE ?
			      MAP_SHARED_VALIDATE | MAP_SYNC : MAP_SHARED, m->fd, off, len, out, err);
	if (fstatfs(m->fd, &sf) < 0)
		return wal_fail(err, WAL_EIO, "%s: fstatfs: %s", path, strerror(errno));
	m->kind = WAL_MEDIA_SHM;
	if (mode != MEDIA_READ && sf.f_type != TMPFS_MAGIC && sf.f_type != RAMFS_MAGIC) {
		p = mmap(NULL, len, prot, MAP_SHARED_VALIDATE | MAP_SYNC, m->fd, (off_t)off);
		if (p != MAP_FAILED) {
			*out = p;
			m->kind = WAL_MEDIA_DAXFILE;
			m->flush = 1;
			return 0;
		}
		if (errno != EOPNOTSUPP && errno != EINVAL)
			return wal_fail(err, WAL_EIO, "%s: mmap %llu bytes: %s", path,
					(unsigned long long)len, strerror(errno));
		wal_logf(WAL_LOG_INFO, "%s: not on a DAX filesystem (MAP_SYNC: %s); "
			 "using MAP_SHARED, durable against process death, not power loss",
			 path, strerror(errno));
	}
	return map_at(path, prot, MAP_SHARED, m->fd, off, len, out, err);
}

/* ---- Mappings, for a SIGBUS handler ----------------------------------- */

/*
 * Every mapping of a medium in this process, so that a fault in one (its
 * file truncated under it) can be told from the application's own.  A
 * node is claimed with `used`, filled, then published by its base; a
 * signal handler may walk the list at any time, so nodes are never freed,
 * only reused.
 */
struct mapping {
	struct mapping *next;
	atomic_int used;
	_Atomic uintptr_t base;  /* 0: not published */
	uint64_t len;
	char path[PATH_MAX];     /* in the node: a handler never reads freed memory */
};

static _Atomic(struct mapping *) mappings;

/* Remember [p, p+len) as path's.  Out of memory, it is not remembered:
 * a fault there is then the process's end, as it always was. */
static void remember(const char *path, uint8_t *p, uint64_t len)
{
	struct mapping *n = atomic_load(&mappings);

	while (n && atomic_exchange(&n->used, 1))
		n = n->next;
	if (!n && (n = calloc(1, sizeof *n))) {
		n->used = 1;
		n->next = atomic_load(&mappings);
		while (!atomic_compare_exchange_weak(&mappings, &n->next, n))
			;
	}
	if (!n)
		return;
	n->len = len;
	snprintf(n->path, sizeof n->path, "%s", path);
	atomic_store_explicit(&n->base, (uintptr_t)p, memory_order_release);
}

void media_unmap(void *p, uint64_t len)
{
	for (struct mapping *n = atomic_load(&mappings); n; n = n->next)
		if (atomic_load_explicit(&n->base, memory_order_acquire) == (uintptr_t)p) {
			atomic_store(&n->base, 0);
			atomic_store(&n->used, 0);
			break;
		}
	munmap(p, len);
}

const char *media_fault(const void *addr)
{
	uintptr_t a = (uintptr_t)addr, b;

	for (struct mapping *n = atomic_load(&mappings); n; n = n->next) {
		b = atomic_load_explicit(&n->base, memory_order_acquire);
		if (!b || a < b || a - b >= n->len)
			continue;
		/* mmap is a plain system call: safe in a handler. */
		if (mmap((void *)b, n->len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			return NULL;
		return n->path;
	}
	return NULL;
}

/* Map and remember. */
static int map_file(struct media *m, const char *path, int mode, uint64_t off, uint64_t len,
		    uint8_t **out, struct wal_error *err)
{
	int rc = map_kind(m, path, mode, off, len, out, err);

	if (!rc)
		remember(path, *out, len);
	return rc;
}

/* Give [off, off+len) its blocks now, so running out shows here; on
 * failure the file ends at off again. */
static int reserve_range(const struct media *m, const char *path, uint64_t off, uint64_t len,
			 struct wal_error *err)
{
	int e = posix_fallocate(m->fd, (off_t)off, (off_t)len);

	if (e == EOPNOTSUPP)
		e = ftruncate(m->fd, (off_t)(off + len)) < 0 ? errno : 0;
	if (!e)
		return 0;
	/* A partial reservation may have grown the file: cut it back. */
	if (ftruncate(m->fd, (off_t)off) < 0)
		wal_logf(WAL_LOG_WARN, "%s: truncating back to %llu: %s", path,
			 (unsigned long long)off, strerror(errno));
	return wal_fail(err, WAL_EIO, "%s: cannot reserve %llu bytes: %s", path,
			(unsigned long long)len, strerror(e));
}

static int not_regular(const char *path, int mode, struct wal_error *err)
{
	if (mode == MEDIA_PARTS)
		return wal_fail(err, WAL_EINVAL, "%s: not a regular file (only a file on tmpfs "
				"or a DAX filesystem can be mapped in parts, not a device-DAX node)",
				path);
	return wal_fail(err, WAL_EINVAL, "%s: not a regular file or a device-DAX node", path);
}

/* One try of media_open_init: 1 when another process linked a new file
 * at path while this one made its own (nothing is left open). */
static int open_once(struct media *m, const char *path, int mode, uint64_t size, int numa_node,
		     unsigned flags, media_init_fn init, void *arg, struct wal_error *err)
{
	struct stat st;
	int unnamed, rc;

	/* Refuse links, directories and FIFOs before open() could follow or
	 * block on one. */
	if ((mode == MEDIA_READ ? stat(path, &st) : lstat(path, &st)) == 0) {
		if (S_ISLNK(st.st_mode))
			return link_refused(path, err);
		if (!S_ISREG(st.st_mode) && (!S_ISCHR(st.st_mode) || mode == MEDIA_PARTS))
			return not_regular(path, mode, err);
	}

	unnamed = open_locked(m, path, mode, flags, err);
	rc = unnamed < 0 ? unnamed : 0;
	if (!rc && fstat(m->fd, &st) < 0)
		rc = wal_fail(err, WAL_EIO, "%s: fstat: %s", path, strerror(errno));
	if (!rc && mode == MEDIA_PARTS && !S_ISREG(st.st_mode))
		rc = not_regular(path, mode, err); /* replaced since the lstat() */
	if (!rc)
		rc = S_ISCHR(st.st_mode) ? size_devdax(m, path, &st, err) :
					   size_file(m, path, mode, size, &st, err);
	if (!rc)
		rc = map_file(m, path, mode, 0, m->size, &m->base, err);
	if (!rc && numa_node >= 0)
		rc = bind_node(m, path, numa_node, err);
	if (!rc && m->created)
		rc = reserve_range(m, path, 0, m->size, err);
	if (!rc && m->created && init)
		rc = init(m, arg, err);
	if (!rc && unnamed > 0)
		rc = link_unnamed(m, path, err);
	if (rc) {
		if (m->base)
			media_unmap(m->base, m->size);
		if (m->fd >= 0)
			close(m->fd); /* an unnamed file goes with it */
		media_reset(m);
	}
	return rc;
}

/* Tries: a path that keeps being made and removed by others is given up. */
#define OPEN_TRIES 3

int media_open_init(struct media *m, const char *path, int mode, uint64_t size,
		    int numa_node, unsigned flags, media_init_fn init, void *arg,
		    struct wal_error *err)
{
	int rc;

	media_reset(m);
	if (mode != MEDIA_READ && mode != MEDIA_WRITE && mode != MEDIA_PARTS)
		return wal_fail(err, WAL_EINVAL, "%s: bad open mode %d", path, mode);
	if (numa_node >= 0 && (rc = check_node(numa_node, path, err)) < 0)
		return rc;
	rc = 1;
	for (int i = 0; i < OPEN_TRIES && rc > 0; i++)
		rc = open_once(m, path, mode, size, numa_node, flags, init, arg, err);
	if (rc > 0)
		return wal_fail(err, WAL_EBUSY, "%s: created by other processes at the same "
				"time, %d times; try again", path, OPEN_TRIES);
	return rc;
}

int media_open(struct media *m, const char *path, int mode, uint64_t size,
	       int numa_node, unsigned flags, struct wal_error *err)
{
	return media_open_init(m, path, mode, size, numa_node, flags, NULL, NULL, err);
}

/* An open medium always has a mapping, so a zeroed struct (fd 0) is left
 * alone. */
void media_close(struct media *m)
{
	if (m->base) {
		media_unmap(m->base, m->size);
		close(m->fd);
	}
	media_reset(m);
}

/* ---- A file mapped in parts ------------------------------------------ */

int media_cut(const struct media *m, const char *path, uint64_t size, struct wal_error *err)
{
	if (size > INT64_MAX || ftruncate(m->fd, (off_t)size) < 0)
		return wal_fail(err, WAL_EIO, "%s: truncating to %llu bytes: %s", path,
				(unsigned long long)size, size > INT64_MAX ? "too large" : strerror(errno));
	return 0;
}

int media_reserve(const struct media *m, const char *path, uint64_t off, uint64_t len,
		  struct wal_error *err)
{
	int e = posix_fallocate(m->fd, (off_t)off, (off_t)len);

	/* A filesystem that cannot reserve gives its blocks at the first
	 * store, as it does to a new part (reserve_range). */
	if (e && e != EOPNOTSUPP)
		return wal_fail(err, WAL_EIO, "%s: cannot reserve %llu bytes at %llu: %s", path,
				(unsigned long long)len, (unsigned long long)off, strerror(e));
	if (fdatasync(m->fd) < 0)
		return wal_fail(err, WAL_EIO, "%s: fdatasync: %s", path, strerror(errno));
	return 0;
}

int media_release(const struct media *m, const char *path, uint64_t off, uint64_t len,
		  struct wal_error *err)
{
	if (fallocate(m->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		      (off_t)len) < 0)
		return wal_fail(err, WAL_EIO, "%s: cannot give back %llu bytes at %llu: %s", path,
				(unsigned long long)len, (unsigned long long)off, strerror(errno));
	return 0;
}

int media_map(struct media *m, const char *path, uint64_t off, uint64_t len, int grow,
	      uint8_t **out, struct wal_error *err)
{
	int rc;

	*out = NULL;
	if (!len || off % MEDIA_PAGE || off > INT64_MAX || len > INT64_MAX - off)
		return wal_fail(err, WAL_EINVAL, "%s: cannot map %llu bytes at %llu", path,
				(unsigned long long)len, (unsigned long long)off);
	rc = grow ? media_cut(m, path, off, err) : 0;
	if (!rc)
		rc = map_file(m, path, MEDIA_PARTS, off, len, out, err);
	if (!rc && m->numa_node >= 0)
		rc = bind_range(path, *out, len, m->numa_node, err);
	if (!rc && grow)
		rc = reserve_range(m, path, off, len, err);
	/* The new size is durable before anything can refer to it. */
	if (!rc && grow && fdatasync(m->fd) < 0)
		rc = wal_fail(err, WAL_EIO, "%s: fdatasync: %s", path, strerror(errno));
	if (rc < 0 && *out) {
		media_unmap(*out, len);
		*out = NULL;
	}
	return rc;
}

/* ---- Persistence ------------------------------------------------------ */

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

enum flush_insn { FLUSH_UNKNOWN, FLUSH_CLWB, FLUSH_CLFLUSHOPT, FLUSH_CLFLUSH };

/* Best cache-line write-back instruction of this CPU, decided once. */
static int flush_insn(void)
{
	static _Atomic int insn;
	unsigned a, b, c, d;
	int i = atomic_load_explicit(&insn, memory_order_relaxed);

	if (i != FLUSH_UNKNOWN)
		return i;
	i = FLUSH_CLFLUSH;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
		if (b & (1u << 24))
			i = FLUSH_CLWB;
		else if (b & (1u << 23))
			i = FLUSH_CLFLUSHOPT;
	}
	atomic_store_explicit(&insn, i, memory_order_relaxed);
	return i;
}

static void flush_line(int insn, uintptr_t line)
{
	switch (insn) {
	case FLUSH_CLWB:
		__asm__ __volatile__("clwb (%0)" : : "r"(line) : "memory");
		break;
	case FLUSH_CLFLUSHOPT:
		__asm__ __volatile__("clflushopt (%0)" : : "r"(line) : "memory");
		break;
	default:
		__asm__ __volatile__("clflush (%0)" : : "r"(line) : "memory");
		break;
	}
}

void media_persist(const struct media *m, const void *p, size_t len)
{
	uintptr_t line = (uintptr_t)p & ~(uintptr_t)(CACHE_LINE - 1);
	uintptr_t end = (uintptr_t)p + len;
	int insn;

	if (!m->flush || !len) {
		/* Page-cache stores outlive the process and x86 keeps their
		 * order; only the compiler must not reorder them. */
		atomic_thread_fence(memory_order_release);
		return;
	}
	insn = flush_insn();
	for (; line < end; line += CACHE_LINE)
		flush_line(insn, line);
	__asm__ __volatile__("sfence" : : : "memory");
}
#else
void media_persist(const struct media *m, const void *p, size_t len)
{
	(void)m;
	(void)p;
	(void)len;
	atomic_thread_fence(memory_order_release);
}
#endif

int media_hold(const char *path, int *fd, struct wal_error *err)
{
	*fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (*fd < 0)
		return wal_fail(err, WAL_EIO, "%s: %s", path, strerror(errno));
	/* A shared lock is refused while a writer's exclusive one is held,
	 * and refuses a writer while it is. */
	if (flock(*fd, LOCK_SH | LOCK_NB) == 0)
		return 0;
	close(*fd);
	*fd = -1;
	return 1;
}

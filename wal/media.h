/*
 * media.h - the medium under a log: open, size, map, lock, NUMA-bind.
 *
 * Three kinds (enum wal_media in wal.h): a file on tmpfs or a regular
 * filesystem (MAP_SHARED), a file on a DAX filesystem (MAP_SHARED_VALIDATE |
 * MAP_SYNC, which falls back to MAP_SHARED with a logged reason), and a
 * device-DAX node (/dev/daxX.Y: MAP_SHARED, size from sysfs, 2 MiB aligned,
 * never truncated).  Files are created with mode 0600.
 *
 * A new file is made unnamed (O_TMPFILE) in the path's directory, sized,
 * reserved and initialised (the log formatted), and only then linked at
 * its path, never over anything: a process killed at any instant leaves
 * no file or a whole one, and one that loses a race to create the path
 * opens the winner's.  A writer refuses a symbolic link, a file owned by
 * another user or one that group or others may write (media_trust): a
 * predictable path in a world-writable directory such as /dev/shm is no
 * one else's to pre-create.  A device-DAX node is the administrator's
 * and is not checked; neither is a reader's file.
 *
 * The KV store beside a log is a regular file mapped in parts (MEDIA_PARTS):
 * it grows by whole parts, each mapped on its own, so a mapping never
 * moves and no pointer into one goes stale; a part no longer wanted gives
 * its blocks back (a hole), and a later part may be placed there again.
 */
#ifndef MOEFT_MEDIA_H
#define MOEFT_MEDIA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "wal.h"

struct media {
	int fd;
	int kind;        /* enum wal_media */
	int numa_node;   /* -1: not bound */
	int flush;       /* nonzero: stores must be flushed (clwb) to persist */
	uint8_t *base;   /* the medium, or the first part of one mapped in parts */
	uint64_t size;   /* bytes mapped at base */
	int created;     /* the file was created (or was empty) by this open */
};

/* Makes a new medium what its path may show (formats it); 0 or a negative
 * wal_status with err filled. */
typedef int (*media_init_fn)(struct media *m, void *arg, struct wal_error *err);

enum media_mode {
	MEDIA_READ = 0,  /* read-only map, no lock, never creates */
	MEDIA_WRITE = 1, /* exclusive writer lock (flock LOCK_EX|LOCK_NB) */
	MEDIA_PARTS = 2  /* MEDIA_WRITE for a regular file mapped in parts: only
			    the first `size` bytes are mapped at open */
};

/*
 * Open and map `path`.  For MEDIA_WRITE with WAL_OPEN_CREATE a missing file
 * is created with `size` bytes (space reserved with posix_fallocate so a full
 * tmpfs fails here, not with SIGBUS later); an existing file keeps its size.
 * MEDIA_PARTS maps `size` bytes of a regular file, emptying and growing one
 * shorter than that as if it were new (m->created).
 * numa_node >= 0 binds the mapping's pages to that node before first touch.
 * Returns 0 or a negative wal_status with err filled.
 */
int media_open(struct media *m, const char *path, int mode, uint64_t size,
	       int numa_node, unsigned flags, struct wal_error *err);

/* media_open, with init (when not NULL) run on a medium this open created
 * or took over empty, before a new file is linked at its path. */
int media_open_init(struct media *m, const char *path, int mode, uint64_t size,
		    int numa_node, unsigned flags, media_init_fn init, void *arg,
		    struct wal_error *err);

/* Whether a writer may use the existing file or directory at path with
 * status st: owned by this process's user and not writable by group or
 * others.  0, or WAL_EUNSAFE with err naming path and the reason. */
int media_trust(const char *path, const struct stat *st, struct wal_error *err);

/* The directory at path, open (O_RDONLY, close-on-exec), made with mode
 * 0700 when missing and create is set (the last component only: a typo
 * makes no tree).  A link, a non-directory, or one media_trust refuses is
 * refused.  The descriptor, or a negative wal_status with err naming path:
 * WAL_EUNSAFE for what media_trust or a link refuses, WAL_EIO else. */
int media_open_dir(const char *path, int create, struct wal_error *err);
void media_close(struct media *m);

/* A reader's hold on the medium at path against writers (the lock
 * media_open takes for one): 0 with *fd holding it (close it to let go;
 * close-on-exec), 1 when a writer holds the medium now, or a negative
 * wal_status with err filled when path cannot be opened.  A restore must
 * not race a log's live writer, nor a writer starting meanwhile. */
int media_hold(const char *path, int *fd, struct wal_error *err);

/* Unmap a part that media_map mapped. */
void media_unmap(void *p, uint64_t len);

/*
 * For a SIGBUS handler (async-signal-safe): when addr lies in a mapping of
 * a medium of this process (its file was truncated under it), that mapping
 * is replaced by private zero pages, so the faulting access can run again
 * and succeed, and the path of its file is returned; else NULL.  What is
 * written there from then on is lost: the caller stops writing.
 */
const char *media_fault(const void *addr);

/*
 * MEDIA_PARTS: map [off, off+len) of the file (off page-aligned) the way
 * its first part is mapped, bound to the same NUMA node; unmap it with
 * media_unmap before media_close.  With `grow` the range becomes new zero
 * bytes at the end of the file (whatever lay at or past off is dropped),
 * reserved like a new file's and with the new size durable when this
 * returns.
 */
int media_map(struct media *m, const char *path, uint64_t off, uint64_t len, int grow,
	      uint8_t **out, struct wal_error *err);

/* MEDIA_PARTS: reserve the blocks of [off, off+len), a range inside the
 * file (a part that held something else before, or a hole), so that
 * stores there cannot fail for want of space; durable when this returns.
 * The bytes and the file's size stay as they are.  0, or WAL_EIO. */
int media_reserve(const struct media *m, const char *path, uint64_t off, uint64_t len,
		  struct wal_error *err);

/* MEDIA_PARTS: give the blocks of [off, off+len) back to the filesystem
 * (a hole: it reads as zeros); the file keeps its size.  0, or WAL_EIO
 * when the filesystem cannot punch holes (the bytes stay). */
int media_release(const struct media *m, const char *path, uint64_t off, uint64_t len,
		  struct wal_error *err);

/* MEDIA_PARTS: cut the file to `size` bytes; parts mapped past it must not
 * be touched again. */
int media_cut(const struct media *m, const char *path, uint64_t size, struct wal_error *err);

/* Make [p, p+len) durable: clwb/clflushopt + sfence when m->flush is set,
 * otherwise only a store fence (process death keeps the page-cache pages). */
void media_persist(const struct media *m, const void *p, size_t len);

/* Validate a NUMA node number given as text (e.g. MOEFT_NUMA_NODE): must be
 * a decimal integer naming a node that exists.  Returns the node or a
 * negative wal_status with a message naming `what`. */
int media_parse_numa_node(const char *text, const char *what, struct wal_error *err);

/* Report whether a NUMA node has no CPUs (how CXL memory shows up). */
int media_numa_node_cpuless(int node);

#endif

/*
 * copyin.c - restore images into device memory (copyin.h).
 *
 * The calling thread cuts the images into pieces of at most PIECE bytes
 * of data, enqueues the memsets of the holes between them, and then waits
 * while the threads it starts work the pieces off: each takes the next piece,
 * waits until its older buffer's last copy has ended, preads the piece
 * into it and enqueues its copy.  Every copy and memset goes on one stream
 * of moeft's own that waits for the caller's stream first; the caller's
 * stream waits for the last of them.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "copyin.h"
#include "shim.h"

#define PIECE (8u << 20)        /* bytes of a buffer, and of a copy */
#define BUFS 2u                 /* a thread's: one filled while one drains */
/* A hole shorter than this is read as data: a memset and a copy more cost
 * more than reading its zeros. */
#define HOLE_MIN (1u << 20)

struct piece {
	int fd;
	uint64_t off, len, dev;
};

struct job {
	void *stream;                   /* moeft's own, for every copy */
	void *context;
	struct piece *pieces;
	size_t npieces, cap;
	atomic_size_t next;
	atomic_int failed;
	atomic_int pageable;
	pthread_mutex_t lock;           /* err */
	char *err;
	size_t errlen;
};

static void job_fail(struct job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The first failure is the one said. */
static void job_fail(struct job *j, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&j->lock);
	if (!atomic_exchange(&j->failed, 1)) {
		va_start(ap, fmt);
		vsnprintf(j->err, j->errlen, fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&j->lock);
}

static int add_piece(struct job *j, int fd, uint64_t off, uint64_t len, uint64_t dev)
{
	struct piece *p;

	if (j->npieces == j->cap) {
		size_t cap = j->cap ? 2 * j->cap : 64;

		if (!(p = realloc(j->pieces, cap * sizeof *p)))
			return -1;
		j->pieces = p;
		j->cap = cap;
	}
	j->pieces[j->npieces++] = (struct piece){ fd, off, len, dev };
	return 0;
}

/* Where the data at or after off begins in the image (size: none after
 * it), or where it ends (SEEK_HOLE: size at the end).  A filesystem that
 * cannot tell has all of it data. */
static uint64_t seek(int fd, uint64_t off, uint64_t size, int whence)
{
	off_t at = lseek(fd, (off_t)off, whence);

	if (at >= 0)
		return (uint64_t)at < size ? (uint64_t)at : size;
	if (whence == SEEK_DATA && errno == ENXIO)
		return size;
	return whence == SEEK_DATA ? off : size;
}

/* Whether q's descriptor is still the image it was opened on, whole: a
 * file shortened since would read as holes past its end, and a
 * descriptor the program closed and reused as its own would be copied. */
static int same_image(struct job *j, const struct restore_pool *q)
{
	struct stat st;

	if (fstat(q->fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_dev == q->file_dev &&
	    (uint64_t)st.st_ino == q->file_ino && (uint64_t)st.st_size == q->size)
		return 1;
	job_fail(j, "pool %u: its image %s is not the file of %llu bytes it was when the plan "
		 "was loaded", q->no, q->file, (unsigned long long)q->size);
	return 0;
}

/* Pool q's image: its data into pieces, with the holes between that are
 * shorter than HOLE_MIN; the others zeroed on the job's stream.  0, or -1
 * with the job failed. */
static int cut(struct job *j, const struct restore_pool *q, struct copyin_stats *st)
{
	uint64_t at = 0, end, next, len;
	int r;

	while (at < q->size) {
		next = seek(q->fd, at, q->size, SEEK_DATA);
		if (next - at >= HOLE_MIN || next == q->size) {
			if (next > at && (r = shim_dev_zero(q->base + at, next - at, j->stream))) {
				job_fail(j, "pool %u: zeroing %llu bytes at %llu failed (CUresult %d)",
					 q->no, (unsigned long long)(next - at),
					 (unsigned long long)at, r);
				return -1;
			}
			st->zero += next - at;
			if ((at = next) == q->size)
				break;
		}
		for (end = at;; end = next) {
			end = seek(q->fd, end, q->size, SEEK_HOLE);
			next = seek(q->fd, end, q->size, SEEK_DATA);
			if (next == end && end < q->size)
				end = q->size;	/* answers that contradict: all data */
			if (end == q->size || next == q->size || next - end >= HOLE_MIN)
				break;
		}
		for (; at < end; at += len) {
			len = end - at < PIECE ? end - at : PIECE;
			if (add_piece(j, q->fd, at, len, q->base + at) < 0) {
				job_fail(j, "out of memory");
				return -1;
			}
			st->data += len;
		}
	}
	return 0;
}

/* Read len bytes at off, to the end: an image that got shorter since it
 * was opened is not one to restore from. */
static int read_all(int fd, void *buf, uint64_t len, uint64_t off)
{
	ssize_t n;

	while (len) {
		n = pread(fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = ENODATA;
			return -1;
		}
		buf = (char *)buf + n;
		len -= (uint64_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* A thread's buffers: pinned, or pageable when the driver has no pinned
 * memory to give (*pinned 0 then).  0, or -1 with the job failed. */
static int buffers(struct job *j, void *buf[BUFS], int *pinned)
{
	uint64_t mapped;
	unsigned k;

	for (k = 0; k < BUFS; k++)
		if (shim_dev_host_alloc(PIECE, &buf[k], &mapped) != 0)
			break;
	if ((*pinned = k == BUFS))
		return 0;
	while (k--)
		shim_dev_host_free(buf[k]);
	atomic_store(&j->pageable, 1);
	for (k = 0; k < BUFS; k++)
		if (!(buf[k] = malloc(PIECE))) {
			while (k--)
				free(buf[k]);
			job_fail(j, "out of memory");
			return -1;
		}
	return 0;
}

/* A thread's share: pieces until none is left or one failed anywhere. */
static void work(struct job *j)
{
	void *buf[BUFS], *ev[BUFS] = { 0 };
	int used[BUFS] = { 0 }, pinned, r;
	size_t i, k;

	if (buffers(j, buf, &pinned) < 0)
		return;
	for (k = 0; k < BUFS; k++)
		if ((r = shim_dev_event(&ev[k]))) {
			job_fail(j, "cannot make an event (CUresult %d)", r);
			goto out;
		}
	for (k = 0; !atomic_load(&j->failed) && (i = atomic_fetch_add(&j->next, 1)) < j->npieces;
	     k = (k + 1) % BUFS) {
		const struct piece *p = &j->pieces[i];

		if (used[k] && (r = shim_dev_sync(ev[k]))) {
			job_fail(j, "waiting for a copy failed (CUresult %d)", r);
			break;
		}
		if (read_all(p->fd, buf[k], p->len, p->off) < 0) {
			job_fail(j, "reading %llu bytes at %llu of an image: %s",
				 (unsigned long long)p->len, (unsigned long long)p->off,
				 errno == ENODATA ? "it ends there (changed since it was opened)"
						  : strerror(errno));
			break;
		}
		if ((r = shim_dev_copy_to_device(p->dev, buf[k], p->len, j->stream)) ||
		    (r = shim_dev_record(ev[k], j->stream))) {
			job_fail(j, "copying %llu bytes into the device failed (CUresult %d)",
				 (unsigned long long)p->len, r);
			break;
		}
		used[k] = 1;
	}
out:
	/* A buffer goes once its last copy has ended; a wait that fails
	 * leaves it (the process is stopped then). */
	for (k = 0; k < BUFS; k++) {
		if (used[k] && (r = shim_dev_sync(ev[k]))) {
			job_fail(j, "waiting for a copy failed (CUresult %d)", r);
			continue;
		}
		if (ev[k])
			shim_dev_event_free(ev[k]);
		if (pinned)
			shim_dev_host_free(buf[k]);
		else
			free(buf[k]);
	}
}

static void *worker(void *arg)
{
	struct job *j = arg;

	shim_dev_bind_thread(j->context);
	work(j);
	return NULL;
}

/* The threads to read with: one per piece, no more than the CPUs this
 * process may run on, nor COPYIN_THREADS. */
static unsigned nthreads(size_t npieces)
{
	cpu_set_t set;
	unsigned n = COPYIN_THREADS;

	if (sched_getaffinity(0, sizeof set, &set) == 0 && (unsigned)CPU_COUNT(&set) < n)
		n = (unsigned)CPU_COUNT(&set);
	if (npieces < n)
		n = (unsigned)npieces;
	return n ? n : 1;
}

/* Start j: moeft's copy stream, ordered after the work enqueued on
 * stream so far.  The job fails when it cannot be. */
static void job_open(struct job *j, void *stream, char *err, size_t errlen, void **ready)
{
	int r;

	*j = (struct job){ .lock = PTHREAD_MUTEX_INITIALIZER, .err = err, .errlen = errlen };
	j->context = shim_dev_current();
	if ((r = shim_dev_stream(&j->stream)) || (r = shim_dev_event(ready)) ||
	    (r = shim_dev_record(*ready, stream)) || (r = shim_dev_wait(j->stream, *ready)))
		job_fail(j, "cannot order moeft's copy stream after the application's "
			 "(CUresult %d)", r);
}

/* Work j's pieces off, then order stream after every copy (*done: an
 * event of all of them, NULL when the job failed).  0, or -1. */
static int job_close(struct job *j, void *stream, void *ready, void **done,
		     struct copyin_stats *st)
{
	pthread_t tid[COPYIN_THREADS];
	unsigned i, n;
	int r;

	*done = NULL;
	if (!atomic_load(&j->failed) && j->npieces) {
		/* The caller only waits: its waits for copies would count as
		 * unsafe in another thread's global-mode capture, the workers'
		 * do not (shim_dev_bind_thread). */
		for (n = 0; n < nthreads(j->npieces); n++)
			if (pthread_create(&tid[n], NULL, worker, j) != 0)
				break;
		if (n == 0)
			work(j);	/* no thread to be had: the caller reads */
		for (i = 0; i < n; i++)
			pthread_join(tid[i], NULL);
		st->threads = n ? n : 1;
		st->pageable = atomic_load(&j->pageable);
	}
	if (!atomic_load(&j->failed) &&
	    ((r = shim_dev_event(done)) || (r = shim_dev_record(*done, j->stream)) ||
	     (r = shim_dev_wait(stream, *done))))
		job_fail(j, "cannot order the application's stream after the copies "
			 "(CUresult %d)", r);
	if (atomic_load(&j->failed) && *done) {
		shim_dev_event_free(*done);
		*done = NULL;
	}
	free(j->pieces);
	if (ready)
		shim_dev_event_free(ready);
	if (j->stream)
		shim_dev_stream_free(j->stream);
	return atomic_load(&j->failed) ? -1 : 0;
}

int copyin_pools(const struct restore_plan *p, void *stream, void **done,
		 struct copyin_stats *st, char *err, size_t errlen)
{
	struct job j;
	void *ready = NULL;

	memset(st, 0, sizeof *st);
	job_open(&j, stream, err, errlen, &ready);
	for (unsigned i = 0; i < p->npools && !atomic_load(&j.failed); i++)
		if (!p->pools[i].host && same_image(&j, &p->pools[i]))
			cut(&j, &p->pools[i], st);
	return job_close(&j, stream, ready, done, st);
}

int copyin_ranges(const struct restore_plan *p, const struct copyin_range *r, size_t n,
		  void *stream, char *err, size_t errlen)
{
	struct copyin_stats st = { 0 };
	struct job j;
	void *ready = NULL, *done;
	uint64_t len;
	int ret;

	job_open(&j, stream, err, errlen, &ready);
	for (size_t i = 0; i < n && !atomic_load(&j.failed); i++) {
		const struct restore_pool *q = &p->pools[r[i].pool];

		if (!same_image(&j, q))
			break;
		for (uint64_t at = 0; at < r[i].length; at += len) {
			len = r[i].length - at < PIECE ? r[i].length - at : PIECE;
			if (add_piece(&j, q->fd, r[i].offset + at, len, r[i].dev + at) < 0) {
				job_fail(&j, "out of memory");
				break;
			}
		}
	}
	ret = job_close(&j, stream, ready, &done, &st);
	if (done)
		shim_dev_event_free(done);	/* stream waits for it already */
	return ret;
}

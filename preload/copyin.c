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
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "copyin.h"
#include "crc32c.h"
#include "format.h"
#include "kvformat.h"
#include "shim.h"

#define PIECE (8u << 20)        /* bytes of a buffer, and of a copy */
#define BUFS 2u                 /* a thread's: one filled while one drains */
/* A hole shorter than this is read as data: a memset and a copy more cost
 * more than reading its zeros (in an image: its seeks too). */
#define HOLE_MIN (1u << 20)
#define MAP_HOLE_MIN (256u << 10)

/* Bytes [off, off + len) of q, read into a buffer; of them, those from
 * skip on (take bytes) are copied to dev.  Of an image, skip is 0 and
 * take len; of a map, [off, off + len) are whole chunks (each checked). */
struct piece {
	const struct restore_pool *q;
	uint64_t off, len, skip, take, dev;
};

struct job {
	void *stream;                   /* moeft's own, for every copy */
	void *context;
	const struct restore_plan *plan;
	void *ready;                    /* the application's work before */
	atomic_flag started;            /* a reading thread found it done, */
	struct timespec t0;             /* at t0: the data's time begins */
	struct piece *pieces;
	size_t npieces, cap;
	struct piece *holes;            /* zeroed once the data is in (a copy
					   queued behind them would wait) */
	size_t nholes, holecap;
	atomic_size_t next;
	atomic_uint_fast64_t live;      /* bytes read from the KV store */
	int recheck;                    /* read again: slots checked (kvmap.h) */
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

/* piece at the end of *v (*n of *cap used).  0, or -1 with j failed. */
static int append(struct job *j, struct piece **v, size_t *n, size_t *cap,
		  const struct piece *piece)
{
	struct piece *p;

	if (*n == *cap) {
		size_t more = *cap ? 2 * *cap : 64;

		if (!(p = realloc(*v, more * sizeof *p))) {
			job_fail(j, "out of memory");
			return -1;
		}
		*v = p;
		*cap = more;
	}
	(*v)[(*n)++] = *piece;
	return 0;
}

static int add_piece(struct job *j, const struct piece *piece)
{
	return append(j, &j->pieces, &j->npieces, &j->cap, piece);
}

/* q's bytes [at, at + len) to be zeroed on the device. */
static int add_hole(struct job *j, const struct restore_pool *q, uint64_t at, uint64_t len,
		    struct copyin_stats *st)
{
	st->zero += len;
	return len ? append(j, &j->holes, &j->nholes, &j->holecap,
			    &(struct piece){ q, at, len, 0, len, q->base + at }) : 0;
}

/* q's bytes [at, end) as pieces of at most PIECE bytes, all copied to
 * the device from q->base + at on. */
static int add_run(struct job *j, const struct restore_pool *q, uint64_t at, uint64_t end)
{
	uint64_t len;

	for (; at < end; at += len) {
		len = end - at < PIECE ? end - at : PIECE;
		if (add_piece(j, &(struct piece){ q, at, len, 0, len, q->base + at }) < 0)
			return -1;
	}
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
	const struct restore_plan *p = j->plan;
	struct stat st;

	if (q->map.e) {
		if (fstat(p->store_fd, &st) == 0 && S_ISREG(st.st_mode) &&
		    (uint64_t)st.st_dev == p->store_dev && (uint64_t)st.st_ino == p->store_ino)
			return 1;
		job_fail(j, "pool %u: the KV store is not the file it was when its map was read",
			 q->no);
		return 0;
	}
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
	uint64_t at = 0, end, next;

	while (at < q->size) {
		next = seek(q->fd, at, q->size, SEEK_DATA);
		if (next - at >= HOLE_MIN || next == q->size) {
			if (add_hole(j, q, at, next - at, st) < 0)
				return -1;
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
		if (add_run(j, q, at, end) < 0)
			return -1;
		st->data += end - at;
		at = end;
	}
	return 0;
}

/* Pool q's chunk map: runs of zero chunks of MAP_HOLE_MIN bytes or more
 * zeroed on the job's stream, the rest in pieces of whole chunks (a map's
 * chunks are at most KVMAP_CHUNK_MAX, under PIECE).  0, or -1 with the
 * job failed. */
static int cut_map(struct job *j, const struct restore_pool *q, struct copyin_stats *st)
{
	const struct kvmap *m = &q->map;
	uint64_t c = 0, z, at, end, per = PIECE / m->chunk_bytes;

	while (c < m->nchunks) {
		for (z = c; z < m->nchunks && !m->e[z].len; z++)
			;
		at = c * m->chunk_bytes;
		end = z == m->nchunks ? m->size : z * m->chunk_bytes;
		if (end - at >= MAP_HOLE_MIN || z == m->nchunks) {
			if (add_hole(j, q, at, end - at, st) < 0)
				return -1;
			c = z;
		}
		/* Data up to the next run of zeros long enough to skip. */
		for (end = c; end < m->nchunks; end = z) {
			while (end < m->nchunks && m->e[end].len)
				end++;
			for (z = end; z < m->nchunks && !m->e[z].len; z++)
				;
			if (z == m->nchunks || (z - end) * m->chunk_bytes >= MAP_HOLE_MIN)
				break;
		}
		while (c < end) {
			uint64_t n = end - c < per ? end - c : per;
			uint64_t off = c * m->chunk_bytes;
			uint64_t len = c + n == m->nchunks ? m->size - off : n * m->chunk_bytes;

			if (add_piece(j, &(struct piece){ q, off, len, 0, len, q->base + off }) < 0)
				return -1;
			st->data += len;
			c += n;
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

/* Whether the slot of chunk c of q (entry e) still holds the copy the
 * map names: its header's window word is that copy's (a writer clears it
 * before it changes the bytes, and sets a newer one after).  Else the job
 * fails. */
static int slot_holds(struct job *j, const struct restore_pool *q, uint64_t c,
		      const struct kvmap_entry *e)
{
	uint8_t word[8];

	if (read_all(j->plan->store_fd, word, sizeof word, e->hdr) == 0 &&
	    get64(word) == ((e->window + 1) | KVS_SLOT_FULL))
		return 1;
	job_fail(j, "pool %u chunk %llu: its copy of window %llu in the KV store was written over "
		 "since the restore (the restored process wrote the chunk again)", q->no,
		 (unsigned long long)c, (unsigned long long)e->window);
	return 0;
}

/* Piece p of a map's pool into buf: each chunk's bytes read from the
 * store, contiguous ones at once, and checked against the map's CRC-32C
 * while they are in the cache; zeros after and for the rest.  Read again
 * later (j->recheck: the restored process may have written the store
 * since), each chunk's slot must hold the map's copy before the read and
 * after it.  0, or -1 with the job failed. */
static int fill_from_store(struct job *j, const struct piece *p, uint8_t *buf)
{
	const struct restore_pool *q = p->q;
	const struct kvmap *m = &q->map;
	uint64_t c = p->off / m->chunk_bytes, last = (p->off + p->len - 1) / m->chunk_bytes, d, k;

	for (; c <= last; c = d) {
		const struct kvmap_entry *e = &m->e[c];
		uint8_t *dst = buf + (c * m->chunk_bytes - p->off);
		uint64_t run = e->len;

		/* Chunks whose bytes follow each other in the store too. */
		for (d = c + 1; d <= last && m->e[d - 1].len == kvmap_chunk_len(m, d - 1) &&
				m->e[d].len && m->e[d].off == m->e[d - 1].off + m->e[d - 1].len;
		     d++)
			run += m->e[d].len;
		for (k = c; j->recheck && k < d; k++)
			if (m->e[k].len && !slot_holds(j, q, k, &m->e[k]))
				return -1;
		if (run && read_all(j->plan->store_fd, dst, run, e->off) < 0) {
			job_fail(j, "pool %u: reading chunk %llu from the KV store (%llu bytes at %llu): "
				 "%s", q->no, (unsigned long long)c, (unsigned long long)run,
				 (unsigned long long)e->off,
				 errno == ENODATA ? "the store ends there (changed since the restore)"
						  : strerror(errno));
			return -1;
		}
		atomic_fetch_add_explicit(&j->live, run, memory_order_relaxed);
		for (k = c; k < d; k++) {
			const struct kvmap_entry *f = &m->e[k];
			uint8_t *at = buf + (k * m->chunk_bytes - p->off);

			if (f->len && j->recheck && !slot_holds(j, q, k, f))
				return -1;
			if (f->len && crc32c(0, at, f->len) != f->crc) {
				job_fail(j, "pool %u chunk %llu: its bytes in the KV store fail their "
					 "CRC-32C (written since the restore checked them, or damaged)",
					 q->no, (unsigned long long)k);
				return -1;
			}
			memset(at + f->len, 0, kvmap_chunk_len(m, k) - f->len);
		}
	}
	return 0;
}

/* Piece p's bytes into buf.  0, or -1 with the job failed. */
static int fill(struct job *j, const struct piece *p, uint8_t *buf)
{
	if (p->q->map.e)
		return fill_from_store(j, p, buf);
	if (read_all(p->q->fd, buf, p->len, p->off) == 0)
		return 0;
	job_fail(j, "reading %llu bytes at %llu of an image: %s", (unsigned long long)p->len,
		 (unsigned long long)p->off,
		 errno == ENODATA ? "it ends there (changed since it was opened)" : strerror(errno));
	return -1;
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
	/* No copy can start before the application's work enqueued before
	 * it (its pools' initialiser): the data's time starts after that. */
	if ((r = shim_dev_sync(j->ready))) {
		job_fail(j, "waiting for the application's stream failed (CUresult %d)", r);
		goto out;
	}
	if (!atomic_flag_test_and_set(&j->started))
		clock_gettime(CLOCK_MONOTONIC, &j->t0);
	for (k = 0; !atomic_load(&j->failed) && (i = atomic_fetch_add(&j->next, 1)) < j->npieces;
	     k = (k + 1) % BUFS) {
		const struct piece *p = &j->pieces[i];

		if (used[k] && (r = shim_dev_sync(ev[k]))) {
			job_fail(j, "waiting for a copy failed (CUresult %d)", r);
			break;
		}
		if (fill(j, p, buf[k]) < 0)
			break;
		if ((r = shim_dev_copy_to_device(p->dev, (uint8_t *)buf[k] + p->skip, p->take,
						 j->stream)) ||
		    (r = shim_dev_record(ev[k], j->stream))) {
			job_fail(j, "copying %llu bytes into the device failed (CUresult %d)",
				 (unsigned long long)p->take, r);
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
static void job_open(struct job *j, const struct restore_plan *p, void *stream, char *err,
		     size_t errlen, void **ready)
{
	int r;

	*j = (struct job){ .plan = p, .started = ATOMIC_FLAG_INIT,
			   .lock = PTHREAD_MUTEX_INITIALIZER, .err = err, .errlen = errlen };
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
		struct timespec t1;

		j->ready = ready;
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
		clock_gettime(CLOCK_MONOTONIC, &t1);
		st->data_s = (double)(t1.tv_sec - j->t0.tv_sec) +
			     (double)(t1.tv_nsec - j->t0.tv_nsec) / 1e9;
		st->threads = n ? n : 1;
		st->pageable = atomic_load(&j->pageable);
		st->live = atomic_load(&j->live);
	}
	for (i = 0; i < j->nholes && !atomic_load(&j->failed); i++) {
		const struct piece *h = &j->holes[i];

		if ((r = shim_dev_zero(h->dev, h->len, j->stream)))
			job_fail(j, "pool %u: zeroing %llu bytes at %llu failed (CUresult %d)",
				 h->q->no, (unsigned long long)h->len, (unsigned long long)h->off, r);
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
	free(j->holes);
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
	job_open(&j, p, stream, err, errlen, &ready);
	for (unsigned i = 0; i < p->npools && !atomic_load(&j.failed); i++)
		if (!p->pools[i].host && same_image(&j, &p->pools[i]))
			(p->pools[i].map.e ? cut_map : cut)(&j, &p->pools[i], st);
	return job_close(&j, stream, ready, done, st);
}

/* Range r of pool q as pieces: of an image, its bytes; of a map, the
 * whole chunks that hold them (each checked), of which r's bytes are
 * copied. */
static int add_range(struct job *j, const struct restore_pool *q, const struct copyin_range *r)
{
	uint64_t cb = q->map.e ? q->map.chunk_bytes : 1, end = r->offset + r->length;
	uint64_t at = r->offset / cb * cb, stop = (end + cb - 1) / cb * cb, len, skip;

	if (stop > q->size)
		stop = q->size;
	for (; at < end; at += len) {
		len = stop - at < PIECE / cb * cb ? stop - at : PIECE / cb * cb;
		skip = r->offset > at ? r->offset - at : 0;
		if (add_piece(j, &(struct piece){ q, at, len, skip,
						  (end < at + len ? end : at + len) - (at + skip),
						  r->dev + (at + skip - r->offset) }) < 0)
			return -1;
	}
	return 0;
}

int copyin_ranges(const struct restore_plan *p, const struct copyin_range *r, size_t n,
		  void *stream, char *err, size_t errlen)
{
	struct copyin_stats st = { 0 };
	struct job j;
	void *ready = NULL, *done;
	int ret;

	job_open(&j, p, stream, err, errlen, &ready);
	j.recheck = 1;
	for (size_t i = 0; i < n && !atomic_load(&j.failed); i++) {
		const struct restore_pool *q = &p->pools[r[i].pool];

		if (!same_image(&j, q) || add_range(&j, q, &r[i]) < 0)
			break;
	}
	ret = job_close(&j, stream, ready, &done, &st);
	if (done)
		shim_dev_event_free(done);	/* stream waits for it already */
	return ret;
}

/*
 * hostkv.c - KV pools in host memory that an engine adapter registers and
 * commits (hostkv.h), where no kernel launch shows the preload the KV.
 *
 * A pool is an allocation of the table like a device one (api
 * ALLOC_API_ADAPTER, its fingerprint the name's), made a KV pool of the
 * store at once; the snapshot never sees it (it is no device memory).  A
 * commit copies the chunks the ranges touch into the store and logs their
 * KVREF records in one window, under the log's order lock, or nothing.
 * After this process's first such window the store drops the pools of
 * earlier processes, as capturing.c does after its first decode window.
 * In a restored process a pool claims the plan's pool of its identity
 * (resume.h) and reads it back from its image; it is never copied in:
 * the engine reuses its blocks for new requests before the old ones are
 * loaded.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "allocs.h"
#include "fingerprint.h"
#include "hostkv.h"
#include "kvsnap.h"
#include "kvstore.h"
#include "msg.h"
#include "record.h"
#include "resume.h"
#include "start.h"
#include "wal.h"

#define HOSTKV_MAX 64u
#define HOSTKV_NAME_MAX 255u
/* Chunks a window may name, counted before duplicates go: 64 GiB of 4 KiB
 * chunks, 256 MiB of bookkeeping at most. */
#define HOSTKV_WINDOW_CHUNKS (UINT64_C(1) << 24)

static struct {
	pthread_mutex_t lock;           /* the pools, n, reclaimed */
	struct hostpool {
		const uint8_t *base;
		uint64_t size, chunk;
		uint32_t no;            /* the store's pool number */
		int restored;           /* the restore plan's pool it claimed; -1:
					   none (not a restored process) */
	} p[HOSTKV_MAX];
	unsigned n;
	int reclaimed;
} hk = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int name_ok(const char *name, size_t *len)
{
	size_t i;

	if (!name)
		return 0;
	for (i = 0; name[i] && i <= HOSTKV_NAME_MAX; i++)
		if (name[i] < 0x20 || name[i] > 0x7e)
			return 0;
	*len = i;
	return i >= 1 && i <= HOSTKV_NAME_MAX;
}

int hostkv_pool(const char *name, void *base, size_t bytes, size_t chunk_bytes)
{
	struct kvs *kvs = preload_kvs();
	struct kvs_pool_desc d;
	struct alloc_info a;
	size_t len;
	uint32_t no;
	int r, handle, restored;

	if (!name_ok(name, &len) || !base || !bytes || (uintptr_t)base > UINTPTR_MAX - bytes ||
	    (chunk_bytes && (chunk_bytes < KVSNAP_MIN_CHUNK || chunk_bytes > KVSNAP_MAX_CHUNK ||
			     (chunk_bytes & (chunk_bytes - 1)))))
		return -EINVAL;
	if (!kvs)
		return -ENODEV;
	pthread_mutex_lock(&hk.lock);
	if (hk.n == HOSTKV_MAX) {
		pthread_mutex_unlock(&hk.lock);
		return -EINVAL;
	}
	/* Memory the table tracks already (the same pool again, or a managed
	 * allocation): taking it would log the other one freed. */
	if (allocs_find((uintptr_t)base, &a) == 0 ||
	    allocs_find((uintptr_t)base + bytes - 1, &a) == 0) {
		pthread_mutex_unlock(&hk.lock);
		return -EEXIST;
	}
	if (allocs_new(ALLOC_API_ADAPTER, (uintptr_t)base, bytes, fingerprint_name(name, len),
		       &a) < 0) {
		pthread_mutex_unlock(&hk.lock);
		return -EIO;
	}
	d = (struct kvs_pool_desc){ .fingerprint = a.fingerprint, .size = bytes,
				    .chunk_bytes = chunk_bytes ? chunk_bytes
							       : kv_default_chunk(bytes),
				    .ordinal = a.ordinal };
	allocs_begin();
	if ((r = kvs_pool(kvs, &d, &no)) == 0 && allocs_set_role(&a, ALLOC_ROLE_KV_POOL) < 0)
		r = WAL_EIO;
	allocs_end();
	if (r < 0) {
		pthread_mutex_unlock(&hk.lock);
		/* A restored process must hold its pools: fail closed. */
		if (resume_active())
			resume_refuse("the adapter's KV pool %s of %zu bytes cannot be tracked: %s",
				      name, bytes, wal_strerror(r));
		msg_log(WAL_LOG_WARN, "the adapter's KV pool %s of %zu bytes is not tracked: %s",
			name, bytes, wal_strerror(r));
		return wal_errno(r);
	}
	/* Claimed once the pool is the store's: nothing after can fail. */
	restored = resume_active() ? resume_host_pool(&a) : -1;
	handle = (int)hk.n;
	hk.p[hk.n++] = (struct hostpool){ .base = base, .size = bytes, .chunk = d.chunk_bytes,
					  .no = no, .restored = restored };
	pthread_mutex_unlock(&hk.lock);
	msg_log(WAL_LOG_DEBUG, "KV pool %u: the adapter's %s, %zu bytes at %p, chunks of %llu", no,
		name, bytes, base, (unsigned long long)d.chunk_bytes);
	return handle;
}

/* The plan's pool index of handle pool, restored: >= 0, or -EINVAL (no
 * such handle) or -ENODEV (not restored). */
static int restored_of(int pool)
{
	int restored;

	pthread_mutex_lock(&hk.lock);
	restored = pool >= 0 && (unsigned)pool < hk.n ? hk.p[pool].restored : -2;
	pthread_mutex_unlock(&hk.lock);
	if (restored == -2)
		return -EINVAL;
	return restored < 0 ? -ENODEV : restored;
}

int hostkv_restored_read(int pool, size_t offset, void *dst, size_t length)
{
	int restored = restored_of(pool);

	return restored < 0 ? restored : resume_host_read(restored, offset, dst, length);
}

int hostkv_restored_intact(int pool, size_t offset, size_t length)
{
	int restored = restored_of(pool);

	return restored < 0 ? restored : resume_host_intact(restored, offset, length);
}

/* A chunk a range touches: pool handle and index. */
struct touched {
	unsigned pool;
	uint64_t chunk;
};

static int by_chunk(const void *x, const void *y)
{
	const struct touched *a = x, *b = y;

	if (a->pool != b->pool)
		return a->pool < b->pool ? -1 : 1;
	return (a->chunk > b->chunk) - (a->chunk < b->chunk);
}

/* The chunks the ranges touch, each once, in a new array (*count of
 * them); lock held.  NULL with *err -EINVAL or -ENOMEM. */
static struct touched *chunks_of(const struct moeft_kv_range *ranges, size_t n, size_t *count,
				 int *err)
{
	struct touched *t = NULL, *grown;
	size_t used = 0, cap = 0, i, k;
	uint64_t c, last;

	uint64_t total = 0;

	*err = -EINVAL;
	for (i = 0; i < n; i++) {
		const struct moeft_kv_range *r = &ranges[i];
		const struct hostpool *p;

		if (r->pool < 0 || (unsigned)r->pool >= hk.n)
			goto bad;
		p = &hk.p[r->pool];
		if (!r->length || r->offset >= p->size || r->length > p->size - r->offset)
			goto bad;
		last = (r->offset + r->length - 1) / p->chunk;
		total += last - r->offset / p->chunk + 1;
		if (total > HOSTKV_WINDOW_CHUNKS) {
			*err = -E2BIG;
			goto bad;
		}
	}
	for (i = 0; i < n; i++) {
		const struct moeft_kv_range *r = &ranges[i];
		const struct hostpool *p = &hk.p[r->pool];

		last = (r->offset + r->length - 1) / p->chunk;
		for (c = r->offset / p->chunk; c <= last; c++) {
			if (used == cap) {
				cap = cap ? 2 * cap : 64;
				if (!(grown = realloc(t, cap * sizeof *t))) {
					*err = -ENOMEM;
					goto bad;
				}
				t = grown;
			}
			t[used++] = (struct touched){ (unsigned)r->pool, c };
		}
	}
	if (used)
		qsort(t, used, sizeof *t, by_chunk);
	for (i = k = 0; i < used; i++)
		if (!k || by_chunk(&t[k - 1], &t[i]))
			t[k++] = t[i];
	*count = k;
	return t ? t : calloc(1, sizeof *t);
bad:
	free(t);
	return NULL;
}

int hostkv_commit(uint64_t first_step, uint32_t steps, const struct moeft_kv_range *ranges,
		  size_t n)
{
	struct rec_window_steps ws = { .first_step = first_step, .steps = steps };
	struct wal *w = preload_log();
	struct kvs *kvs = preload_kvs();
	uint8_t extra[WINDOW_STEPS_SIZE], p[KVREF_PAYLOAD_SIZE];
	struct touched *t;
	struct wal_stats st;
	size_t count = 0, i;
	int64_t r = 0;
	int err;

	if (!steps || first_step > UINT64_MAX - steps || (n && !ranges))
		return -EINVAL;
	if (!w || !kvs)
		return -ENODEV;
	/* A window before all restored pools are back would be what the next
	 * restore takes, and its reclaim would drop the pools not yet back. */
	if (resume_pending())
		return -EBUSY;
	if (resume_active() && first_step <= resume_last_step())
		return -EINVAL;
	pthread_mutex_lock(&hk.lock);
	if (!(t = chunks_of(ranges, n, &count, &err))) {
		pthread_mutex_unlock(&hk.lock);
		return err;
	}
	allocs_begin();
	wal_stats(w, &st);
	for (i = 0; i < count && r >= 0; i++) {
		const struct hostpool *hp = &hk.p[t[i].pool];
		uint64_t off = t[i].chunk * hp->chunk, len = hp->size - off;
		struct rec_kvref ref = { .pool = hp->no, .block = t[i].chunk,
					 .bytes = (uint32_t)(len < hp->chunk ? len : hp->chunk),
					 .step = first_step + steps - 1 };

		r = kvs_put(kvs, hp->no, t[i].chunk, hp->base + off, ref.bytes, st.open_window,
			    &ref.store_off, &ref.crc);
		if (r >= 0) {
			rec_kvref_encode(p, &ref);
			r = wal_append(w, WAL_REC_KVREF, p, sizeof p);
		}
	}
	ws.kv_chunks = (uint32_t)count;
	rec_window_steps_encode(extra, &ws);
	if (r >= 0)
		r = wal_commit(w, extra, sizeof extra, NULL);
	if (r < 0) {
		wal_abort(w);	/* half a window must not ride along with the next */
		for (i = 0; i < count; i++)
			kvs_unput(kvs, hk.p[t[i].pool].no, t[i].chunk, st.open_window);
	}
	allocs_end();
	free(t);
	if (r >= 0 && !hk.reclaimed) {
		hk.reclaimed = 1;
		kvs_reclaim(kvs);
	}
	pthread_mutex_unlock(&hk.lock);
	if (r < 0) {
		msg_log(WAL_LOG_WARN, "the adapter's KV of steps %llu-%llu was not committed: %s",
			(unsigned long long)first_step,
			(unsigned long long)(first_step + steps - 1), wal_strerror((int)r));
		return wal_errno((int)r);
	}
	return 0;
}

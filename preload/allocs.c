/*
 * allocs.c - the allocation log (allocs.h).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "allocs.h"
#include "msg.h"
#include "record.h"
#include "snapshot.h"
#include "wal.h"

static struct {
	struct wal *wal;
	struct alloc_table *at;
	pthread_mutex_t lock;        /* the log's order lock */
	unsigned pending;            /* records appended, not yet committed */
	atomic_ullong allocs, frees, windows;
	atomic_bool said_table, said_append, said_commit;
} al = { .lock = PTHREAD_MUTEX_INITIALIZER };

int allocs_init(unsigned max)
{
	al.at = at_create(max);
	return al.at ? 0 : -1;
}

void allocs_log_to(struct wal *w)
{
	al.wal = w;
}

void allocs_fini(void)
{
	at_destroy(al.at);
	al.at = NULL;
}

pthread_mutex_t *allocs_lock(void)
{
	return &al.lock;
}

void allocs_begin(void)
{
	pthread_mutex_lock(&al.lock);
}

/* Commit what was appended as one window (see allocs.h). */
void allocs_end(void)
{
	uint8_t extra[WINDOW_STEPS_SIZE];
	struct rec_window_steps steps = { 0 };
	int r;

	if (al.pending) {
		rec_window_steps_encode(extra, &steps);
		r = wal_commit(al.wal, extra, sizeof extra, NULL);
		if (r == 0)
			atomic_fetch_add_explicit(&al.windows, 1, memory_order_relaxed);
		else if (msg_first(&al.said_commit))
			msg_log(WAL_LOG_ERROR, "cannot commit to the log: %s", wal_strerror(r));
		al.pending = 0;
	}
	pthread_mutex_unlock(&al.lock);
}

static void append(unsigned type, const void *payload, uint32_t len)
{
	int64_t r = wal_append(al.wal, type, payload, len);

	if (r < 0) {
		if (msg_first(&al.said_append))
			msg_log(WAL_LOG_ERROR, "cannot append to the log: %s; records are being "
				"dropped", wal_strerror((int)r));
		return;
	}
	al.pending++;
}

static void log_alloc(const struct alloc_info *a)
{
	uint8_t buf[ALLOC_PAYLOAD_SIZE];
	struct rec_alloc r;

	at_to_record(a, &r);
	rec_alloc_encode(buf, &r);
	append(WAL_REC_ALLOC, buf, sizeof buf);
}

static void log_free(const struct alloc_info *a)
{
	uint8_t buf[FREE_PAYLOAD_SIZE];
	struct rec_free f = { .alloc_id = a->alloc_id, .base = a->base };

	if (a->role == ALLOC_ROLE_KV_POOL)
		snap_drop_pool(a->alloc_id);
	rec_free_encode(buf, &f);
	append(WAL_REC_FREE, buf, sizeof buf);
	atomic_fetch_add_explicit(&al.frees, 1, memory_order_relaxed);
}

/*
 * The driver handed out [base, base + size) while the table still holds
 * something there: we missed its free (a path we do not hook).  Whatever
 * overlaps is dead; log it freed.
 */
static void evict(uint64_t base, uint64_t size)
{
	struct alloc_info a;

	if (at_find(al.at, base, &a) == 0 && a.base < base && at_remove(al.at, a.base, &a) == 0)
		log_free(&a);
	while (at_next(al.at, base, &a) == 0 && a.base - base < size &&
	       at_remove(al.at, a.base, &a) == 0)
		log_free(&a);
}

static int table_add(unsigned api, uint64_t base, uint64_t size, uint64_t handle,
		     uint64_t fingerprint, struct alloc_info *a)
{
	if (api == ALLOC_API_VMM)
		return at_map(al.at, base, size, handle, fingerprint, a);
	return at_insert(al.at, base, size, api, fingerprint, a);
}

/* A new allocation, or a mapping (api ALLOC_API_VMM, with its handle):
 * into the table and the log. */
static int add(unsigned api, uint64_t base, uint64_t size, uint64_t handle,
	       uint64_t fingerprint, struct alloc_info *a)
{
	int r;

	if (base == 0 || size == 0)
		return -1;
	allocs_begin();
	r = table_add(api, base, size, handle, fingerprint, a);
	if (r == AT_EOVERLAP) {
		evict(base, size);
		r = table_add(api, base, size, handle, fingerprint, a);
	}
	if (r == 0) {
		log_alloc(a);
		atomic_fetch_add_explicit(&al.allocs, 1, memory_order_relaxed);
	} else if (msg_first(&al.said_table)) {
		msg_log(WAL_LOG_WARN, "allocation table: %s; some allocations are missing from "
			"the log", at_strerror(r));
	}
	allocs_end();
	return r == 0 ? 0 : -1;
}

int allocs_new(unsigned api, uint64_t base, uint64_t size, uint64_t fingerprint,
	       struct alloc_info *a)
{
	return add(api, base, size, 0, fingerprint, a);
}

int allocs_map(uint64_t va, uint64_t size, uint64_t handle, uint64_t fingerprint,
	       struct alloc_info *a)
{
	return add(ALLOC_API_VMM, va, size, handle, fingerprint, a);
}

void allocs_free(uint64_t base)
{
	struct alloc_info a;

	if (base == 0)
		return;
	allocs_begin();
	if (at_remove(al.at, base, &a) == 0)
		log_free(&a);
	allocs_end();
}

void allocs_unmap(uint64_t va, uint64_t size)
{
	struct alloc_info a;

	if (size == 0)
		return;
	allocs_begin();
	while (at_unmap(al.at, va, size, &a) == 0)
		log_free(&a);
	allocs_end();
}

int allocs_find(uint64_t addr, struct alloc_info *a)
{
	return at_find(al.at, addr, a) == 0 ? 0 : -1;
}

int allocs_set_role(const struct alloc_info *a, unsigned role)
{
	struct alloc_info b;

	if (at_set_role(al.at, a->alloc_id, role) != 0 || at_find(al.at, a->base, &b) != 0)
		return -1;
	log_alloc(&b);
	return 0;
}

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)

void allocs_stats(struct allocs_stats *st)
{
	st->allocs = LD(al.allocs);
	st->frees = LD(al.frees);
	st->windows = LD(al.windows);
	st->live = al.at ? at_count(al.at) : 0;
}

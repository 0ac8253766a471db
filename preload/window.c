/*
 * window.c - decode windows assembled from the capture ring (window.h).
 *
 * Runs on the consumer thread only, apart from wa_stats.  Nothing read
 * from the ring or the staging area is trusted beyond its bounds: both are
 * written by a GPU.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diag.h"
#include "format.h"
#include "monotonic.h"
#include "record.h"
#include "window.h"

#define MAX_LANES 64u
#define WA_PASSES_MAX 64u
#define WA_HELD_MAX (UINT64_C(1) << 30)

struct lane_step {
	uint32_t lane;
	uint64_t step;
};

struct window_asm {
	struct wa_sink sink;
	/* Set by the launching thread at a boundary, read here at its mark
	 * (which the ring orders after it). */
	const struct kv_stage *_Atomic stage;
	atomic_int *_Atomic busy;
	/* The open window: steps from `first`, its routing payloads, each
	 * preceded by its length (u32), in arrival order. */
	uint64_t first;
	uint8_t *buf;
	size_t len, cap;
	uint32_t records, tokens, flags;
	uint64_t staged;         /* KV chunks the last snapshot staged */
	/* The window's chunks taken out of staging by its earlier passes
	 * (snapshot.h), their bytes at hdata + entry.data; taken: the
	 * staging area's own chunks are among them. */
	struct kv_stage_entry *held;
	size_t nheld, heldcap;
	uint8_t *hdata;
	size_t hlen, hcap;
	int taken;
	int given_up;           /* a given-up window's pass is still queued */
	unsigned passes;
	unsigned nlanes;
	struct lane_step lanes[MAX_LANES];
	struct {
		atomic_ullong entries, windows, routing, unplaced, kv_chunks, kv_bytes, failures;
		atomic_ullong commit_ns, commit_max_ns;
	} n;
};

#define ADD(field, v) atomic_fetch_add_explicit(&wa->n.field, (v), memory_order_relaxed)
#define LD(field) atomic_load_explicit(&wa->n.field, memory_order_relaxed)

struct window_asm *wa_create(const struct wa_sink *sink)
{
	struct window_asm *wa = calloc(1, sizeof *wa);

	if (wa) {
		wa->sink = *sink;
		wa->first = sink->first_step;
	}
	return wa;
}

void wa_destroy(struct window_asm *wa)
{
	if (wa) {
		free(wa->buf);
		free(wa->held);
		free(wa->hdata);
	}
	free(wa);
}

void wa_set_stage(struct window_asm *wa, const struct kv_stage *stage, atomic_int *busy)
{
	atomic_store_explicit(&wa->busy, busy, memory_order_relaxed);
	atomic_store_explicit(&wa->stage, stage, memory_order_release);
}

void wa_gap(struct window_asm *wa, uint64_t entries)
{
	if (entries)
		wa->flags |= WINDOW_ROUTING_GAP;
}

void wa_stats(const struct window_asm *wa_c, struct wa_stats *st)
{
	struct window_asm *wa = (struct window_asm *)wa_c;

	*st = (struct wa_stats){ LD(entries), LD(windows), LD(routing), LD(unplaced),
				 LD(kv_chunks), LD(kv_bytes), LD(failures), LD(commit_ns),
				 LD(commit_max_ns) };
}

/* ---- markers and routing --------------------------------------------- */

static void mark(struct window_asm *wa, uint32_t lane, uint64_t step)
{
	unsigned i;

	for (i = 0; i < wa->nlanes; i++)
		if (wa->lanes[i].lane == lane)
			break;
	if (i == wa->nlanes) {
		if (wa->nlanes == MAX_LANES)
			i = 0;	/* the preload's clock has as many: never */
		else
			wa->nlanes++;
	}
	wa->lanes[i] = (struct lane_step){ lane, step };
}

static int step_of(const struct window_asm *wa, uint32_t lane, uint64_t *step)
{
	unsigned i;

	for (i = 0; i < wa->nlanes; i++)
		if (wa->lanes[i].lane == lane) {
			*step = wa->lanes[i].step;
			return 0;
		}
	return -1;
}

/* buf, of *cap bytes, made to hold at least need: it, moved maybe, or
 * NULL without memory (buf as it was). */
static void *grow(void *buf, size_t *cap, size_t need)
{
	size_t c = *cap ? *cap : 1u << 16;
	void *p;

	if (need <= *cap)
		return buf;
	while (c < need)
		c *= 2;
	if ((p = realloc(buf, c)))
		*cap = c;
	return p;
}

static int reserve(struct window_asm *wa, size_t more)
{
	uint8_t *p = grow(wa->buf, &wa->cap, wa->len + more);

	if (!p)
		return -1;
	wa->buf = p;
	return 0;
}

/* The record's weight type of a ring entry's (ring.c checked it). */
static uint8_t weights_flag(uint32_t wdtype)
{
	return wdtype == CAP_DT_F32 ? ROUTING_W_F32 : wdtype == CAP_DT_BF16 ? ROUTING_W_BF16 :
	       wdtype == CAP_DT_F16 ? ROUTING_W_F16 : ROUTING_W_NONE;
}

/* A routing entry: rows x k int32 ids, then as many weights when it has
 * them (capture.h), both copied into the record as they are. */
static void routing(struct window_asm *wa, const struct cap_entry *e, const void *ids,
		    size_t len)
{
	struct rec_routing r = {
		.layer = (uint32_t)e->step, .tokens = e->rows, .k = (uint16_t)e->k,
		.id_bytes = 4, .flags = weights_flag(e->wdtype),
		.experts = WA_TAG_EXPERTS(e->tag),
	};
	uint32_t plen = (uint32_t)(ROUTING_HDR_SIZE + len);
	const int32_t *id = ids;
	size_t i, nids = (size_t)e->rows * e->k;

	ADD(entries, 1);
	/* Before the lane's first marker, or layers no record can name. */
	if (step_of(wa, WA_TAG_LANE(e->tag), &r.step) < 0 || e->k > UINT16_MAX ||
	    e->step > UINT32_MAX || r.step < wa->first) {
		ADD(unplaced, 1);
		wa->flags |= WINDOW_ROUTING_GAP;
		return;
	}
	/* Without the rule's count, the ids say at least this many (ids that
	 * did not fit int32 read as CAP_ID_INVALID and say nothing). */
	for (i = 0; !WA_TAG_EXPERTS(e->tag) && i < nids; i++)
		if (id[i] >= 0 && (uint32_t)id[i] + 1 > r.experts)
			r.experts = (uint32_t)id[i] + 1;
	if (reserve(wa, 4 + (size_t)plen) < 0) {
		ADD(failures, 1);
		wa->flags |= WINDOW_ROUTING_GAP;
		return;
	}
	memcpy(wa->buf + wa->len, &plen, 4);
	rec_routing_encode(wa->buf + wa->len + 4, &r);
	/* The ring holds native int32 and the weights' own bytes, the log
	 * little-endian: both are the hosts CUDA runs on. */
	memcpy(wa->buf + wa->len + 4 + ROUTING_HDR_SIZE, ids, len);
	wa->len += 4 + (size_t)plen;
	wa->records++;
	if (r.layer == 0)
		wa->tokens += r.tokens;
}

/* ---- the commit of a window ------------------------------------------ */

/* Copy the staged chunks into the KV store and log their KVREFs; the log
 * lock is held.  Returns the number logged; flags what could not be. */
/* How long a mark waits for its staging header: the event that says it is
 * back comes before the mark in the stream, so this is a guard, never the
 * wait. */
#define STAGED_WAIT_NS 1000000000u

/* Whether the staging header of the mark being handled is back, polling
 * for up to STAGED_WAIT_NS. */
static int boundary_done(const struct window_asm *wa)
{
	const struct timespec poll = { 0, 10000 };
	uint64_t deadline;

	if (!wa->sink.staged || wa->sink.staged())
		return 1;
	for (deadline = mono_ns() + STAGED_WAIT_NS; mono_ns() < deadline;) {
		nanosleep(&poll, NULL);
		if (wa->sink.staged())
			return 1;
	}
	return 0;
}

/* What a snapshot staged will not all reach the store: the window is
 * KV-partial, and the next snapshot stages every chunk again. */
static void chunks_lost(struct window_asm *wa)
{
	wa->flags |= WINDOW_KV_PARTIAL;
	if (wa->sink.restage)
		wa->sink.restage();
}

/* The chunks of the staging area's table, bounds checked (the GPU wrote
 * them): their number, and *t and *data. */
static uint64_t staged_chunks(const struct kv_stage *s, const struct kv_stage_entry **t,
			      const uint8_t **data)
{
	*t = (const struct kv_stage_entry *)((const uint8_t *)s + s->table_off);
	*data = (const uint8_t *)s + s->data_off;
	return s->entries < s->max_entries ? s->entries : s->max_entries;
}

/* One chunk into the KV store and its KVREF into the log: 0, or -1 (the
 * window is KV-partial then). */
static int put_chunk(struct window_asm *wa, const struct kv_stage_entry *e, const uint8_t *data,
		     uint64_t capacity, uint64_t window, uint64_t last_step)
{
	uint8_t p[KVREF_PAYLOAD_SIZE];
	struct rec_kvref ref = { .pool = e->pool, .bytes = e->bytes, .block = e->chunk,
				 .step = last_step };

	if (e->data > capacity || e->bytes > capacity - e->data ||
	    kvs_put(wa->sink.kvs, e->pool, e->chunk, data + e->data, e->bytes, window,
		    &ref.store_off, &ref.crc) < 0) {
		chunks_lost(wa);
		return -1;
	}
	rec_kvref_encode(p, &ref);
	if (wal_append(wa->sink.wal, WAL_REC_KVREF, p, sizeof p) < 0) {
		chunks_lost(wa);
		return -1;
	}
	ADD(kv_bytes, e->bytes);
	return 0;
}

/* Copy the window's chunks, those its earlier passes took and those
 * staged now, into the KV store and log their KVREFs; the log lock is
 * held.  Returns the number logged; flags what could not be. */
static uint32_t put_chunks(struct window_asm *wa, uint64_t window, uint64_t last_step)
{
	const struct kv_stage *s = atomic_load_explicit(&wa->stage, memory_order_acquire);
	const struct kv_stage_entry *t;
	const uint8_t *data;
	uint64_t n, i;
	uint32_t logged = 0;

	for (i = 0; i < wa->nheld; i++)
		logged += put_chunk(wa, &wa->held[i], wa->hdata, wa->hlen, window, last_step) == 0;
	wa->staged = wa->nheld;
	if (wa->taken)
		return logged;
	/* A mark comes after its boundary handed the staging area over
	 * (snapshot.h); without one, the chunks that changed are unknown. */
	if (!s) {
		wa->flags |= WINDOW_KV_PARTIAL;
		return logged;
	}
	if (!boundary_done(wa)) {
		chunks_lost(wa);
		return logged;
	}
	n = staged_chunks(s, &t, &data);
	wa->staged += n;
	/* Chunks that found no room, or of a pool no snapshot reads. */
	if (s->overflow || (wa->sink.untracked && wa->sink.untracked()))
		wa->flags |= WINDOW_KV_PARTIAL;
	for (i = 0; i < n; i++) {
		struct kv_stage_entry e = t[i];

		logged += put_chunk(wa, &e, data, s->capacity, window, last_step) == 0;
	}
	return logged;
}

/* The window's commit failed: the copies put_chunks made for it go, or the
 * window id, which the next commit gets, would name them (kvs_unput). */
static void unput_chunks(struct window_asm *wa, uint64_t window)
{
	const struct kv_stage *s = atomic_load_explicit(&wa->stage, memory_order_acquire);
	const struct kv_stage_entry *t;
	const uint8_t *data;
	uint64_t n, i;

	if (!wa->sink.kvs)
		return;
	for (i = 0; i < wa->nheld; i++)
		kvs_unput(wa->sink.kvs, wa->held[i].pool, wa->held[i].chunk, window);
	if (!s || wa->taken)
		return;
	for (i = 0, n = staged_chunks(s, &t, &data); i < n; i++)
		kvs_unput(wa->sink.kvs, t[i].pool, t[i].chunk, window);
}

/*
 * The staging area's chunks into held (bounds checked, the GPU wrote
 * them), for the pass that reuses it: 0, or -1 without memory.
 */
static int hold_chunks(struct window_asm *wa, const struct kv_stage *s)
{
	const struct kv_stage_entry *t;
	const uint8_t *data;
	uint64_t n = staged_chunks(s, &t, &data), i, bytes = 0;
	struct kv_stage_entry *held;
	uint8_t *hdata;

	for (i = 0; i < n; i++) {
		if (t[i].data > s->capacity || t[i].bytes > s->capacity - t[i].data)
			return -1;
		bytes += t[i].bytes;
	}
	if (!(held = grow(wa->held, &wa->heldcap, (wa->nheld + n) * sizeof *held)))
		return -1;
	wa->held = held;
	if (!(hdata = grow(wa->hdata, &wa->hcap, wa->hlen + bytes)))
		return -1;
	wa->hdata = hdata;
	for (i = 0; i < n; i++) {
		struct kv_stage_entry e = t[i];

		memcpy(wa->hdata + wa->hlen, data + e.data, e.bytes);
		e.data = wa->hlen;
		wa->hlen += e.bytes;
		wa->held[wa->nheld++] = e;
	}
	return 0;
}

/* The window's held chunks go (its mark was lost: the next snapshot
 * stages every chunk again, for the window that goes on). */
void wa_drop_held(struct window_asm *wa)
{
	wa->nheld = wa->hlen = 0;
	wa->taken = 0;
	wa->passes = 0;
	wa->given_up = 0;
}

/* The ring bytes a window of kvrefs KV references and the routing held in
 * wa->buf takes, its WINDOW record included. */
static uint64_t window_bytes(const struct window_asm *wa, uint64_t kvrefs)
{
	uint64_t bytes = kvrefs * rec_size(KVREF_PAYLOAD_SIZE) +
			 rec_size(WINDOW_FIXED_SIZE + WINDOW_STEPS_SIZE);
	size_t off;

	for (off = 0; off < wa->len;) {
		uint32_t plen;

		memcpy(&plen, wa->buf + off, 4);
		bytes += rec_size(plen);
		off += 4 + (size_t)plen;
	}
	return bytes;
}

#define MiB (UINT64_C(1) << 20)

/*
 * A window the log cannot take, full even after reclaiming everything but
 * the last committed window: say which settings to change, and by how much
 * (a log holds the window kept for restore, the one being committed and
 * the allocation windows between them, so three of these fit the one
 * suggested); "never" only for a window larger than the whole ring.
 */
static void say_not_committed(const struct window_asm *wa, uint64_t end, int64_t r,
			      const struct wal_stats *st, uint64_t kvrefs)
{
	uint64_t need = window_bytes(wa, kvrefs), want;

	if (r != WAL_EFULL) {
		wal_logf(WAL_LOG_ERROR, "cannot commit the window of steps %llu-%llu: %s",
			 (unsigned long long)wa->first, (unsigned long long)end - 1,
			 wal_strerror((int)r));
		return;
	}
	want = (st->size - st->capacity + 3 * need + MiB - 1) / MiB;
	if (need > st->capacity)
		wal_logf(WAL_LOG_ERROR, "cannot commit the window of steps %llu-%llu: its %llu "
			 "bytes of records exceed the log's ring of %llu bytes; no decode window "
			 "commits until MOEFT_WAL_SIZE is raised (to at least %llu MiB) or "
			 "MOEFT_WINDOW lowered", (unsigned long long)wa->first,
			 (unsigned long long)end - 1, (unsigned long long)need,
			 (unsigned long long)st->capacity, (unsigned long long)want);
	else	/* smaller windows may still commit beside the kept one */
		wal_logf(WAL_LOG_ERROR, "cannot commit the window of steps %llu-%llu: its %llu "
			 "bytes of records do not fit the log's ring of %llu bytes beside the last "
			 "committed window; windows this large need MOEFT_WAL_SIZE of at least "
			 "%llu MiB (or a lower MOEFT_WINDOW)", (unsigned long long)wa->first,
			 (unsigned long long)end - 1, (unsigned long long)need,
			 (unsigned long long)st->capacity, (unsigned long long)want);
}

static void commit(struct window_asm *wa, uint64_t end)
{
	uint8_t extra[WINDOW_STEPS_SIZE];
	struct rec_window_steps ws = { .first_step = wa->first,
				       .steps = (uint32_t)(end - wa->first),
				       .tokens = wa->tokens };
	struct wal_stats st;
	size_t off;
	int64_t r = 0;
	uint64_t t0 = mono_ns(), dt;
	unsigned long long max;

	pthread_mutex_lock(wa->sink.log_lock);
	wal_stats(wa->sink.wal, &st);
	if (wa->sink.kvs)
		ws.kv_chunks = put_chunks(wa, st.open_window, end - 1);
	for (off = 0; off < wa->len && r >= 0;) {
		uint32_t plen;

		memcpy(&plen, wa->buf + off, 4);
		r = wal_append(wa->sink.wal, WAL_REC_ROUTING, wa->buf + off + 4, plen);
		off += 4 + (size_t)plen;
	}
	ws.flags = wa->flags;
	rec_window_steps_encode(extra, &ws);
	if (r >= 0)
		r = wal_commit(wa->sink.wal, extra, sizeof extra, NULL);
	/* Half a window must not ride along with the next commit. */
	if (r < 0) {
		wal_abort(wa->sink.wal);
		unput_chunks(wa, st.open_window);
		if (wa->sink.restage)
			wa->sink.restage();
	}
	pthread_mutex_unlock(wa->sink.log_lock);
	dt = mono_ns() - t0;
	ADD(commit_ns, dt);
	max = LD(commit_max_ns);
	while (dt > max && !atomic_compare_exchange_weak_explicit(&wa->n.commit_max_ns, &max, dt,
								  memory_order_relaxed,
								  memory_order_relaxed))
		;
	if (r < 0) {
		/* After the writer's clean end (wal_end) a window goes quietly. */
		if (!LD(failures) && r != WAL_EENDED)
			say_not_committed(wa, end, r, &st, wa->staged);
		ADD(failures, 1);
	} else {
		ADD(windows, 1);
		ADD(routing, wa->records);
		ADD(kv_chunks, ws.kv_chunks);
	}
}

/*
 * Whether the window ending at `end` takes another pass (snapshot.h): its
 * snapshot staged some chunks and found no room for others.  The staged
 * ones are then taken out of the staging area (held) and the pass is
 * asked for: 1.  Else 0: the window commits with what it has, KV-partial
 * when chunks found no room.  A window takes at most WA_PASSES_MAX passes
 * and holds at most WA_HELD_MAX bytes: a forced window (every chunk of
 * every pool) or writers the boundary does not hold would otherwise keep
 * the serving streams waiting, and the bytes in memory, without end.
 */
static int another_pass(struct window_asm *wa, uint64_t end)
{
	const struct kv_stage *s = atomic_load_explicit(&wa->stage, memory_order_acquire);
	const struct kv_stage_entry *t;
	const uint8_t *data;

	/* Past the bounds, what found no room stays marked (or unlike its
	 * sum) and goes with the next window: this one is KV-partial. */
	if (!s || !wa->sink.kvs || !wa->sink.more || (wa->sink.holds && !wa->sink.holds()) ||
	    !boundary_done(wa) || !s->overflow ||
	    !staged_chunks(s, &t, &data) || wa->passes >= WA_PASSES_MAX ||
	    wa->hlen + s->used > WA_HELD_MAX || hold_chunks(wa, s) < 0)
		return 0;
	wa->passes++;
	if (wa->sink.more(end) == 0)
		return 1;
	/* The held chunks are the staging area's: put them once. */
	wa->taken = 1;
	wa->flags |= WINDOW_KV_PARTIAL;
	return 0;
}

/* The open window, all it has, and on to the next (its mark ended it). */
static void end_window(struct window_asm *wa, uint64_t end)
{
	wa->first = end;
	wa->len = 0;
	wa->records = wa->tokens = wa->flags = 0;
	wa_drop_held(wa);
}

void wa_give_up(struct window_asm *wa, uint64_t end)
{
	if (end <= wa->first)
		return;
	wa->flags |= WINDOW_KV_PARTIAL;
	wa->taken = 1;	/* the staging area is the queued pass's */
	commit(wa, end);
	/* That pass's chunks never reach the store, yet their sums will say
	 * they did. */
	if (wa->sink.restage)
		wa->sink.restage();
	end_window(wa, end);
	wa->given_up = 1;
}

static void snapshot_mark(struct window_asm *wa, uint64_t end)
{
	atomic_int *busy = atomic_load_explicit(&wa->busy, memory_order_relaxed);

	/* The queued pass of a window given up: the next window's routing
	 * came before it, and stays. */
	if (wa->given_up && end <= wa->first) {
		wa->given_up = 0;
		if (busy)
			atomic_store_explicit(busy, 0, memory_order_release);
		return;
	}
	if (end > wa->first) {
		if (another_pass(wa, end))
			return;	/* busy stays set: the pass's mark comes back here */
		/* Capture stopped meanwhile released the streams: the last
		 * pass may have read the pools as they moved on. */
		if (wa->sink.live && !wa->sink.live())
			wa->flags |= WINDOW_KV_PARTIAL;
		commit(wa, end);
	}
	/* Whatever its passes did, no stream waits for this window now. */
	if (wa->sink.release)
		wa->sink.release();
	if (busy)
		atomic_store_explicit(busy, 0, memory_order_release);
	end_window(wa, end);
}

void wa_entry(void *arg, const struct cap_entry *e, const void *payload, size_t len)
{
	struct window_asm *wa = arg;

	switch (WA_TAG_RULE(e->tag)) {
	case WA_RULE_MARKER:
		mark(wa, WA_TAG_LANE(e->tag), e->step);
		break;
	case WA_RULE_SNAP:
		snapshot_mark(wa, e->step);
		break;
	default:
		routing(wa, e, payload, len);
		break;
	}
}

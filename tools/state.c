/*
 * state.c - the state of the last committed decode window (see state.h).
 *
 * One pass over the committed records up to C gathers the allocation
 * events of C's epoch, the newest KVREF of every chunk and the routing;
 * both kinds of event are sorted afterwards (by allocation id, by chunk),
 * so the cost stays O(records log records) and what is allocated is
 * bounded by what the log holds, never by a count the store claims.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "diag.h"
#include "state.h"

/* An ALLOC or FREE record of C's epoch. */
struct event {
	uint64_t lsn, window;
	int is_alloc;
	struct rec_alloc a;     /* a FREE sets a.alloc_id only */
};

/* A KVREF record, before only the newest of each chunk is kept. */
struct kvref {
	uint64_t lsn;
	uint32_t pool;
	struct state_ref ref;
};

struct scan {
	struct event *ev;
	size_t nev, evcap;
	struct kvref *kr;
	size_t nkr, krcap;
	int epoch_seen;         /* C's EPOCH record is in the log */
	uint64_t epoch_window;  /* its window */
};

static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
	size_t want;

	if (n < *cap)
		return p;
	want = *cap ? *cap * 2 : 64;
	if (want > SIZE_MAX / size || !(p = realloc(p, want * size)))
		return NULL;
	*cap = want;
	return p;
}

/* The windows whose routing is restored: the intact decode windows of C's
 * epoch up to C. */
static int routing_windows(struct state *s, const struct wal_window *win, size_t nwin)
{
	struct rec_window_steps ws;
	size_t i;

	if (!(s->win = calloc(nwin, sizeof *s->win)))
		return -1;
	for (i = 0; i < nwin && win[i].id <= s->c->id; i++)
		if (win[i].epoch == s->c->epoch && rec_decode_window(&win[i], &ws))
			s->win[s->nwin++] = (struct state_window){ .id = win[i].id, .s = ws };
	return 0;
}

/* Whether rec is a ROUTING record of a routing window; *wi walks s->win
 * forward along the log. */
static int is_routing(const struct state *s, size_t *wi, const struct wal_record *rec)
{
	while (*wi < s->nwin && s->win[*wi].id < rec->window)
		(*wi)++;
	return rec->type == WAL_REC_ROUTING && *wi < s->nwin && s->win[*wi].id == rec->window;
}

static int add_event(struct state *s, struct scan *sc, const struct wal_record *rec)
{
	struct event e = { .lsn = rec->lsn, .window = rec->window,
			   .is_alloc = rec->type == WAL_REC_ALLOC };
	struct rec_free f;
	struct event *p;

	if (e.is_alloc ? rec_alloc_decode(rec->payload, rec->len, &e.a) < 0
		       : rec_free_decode(rec->payload, rec->len, &f) < 0) {
		s->bad++;
		return 0;
	}
	if (!e.is_alloc)
		e.a.alloc_id = f.alloc_id;
	if (!(p = grow(sc->ev, &sc->evcap, sc->nev, sizeof *p)))
		return -1;
	sc->ev = p;
	sc->ev[sc->nev++] = e;
	return 0;
}

/* A KVREF must name a chunk of the store and a length that chunk can
 * have; without a store there is nothing to check it against. */
static int add_kvref(struct state *s, struct scan *sc, const struct wal_record *rec)
{
	struct kvs_pool_info pi;
	struct rec_kvref k;
	struct kvref *p;

	s->kvrefs++;
	if (!s->kv)
		return 0;
	if (rec_kvref_decode(rec->payload, rec->len, &k) < 0 ||
	    kvs_reader_pool(s->kv, k.pool, &pi) < 0 || k.block >= pi.nchunks || !k.bytes ||
	    k.bytes > pi.d.chunk_bytes) {
		s->bad++;
		return 0;
	}
	if (!(p = grow(sc->kr, &sc->krcap, sc->nkr, sizeof *p)))
		return -1;
	sc->kr = p;
	sc->kr[sc->nkr++] = (struct kvref){ .lsn = rec->lsn, .pool = k.pool,
					    .ref = { .chunk = k.block, .window = rec->window,
						     .crc = k.crc, .len = k.bytes } };
	return 0;
}

/* Every committed record up to C, in log order. */
static int scan(struct state *s, struct scan *sc)
{
	struct wal_iter it;
	struct wal_record rec;
	struct rec_routing rt;
	size_t wi = 0;

	wal_iter_init(&it, s->r);
	while (wal_iter_next(&it, &rec) && rec.window <= s->c->id) {
		int ret = 0;

		if (rec.type == WAL_REC_EPOCH && rec.epoch == s->c->epoch) {
			sc->epoch_seen = 1;
			sc->epoch_window = rec.window;
		} else if ((rec.type == WAL_REC_ALLOC || rec.type == WAL_REC_FREE) &&
			   rec.epoch == s->c->epoch) {
			ret = add_event(s, sc, &rec);
		} else if (rec.type == WAL_REC_KVREF && rec.epoch == s->c->epoch) {
			ret = add_kvref(s, sc, &rec);
		} else if (is_routing(s, &wi, &rec)) {
			if (rec_routing_decode(rec.payload, rec.len, &rt) < 0) {
				s->bad++;
				continue;
			}
			s->routing++;
			ret = hist_add(&s->hist, &rec);
		}
		if (ret < 0)
			return -1;
	}
	return 0;
}

/* Whether an ALLOC record of the scan made an allocation a KV pool. */
static int kv_pool_logged(const struct scan *sc)
{
	for (size_t i = 0; i < sc->nev; i++)
		if (sc->ev[i].is_alloc && sc->ev[i].a.role == ALLOC_ROLE_KV_POOL)
			return 1;
	return 0;
}

/* The requests of C when C is an adapter's window: its REQUEST records
 * that decode (the others are counted bad).  0, or -1 out of memory. */
static int requests(struct state *s)
{
	struct state_requests *q = &s->req;
	struct rec_request rr;
	struct wal_record rec;
	struct wal_iter it;
	size_t cap = 0;

	if (!(s->cs.flags & WINDOW_REQUESTS))
		return 0;
	q->w = s->c;
	q->s = s->cs;
	wal_iter_init(&it, s->r);
	while (wal_iter_next(&it, &rec) && rec.window <= q->w->id) {
		if (rec.window != q->w->id || rec.type != WAL_REC_REQUEST)
			continue;
		if (rec_request_decode(rec.payload, rec.len, &rr) < 0) {
			s->bad++;
			continue;
		}
		if (q->n == cap) {
			const uint8_t **p = grow(q->payload, &cap, q->n, sizeof *p);
			uint32_t *l = p ? realloc(q->len, cap * sizeof *l) : NULL;

			if (p)
				q->payload = p;
			if (!l)
				return -1;
			q->len = l;
		}
		q->payload[q->n] = rec.payload;
		q->len[q->n++] = rec.len;
	}
	return 0;
}

static int by_id(const void *x, const void *y)
{
	const struct event *a = x, *b = y;

	if (a->a.alloc_id != b->a.alloc_id)
		return a->a.alloc_id < b->a.alloc_id ? -1 : 1;
	return (a->lsn > b->lsn) - (a->lsn < b->lsn);
}

/*
 * The allocation table as of C: each id's events in log order.  An ALLOC
 * of a live id replaces it; its turning into a KV pool is when the
 * pool's current copies begin.  An id first seen already a KV pool began
 * in that window only if the epoch's history is there to say it was not
 * logged before.
 */
static int replay(struct state *s, struct scan *sc)
{
	struct state_alloc cur = { 0 };
	size_t i;
	int live = 0;

	if (sc->nev)	/* qsort's array may not be NULL, even when empty */
		qsort(sc->ev, sc->nev, sizeof *sc->ev, by_id);
	if (!(s->alloc = calloc(sc->nev ? sc->nev : 1, sizeof *s->alloc)))
		return -1;
	for (i = 0; i < sc->nev; i++) {
		const struct event *e = &sc->ev[i];
		int kv = e->a.role == ALLOC_ROLE_KV_POOL;

		if (i && e->a.alloc_id != sc->ev[i - 1].a.alloc_id) {
			if (live)
				s->alloc[s->nalloc++] = cur;
			live = 0;
		}
		if (!e->is_alloc) {
			live = 0;
			continue;
		}
		if (!live || !kv || cur.a.role != ALLOC_ROLE_KV_POOL) {
			cur.kv_known = kv && (live || sc->epoch_seen);
			cur.kv_window = e->window;
		}
		cur.a = e->a;
		live = 1;
	}
	if (live)
		s->alloc[s->nalloc++] = cur;
	return 0;
}

static int by_chunk(const void *x, const void *y)
{
	const struct kvref *a = x, *b = y;

	if (a->pool != b->pool)
		return a->pool < b->pool ? -1 : 1;
	if (a->ref.chunk != b->ref.chunk)
		return a->ref.chunk < b->ref.chunk ? -1 : 1;
	return (a->lsn > b->lsn) - (a->lsn < b->lsn);
}

/* Keep the newest KVREF of each chunk, in chunk order: the last of its
 * run once sorted. */
static size_t newest_refs(struct scan *sc)
{
	size_t i, n = 0;

	if (sc->nkr)
		qsort(sc->kr, sc->nkr, sizeof *sc->kr, by_chunk);
	for (i = 0; i < sc->nkr; i++) {
		if (i + 1 < sc->nkr && sc->kr[i + 1].pool == sc->kr[i].pool &&
		    sc->kr[i + 1].ref.chunk == sc->kr[i].ref.chunk)
			continue;
		sc->kr[n++] = sc->kr[i];
	}
	return n;
}

static const struct state_alloc *live_pool(const struct state *s, const struct kvs_pool_desc *d)
{
	for (size_t i = 0; i < s->nalloc; i++) {
		const struct rec_alloc *a = &s->alloc[i].a;

		if (a->role == ALLOC_ROLE_KV_POOL &&
		    alloc_ident_eq(rec_alloc_ident(a), kvs_pool_ident(d)))
			return &s->alloc[i];
	}
	return NULL;
}

/* Whether a pool of the state is the allocation's. */
static int pool_of(const struct state *s, const struct state_alloc *a)
{
	for (unsigned i = 0; i < s->npools; i++)
		if (s->pool[i].alloc == a)
			return 1;
	return 0;
}

/* The store's pools that are part of the state, each with the newest
 * KVREFs of its chunks; a free pool number (a reclaimed pool's) is none. */
static int pools(struct state *s, struct scan *sc)
{
	unsigned n = s->kv ? kvs_reader_pools(s->kv) : 0;
	size_t nref = newest_refs(sc), r = 0, first;

	if (!(s->pool = calloc(n ? n : 1, sizeof *s->pool)))
		return -1;
	for (uint32_t no = 0; no < n; no++) {
		struct state_pool *p = &s->pool[s->npools];

		if (kvs_reader_pool(s->kv, no, &p->info) < 0)
			continue;
		p->no = no;
		p->alloc = live_pool(s, &p->info.d);
		if (!p->alloc && s->history_complete) {
			s->stale_pools++;
			continue;
		}
		p->floor = p->alloc && p->alloc->kv_known ? p->alloc->kv_window : 0;
		for (; r < nref && sc->kr[r].pool < no; r++)
			;
		for (first = r; r < nref && sc->kr[r].pool == no; r++)
			;
		p->nref = r - first;
		if (!(p->ref = calloc(p->nref ? p->nref : 1, sizeof *p->ref)))
			return -1;
		for (size_t i = 0; i < p->nref; i++)
			p->ref[i] = sc->kr[first + i].ref;
		s->npools++;
	}
	for (size_t i = 0; s->kv && i < s->nalloc; i++)
		if (s->alloc[i].a.role == ALLOC_ROLE_KV_POOL && !pool_of(s, &s->alloc[i]))
			s->missing_pools++;
	return 0;
}

/* The history of C's epoch is whole from its EPOCH record to C. */
static int complete(const struct state *s, const struct scan *sc)
{
	const struct wal_window *win;
	size_t nwin;

	if (!sc->epoch_seen)
		return 0;
	win = wal_reader_windows(s->r, &nwin);
	for (size_t i = 0; i < nwin && win[i].id <= s->c->id; i++)
		if (win[i].state != WAL_WINDOW_INTACT && win[i].id >= sc->epoch_window)
			return 0;
	return 1;
}

/* The KV store beside the log: 0 (s->kv NULL when there is none), or -1. */
static int open_store(struct state *s, const char *wal_path, char *msg, size_t len)
{
	struct wal_error err = { 0 };
	struct stat st;
	char path[PATH_MAX];

	if (kvs_path(wal_path, path, sizeof path) < 0)
		return fail_msg(msg, len, "%s: the path of its KV store is too long", wal_path);
	if (stat(path, &st) < 0 && errno == ENOENT)
		s->kv = NULL;
	else if (kvs_reader_open(path, s->rec->log_id, &s->kv, &err) < 0)
		return fail_msg(msg, len, "%s", err.msg);
	return 0;
}

long state_pick(const struct wal_window *win, size_t nwin, uint64_t step,
		struct rec_window_steps *ws)
{
	size_t i, decode = 0;
	int damaged = 0;

	for (i = nwin; i > 0; i--) {
		/* A damaged window may have put copies of its own: the one
		 * before the newest intact one is gone then. */
		if (win[i - 1].state != WAL_WINDOW_INTACT) {
			damaged |= !decode;
			continue;
		}
		if (!rec_decode_window(&win[i - 1], ws))
			continue;
		/* The newest decode window, or the one before it in its epoch:
		 * the store keeps a chunk's newest copy and the one before. */
		if (decode && win[i - 1].epoch != win[decode - 1].epoch)
			return -1;
		if (step == STATE_NEWEST || ws->first_step + ws->steps - 1 == step)
			return (long)(i - 1);
		if (decode || damaged)
			return -1;
		decode = i;
	}
	if (decode)
		return -1;
	/* No kernels logged: a scheduler's process, its requests alone, any
	 * adapter window of its newest one's epoch. */
	for (i = nwin; i > 0; i--) {
		if (!rec_requests_window(&win[i - 1], ws))
			continue;
		if (step == STATE_NEWEST || ws->first_step + ws->steps - 1 == step)
			return (long)(i - 1);
		for (size_t k = i - 1; k > 0; k--)
			if (win[k - 1].epoch != win[i - 1].epoch)
				break;
			else if (rec_requests_window(&win[k - 1], ws) &&
				 ws->first_step + ws->steps - 1 == step)
				return (long)(k - 1);
		return -1;
	}
	return -1;
}

int state_load(struct state *s, const char *wal_path, char *msg, size_t msglen)
{
	return state_load_at(s, wal_path, STATE_NEWEST, msg, msglen);
}

int state_load_at(struct state *s, const char *wal_path, uint64_t step, char *msg, size_t msglen)
{
	struct wal_error err = { 0 };
	const struct wal_window *win;
	struct scan sc = { 0 };
	size_t nwin;
	long pick;
	int ret = -1;

	memset(s, 0, sizeof *s);
	hist_init(&s->hist);
	if (wal_reader_open_path(wal_path, &s->r, &err) < 0)
		return fail_msg(msg, msglen, "%s", err.msg);
	s->rec = wal_reader_recovery(s->r);
	win = wal_reader_windows(s->r, &nwin);
	if ((pick = state_pick(win, nwin, step, &s->cs)) < 0) {
		if (step == STATE_NEWEST)
			fail_msg(msg, msglen, "%s: no committed decode window (%zu committed window%s, "
			     "none with decode steps): nothing to restore", wal_path, nwin,
			     nwin == 1 ? "" : "s");
		else
			fail_msg(msg, msglen, "%s: no window it can restore ends at step %" PRIu64,
			     wal_path, step);
		ret = STATE_NOTHING;
		goto out;
	}
	s->c = &win[pick];
	if (open_store(s, wal_path, msg, msglen) < 0)
		goto out;
	if (routing_windows(s, win, nwin) < 0 || scan(s, &sc) < 0 || requests(s) < 0)
		goto oom;
	/* An adapter's window stands for the state only in a process that
	 * logged no KV: one whose decode windows are gone (reclaimed, failed)
	 * cannot be restored from its requests alone. */
	if ((s->cs.flags & WINDOW_REQUESTS) && (s->kvrefs || kv_pool_logged(&sc))) {
		fail_msg(msg, msglen, "%s: the process of window %" PRIu64 " logged KV, and no decode "
		     "window of it is left: nothing to restore", wal_path, s->c->id);
		ret = STATE_NOTHING;
		goto out;
	}
	s->history_complete = complete(s, &sc);
	if (replay(s, &sc) < 0 || pools(s, &sc) < 0)
		goto oom;
	ret = 0;
	goto out;
oom:
	fail_msg(msg, msglen, "out of memory");
out:
	free(sc.ev);
	free(sc.kr);
	if (ret < 0)
		state_free(s);
	return ret;
}

void state_free(struct state *s)
{
	for (unsigned i = 0; s->pool && i < s->npools; i++)
		free(s->pool[i].ref);
	free(s->pool);
	free(s->alloc);
	free(s->win);
	free(s->req.payload);
	free(s->req.len);
	hist_free(&s->hist);
	kvs_reader_close(s->kv);
	wal_reader_close(s->r);
	memset(s, 0, sizeof *s);
}

uint64_t state_chunk_len(const struct state_pool *p, uint64_t chunk)
{
	uint64_t left = p->info.d.size - chunk * p->info.d.chunk_bytes;

	return left < p->info.d.chunk_bytes ? left : p->info.d.chunk_bytes;
}

/* The newest KVREF of the chunk that belongs to the pool's allocation. */
static const struct state_ref *find_ref(const struct state_pool *p, uint64_t chunk)
{
	size_t lo = 0, hi = p->nref;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->ref[mid].chunk < chunk)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == p->nref || p->ref[lo].chunk != chunk || p->ref[lo].window < p->floor)
		return NULL;
	return &p->ref[lo];
}

int state_chunk(const struct state *s, const struct state_pool *p, uint64_t chunk,
		const uint8_t **data, uint32_t *crc, char *why, size_t whylen)
{
	const struct state_ref *ref = find_ref(p, chunk);
	uint64_t want = state_chunk_len(p, chunk), window = 0;
	uint32_t len = 0;
	int st = kvs_reader_chunk(s->kv, p->no, chunk, s->c->id, data, &len, &window, crc);

	if (st == KVS_CHUNK_DAMAGED) {
		snprintf(why, whylen, "damaged in the KV store");
		return STATE_CHUNK_LOST;
	}
	if (st != KVS_CHUNK_OK && st != KVS_CHUNK_NONE) {
		snprintf(why, whylen, "the KV store cannot say (%s)", wal_strerror(st));
		return STATE_CHUNK_LOST;
	}
	if (st == KVS_CHUNK_NONE || window < p->floor) {
		if (!ref)
			return STATE_CHUNK_ZERO;
		snprintf(why, whylen, "the log references window %llu's copy, the KV store has "
			 "none", (unsigned long long)ref->window);
		return STATE_CHUNK_LOST;
	}
	if (ref && ref->window > window)
		snprintf(why, whylen, "the log references window %llu's copy, the KV store holds "
			 "window %llu's", (unsigned long long)ref->window, (unsigned long long)window);
	else if (ref && ref->window == window && (ref->crc != *crc || ref->len != len))
		snprintf(why, whylen, "window %llu's copy has CRC %08x and %u bytes, its KVREF "
			 "says %08x and %u", (unsigned long long)window, (unsigned)*crc, (unsigned)len,
			 (unsigned)ref->crc, (unsigned)ref->len);
	else if (len != want)
		snprintf(why, whylen, "window %llu's copy holds %u of the chunk's %llu bytes",
			 (unsigned long long)window, (unsigned)len, (unsigned long long)want);
	else
		return STATE_CHUNK_DATA;
	return STATE_CHUNK_LOST;
}

void state_routing_init(struct state_iter *it, const struct state *s)
{
	memset(it, 0, sizeof *it);
	it->s = s;
	wal_iter_init(&it->it, s->r);
}

int state_routing_next(struct state_iter *it, struct wal_record *rec)
{
	struct rec_routing rt;

	while (wal_iter_next(&it->it, rec) && rec->window <= it->s->c->id)
		if (is_routing(it->s, &it->wi, rec) &&
		    rec_routing_decode(rec->payload, rec->len, &rt) == 0)
			return 1;
	return 0;
}

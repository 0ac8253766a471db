/*
 * state.h - the state of the last committed decode window of a log, read
 * offline from the log and its KV store (no CUDA): what `moeft restore`
 * materialises.
 *
 * The last committed decode window C is the newest intact window whose
 * WINDOW extra bytes are a window's steps with steps > 0.  As of C:
 *
 *  - the allocation table of C's writer epoch (the process that committed
 *    C): its ALLOC and FREE records up to C replayed in log order, an ALLOC
 *    of a live id replacing it (the preload logs one again when the
 *    allocation becomes a KV pool).  The history is complete when the
 *    epoch's EPOCH record is still in the log and no window between it and
 *    C is damaged; otherwise allocations made before the retained part are
 *    missing.
 *
 *  - the KV pools: the store's pools that a live KV-pool allocation of the
 *    table matches (fingerprint, size, ordinal); a live KV-pool allocation
 *    that none matches is missing (its table entry damaged, or reclaimed
 *    by a later process, whose window is then not intact).  A store pool outlives
 *    its allocation (a later process, or a later allocation of the same
 *    call site, gets the same pool back), but the snapshot of a new
 *    allocation starts from zeros and copies only the chunks that differ:
 *    a copy older than the window in which the allocation became a KV pool
 *    belongs to the earlier one, and the chunk reads as zeros.  With an
 *    incomplete history an unmatched pool may still be live, so it is
 *    kept, with nothing taken as stale.
 *
 *  - each chunk: its newest store copy of a window <= C (kvs_reader_chunk),
 *    checked against the newest KVREF record of the chunk up to C in C's
 *    epoch (a pool number of another epoch may be another pool's now: a
 *    reclaim frees numbers).  The
 *    chunk is lost when the store says damaged, when the log references a
 *    newer copy than the store holds, when the KVREF of the copy's window
 *    disagrees with it (CRC, length), or when the copy does not fill the
 *    chunk.
 *
 *  - the routing: the ROUTING records of the intact decode windows of C's
 *    epoch up to C (steps restart at 0 in every process), and per layer
 *    the tokens routed to each expert.
 *
 *  - the engine's requests: in a log with an engine adapter's windows
 *    (WINDOW_REQUESTS) and no decode window, a scheduler's process that
 *    logs no kernels, C is the newest adapter's window and its REQUEST
 *    records are the requests.  Where the preload also logs this
 *    process's kernels, the engine's steps and the preload's are not
 *    paired yet: no requests are taken.  A process that logged KV and has
 *    no decode window left is nothing to restore (not its requests alone).
 *
 * The log and the store are untrusted: records that do not decode, or
 * KVREFs of a chunk the store lacks, are counted (state.bad), never used.
 */
#ifndef MOEFT_STATE_H
#define MOEFT_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "hist.h"
#include "kvstore.h"
#include "record.h"
#include "wal.h"

/* An allocation live as of C. */
struct state_alloc {
	struct rec_alloc a;     /* its newest ALLOC record */
	uint64_t kv_window;     /* the window in which it became a KV pool */
	int kv_known;           /* kv_window is known (0: unknown or not a pool) */
};

/* The newest KVREF record of a chunk up to C. */
struct state_ref {
	uint64_t chunk, window;
	uint32_t crc, len;
};

struct state_pool {
	uint32_t no;                    /* the KV store's pool number */
	struct kvs_pool_info info;
	const struct state_alloc *alloc;/* its live allocation; NULL: none known */
	uint64_t floor;                 /* copies of older windows are stale */
	struct state_ref *ref;          /* by chunk, the chunks with one */
	size_t nref;
};

/* The engine's requests as of the adapter's window w, which is C (NULL:
 * none). */
struct state_requests {
	const struct wal_window *w;
	struct rec_window_steps s;
	size_t n;
	const uint8_t **payload;        /* n REQUEST payloads, in the reader's
					   mapping, each decoding */
	uint32_t *len;
};

/* A decode window whose routing is restored. */
struct state_window {
	uint64_t id;
	struct rec_window_steps s;
};

struct state {
	struct wal_reader *r;
	const struct wal_recovery *rec;
	struct kvs_reader *kv;          /* NULL: the log has no KV store */
	const struct wal_window *c;     /* the last committed decode window */
	struct rec_window_steps cs;     /* its steps */
	int history_complete;
	struct state_alloc *alloc;      /* by alloc id */
	size_t nalloc;
	struct state_pool *pool;        /* by pool number */
	unsigned npools;
	unsigned stale_pools;           /* store pools left out: no live allocation */
	unsigned missing_pools;         /* live KV-pool allocations with no store pool */
	struct state_window *win;       /* oldest first; the last is C */
	size_t nwin;
	uint64_t routing;               /* ROUTING records of win */
	struct hist hist;               /* their expert usage */
	uint64_t kvrefs;                /* KVREF records of C's epoch up to C */
	uint64_t bad;                   /* records up to C that cannot be used */
	struct state_requests req;
};

/* state_load_at's step for the newest window a restore can take. */
#define STATE_NEWEST UINT64_MAX

/*
 * The window of a log a restore takes as C, its last step `step`
 * (STATE_NEWEST: the newest one): a decode window, the newest or the one
 * before it in its epoch (the KV store keeps a chunk's newest copy and
 * the one before, so no earlier state is whole; the newest only when a
 * damaged window follows it, which may have put copies); else, in a log with no
 * decode window, an adapter window of its newest one's epoch.  Its index
 * in win with *ws its steps, or -1.
 */
long state_pick(const struct wal_window *win, size_t nwin, uint64_t step,
		struct rec_window_steps *ws);

/*
 * Read the log at wal_path and its KV store (wal_path + ".kv"; a missing
 * one is no error: device-DAX and routing-only logs have none).  0;
 * STATE_NOTHING when the log has no committed decode window nor adapter's
 * window; or -1.  On
 * failure msg names what is wrong: the log cannot be read, it has no
 * committed decode window, the store belongs to another log or cannot be
 * read, out of memory.
 */
#define STATE_NOTHING (-2)
int state_load(struct state *s, const char *wal_path, char *msg, size_t msglen);
/* The same as of the window state_pick gives for step: STATE_NOTHING when
 * there is none. */
int state_load_at(struct state *s, const char *wal_path, uint64_t step, char *msg,
		  size_t msglen);
void state_free(struct state *s);

enum state_chunk_kind {
	STATE_CHUNK_DATA = 0,   /* *data, len bytes */
	STATE_CHUNK_ZERO = 1,   /* never written as of C: zeros */
	STATE_CHUNK_LOST = 2    /* why says why */
};

/* Bytes of chunk `chunk` of p (the last one holds what is left). */
uint64_t state_chunk_len(const struct state_pool *p, uint64_t chunk);

/* Chunk `chunk` (< p->info.nchunks) of pool p as of C; with data, *crc is
 * its CRC-32C, verified against the bytes. */
int state_chunk(const struct state *s, const struct state_pool *p, uint64_t chunk,
		const uint8_t **data, uint32_t *crc, char *why, size_t whylen);

/* The ROUTING records of s->win in log order: the s->routing records that
 * were counted into s->hist. */
struct state_iter {
	const struct state *s;
	struct wal_iter it;
	size_t wi;
};
void state_routing_init(struct state_iter *it, const struct state *s);
int state_routing_next(struct state_iter *it, struct wal_record *rec);

#endif

/*
 * window.h - decode windows assembled from the capture ring and committed.
 *
 * The consumer thread hands every ring entry to wa_entry, in ring order,
 * which on each stream is execution order.  Three kinds of entries, told
 * apart by the rule field of their tag (WA_TAG):
 *  - a step marker, which the preload enqueued on a stream as that stream
 *    started a step: later routing entries of that stream (lane) belong to
 *    the step the marker carries;
 *  - routing ids of a rule hit: step from its lane's marker, layer from the
 *    entry (its `step` field carries the layer ordinal, which graphs record
 *    once and replay);
 *  - a snapshot mark, enqueued on the preload's side stream after the
 *    streams of the window and the KV snapshot kernels: everything of the
 *    window is in the ring before it, and the staging area holds the KV
 *    chunks that changed.
 * At a snapshot mark for step B, the window of steps [previous mark, B) is
 * committed: KV chunks into the KV store (data first), then its KVREF and
 * ROUTING records, then the WINDOW record (wal_commit) with its steps and
 * flags.  When the snapshot found no room for some chunks, the staged ones
 * are first copied out (held in memory) and another pass stages the rest,
 * its mark coming back for the same step; the window commits at the mark
 * of the pass that staged everything (sink.more).  Routing waits in memory until then, so a window's records are
 * never split by the allocation windows committed meanwhile.
 */
#ifndef MOEFT_WINDOW_H
#define MOEFT_WINDOW_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "capture.h"
#include "kvsnap.h"
#include "kvstore.h"
#include "wal.h"

/* An entry's tag: rule (or WA_RULE_*), experts when the rule gives them
 * (else 0), and a 32-bit id of the stream. */
#define WA_TAG(rule, experts, lane) \
	((uint64_t)(rule) << 48 | (uint64_t)((experts) & 0xffff) << 32 | (uint32_t)(lane))
#define WA_TAG_RULE(tag) ((unsigned)((tag) >> 48))
#define WA_TAG_EXPERTS(tag) ((uint32_t)((tag) >> 32) & 0xffff)
#define WA_TAG_LANE(tag) ((uint32_t)(tag))

enum { WA_RULE_SNAP = 0xfffe, WA_RULE_MARKER = 0xffff, WA_MAX_RULES = 0xfffe };

/* The 32-bit lane id of a stream handle. */
static inline uint32_t wa_lane(uint64_t stream)
{
	return (uint32_t)(stream ^ stream >> 32);
}

/*
 * The lane of every launch recorded into a graph.  A graph may be
 * replayed on another stream than the one it was captured on
 * (torch.cuda.graph captures on a side stream), and the replay's stream
 * is all a launch names: so captured entries share this lane, and every
 * graph launch marks it with the step as it marks its own stream.
 */
#define WA_LANE_GRAPH UINT32_C(0xffffffff)

struct wa_sink {
	struct wal *wal;
	struct kvs *kvs;             /* NULL: windows carry no KV */
	pthread_mutex_t *log_lock;   /* held around every append and commit */
	uint64_t first_step;         /* of the first window: 0, or a resumed step */
	/* KV pools the store could not take (NULL: none ever): while not 0,
	 * every window lacks their KV and is committed KV-partial. */
	unsigned (*untracked)(void);
	/* Whether the staging header of the boundary whose mark arrived is
	 * back (NULL: take it as back): its counters come by a copy that the
	 * mark's own write to the ring does not order, so the event after the
	 * copy says. */
	int (*staged)(void);
	/* Have the next snapshot stage every chunk again (NULL: nothing to
	 * do): chunks a snapshot staged did not reach the store, yet their
	 * sums say they did. */
	void (*restage)(void);
	/* Another pass for the window ending at step, whose snapshot found
	 * no room for some chunks (snapshot.h's snap_continue; NULL: none):
	 * 0, and its mark comes back as the window's, or -1. */
	int (*more)(uint64_t step);
	/* No stream waits for the window any more (NULL: none ever does). */
	void (*release)(void);
	/* Whether the streams were held through the window's last pass
	 * (NULL: always): when capture stopped they were let go, and the pass
	 * read the pools as they moved on. */
	int (*live)(void);
	/* Whether a further pass may be asked for (NULL: yes): not when the
	 * streams wait for each snapshot's end instead of being held
	 * (snapshot.h, snap_holds). */
	int (*holds)(void);
};

struct wa_stats {
	uint64_t entries;       /* routing entries received */
	uint64_t windows, routing, unplaced, kv_chunks, kv_bytes, failures;
	uint64_t commit_ns, commit_max_ns;  /* time in commits, all and longest */
};

struct window_asm;

struct window_asm *wa_create(const struct wa_sink *sink);
void wa_destroy(struct window_asm *wa);

/* The staging area snapshot marks refer to (NULL: none), and the flag the
 * assembler clears once it has copied a snapshot out of it. */
void wa_set_stage(struct window_asm *wa, const struct kv_stage *stage, atomic_int *busy);

/* A ring_fn (ring.h): one entry, in ring order.  The consumer thread's. */
void wa_entry(void *wa, const struct cap_entry *e, const void *payload, size_t len);

/* The open window's mark was lost (snapshot.h, snap_forget): the chunks
 * its earlier passes took go, and the next snapshot, which stages every
 * chunk, brings the window its KV. */
void wa_drop_held(struct window_asm *wa);

/*
 * The open window, which ends before step end, is given up while a pass
 * of its snapshot is still queued (snapshot.h, snap_unhold), before the
 * streams it held go on: committed now, KV-partial, with the chunks its
 * earlier passes took, so that the next step's routing goes to the next
 * window; the next snapshot stages every chunk again.  The queued pass's
 * mark, when it comes, ends nothing, and clears busy.
 */
void wa_give_up(struct window_asm *wa, uint64_t end);

/* Appends the GPU dropped (ring full): the open window lacks routing. */
void wa_gap(struct window_asm *wa, uint64_t entries);

/* Counters, readable from any thread. */
void wa_stats(const struct window_asm *wa, struct wa_stats *st);

#endif

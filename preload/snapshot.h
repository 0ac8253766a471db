/*
 * snapshot.h - the device side of a window boundary: KV pools, the staging
 * area, the side stream.
 *
 * When the process enters the first step of a window (clock.h), the
 * launching thread calls snap_boundary before forwarding the launch that
 * starts the step.  It enqueues, without waiting for anything:
 *
 *   each stream of the window:   record event E_i
 *   side stream:                 wait E_i for all i;
 *                                moeft_kv_header: the staging header to
 *                                the device's copy;
 *                                moeft_kv_snapshot per KV pool (staging);
 *                                moeft_kv_header: the header back;
 *                                a snapshot mark into the capture ring;
 *                                record event D;
 *                                moeft_kv_release: flag = G when every
 *                                changed chunk found room
 *   each stream of the window:   wait until flag >= G (cuStreamWaitValue32)
 *
 * so the KV pools are read at the boundary, in stream order, and the
 * serving streams wait only for the device-side pass (hash and copy of the
 * changed chunks into pinned staging), never for the host, as long as the
 * staging area holds what the window changed.  When it does not, the
 * release is left to the host: the consumer copies what was staged out of
 * the staging area and has the rest staged by another pass
 * (snap_continue: the chunks still marked dirty, or still unlike their
 * sums), with its own mark and release, until a pass finds room for all;
 * the serving streams wait meanwhile (back-pressure), so the window is
 * still one cut of the pools.  A pass makes no copy (its header moves by
 * a kernel), yet a GPU may still queue it behind a stream it holds: a
 * further pass that has not begun in a second lets the streams go, the
 * window goes KV-partial, and the streams wait for each snapshot's end
 * from then on (snap_stalled).  Staging is sized to the most a window has
 * changed and a quarter more, not to the pools.  Where the device has no stream
 * memory operations the streams wait for D instead, staging is sized to
 * the pools, and a window that changes more than it holds is committed
 * KV-partial.  The consumer
 * thread, reaching the mark, copies the staging area into the KV store and
 * commits the window (window.h), then clears the busy flag; a host wait
 * that returns once the snapshot is done delivers the mark itself unless
 * MOEFT_COMMIT=async (capturing.c, capture_sync).  A boundary
 * that finds the staging area still busy is skipped: the open window grows
 * by another MOEFT_WINDOW steps.
 *
 * Which chunks a snapshot reads: each pool has a dirty bitmap that the
 * mark after every hit of a KV rule with stride= sets (snap_mark,
 * kvsnap.h), and a snapshot reads only the marked chunks; a pool that
 * something else writes (a rule without stride=, MOEFT_KV,
 * MOEFT_KV_TRACK=hash) is read whole at every boundary.
 *
 * Callers serialise every call here (capture_lock).
 */
#ifndef MOEFT_SNAPSHOT_H
#define MOEFT_SNAPSHOT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "capture.h"
#include "kvsnap.h"

#define SNAP_STAGE_MIN (UINT64_C(1) << 20)

/* A KV pool to snapshot: the allocation [base, base + size), in chunks of
 * chunk bytes, numbered pool_no in the KV store; hashed: every snapshot
 * reads all of it (MOEFT_KV's pools, MOEFT_KV_TRACK=hash).  0, or
 * WAL_ENOMEM. */
int snap_add_pool(uint64_t alloc_id, uint64_t base, uint64_t size, uint64_t chunk,
		  uint32_t pool_no, int hashed);
/*
 * A KV rule hit h: fill *m, the mark of the blocks its slots name, for
 * the pools it writes that are read by their marks, and return how many
 * those are (0: no mark to enqueue).  A pool that h writes without a
 * stride (or whose bitmap finds no memory) is hashed whole from now on:
 * a write no mark sees must not be missed.  Under the caller's lock, the
 * hit's pools added first (pools.h); m then goes to kernels_mark on the
 * hit's stream, after its launch.
 */
struct rule_hit;
unsigned snap_mark(const struct rule_hit *h, struct kv_mark_args *m);

/* The allocation is about to be freed: never read it again. */
void snap_drop_pool(uint64_t alloc_id);
/* Whether alloc_id is a pool already. */
int snap_has_pool(uint64_t alloc_id);

/*
 * Enqueue the boundary before process step mark->step for the streams in
 * lanes[] (stream handles), then *mark, the snapshot mark, into the
 * capture ring, for the window assembler wa: it is handed the staging area
 * and the busy flag, which is set, before anything is enqueued, so that a
 * consumer draining the mark at once finds the chunks the mark refers to.
 * Returns 1 when enqueued, 0 when skipped (staging busy), -1 with one line
 * in why when the device refused something: the caller stops capture
 * (what was enqueued is harmless: at worst a mark the consumer never sees).
 */
struct window_asm;
int snap_boundary(const struct cap_append_args *mark, void *const *lanes, unsigned n,
		  struct window_asm *wa, char *why, size_t whylen);

/*
 * Another pass for the window whose mark was just handled, which found no
 * room for some chunks (their dirty bits are still set, their sums still
 * old): its header's counters and the staged chunks were taken out of the
 * staging area, which the pass reuses.  *mark goes into the ring after it,
 * as the boundary's did.  The consumer's, while busy.  0, or -1 with one
 * line in why (no back-pressure, or the device refused something): the
 * serving streams are then released (snap_release), and the window lacks
 * what found no room.
 */
int snap_continue(const struct cap_append_args *mark, char *why, size_t whylen);

/* Release the serving streams from the host, whatever the window's passes
 * still lack: when the window is given up (its mark lost, capture
 * stopped, the process exiting), so that no stream ever waits for a pass
 * that will not come.  Any thread. */
void snap_release(void);

/* No consumer any more (exit): release the streams, enqueue no boundary
 * from now on, and release again once the side stream's last pass is
 * through (a second at most). */
void snap_close(void);

/* The busy flag: set from a boundary until its window is committed. */
atomic_int *snap_busy(void);

/*
 * A lost snapshot mark (an append the GPU dropped because the ring was
 * full) would leave busy set for good.  The consumer's check: once the
 * boundary's device work has completed (snap_done), a drain must deliver
 * the mark; when busy is still set after it, and that drain enqueued no
 * further pass (snap_passes counts them: the mark it delivered may have
 * asked for one), the mark is lost, and the chunks it staged never reached
 * the KV store although their sums say they did.  snap_forget then has the
 * next snapshot stage every chunk (KVSNAP_FORCE) and clears busy.
 */
int snap_done(void);
unsigned snap_passes(void);
/*
 * A further pass (a first one is enqueued before the streams' waits, and
 * may wait for their earlier work as long as it takes) that has not begun
 * SNAP_STALL_NS after it was enqueued while the serving streams wait for
 * it (a slow one that has begun is left to finish): a GPU may queue the
 * work of several streams in one hardware queue, where moeft's side
 * stream then waits behind a serving stream that waits for moeft (CUDA
 * promises no progress between streams).  The consumer's check: the step the stalled pass's window ends
 * before, or 0.  The consumer then gives the window up (window.h,
 * wa_give_up) and snap_unhold lets the streams go and has every later
 * boundary's streams wait for its snapshot's end instead: no further
 * passes (snap_holds is 0), staging sized to the pools where the driver
 * pins that much, else a window that changes more than it holds is
 * KV-partial.
 */
#define SNAP_STALL_NS (UINT64_C(1000) * 1000 * 1000)
uint64_t snap_stalled(void);
void snap_unhold(void);
/* Whether the serving streams wait for the release flag (further passes
 * possible), not for each snapshot's end. */
int snap_holds(void);
/* The boundary's state in one line, for a stall's report. */
void snap_state(char *buf, size_t len);
void snap_forget(void);

/* Whether the staging header of the boundary whose mark arrived is back
 * for the host to read (window.h, wa_sink.staged): its event is recorded
 * before the mark, so once the mark is in the ring this holds, whatever
 * the host's view of the copy's writes. */
int snap_staged(void);

/* The next snapshot stages every chunk (KVSNAP_FORCE): some that a window
 * staged never reached the store (window.h, wa_sink.restage). */
void snap_restage(void);

/* Boundaries enqueued and skipped, the application's time enqueueing
 * them, and the device's time running them (of those timed). */
struct snap_counts {
	uint64_t enqueued, skipped, ns, gpu_ns, gpu_timed;
	uint64_t read_bytes;    /* pool bytes the enqueued snapshots read */
	uint64_t first_read_bytes; /* of which each pool's first snapshot
				      read, the pool whole */
	uint64_t passes;        /* passes after a boundary's first (staging
				   short of a window's changes) */
	uint64_t pinned_bytes;  /* the staging area's */
};
/* Under the caller's lock (a boundary may free the staging area). */
void snap_counts(struct snap_counts *c);

#endif

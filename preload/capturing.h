/*
 * capturing.h - capture (DESIGN.md, "Capture without synchronizing"): the
 * step clock, the capture ring and its consumer, window boundaries.
 *
 * After a launch that a routing rule hit, moeft_capture_append is enqueued
 * on the launch's stream: the GPU appends the ids to a ring in pinned,
 * mapped host memory, and a consumer thread drains it into windows
 * (window.h).  Before a launch that starts a step (clock.h), a step marker
 * goes the same way, and before the first step of a window the boundary
 * (snapshot.h).  Nothing waits for the GPU, and inside a stream capture the
 * appends are recorded into the graph like any launch, so they replay with
 * it.
 *
 * The device side opens at the first rule hit, not at start: only then is
 * a context sure to be current (start runs before the application's first
 * CUDA call reaches the driver).  The consumer thread starts with it.
 *
 * The capture lock serialises the clock, the boundaries and the KV pools
 * they snapshot (pools.h); it is taken before the log's order lock
 * (allocs.h) and before restore mode's (resume.h).
 */
#ifndef MOEFT_CAPTURING_H
#define MOEFT_CAPTURING_H

#include <stdint.h>

#include "alloc_table.h"
#include "profile.h"
#include "snapshot.h"
#include "window.h"

struct wal;
struct kvs;

struct capture_setup {
	struct wal *wal;
	struct kvs *kvs;          /* NULL: windows carry no KV */
	unsigned window;          /* MOEFT_WINDOW */
	uint64_t ring_bytes;      /* MOEFT_RING */
	int commit_async;         /* MOEFT_COMMIT=async */
};

void capture_init(const struct capture_setup *s);

/* A new allocation, which may be a KV pool (pools.h). */
void capture_new_alloc(const struct alloc_info *a);

/* What follows a hit's launch in its stream: the capture of a routing
 * hit, or the mark of a KV hit's blocks. */
struct capture_after {
	void *stream;
	int rule;
	uint32_t layer;
	uint32_t lane;           /* of the entry (window.h) */
	struct rule_hit hit;
	struct kv_mark_args mark; /* KV: its pools (snapshot.h) */
};

/* Rule `rule` hit h on a launch about to run on stream: move the clock
 * (which may enqueue a boundary and a step marker ahead of the launch).
 * 1 when *after must go to capture_after once the launch succeeded. */
int capture_hit(int rule, const struct rule_hit *h, void *stream, struct capture_after *after);
void capture_after(const struct capture_after *after);

/* A graph is about to be launched on stream (a step starts there). */
void capture_graph_launch(void *stream);

/* A stream capture began on stream: its routing layers count from 0. */
void capture_began(void *stream);

/*
 * The calling thread's wait for the GPU returned.  When a boundary is in
 * flight and its snapshot is done on the device, what the application
 * waited for may be a step past the boundary: its results (tokens a server
 * streams out) must not reach the application before the window that
 * precedes them is committed, or a crash could lose more than a window of
 * results.  So the window is committed before this returns, unless
 * MOEFT_COMMIT=async.
 */
void capture_sync(void);

struct capture_stats {
	unsigned long long gaps;     /* appends that never reached the ring */
	long long steps;             /* the process's steps so far */
	struct snap_counts snap;     /* boundaries (snapshot.h) */
	uint64_t sync_ns;            /* time in host waits that commit a window */
};

void capture_stats(struct capture_stats *st, struct wa_stats *win);

#endif

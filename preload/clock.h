/*
 * clock.h - the decode-step clock: which step and layer each captured
 * launch belongs to, and when a window of MOEFT_WINDOW steps ends.
 *
 * The rules (preload/STEPS.md has the user's version):
 *
 * A lane is a stream as the launches name it.  A lane starts a step at
 *  - a graph launch (a graph replays one whole decode step);
 *  - a launch of a kernel a `step` rule names (a marker);
 *  - its first KV-write launch ever, and every KV-write launch whose key
 *    (the first pool pointer: per-layer caches make it the layer) is the
 *    key the lane's current step began with: the forward pass came round
 *    to its first layer again;
 *  - on a lane that has never written KV, a routing launch by a thread
 *    that has waited for the GPU since it launched the lane's last one; or
 *    whose row count is not that of the step's first one; or that finds
 *    the step holding as many as the last step those ended (routing_starts
 *    in clock.c).
 * A routing launch's layer is its ordinal among the routing launches of
 * its lane's step.
 *
 * The process's step is one clock for all lanes: a lane starting a step
 * joins the process's current step if it has not taken part in it yet (two
 * streams each running half of a batch), unless its host thread took part
 * in that step and has waited for the GPU since (a stream synchronize, an
 * event synchronize: the thread has its results, the step is over for
 * it); else the process moves to the next step.  Every `window` process
 * steps a window ends.
 *
 * Launches recorded into a graph (the lane is capturing) are not steps:
 * they only get their layer ordinals, counted from the capture's first
 * routing launch (a captured KV key or marker starts the count again), and
 * the graph's replays supply the steps.
 *
 * Not thread-safe: the caller serialises calls.  No CUDA, no allocation
 * after clk_create.
 */
#ifndef MOEFT_CLOCK_H
#define MOEFT_CLOCK_H

#include <stdint.h>

#define CLK_MAX_LANES 64u
#define CLK_STEP_THREADS 8u  /* threads remembered per step */

enum clk_kind {
	CLK_KV = 1,      /* a KV-write launch; key: its first pool pointer */
	CLK_ROUTING = 2, /* a routing launch; no key (0) */
	CLK_MARKER = 3,  /* a `step` rule's kernel; no key */
	CLK_GRAPH = 4    /* a graph launch */
};

/* The calling host thread: an id, and how many times it has waited for
 * the GPU so far. */
struct clk_thread {
	uint64_t id;
	uint64_t syncs;
};

struct clk_tick {
	int new_step;    /* the launch starts a step of its lane */
	int lane_first;  /* ... its first step */
	int boundary;    /* ... and the process entered the first step of a
			    window: the previous window ended before it */
	uint64_t step;   /* the lane's step (0 while capturing) */
	uint32_t layer;  /* CLK_ROUTING: ordinal within the lane's step */
};

struct clock;

/* window: steps per window, >= 1.  NULL without memory. */
struct clock *clk_create(unsigned window);
void clk_destroy(struct clock *c);

/* A launch of kind on lane by thread th; rows: a routing launch's token
 * rows (0: unknown).  Returns 0 with *t filled, or -1 when the lane is new
 * and CLK_MAX_LANES lanes are known (nothing changed). */
int clk_hit(struct clock *c, uint64_t lane, int kind, uint64_t key, uint64_t rows,
	    int capturing, const struct clk_thread *th, struct clk_tick *t);

/* Lanes whose latest step is `since` or later, at most max of them, into
 * lanes[]: those that took part in the window beginning at `since`. */
unsigned clk_lanes(const struct clock *c, uint64_t since, uint64_t *lanes, unsigned max);

/* The process's current step, or -1 before the first. */
int64_t clk_step(const struct clock *c);

/* A process resuming after step `last` (restore mode): its first step is
 * last + 1, and entering it ends no window. */
void clk_resume(struct clock *c, uint64_t last);

/* A stream capture began on lane: its ordinals count from 0 again, also
 * when the lane's last capture ended with no launch outside one since. */
void clk_capture_begin(struct clock *c, uint64_t lane);

#endif

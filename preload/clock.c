/*
 * clock.c - the decode-step clock (clock.h has the rules).
 */
#include <stdlib.h>

#include "clock.h"

/* A lane's count of routing launches, the key its step began with and the
 * rows of the step's first routing launch. */
struct count {
	uint64_t first_key;     /* 0: none yet */
	uint64_t first_rows;    /* 0: none yet */
	uint32_t routing;
};

struct lane {
	uint64_t id;
	int64_t step;           /* latest process step it took part in; -1: none */
	int kv;                 /* it has written KV: routing no longer starts steps */
	int capturing;
	uint32_t layers;        /* routing launches of its last step that a wait
				   or a row count ended: the model's MoE layers */
	struct clk_thread router; /* the thread of its last routing launch, with
				     its waits then */
	struct count live, captured;
};

struct clock {
	unsigned window;
	int64_t step;           /* the process's; -1 before the first */
	int64_t first;          /* the first step: 0, or a resumed one */
	/* Threads that took part in the process's step, with their syncs then
	 * (only the first CLK_STEP_THREADS). */
	unsigned nthreads;
	struct clk_thread threads[CLK_STEP_THREADS];
	unsigned nlanes;
	struct lane lanes[CLK_MAX_LANES];
};

struct clock *clk_create(unsigned window)
{
	struct clock *c;

	if (window == 0 || !(c = calloc(1, sizeof *c)))
		return NULL;
	c->window = window;
	c->step = -1;
	return c;
}

void clk_destroy(struct clock *c)
{
	free(c);
}

int64_t clk_step(const struct clock *c)
{
	return c->step;
}

void clk_resume(struct clock *c, uint64_t last)
{
	c->step = (int64_t)last;
	c->first = (int64_t)last + 1;
}

static struct lane *lane_of(struct clock *c, uint64_t id)
{
	struct lane *l;
	unsigned i;

	for (i = 0; i < c->nlanes; i++)
		if (c->lanes[i].id == id)
			return &c->lanes[i];
	if (c->nlanes == CLK_MAX_LANES)
		return NULL;
	l = &c->lanes[c->nlanes++];
	l->id = id;
	l->step = -1;
	return l;
}

/* Whether th took part in the process's step and has synced since. */
static int thread_done(const struct clock *c, const struct clk_thread *th)
{
	unsigned i;

	for (i = 0; i < c->nthreads; i++)
		if (c->threads[i].id == th->id)
			return c->threads[i].syncs != th->syncs;
	return 0;
}

static void thread_took_part(struct clock *c, const struct clk_thread *th)
{
	unsigned i;

	for (i = 0; i < c->nthreads && c->threads[i].id != th->id; i++)
		;
	if (i < CLK_STEP_THREADS) {
		c->threads[i] = *th;
		c->nthreads += i == c->nthreads;
	}
}

/* The lane starts a step: it joins the process's step or opens the next. */
static void start_step(struct clock *c, struct lane *l, uint64_t key,
		       const struct clk_thread *th, struct clk_tick *t)
{
	/* A resumed process's current step is the dead process's: never join it. */
	if (l->step >= c->step || c->step < c->first || thread_done(c, th)) {
		c->step++;
		c->nthreads = 0;
		t->boundary = c->step > c->first && c->step % c->window == 0;
	}
	thread_took_part(c, th);
	t->lane_first = l->step < 0;
	l->step = c->step;
	l->live.first_key = key;
	l->live.first_rows = 0;
	l->live.routing = 0;
	t->new_step = 1;
}

/* Whether a keyed launch starts a step of counter n: the first keyed one,
 * or one with the key the step began with. */
static int keyed_start(struct count *n, uint64_t key)
{
	if (n->first_key == 0) {
		n->first_key = key;
		return 0;
	}
	return key == n->first_key;
}

/*
 * Whether a routing launch of rows token rows by thread th starts a step of
 * a lane that never wrote KV: th launched the lane's last routing launch
 * too and has waited for the GPU since (it took the step's results: every
 * engine waits for the sampled tokens); or its row count is not the step's
 * (every layer of a forward pass routes the same tokens: a prefill's then a
 * decode's); or the step has as many routing launches as the last step
 * those two ended.  The ids pointer says nothing: PyTorch's caching
 * allocator hands every layer's top-k the block the layer before freed.
 */
static int routing_starts(struct lane *l, uint64_t rows, const struct clk_thread *th)
{
	struct count *n = &l->live;
	int waited = l->router.id == th->id && l->router.syncs != th->syncs;

	if (n->routing && (waited || (rows && n->first_rows && rows != n->first_rows))) {
		l->layers = n->routing;
		return 1;
	}
	return l->layers && n->routing >= l->layers;
}

static void hit_captured(struct lane *l, int kind, uint64_t key, struct clk_tick *t)
{
	struct count *n = &l->captured;

	switch (kind) {
	case CLK_MARKER:
		n->routing = 0;
		break;
	case CLK_KV:
		if (!l->kv) {
			l->kv = 1;
			n->first_key = 0;
		}
		if (keyed_start(n, key))
			n->routing = 0;
		break;
	case CLK_ROUTING:
		/* Counted from the capture's start: its replays are the steps. */
		t->layer = n->routing++;
		break;
	}
}

static void hit_live(struct clock *c, struct lane *l, int kind, uint64_t key, uint64_t rows,
		     const struct clk_thread *th, struct clk_tick *t)
{
	switch (kind) {
	case CLK_MARKER:
	case CLK_GRAPH:
		start_step(c, l, 0, th, t);
		break;
	case CLK_KV:
		if (!l->kv) {
			/* From now on the lane's KV writes mark its steps. */
			l->kv = 1;
			l->live.first_key = 0;
		}
		if (l->step < 0 || keyed_start(&l->live, key))
			start_step(c, l, key, th, t);
		break;
	case CLK_ROUTING:
		if (l->step < 0 || (!l->kv && routing_starts(l, rows, th)))
			start_step(c, l, l->live.first_key, th, t);
		if (!l->live.first_rows)
			l->live.first_rows = rows;
		l->router = *th;
		t->layer = l->live.routing++;
		break;
	}
	t->step = (uint64_t)l->step;
}

void clk_capture_begin(struct clock *c, uint64_t lane)
{
	struct lane *l = lane_of(c, lane);

	if (l) {
		l->captured = (struct count){ 0 };
		l->capturing = 1;
	}
}

int clk_hit(struct clock *c, uint64_t lane, int kind, uint64_t key, uint64_t rows,
	    int capturing, const struct clk_thread *th, struct clk_tick *t)
{
	struct lane *l = lane_of(c, lane);

	*t = (struct clk_tick){ 0 };
	if (!l)
		return -1;
	if (capturing && !l->capturing)
		l->captured = (struct count){ 0 };
	l->capturing = capturing;
	if (capturing)
		hit_captured(l, kind, key, t);
	else
		hit_live(c, l, kind, key, rows, th, t);
	return 0;
}

unsigned clk_lanes(const struct clock *c, uint64_t since, uint64_t *lanes, unsigned max)
{
	unsigned i, n = 0;

	for (i = 0; i < c->nlanes && n < max; i++)
		if (c->lanes[i].step >= 0 && (uint64_t)c->lanes[i].step >= since)
			lanes[n++] = c->lanes[i].id;
	return n;
}

/*
 * test_clock.c - the decode-step clock: steps, layers, lanes joining a
 * step, window boundaries, captures.
 */
#include <CUnit/Basic.h>

#include "clock.h"
#include "testutil.h"

enum { A = 0xa, B = 0xb };

/* The host thread of the hits below, unless a test says otherwise. */
static struct clk_thread me = { 1, 0 };

static struct clk_tick hit(struct clock *c, uint64_t lane, int kind, uint64_t key, int cap)
{
	struct clk_tick t;

	CU_ASSERT_EQUAL_FATAL(clk_hit(c, lane, kind, key, 0, cap, &me, &t), 0);
	return t;
}

/* One eager step of a 3-layer model on lane: per layer a KV write into
 * that layer's cache, then a routing launch; checks the layers. */
static uint64_t eager_step(struct clock *c, uint64_t lane, int *boundary)
{
	struct clk_tick t;
	uint64_t layer, step = 0;

	*boundary = 0;
	for (layer = 0; layer < 3; layer++) {
		t = hit(c, lane, CLK_KV, 0x1000 + layer * 0x100, 0);
		CU_ASSERT_EQUAL(t.new_step, layer == 0);
		*boundary |= t.boundary;
		if (layer == 0)
			step = t.step;
		CU_ASSERT_EQUAL(t.step, step);
		t = hit(c, lane, CLK_ROUTING, 0x9000, 0);
		CU_ASSERT_EQUAL(t.new_step, 0);
		CU_ASSERT_EQUAL(t.layer, layer);
		CU_ASSERT_EQUAL(t.step, step);
	}
	return step;
}

static void test_kv_keys(void)
{
	struct clock *c = clk_create(4);
	int boundary;
	uint64_t s;

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(clk_step(c), -1);
	for (s = 0; s < 10; s++) {
		CU_ASSERT_EQUAL(eager_step(c, A, &boundary), s);
		CU_ASSERT_EQUAL(boundary, s == 4 || s == 8);
	}
	CU_ASSERT_EQUAL(clk_step(c), 9);
	clk_destroy(c);
}

/* Two lanes, each half of a batch: one process step; an idle lane joins
 * the step in progress when it comes back. */
static void test_lanes_join(void)
{
	struct clock *c = clk_create(16);
	uint64_t lanes[4];
	int boundary;

	CU_ASSERT_EQUAL(eager_step(c, A, &boundary), 0);
	CU_ASSERT_EQUAL(eager_step(c, B, &boundary), 0);
	CU_ASSERT_EQUAL(eager_step(c, A, &boundary), 1);
	CU_ASSERT_EQUAL(eager_step(c, B, &boundary), 1);
	CU_ASSERT_EQUAL(eager_step(c, A, &boundary), 2);
	CU_ASSERT_EQUAL(eager_step(c, A, &boundary), 3);
	CU_ASSERT_EQUAL(clk_lanes(c, 2, lanes, 4), 1);
	CU_ASSERT_EQUAL(lanes[0], A);
	CU_ASSERT_EQUAL(eager_step(c, B, &boundary), 3);
	CU_ASSERT_EQUAL(clk_lanes(c, 1, lanes, 4), 2);
	CU_ASSERT_EQUAL(clk_lanes(c, 1, lanes, 1), 1);
	clk_destroy(c);
}

/* One thread drives two streams that take turns: once the thread has
 * waited for the GPU, the step it took part in is over, and the other
 * stream's next step is a new one.  Another thread's stream still joins. */
static void test_syncs(void)
{
	struct clock *c = clk_create(16);
	struct clk_thread other = { 2, 0 }, mine = me;
	struct clk_tick t;
	int boundary;

	CU_ASSERT_EQUAL(eager_step(c, A, &boundary), 0);
	me.syncs++;
	CU_ASSERT_EQUAL(eager_step(c, B, &boundary), 1);
	me.syncs++;
	CU_ASSERT_EQUAL(eager_step(c, A, &boundary), 2);
	CU_ASSERT_EQUAL(eager_step(c, B, &boundary), 2);
	CU_ASSERT_EQUAL(clk_hit(c, 0xc, CLK_GRAPH, 0, 0, 0, &other, &t), 0);
	CU_ASSERT_EQUAL(t.step, 2);
	other.syncs++;
	CU_ASSERT_EQUAL(clk_hit(c, 0xc, CLK_GRAPH, 0, 0, 0, &other, &t), 0);
	CU_ASSERT_EQUAL(t.step, 3);
	me = mine;
	clk_destroy(c);
}

/* Without KV writes, a host wait ends the step: the thread's next routing
 * launch starts one, whatever its ids pointer.  PyTorch's caching allocator
 * hands every layer's top-k the same block (freed at the end of the layer),
 * so a repeated pointer is no step; nor is a wait by another thread. */
static void test_routing_syncs(void)
{
	struct clock *c = clk_create(2);
	struct clk_thread other = { 2, 0 };
	struct clk_tick t;
	unsigned s, l;

	for (s = 0; s < 5; s++) {
		for (l = 0; l < 4; l++) {
			t = hit(c, A, CLK_ROUTING, 0x500, 0);
			CU_ASSERT_EQUAL(t.new_step, l == 0);
			CU_ASSERT_EQUAL(t.boundary, l == 0 && (s == 2 || s == 4));
			CU_ASSERT_EQUAL(t.step, s);
			CU_ASSERT_EQUAL(t.layer, l);
			if (l == 1)
				other.syncs++;
		}
		me.syncs++;
	}
	/* Two waits in a row are one. */
	me.syncs++;
	t = hit(c, A, CLK_ROUTING, 0x500, 0);
	CU_ASSERT_EQUAL(t.new_step, 1);
	CU_ASSERT_EQUAL(t.step, 5);
	CU_ASSERT_EQUAL(clk_hit(c, A, CLK_ROUTING, 0x500, 0, 0, &other, &t), 0);
	CU_ASSERT_EQUAL(t.new_step, 0);
	CU_ASSERT_EQUAL(t.layer, 1);
	/* The lane starts writing KV: its KV keys take over, waits no longer
	 * start steps, and the switch itself is no step. */
	t = hit(c, A, CLK_KV, 0x7000, 0);
	CU_ASSERT_EQUAL(t.new_step, 0);
	me.syncs++;
	t = hit(c, A, CLK_ROUTING, 0x500, 0);
	CU_ASSERT_EQUAL(t.new_step, 0);
	CU_ASSERT_EQUAL(t.layer, 2);
	t = hit(c, A, CLK_KV, 0x7000, 0);
	CU_ASSERT_EQUAL(t.new_step, 1);
	CU_ASSERT_EQUAL(t.step, 6);
	clk_destroy(c);
}

static struct clk_tick routed(struct clock *c, uint64_t key, uint64_t rows)
{
	struct clk_tick t;

	CU_ASSERT_EQUAL_FATAL(clk_hit(c, A, CLK_ROUTING, key, rows, 0, &me, &t), 0);
	return t;
}

/* No KV rule and no host waits: a prefill over 8 rows, then decode steps
 * of 2 rows, whatever their ids pointers.  The row count ends the prefill;
 * the prefill's layer count (4) then ends every step. */
static void test_routing_rows_and_layers(void)
{
	struct clock *c = clk_create(16);
	struct clk_tick t;
	unsigned s, l;

	for (l = 0; l < 4; l++) {
		t = routed(c, 0x100 + l, 8);
		CU_ASSERT_EQUAL(t.new_step, l == 0);
		CU_ASSERT_EQUAL(t.step, 0);
	}
	for (s = 1; s < 8; s++)
		for (l = 0; l < 4; l++) {
			t = routed(c, s < 3 ? 0x200 + l : 0x1000 * s + l, 2);
			CU_ASSERT_EQUAL(t.new_step, l == 0);
			CU_ASSERT_EQUAL(t.step, s);
			CU_ASSERT_EQUAL(t.layer, l);
		}
	/* A prefill again (new rows) after three of the four layers: a step. */
	for (l = 0; l < 3; l++)
		routed(c, 0x9000 + l, 2);
	t = routed(c, 0x100, 8);
	CU_ASSERT_EQUAL(t.new_step, 1);
	CU_ASSERT_EQUAL(t.step, 9);
	clk_destroy(c);
}

/* A capture counts layers without moving the clock; each replay (graph
 * launch) is a step; markers start steps too. */
static void test_capture_and_graphs(void)
{
	struct clock *c = clk_create(3);
	struct clk_tick t;
	unsigned l, s;

	for (l = 0; l < 3; l++) {
		t = hit(c, A, CLK_KV, 0x100 + l, 1);
		CU_ASSERT_EQUAL(t.new_step, 0);
		t = hit(c, A, CLK_ROUTING, 0x900 + l, 1);
		CU_ASSERT_EQUAL(t.new_step, 0);
		CU_ASSERT_EQUAL(t.layer, l);
	}
	CU_ASSERT_EQUAL(clk_step(c), -1);
	/* Without KV, every layer's ids in one block: the layers still count. */
	for (l = 0; l < 3; l++) {
		t = hit(c, B, CLK_ROUTING, 0x300, 1);
		CU_ASSERT_EQUAL(t.layer, l);
	}
	for (s = 0; s < 7; s++) {
		t = hit(c, A, CLK_GRAPH, 0, 0);
		CU_ASSERT_EQUAL(t.new_step, 1);
		CU_ASSERT_EQUAL(t.step, s);
		CU_ASSERT_EQUAL(t.boundary, s == 3 || s == 6);
	}
	t = hit(c, B, CLK_MARKER, 0, 0);
	CU_ASSERT_EQUAL(t.step, 6);	/* joins */
	t = hit(c, B, CLK_ROUTING, 0x42, 0);
	CU_ASSERT_EQUAL(t.new_step, 0);
	CU_ASSERT_EQUAL(t.layer, 0);
	/* A second capture on A starts its ordinals again. */
	t = hit(c, A, CLK_ROUTING, 0x900, 1);
	CU_ASSERT_EQUAL(t.layer, 0);
	/* So does one that begins right after another, with no launch outside
	 * a capture between them (PyTorch's make_graphed_callables). */
	t = hit(c, A, CLK_ROUTING, 0x900, 1);
	CU_ASSERT_EQUAL(t.layer, 1);
	clk_capture_begin(c, A);
	for (l = 0; l < 3; l++) {
		t = hit(c, A, CLK_ROUTING, 0x900, 1);
		CU_ASSERT_EQUAL(t.layer, l);
	}
	clk_destroy(c);
}

/* A resumed process: its first step follows the restored one, two lanes
 * join it, entering it ends no window, the next boundary is the usual. */
static void test_resume(void)
{
	struct clock *c = clk_create(4);
	int boundary;
	uint64_t s;

	clk_resume(c, 7);
	CU_ASSERT_EQUAL(clk_step(c), 7);
	CU_ASSERT_EQUAL(eager_step(c, A, &boundary), 8);
	CU_ASSERT_EQUAL(boundary, 0);
	CU_ASSERT_EQUAL(eager_step(c, B, &boundary), 8);
	for (s = 9; s < 14; s++) {
		CU_ASSERT_EQUAL(eager_step(c, A, &boundary), s);
		CU_ASSERT_EQUAL(boundary, s == 12);
	}
	clk_destroy(c);
}

static void test_limits(void)
{
	struct clock *c = clk_create(1);
	struct clk_tick t;
	uint64_t lane;

	CU_ASSERT_PTR_NULL(clk_create(0));
	for (lane = 1; lane <= CLK_MAX_LANES; lane++)
		CU_ASSERT_EQUAL(clk_hit(c, lane, CLK_GRAPH, 0, 0, 0, &me, &t), 0);
	CU_ASSERT_EQUAL(clk_hit(c, lane, CLK_GRAPH, 0, 0, 0, &me, &t), -1);
	CU_ASSERT_EQUAL(t.new_step, 0);
	/* Window 1: every new process step ends a window. */
	CU_ASSERT_EQUAL(clk_hit(c, 1, CLK_GRAPH, 0, 0, 0, &me, &t), 0);
	CU_ASSERT_EQUAL(t.step, 1);
	CU_ASSERT_EQUAL(t.boundary, 1);
	clk_destroy(c);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "KV keys mark steps and layers", test_kv_keys },
		{ "lanes join the process step", test_lanes_join },
		{ "a thread's syncs end its step", test_syncs },
		{ "host waits end routing steps without KV", test_routing_syncs },
		{ "routing rows and layer counts", test_routing_rows_and_layers },
		{ "captures, graph launches, markers", test_capture_and_graphs },
		{ "resume after a restored step", test_resume },
		{ "lane limit, window 1", test_limits },
		CU_TEST_INFO_NULL,
	};
	static CU_SuiteInfo suites[] = {
		{ "clock", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}

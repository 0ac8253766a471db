/*
 * heatmap_log.c - writes logs of known routing for heatmap.py.
 *
 * Usage: heatmap_log PATH MODE
 *
 * Every id routed in a decode window is id_of(step, layer, token, slot)
 * modulo the layer's experts, which heatmap.py computes too.  Routing that
 * must not be counted sends every id to the layer's last expert:
 *
 *   routing  4 layers x 8 experts, 3 tokens, top-2.  Window 0 holds
 *            allocation events (steps 0) and routing not to count, windows
 *            1-3 are decode windows of 4 steps, window 4 is closed without
 *            extra bytes as a crash handler does (routing not to count),
 *            window 5 is a decode window of 4 steps flagged as missing
 *            routing, and routing not to count is left uncommitted.
 *   ragged   layer 0 of 6 experts, layer 2 of 8, no layer 1: one decode
 *            window of 2 steps.
 *   wide     2 layers x 512 experts, 64 tokens, top-8: one decode window
 *            of 2 steps.
 *   none     routing in an allocation window only; a decode window
 *            without routing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record.h"
#include "wal.h"

#define MAX_IDS 1024u

static struct wal *w;

static void check(int64_t ret, const char *what)
{
	if (ret < 0) {
		fprintf(stderr, "heatmap_log: %s: %s\n", what, wal_strerror((int)ret));
		exit(1);
	}
}

static uint32_t id_of(uint64_t step, uint32_t layer, uint32_t token, uint32_t slot)
{
	return (uint32_t)(layer + step * token + 3 * slot);
}

/* One ROUTING record: ids from id_of, or all to the last expert. */
static void routing(uint64_t step, uint32_t layer, uint32_t experts, uint32_t tokens,
		    uint16_t k, int counted)
{
	static uint8_t buf[ROUTING_HDR_SIZE + MAX_IDS * 2];
	struct rec_routing r = { .step = step, .layer = layer, .tokens = tokens, .k = k,
				 .id_bytes = experts > 256 ? 2 : 1, .experts = experts };
	uint8_t *p = buf + ROUTING_HDR_SIZE;

	rec_routing_encode(buf, &r);
	for (uint32_t t = 0; t < tokens; t++) {
		for (uint32_t j = 0; j < k; j++) {
			uint32_t id = counted ? id_of(step, layer, t, j) % experts : experts - 1;

			*p++ = (uint8_t)id;
			if (r.id_bytes == 2)
				*p++ = (uint8_t)(id >> 8);
		}
	}
	check(wal_append(w, WAL_REC_ROUTING, buf, (uint32_t)(p - buf)), "wal_append");
}

static void commit(uint64_t first_step, uint32_t steps, uint32_t tokens, uint32_t flags)
{
	struct rec_window_steps ws = { .first_step = first_step, .steps = steps,
				       .tokens = steps * tokens, .flags = flags };
	uint8_t extra[WINDOW_STEPS_SIZE];

	rec_window_steps_encode(extra, &ws);
	check(wal_commit(w, extra, sizeof extra, NULL), "wal_commit");
}

/* An allocation window (steps 0) holding routing not to count. */
static void allocation_window(uint32_t layers, uint32_t experts)
{
	uint8_t buf[ALLOC_PAYLOAD_SIZE];
	struct rec_alloc a = { .alloc_id = 1, .base = 0x10000, .size = 4096, .api = 1 };

	rec_alloc_encode(buf, &a);
	check(wal_append(w, WAL_REC_ALLOC, buf, sizeof buf), "wal_append");
	for (uint32_t l = 0; l < layers; l++)
		routing(0, l, experts, 3, 2, 0);
	commit(0, 0, 0, 0);
}

/* `steps` decode steps from `first` of every layer with experts[l] > 0. */
static void decode(uint64_t first, uint32_t steps, const uint32_t *experts, uint32_t layers,
		   uint32_t tokens, uint16_t k, uint32_t flags)
{
	for (uint64_t s = first; s < first + steps; s++)
		for (uint32_t l = 0; l < layers; l++)
			if (experts[l])
				routing(s, l, experts[l], tokens, k, 1);
	commit(first, steps, tokens, flags);
}

int main(int argc, char **argv)
{
	static const uint32_t eight[4] = { 8, 8, 8, 8 }, ragged[3] = { 6, 0, 8 },
			      wide[2] = { 512, 512 };
	struct wal_options opt;
	struct wal_error err = { 0 };
	const char *mode = argc == 3 ? argv[2] : "";

	wal_options_init(&opt);
	opt.size = 1u << 20;
	opt.flags = WAL_OPEN_CREATE | WAL_OPEN_FORMAT;
	if (argc != 3 || (strcmp(mode, "routing") && strcmp(mode, "ragged") &&
			  strcmp(mode, "wide") && strcmp(mode, "none"))) {
		fprintf(stderr, "usage: heatmap_log PATH routing|ragged|wide|none\n");
		return 2;
	}
	if (wal_open(argv[1], &opt, &w, &err) < 0) {
		fprintf(stderr, "heatmap_log: %s\n", err.msg);
		return 1;
	}
	if (!strcmp(mode, "routing")) {
		allocation_window(4, 8);
		for (uint64_t s = 0; s < 12; s += 4)
			decode(s, 4, eight, 4, 3, 2, 0);
		routing(12, 0, 8, 3, 2, 0);
		check(wal_commit(w, NULL, 0, NULL), "wal_commit");
		decode(16, 4, eight, 4, 3, 2, WINDOW_ROUTING_GAP);
		routing(20, 0, 8, 3, 2, 0);
	} else if (!strcmp(mode, "ragged")) {
		decode(0, 2, ragged, 3, 3, 2, 0);
	} else if (!strcmp(mode, "wide")) {
		decode(0, 2, wide, 2, 64, 8, 0);
	} else {
		allocation_window(2, 8);
		commit(0, 4, 3, 0);
	}
	wal_close(w);
	return 0;
}

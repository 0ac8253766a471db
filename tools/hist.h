/*
 * hist.h - expert usage per layer, counted from ROUTING records.
 *
 * Layers and expert ids come from the log, so they are untrusted: both are
 * capped (HIST_MAX_*) and anything beyond is counted as ignored, never
 * allocated for.
 */
#ifndef MOEFT_HIST_H
#define MOEFT_HIST_H

#include <stdint.h>

#include "wal.h"

#define HIST_MAX_LAYERS 1024u
#define HIST_MAX_EXPERTS 4096u

struct hist_layer {
	uint64_t *count;	/* tokens routed to each expert id */
	uint32_t n;		/* slots in count */
	uint64_t total;		/* sum of count */
	uint64_t tokens;	/* rows routed (each to k experts) */
};

struct hist {
	struct hist_layer *layer;
	uint32_t nlayers;	/* highest layer seen + 1 */
	uint32_t experts;	/* most experts seen in any layer */
	uint64_t total;		/* ids counted, all layers */
	uint64_t ignored;	/* ids of layers or experts beyond the caps */
};

void hist_init(struct hist *h);
void hist_free(struct hist *h);

/* Count the expert ids of a ROUTING record; other records and payloads
 * that do not decode are passed over.  0, or -1 out of memory. */
int hist_add(struct hist *h, const struct wal_record *rec);

/* Fraction of the layer's tokens routed to `expert`. */
double hist_share(const struct hist *h, uint32_t layer, uint32_t expert);

/* The `n` most used experts of `layer`, most used first (ties: lower id
 * first) into ids[]; returns how many there are (experts with tokens). */
unsigned hist_top(const struct hist *h, uint32_t layer, uint32_t *ids, unsigned n);

#endif

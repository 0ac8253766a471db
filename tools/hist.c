/*
 * hist.c - expert usage histograms (see hist.h).
 */
#include <stdlib.h>
#include <string.h>

#include "hist.h"
#include "record.h"

void hist_init(struct hist *h)
{
	memset(h, 0, sizeof *h);
}

void hist_free(struct hist *h)
{
	for (uint32_t i = 0; i < h->nlayers; i++)
		free(h->layer[i].count);
	free(h->layer);
	hist_init(h);
}

/* Give a layer at least `want` expert slots, the new ones zero. */
static int fit_layer(struct hist_layer *l, uint32_t want)
{
	uint64_t *p;

	if (want <= l->n)
		return 0;
	if (!(p = realloc(l->count, (size_t)want * sizeof *p)))
		return -1;
	memset(p + l->n, 0, (size_t)(want - l->n) * sizeof *p);
	l->count = p;
	l->n = want;
	return 0;
}

int hist_add(struct hist *h, const struct wal_record *rec)
{
	struct rec_routing rt, *r = &rt;
	struct hist_layer *l;
	uint64_t ids;

	if (rec->type != WAL_REC_ROUTING || rec_routing_decode(rec->payload, rec->len, r) < 0)
		return 0;
	ids = (uint64_t)r->tokens * r->k;
	if (r->layer >= HIST_MAX_LAYERS) {
		h->ignored += ids;
		return 0;
	}
	if (r->layer >= h->nlayers) {
		if (!(l = realloc(h->layer, (size_t)(r->layer + 1) * sizeof *l)))
			return -1;
		memset(l + h->nlayers, 0, (size_t)(r->layer + 1 - h->nlayers) * sizeof *l);
		h->layer = l;
		h->nlayers = r->layer + 1;
	}
	l = &h->layer[r->layer];
	if (fit_layer(l, r->experts < HIST_MAX_EXPERTS ? r->experts : HIST_MAX_EXPERTS) < 0)
		return -1;
	l->tokens += r->tokens;
	for (uint64_t i = 0; i < ids; i++) {
		uint32_t id = rec_routing_id(r, (size_t)i);

		if (id >= HIST_MAX_EXPERTS) {
			h->ignored++;
			continue;
		}
		if (fit_layer(l, id + 1) < 0)
			return -1;
		l->count[id]++;
		l->total++;
		h->total++;
	}
	if (l->n > h->experts)
		h->experts = l->n;
	return 0;
}

double hist_share(const struct hist *h, uint32_t layer, uint32_t expert)
{
	const struct hist_layer *l;

	if (layer >= h->nlayers)
		return 0;
	l = &h->layer[layer];
	return expert < l->n && l->total ? (double)l->count[expert] / (double)l->total : 0;
}

unsigned hist_top(const struct hist *h, uint32_t layer, uint32_t *ids, unsigned n)
{
	const struct hist_layer *l;
	unsigned found = 0;

	if (layer >= h->nlayers)
		return 0;
	l = &h->layer[layer];
	/* n is small: repeated selection of the best expert not yet taken */
	while (found < n) {
		uint32_t best = UINT32_MAX;

		for (uint32_t e = 0; e < l->n; e++) {
			int taken = 0;

			for (unsigned i = 0; i < found && !taken; i++)
				taken = ids[i] == e;
			if (taken || !l->count[e])
				continue;
			if (best == UINT32_MAX || l->count[e] > l->count[best])
				best = e;
		}
		if (best == UINT32_MAX)
			break;
		ids[found++] = best;
	}
	return found;
}

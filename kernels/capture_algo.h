/*
 * capture_algo.h - the append algorithm, one text for two compilers.
 *
 * nvcc compiles these functions as device code into kernels/capture.cu; a
 * C compiler compiles them as the host reference (capture_ref.c).  Only
 * the memory primitives differ: atomics_algo.h.  The protocol and why it
 * is correct: capture.h.  Private to kernels/.
 */
#ifndef MOEFT_CAPTURE_ALGO_H
#define MOEFT_CAPTURE_ALGO_H

#include "atomics_algo.h"
#include "capture.h"

ALGO_FN int cap_dtype_ok(uint32_t dtype)
{
	return dtype >= CAP_DT_I32 && dtype <= CAP_DT_I64;
}

/* No weights, or weights of a known type from somewhere. */
ALGO_FN int cap_weights_ok(const struct cap_append_args *a)
{
	return !a->wdtype || (cap_weight_bytes(a->wdtype) && a->wsrc);
}

/* Element i of an array of a valid dtype, widened. */
ALGO_FN int64_t cap_load_i64(const void *src, uint32_t dtype, uint64_t i)
{
	switch (dtype) {
	case CAP_DT_I32:
		return ((const int32_t *)src)[i];
	case CAP_DT_U32:
		return ((const uint32_t *)src)[i];
	default:
		return ((const int64_t *)src)[i];
	}
}

/* Routing ids travel as int32 whatever the source type: expert ids are
 * small, and one payload format keeps the consumer simple. */
ALGO_FN int32_t cap_load_id(const void *src, uint32_t dtype, uint64_t i)
{
	int64_t v = cap_load_i64(src, dtype, i);

	return v < INT32_MIN || v > INT32_MAX ? CAP_ID_INVALID : (int32_t)v;
}

ALGO_FN unsigned char *cap_data(struct cap_ring *r)
{
	return (unsigned char *)r + CAP_DATA_OFF;
}

ALGO_FN struct cap_entry *cap_skip_entry(struct cap_ring *r, const struct cap_resv *rv)
{
	return (struct cap_entry *)(cap_data(r) + (rv->pos & rv->mask));
}

/* A padded entry starts the next lap, at data offset 0. */
ALGO_FN struct cap_entry *cap_data_entry(struct cap_ring *r, const struct cap_resv *rv)
{
	return (struct cap_entry *)(cap_data(r) + (rv->pad ? 0 : rv->pos & rv->mask));
}

/* Payload bytes of an append, saturated so absurd requests still count. */
ALGO_FN uint64_t cap_payload_bytes(const struct cap_append_args *a)
{
	uint64_t n = (uint64_t)a->rows * a->k;

	return n > UINT64_MAX / 8 ? UINT64_MAX : n * (4 + cap_weight_bytes(a->wdtype));
}

/* Reserve pad + size bytes in one CAS, or nothing (see capture.h, step 1,
 * and the producers in device memory). */
ALGO_FN int cap_reserve(struct cap_ring *r, struct cap_prod *p, uint64_t cap, uint32_t size,
			struct cap_resv *rv)
{
	uint64_t *headp = p ? &p->head : &r->head;
	unsigned t;

	for (t = 0; t < CAP_CAS_TRIES; t++) {
		uint64_t tail = atom_ld_acquire(p ? &p->tail_seen : &r->tail);
		uint64_t head = atom_ld_relaxed(headp);
		uint64_t off = head & (cap - 1);
		uint64_t pad = off + size > cap ? cap - off : 0;
		uint64_t used = head - tail;

		/* used > cap only with a damaged tail: drop, never overwrite */
		if (used > cap)
			return 0;
		if (pad + size > cap - used) {
			uint64_t fresh;

			/* Full as far as tail_seen says: the host's tail, once more. */
			if (!p || (fresh = atom_ld_acquire(&r->tail)) <= tail)
				return 0;
			atom_max_release(&p->tail_seen, fresh);
			continue;
		}
		if (atom_cas(headp, head, head + pad + size)) {
			rv->pos = head;
			rv->mask = cap - 1;
			rv->pad = (uint32_t)pad;
			return 1;
		}
	}
	return 0;
}

/*
 * Reserve room for a's ids and write the headers, all but seq (fields left
 * out stay 0: free space is zeroed); or count a drop.  capacity / 2 bounds
 * an entry so that pad + size fits an empty ring: a pad is only needed when
 * it is smaller than the entry.
 */
ALGO_FN int cap_begin(const struct cap_append_args *a, struct cap_resv *rv)
{
	struct cap_ring *r = a->ring;
	uint64_t cap = a->prod ? a->prod->capacity : r->capacity;
	uint64_t bytes = cap_payload_bytes(a);
	struct cap_entry *e;
	uint32_t size = (uint32_t)((CAP_ENTRY_HDR + bytes + CAP_ALIGN - 1) &
				   ~(uint64_t)(CAP_ALIGN - 1));

	if (!cap_dtype_ok(a->dtype) || !cap_weights_ok(a) || a->stride < a->k ||
	    bytes > cap / 2 - CAP_ENTRY_HDR || !cap_reserve(r, a->prod, cap, size, rv)) {
		atom_add(&r->dropped_entries, 1);
		atom_add(&r->dropped_bytes, bytes);
		return 0;
	}
	if (rv->pad) {
		e = cap_skip_entry(r, rv);
		e->size = rv->pad;
		e->type = CAP_ENTRY_SKIP;
	}
	e = cap_data_entry(r, rv);
	e->size = size;
	e->type = CAP_ENTRY_DATA;
	e->dtype = (uint16_t)a->dtype;
	e->tag = a->tag;
	e->step = a->step;
	e->rows = a->rows;
	e->k = a->k;
	e->bytes = (uint32_t)bytes;
	e->wdtype = a->wdtype;
	return 1;
}

/* Elements first, first + step, ...: the first k ids of each row, int32,
 * then the weights, bit for bit. */
ALGO_FN void cap_copy(struct cap_ring *r, const struct cap_resv *rv,
		      const struct cap_append_args *a, uint32_t first, uint32_t step)
{
	int32_t *out = (int32_t *)((unsigned char *)cap_data_entry(r, rv) + CAP_ENTRY_HDR);
	uint32_t n = a->rows * a->k;	/* < 2^29: the entry fitted */
	uint32_t i;

	for (i = first; i < n; i += step)
		out[i] = cap_load_id(a->src, a->dtype,
				     (uint64_t)(i / a->k) * a->stride + i % a->k);
	if (cap_weight_bytes(a->wdtype) == 4)
		for (i = first; i < n; i += step)
			((uint32_t *)(out + n))[i] = ((const uint32_t *)a->wsrc)[i];
	else if (a->wdtype)
		for (i = first; i < n; i += step)
			((uint16_t *)(out + n))[i] = ((const uint16_t *)a->wsrc)[i];
}

/* Step 3 of the protocol: seq last, after the fence. */
ALGO_FN void cap_publish(struct cap_ring *r, const struct cap_resv *rv)
{
	if (rv->pad)
		atom_publish(&cap_skip_entry(r, rv)->seq, rv->pos + 1);
	atom_publish(&cap_data_entry(r, rv)->seq, rv->pos + rv->pad + 1);
}

#endif

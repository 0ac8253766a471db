/*
 * ring.c - the host consumer of a capture ring (ring.h; the protocol and
 * its memory-ordering argument are in kernels/capture.h).
 *
 * The ring is shared with a GPU, so nothing read from it is trusted: an
 * entry header is copied once, checked against the layout rules, and only
 * then used to size any access.
 */
#include <errno.h>
#include <stddef.h>
#include <stdatomic.h>
#include <string.h>

#include "ring.h"

/* The shared layout is plain C (nvcc reads it too): its words are accessed
 * through _Atomic-qualified pointers, as liburing does. */
#define A64(p) ((_Atomic uint64_t *)(p))

static uint64_t load_relaxed(const uint64_t *p)
{
	return atomic_load_explicit((const _Atomic uint64_t *)p, memory_order_relaxed);
}

static void add_relaxed(uint64_t *p, uint64_t v)
{
	atomic_fetch_add_explicit(A64(p), v, memory_order_relaxed);
}

size_t ring_size(uint64_t capacity)
{
	return CAP_DATA_OFF + capacity;
}

int ring_init(struct ring *r, void *mem, size_t len)
{
	struct cap_ring *hdr = mem;
	uint64_t cap = CAP_MIN_CAPACITY;

	if ((uintptr_t)mem % CAP_ALIGN || len < ring_size(CAP_MIN_CAPACITY))
		return -EINVAL;
	while (cap < CAP_MAX_CAPACITY && ring_size(cap * 2) <= len)
		cap *= 2;
	/* Free space must read as zeros: see "Why seq = pos + 1" in capture.h. */
	memset(mem, 0, ring_size(cap));
	hdr->magic = CAP_RING_MAGIC;
	hdr->version = CAP_RING_VERSION;
	hdr->capacity = cap;
	memset(r, 0, sizeof *r);
	r->hdr = hdr;
	r->data = (unsigned char *)mem + CAP_DATA_OFF;
	r->mask = cap - 1;
	return 0;
}

/*
 * Copy the rest of the header at data offset `off` into h (h->seq is read)
 * and check that it describes a whole entry the producer algorithm could
 * have written there.
 */
static int read_header(struct cap_entry *h, const struct cap_entry *e, uint64_t off,
		       uint64_t cap)
{
	const size_t rest = offsetof(struct cap_entry, tag);
	uint64_t ids, bytes;

	/* First the 16 bytes a SKIP entry has: it may end the data area. */
	memcpy((unsigned char *)h + 8, (const unsigned char *)e + 8, rest - 8);
	switch (h->type) {
	case CAP_ENTRY_SKIP:
		return h->size >= CAP_ALIGN && h->size % CAP_ALIGN == 0 &&
		       off + h->size == cap;
	case CAP_ENTRY_DATA:
		if (off + CAP_ENTRY_HDR > cap)
			return 0;
		memcpy((unsigned char *)h + rest, (const unsigned char *)e + rest,
		       CAP_ENTRY_HDR - rest);
		ids = (uint64_t)h->rows * h->k;	/* cannot overflow */
		bytes = ids * (4 + cap_weight_bytes(h->wdtype));
		return ids <= cap / 8 && (!h->wdtype || cap_weight_bytes(h->wdtype)) &&
		       h->bytes == bytes &&
		       h->size == ((CAP_ENTRY_HDR + bytes + CAP_ALIGN - 1) &
				   ~(uint64_t)(CAP_ALIGN - 1)) &&
		       h->size <= cap / 2 && off + h->size <= cap;
	}
	return 0;
}

long ring_poll(struct ring *r, ring_fn *fn, void *arg, struct ring_gap *gap)
{
	uint64_t cap = r->mask + 1;
	long n = 0;

	if (gap) {
		uint64_t de = load_relaxed(&r->hdr->dropped_entries);
		uint64_t db = load_relaxed(&r->hdr->dropped_bytes);

		gap->entries = de - r->seen_dropped_entries;
		gap->bytes = db - r->seen_dropped_bytes;
		r->seen_dropped_entries = de;
		r->seen_dropped_bytes = db;
	}
	while (fn) {
		uint64_t off = r->tail & r->mask;
		struct cap_entry *e = (struct cap_entry *)(r->data + off);
		struct cap_entry h;

		/* Acquire: the header and payload stores precede seq's. */
		h.seq = atomic_load_explicit(A64(&e->seq), memory_order_acquire);
		if (h.seq == 0)
			break;
		if (h.seq != r->tail + 1 || !read_header(&h, e, off, cap))
			return -EBADMSG;
		if (h.type == CAP_ENTRY_DATA) {
			fn(arg, &h, (unsigned char *)e + CAP_ENTRY_HDR, h.bytes);
			add_relaxed(&r->entries, 1);
			add_relaxed(&r->bytes, h.bytes);
			n++;
		} else {
			add_relaxed(&r->skips, 1);
		}
		/* Zero before release: the next lap relies on zeroed free space,
		 * and producers may write here as soon as they see the new tail. */
		memset(e, 0, h.size);
		r->tail += h.size;
		atomic_store_explicit(A64(&r->hdr->tail), r->tail, memory_order_release);
	}
	return n;
}

void ring_stats(const struct ring *r, struct ring_stats *st)
{
	st->capacity = r->mask + 1;
	st->reserved = load_relaxed(&r->hdr->head);
	st->released = load_relaxed(&r->hdr->tail);
	st->entries = load_relaxed(&r->entries);
	st->bytes = load_relaxed(&r->bytes);
	st->skips = load_relaxed(&r->skips);
	st->dropped_entries = load_relaxed(&r->hdr->dropped_entries);
	st->dropped_bytes = load_relaxed(&r->hdr->dropped_bytes);
}

/*
 * ring.h - the host consumer of a capture ring.
 *
 * The ring's layout and protocol: kernels/capture.h.  One thread owns a
 * struct ring and calls ring_poll; producers (the GPU, or the host
 * reference in tests and the CPU fixture) append through the shared memory
 * block alone.  No locks: the consumer never blocks a producer, and a
 * producer never waits for the consumer (it drops instead).
 */
#ifndef MOEFT_RING_H
#define MOEFT_RING_H

#include <stddef.h>
#include <stdint.h>

#include "capture.h"

struct ring {
	struct cap_ring *hdr;
	unsigned char *data;
	uint64_t mask;
	uint64_t tail;		/* consumer's position; hdr->tail mirrors it */
	uint64_t seen_dropped_entries;
	uint64_t seen_dropped_bytes;
	/* Consumer totals; relaxed atomics so ring_stats may run elsewhere. */
	uint64_t entries;
	uint64_t bytes;
	uint64_t skips;
};

/* Drops observed by a ring_poll call. */
struct ring_gap {
	uint64_t entries;
	uint64_t bytes;
};

struct ring_stats {
	uint64_t capacity;
	uint64_t reserved;	/* the header's head: bytes producers ever reserved
				   there (0 when they count in a cap_prod) */
	uint64_t released;	/* tail: bytes the consumer ever released */
	uint64_t entries;	/* DATA entries delivered */
	uint64_t bytes;		/* their payload bytes */
	uint64_t skips;		/* SKIP entries passed (lap ends wasted) */
	uint64_t dropped_entries;
	uint64_t dropped_bytes;
};

/*
 * Called for each DATA entry, in reservation order.  `e` and `payload`
 * point into the ring and are valid during the call only (copy out what
 * you keep); payload holds e->rows * e->k int32 ids, len == e->bytes.
 */
typedef void ring_fn(void *arg, const struct cap_entry *e, const void *payload,
		     size_t len);

/* Bytes of memory a ring of `capacity` data bytes takes. */
size_t ring_size(uint64_t capacity);

/*
 * Format `mem` (len bytes, CAP_ALIGN-aligned: pinned mapped memory in
 * production, any memory in tests) as an empty ring with the largest
 * power-of-two capacity that fits, up to CAP_MAX_CAPACITY, and attach `r`
 * to it.  0, or -EINVAL when mem is misaligned or too small for
 * CAP_MIN_CAPACITY.  Producers may start once it returns.
 */
int ring_init(struct ring *r, void *mem, size_t len);

/*
 * Deliver every published entry from the consumer's position on to fn,
 * stopping at the first one not yet published, and release their space
 * (fn NULL: deliver nothing, only read the drops).
 * When gap is not NULL it receives the drops counted since the previous
 * call read them (drops carry no ring position, so they can be placed
 * only between polls).  Returns the number of DATA entries delivered, or
 * -EBADMSG when the ring holds damage at the consumer's position (entries
 * delivered before it stay delivered; later calls stop there again).
 */
long ring_poll(struct ring *r, ring_fn *fn, void *arg, struct ring_gap *gap);

/* A snapshot of the counters; any thread. */
void ring_stats(const struct ring *r, struct ring_stats *st);

#endif

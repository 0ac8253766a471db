/*
 * capture.h - the capture ring's layout and the host reference kernels.
 *
 * Plain C, includable from CUDA.  A capture ring lives in one block of
 * pinned, mapped host memory: the GPU appends to it from small kernels the
 * preload enqueues after a matching launch, in the same stream (so CUDA
 * graph capture records them too); one host thread drains it (preload/ring.c).
 *
 * Layout: struct cap_ring (CAP_DATA_OFF bytes), then `capacity` data bytes,
 * a power of two.  head and tail count bytes ever reserved and released;
 * an entry at ring position `pos` lives at data offset pos & (capacity - 1).
 * Entries are variable size (header + payload, CAP_ALIGN multiples) and
 * never wrap: an entry that would cross the end of the data area is preceded
 * by a SKIP entry covering the rest of the lap, reserved in the same step.
 * Variable entries keep the producer to one reservation and one publication
 * per append, whatever the payload size; fixed slots would need a chunk loop
 * with one sequence word per chunk, and the consumer a reassembly step.
 *
 * Protocol (the algorithm text is kernels/capture_algo.h, shared by the
 * device kernel and the host reference):
 *
 *  1. Reserve.  Load tail (acquire, system scope), then head; the entry
 *     needs pad + size bytes, where pad is the rest of the lap when the
 *     entry would cross its end.  If head + need - tail > capacity, or the
 *     entry is larger than capacity / 2, count a drop (dropped_entries += 1,
 *     dropped_bytes += payload bytes) and return: the producer never waits
 *     for the host.  Otherwise CAS head from head to head + need; on failure
 *     retry, at most CAP_CAS_TRIES times, then drop (so the producer is
 *     wait-free).  A reservation is made by one CAS or not at all, so a
 *     failed append consumes no ring space: the consumer never waits for an
 *     entry nobody will write.  Loading tail before head keeps tail <= head
 *     in the producer's view (both only grow; the consumer releases only
 *     published bytes).
 *  2. Write the SKIP header (when pad), the entry header and the payload.
 *     The reserved bytes are the producer's alone.
 *  3. Publish.  __threadfence_system() (host reference: release store), then
 *     store seq = pos + 1 in each header.  The fence orders the whole
 *     block's payload stores (ordered before thread 0 by __syncthreads) and
 *     header stores before seq, at system scope, so a host that sees seq
 *     sees the entry.
 *  4. Consume (host, single thread).  At position tail, acquire-load seq.
 *     0 means not yet published: stop there, whatever follows (entries
 *     after it may be complete; order is reservation order).  tail + 1
 *     means ready: read header and payload, then zero the entry's bytes,
 *     then release-store tail += size.  The release orders the consumer's
 *     reads and zeroing before any producer's reuse of the space (which
 *     starts with its acquire load of tail).
 *
 * Why seq = pos + 1 and zeroing: with variable sizes an entry boundary of
 * this lap can fall inside an older lap's payload, whose bytes could spell
 * any value.  Free space is all zeros (ring_init zeroes it, the consumer
 * re-zeroes what it releases), so the word at tail is either 0 or written
 * by the producer that owns that position, and any other value is damage.
 * seq = pos + 1 is never 0 and differs across laps, which lets the consumer
 * tell damage from a late entry.
 *
 * The producers' words (head, dropped_*) are only modified with device
 * atomics (one ring per device, one GPU writing them); the host only reads
 * them, for statistics.  The host writes tail alone.  Each group has its
 * own cache line.
 *
 * Producers in device memory (struct cap_prod).  Every word of the header
 * is a round trip over the bus for the GPU, and an append made four of
 * them (capacity, tail, head, the CAS on head) before writing a byte.  With
 * cap_append_args.prod set, capacity and head live in device memory and
 * the producers reserve there; they keep tail_seen, a tail the host
 * released at some point (so at most the ring's tail), and read the
 * header's tail only when tail_seen leaves too little room, raising
 * tail_seen to it (release) before they retry.  A reservation's room is
 * then proven by a tail the host released, as in step 1: the acquire load
 * of the header's tail, then the release of tail_seen and the next
 * producer's acquire of it, order the consumer's zeroing before any store
 * into the space.  The header's head then stays 0; drops are still counted
 * in the header (rare, and the consumer reads them).  The words belong to
 * one context, the one the append kernel's module is loaded into: the
 * driver refuses that kernel on another context's stream, so no append
 * reaches them from elsewhere.
 */
#ifndef MOEFT_CAPTURE_H
#define MOEFT_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define CAP_STATIC_ASSERT(e, m) static_assert(e, m)
extern "C" {
#else
#define CAP_STATIC_ASSERT(e, m) _Static_assert(e, m)
#endif

#define CAP_RING_MAGIC 0x474e5243u /* "CRNG" */
#define CAP_RING_VERSION 1u
#define CAP_ALIGN 16u			/* entry alignment and size granule */
#define CAP_DATA_OFF 256u		/* the data area follows the header */
#define CAP_MIN_CAPACITY 256u
#define CAP_MAX_CAPACITY (UINT64_C(1) << 32) /* entries stay below 2^31 */
#define CAP_CAS_TRIES 32u		/* reservation attempts before a drop */
#define CAP_APPEND_THREADS 256u		/* block size of moeft_capture_append */
#define CAP_ID_INVALID (-1)		/* an id that does not fit in int32 */

/* Element types of the arrays the kernels read: ids, then gating weights
 * (copied as their bits). */
enum cap_dtype {
	CAP_DT_I32 = 1,
	CAP_DT_U32 = 2,
	CAP_DT_I64 = 3,
	CAP_DT_F32 = 4,
	CAP_DT_BF16 = 5,
	CAP_DT_F16 = 6,
};

#ifdef __CUDACC__
#define CAP_INLINE static __host__ __device__ inline
#else
#define CAP_INLINE static inline
#endif

/* Bytes of one gating weight of wdtype: 4, 2, or 0 for none (and for a
 * type that is none of the weights'). */
CAP_INLINE uint32_t cap_weight_bytes(uint32_t wdtype)
{
	return wdtype == CAP_DT_F32 ? 4 : wdtype == CAP_DT_BF16 || wdtype == CAP_DT_F16 ? 2 : 0;
}

/* Entry types. */
enum cap_type {
	CAP_ENTRY_DATA = 1,
	CAP_ENTRY_SKIP = 2,	/* padding to the end of the lap */
};

struct cap_ring {
	/* Written by ring_init only. */
	uint32_t magic;
	uint32_t version;
	uint64_t capacity;		/* data bytes, a power of two */
	uint8_t pad0[48];
	/* Producers: device atomics. */
	uint64_t head;			/* bytes ever reserved */
	uint64_t dropped_entries;	/* appends that found no room */
	uint64_t dropped_bytes;		/* payload bytes they carried */
	uint8_t pad1[40];
	/* The consumer. */
	uint64_t tail;			/* bytes ever released */
	uint8_t pad2[56];
	uint8_t pad3[64];
};

/* The producers' words in device memory: the host writes them once, before
 * any append names them, and never again. */
struct cap_prod {
	uint64_t head;			/* bytes ever reserved */
	uint64_t tail_seen;		/* a tail the host released */
	uint64_t capacity;		/* the ring's */
	uint8_t pad[40];
};

/*
 * Entry header.  A SKIP entry uses the first 16 bytes only, so it fits any
 * gap.  A DATA entry's payload follows the header: rows * k int32 ids,
 * row-major (ids that do not fit int32 read as CAP_ID_INVALID), then, when
 * wdtype is set, rows * k gating weights of that type (4 or 2 bytes each,
 * the source's bits), row-major.
 */
struct cap_entry {
	uint64_t seq;		/* ring position + 1; stored last */
	uint32_t size;		/* ring bytes taken, header included */
	uint16_t type;		/* enum cap_type */
	uint16_t dtype;		/* the source array's enum cap_dtype */
	uint64_t tag;		/* the caller's: rule id, layer, stream */
	uint64_t step;		/* the caller's step or launch sequence */
	uint32_t rows;
	uint32_t k;
	uint32_t bytes;		/* payload bytes: rows * k * (4 + weight bytes) */
	uint32_t wdtype;	/* the weights' enum cap_dtype; 0: none */
};

#define CAP_ENTRY_HDR ((uint32_t)sizeof(struct cap_entry))

CAP_STATIC_ASSERT(sizeof(struct cap_ring) == CAP_DATA_OFF, "ring header size");
CAP_STATIC_ASSERT(sizeof(struct cap_prod) == 64, "producer words size");
CAP_STATIC_ASSERT(sizeof(struct cap_entry) % CAP_ALIGN == 0, "entry header size");
CAP_STATIC_ASSERT(offsetof(struct cap_entry, tag) == CAP_ALIGN, "a SKIP entry is 16 bytes");

/*
 * Parameters of moeft_capture_append (passed by value: a graph records
 * them).  Launch it with one block of at most CAP_APPEND_THREADS threads.
 * It appends rows x k ids: the first k of each row of `src`, whose rows
 * start `stride` elements apart (stride >= k; stride == k when dense); and
 * when wdtype is set, the rows x k weights at `wsrc` (dense).  An invalid
 * request (unknown dtype, stride < k, weights without a pointer) counts as
 * a drop.
 */
struct cap_append_args {
	struct cap_ring *ring;	/* the device's view of the ring */
	const void *src;	/* device memory */
	uint64_t tag;
	uint64_t step;
	uint32_t rows;
	uint32_t k;
	uint32_t stride;
	uint32_t dtype;		/* enum cap_dtype: CAP_DT_I32 .. CAP_DT_I64 */
	const void *wsrc;	/* device memory, or NULL */
	uint32_t wdtype;	/* CAP_DT_F32 .. CAP_DT_F16, or 0: no weights */
	uint32_t pad;		/* zero */
	struct cap_prod *prod;	/* device memory, or NULL: the header's words */
};

/* A reservation: a SKIP entry of `pad` bytes at pos (when pad > 0), then
 * the entry at pos + pad. */
struct cap_resv {
	uint64_t pos;
	uint64_t mask;		/* capacity - 1 */
	uint32_t pad;
};

#ifndef __CUDACC__
/*
 * Host reference of moeft_capture_append, safe from many threads at once
 * (as concurrent streams are): 1 when appended and published, 0 when
 * dropped.  The begin/end halves separate the reservation and copy from the
 * publication, so tests can hold an entry reserved but unpublished.
 */
int cap_append_ref(const struct cap_append_args *a);
int cap_append_begin_ref(const struct cap_append_args *a, struct cap_resv *rv);
void cap_append_end_ref(struct cap_ring *ring, const struct cap_resv *rv);
#endif

#ifdef __cplusplus
}
#endif

#endif

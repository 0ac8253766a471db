/*
 * kvsnap.h - the KV snapshot: which chunks of a KV pool changed since the
 * last snapshot, and their bytes, staged for the host in one pass.
 *
 * Plain C, includable from CUDA.  At a window boundary the preload enqueues
 * moeft_kv_snapshot once per KV pool on its side stream (after events of
 * the serving streams), then an append into the capture ring that tells
 * the consumer thread the snapshot is complete.  The kernel reads every
 * chunk of the pool, hashes it (kv_chunk_hash, the same function on the
 * device and the host) and compares the hash with the one it staged last
 * time (sums[]).  A changed chunk is copied into the staging area, pinned
 * host memory mapped for the device, and listed in its table; its new hash
 * is stored in sums[] only then, so a chunk that found no room stays
 * changed and is staged by the next snapshot.  Before it ends the kernel
 * fences at system scope, so a host that sees the later append sees the
 * table and the staged bytes.
 *
 * What every chunk touches stays in device memory: sums[], and the
 * header whose limits a reservation reads and whose counters it adds to
 * (ctl, a copy of the staging area's header that the preload copies in
 * before the snapshots and back after them).  Only a changed chunk's bytes
 * and entry cross the bus: atomics and reads over it cost a round trip
 * each, which made a window's snapshot grow with the chunks it staged
 * (tests/gpu/README.md, the H200 run of 2026-11-27).
 *
 * sums[] needs no setup: a snapshot with KVSNAP_FRESH takes every chunk's
 * previous hash as that of zeros (a zeroed pool, torch.zeros, stages
 * nothing until it is written) and writes every sum.  KVSNAP_FORCE counts
 * every chunk as changed, after a window was lost; a forced or fresh chunk
 * that finds no room gets the complement of its hash, so it stays changed.
 *
 * The hash: 64 bits, the sum (mod 2^64) over the chunk's 8-byte words w_i
 * (little-endian; a last partial word is zero-padded) of kv_mix(w_i, i),
 * with i the word's index within the chunk.  A sum does not depend on
 * which thread adds which word, so the device reduces it in any order.
 * kv_mix is splitmix64's finaliser of w_i + i * 0x9E3779B97F4A7C15
 * (kvsnap_algo.h), a bijection of w_i, so any change of one word changes
 * the hash; a change of several words goes unseen only if their mixed
 * values cancel (about 2^-64).  This is a change detector, not an
 * integrity check: what reaches the KV store is protected by CRC-32C,
 * computed by the host as it copies.
 *
 * An all-zero chunk hashes to kv_zero_hash(len), which costs len / 8
 * mixes: compute it once per chunk length (a pool has at most two).
 *
 * Dirty chunks.  Hashing every chunk costs a read of the whole pool per
 * window, however few tokens the window wrote.  Where a KV rule says how
 * far apart a pool's blocks lie (PROFILES.md, kv stride=), the preload
 * enqueues moeft_kv_mark after each KV-writer launch, in its stream: it
 * reads the launch's slot list and sets, in the pool's dirty bitmap (one
 * bit per chunk), the bit of every chunk that the slots' blocks overlap.
 * A snapshot given the bitmap (kv_snap_args.dirty) then hashes only the
 * chunks whose bit is set, unless it is fresh or forced, which read every
 * chunk; either way it leaves a chunk's bit set only when the chunk
 * changed and found no room, so the next snapshot stages it.  The bitmap
 * needs no setup either: a pool's first snapshot is fresh and writes
 * every bit.  The hash stays the judge of change: a block written with
 * the bytes it held is not staged.
 */
#ifndef MOEFT_KVSNAP_H
#define MOEFT_KVSNAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define KVSNAP_STATIC_ASSERT(e, m) static_assert(e, m)
#else
#define KVSNAP_STATIC_ASSERT(e, m) _Static_assert(e, m)
#endif

#define KVSNAP_THREADS 256u          /* block size of moeft_kv_snapshot */
#define KVSNAP_MIN_CHUNK 4096u       /* chunk bytes: a power of two, */
#define KVSNAP_MAX_CHUNK (1u << 30)  /* from 4 KiB to 1 GiB */
#define KVSNAP_ALIGN 64u             /* staged data offsets */

/*
 * The staging area: this header, then `max_entries` table entries, then
 * `capacity` data bytes (at data_off from the header).  The host sets the
 * read-only fields and zeroes the counters before each snapshot; the
 * device only adds to the counters (atomics) and fills what it reserved.
 * A snapshot reads the fields and adds to the counters of its ctl header,
 * which may be the area's own or a copy in device memory (kvsnap.h's top).
 * Entries are in no particular order, and so are their data offsets.  A
 * chunk reserves its data first (its length rounded up to KVSNAP_ALIGN),
 * then its entry; when either is short it counts in overflow, and data it
 * reserved stays reserved, unused.
 */
struct kv_stage {
	/* Host, before the snapshot. */
	uint64_t capacity;       /* data bytes */
	uint64_t max_entries;
	uint64_t table_off;      /* bytes from the header to the table */
	uint64_t data_off;       /* bytes from the header to the data */
	uint8_t pad0[32];
	/* Device counters. */
	uint64_t used;           /* data bytes reserved (may exceed capacity:
				    what did not fit is counted in overflow) */
	uint64_t entries;        /* table entries written (<= max_entries
				    once the snapshot has ended) */
	uint64_t overflow;       /* changed chunks that found no room */
	uint64_t overflow_bytes; /* their lengths */
	uint64_t read;           /* pool bytes hashed */
	uint8_t pad1[24];
};

/* One staged chunk. */
struct kv_stage_entry {
	uint32_t pool;           /* kv_snap_args.pool_no */
	uint32_t bytes;          /* chunk length (the last chunk may be short) */
	uint64_t chunk;          /* index within the pool */
	uint64_t data;           /* offset of its bytes from the data area */
	uint64_t hash;           /* kv_chunk_hash of those bytes */
};

KVSNAP_STATIC_ASSERT(sizeof(struct kv_stage) == 128, "kv_stage layout");
KVSNAP_STATIC_ASSERT(sizeof(struct kv_stage_entry) == 32, "kv_stage_entry layout");

#define KVSNAP_FRESH 1u  /* sums[] unwritten: every previous hash is of zeros */
#define KVSNAP_FORCE 2u  /* every chunk counts as changed */

/*
 * Parameters of moeft_kv_snapshot (by value).  Launch with 1-D blocks of
 * KVSNAP_THREADS threads (fewer also work) and a 1-D grid of any size
 * (grid-stride over the chunks; one block per chunk at a time; a few
 * blocks per SM keep the GPU busy), no dynamic shared memory.  Chunk c
 * covers bytes [c * chunk_bytes, min((c + 1) * chunk_bytes, bytes)) of
 * pool; nchunks = ceil(bytes / chunk_bytes).  An invalid request
 * (chunk_bytes not a power of two in range, bytes 0, pool, sums, stage or
 * ctl NULL, flags unknown; on the device also blocks or a grid of more
 * than one dimension) does nothing.  Snapshots of different pools may run
 * at once into one staging area (with one ctl); two of the same pool (the
 * same sums) may not.
 */
struct kv_snap_args {
	const void *pool;        /* device memory */
	uint64_t bytes;
	uint64_t chunk_bytes;
	uint64_t *sums;          /* nchunks hashes (device memory, or mapped) */
	uint32_t *dirty;         /* ceil(nchunks / 32) words of dirty bits, chunk
				    c at bit c % 32 of word c / 32; NULL: hash
				    every chunk */
	struct kv_stage *stage;  /* the device's view of the staging area */
	struct kv_stage *ctl;    /* its header's fields and counters: stage, or
				    a copy in device memory */
	uint64_t zero_whole;     /* kv_zero_hash(chunk_bytes) and of the last */
	uint64_t zero_last;      /* chunk's length: read with KVSNAP_FRESH */
	uint32_t pool_no;
	uint32_t flags;          /* KVSNAP_FRESH, KVSNAP_FORCE */
};

#define KVMARK_THREADS 256u          /* block size of moeft_kv_mark */
#define KVMARK_MAX_POOLS 4u          /* pools one launch writes (RULE_MAX_POOL) */

/* One pool a KV-writer launch writes: block b of its slots lies in bytes
 * [off + b * stride, off + (b + 1) * stride) of the pool, cut at its end. */
struct kv_mark_pool {
	uint32_t *dirty;         /* the pool's bitmap (device memory) */
	uint64_t bytes;          /* the pool's size */
	uint64_t off;            /* bytes from the pool's start to block 0 */
	uint64_t stride;         /* bytes from one block to the next, >= 1 */
	uint32_t chunk_shift;    /* log2 of the pool's chunk bytes */
	uint32_t pad;            /* zero */
};

/*
 * Parameters of moeft_kv_mark (by value: a graph records them).  Launch
 * with 1-D blocks of up to KVMARK_THREADS threads and any 1-D grid
 * (grid-stride over the slots).  It marks the chunks of every block that
 * slots[0..count) name: slot s lies in block s / block; negative slots
 * are padding, and a block past a pool's end marks nothing there.  An
 * invalid request (slots NULL, block 0, an unknown dtype, npool above
 * KVMARK_MAX_POOLS, a pool without a bitmap, size or stride, a chunk
 * shift out of kvsnap's range) does nothing.
 */
struct kv_mark_args {
	const void *slots;       /* device memory */
	uint64_t count;
	uint64_t block;          /* slots per KV block */
	uint32_t dtype;          /* enum cap_dtype: CAP_DT_I32, U32 or I64 */
	uint32_t npool;
	struct kv_mark_pool pool[KVMARK_MAX_POOLS];
};

/*
 * Parameters of moeft_kv_release (by value; one thread).  After a
 * window's snapshots, in their stream: when they staged every changed
 * chunk (ctl's overflow is 0), it stores gen into *flag, fenced at system
 * scope after everything the snapshots wrote, unless the flag is at gen or
 * past it already (cyclically); else it leaves the flag for the host,
 * which drains the staging area and has the rest staged first.
 * The serving streams wait for the flag to reach gen (cuStreamWaitValue32,
 * a cyclic comparison), so a window that changed more than the staging
 * area holds holds them back instead of losing chunks.
 */
struct kv_release_args {
	const struct kv_stage *ctl;   /* the snapshots' header (device view) */
	uint32_t *flag;               /* pinned host memory, the device's view */
	uint32_t gen;
	uint32_t pad;                 /* zero */
};

/*
 * Parameters of moeft_kv_header (by value; one thread): copy the staging
 * header *src to *dst, one of them the snapshots' header in device memory
 * (ctl), the other the staging area's own in pinned host memory (device
 * view).  A pass resets ctl from the host's header and returns the counters
 * to it by this kernel, not by copies: a serving stream held at a boundary
 * may have a copy of its own queued, and a GPU may run the copies of all
 * streams through one copy engine's queue, so a copy of moeft's would wait
 * behind it while the stream waits for moeft: a deadlock.
 */
struct kv_header_args {
	struct kv_stage *dst;
	const struct kv_stage *src;
};

#ifndef __CUDACC__
/* Host references of moeft_kv_snapshot (same effect; chunks in any order),
 * moeft_kv_mark, moeft_kv_release and moeft_kv_header. */
void kv_snapshot_ref(const struct kv_snap_args *a);
void kv_mark_ref(const struct kv_mark_args *a);
void kv_release_ref(const struct kv_release_args *a);
void kv_header_ref(const struct kv_header_args *a);

/* Whether moeft_kv_mark takes *a (an invalid one marks nothing). */
int kv_mark_valid(const struct kv_mark_args *a);

/* The chunk size of a pool of `bytes` that nothing else sizes (MOEFT_KV
 * block=): 4 KiB, doubled while the pool has more than 2^16 chunks, up to
 * 64 KiB. */
uint64_t kv_default_chunk(uint64_t bytes);

/* The hash of len bytes at p (len <= KVSNAP_MAX_CHUNK), and of len zeros. */
uint64_t kv_chunk_hash(const void *p, uint64_t len);
uint64_t kv_zero_hash(uint64_t len);

/* Set up a staging area of `len` bytes at s (64-byte aligned), its table
 * sized for data chunks of min_chunk bytes or more (plus one short last
 * chunk per pool, up to 64 pools), so that it never fills before the data
 * area does; the counters zeroed.  0, or -1 (s untouched) when s is not
 * aligned, min_chunk is 0 or above KVSNAP_MAX_CHUNK, or len cannot hold
 * the table and one chunk of min_chunk bytes.  The table takes 32 bytes
 * per min_chunk bytes of len, plus 2 KiB: the data area is less than len.
 * A chunk that finds no data room or no table entry counts in overflow. */
int kv_stage_init(struct kv_stage *s, size_t len, uint64_t min_chunk);
/* Zero the counters for the next snapshot. */
void kv_stage_reset(struct kv_stage *s);
#endif

#ifdef __cplusplus
}
#endif

#endif

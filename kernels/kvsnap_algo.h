/*
 * kvsnap_algo.h - the KV snapshot algorithm, one text for two compilers.
 *
 * nvcc compiles these functions as device code into kernels/capture.cu; a
 * C compiler compiles them as the host reference (kvsnap_ref.c).  Only the
 * memory primitives differ: atomics_algo.h.  Word-sized functions take
 * (first, step) so that a block's threads split a chunk and one host
 * thread does all of it.  The snapshot's contract: kvsnap.h.  Private to
 * kernels/.
 *
 * Per chunk: one thread takes its dirty bit (kv_take_chunk, or the word's
 * kv_take_word); every thread sums the hash terms of its words; the block
 * adds the sums; one thread compares with the previous hash and reserves
 * (kv_begin); the block copies (kv_copy); one thread writes the entry and
 * the new sum (kv_end).  The chunks are every chunk of the pool, or, for a
 * sparse snapshot (kv_sparse), the set bits of the dirty words.  After its
 * last chunk the snapshot fences (atom_fence_sys), so a host that sees
 * anything the same stream writes later sees the staged bytes and the
 * table.
 *
 * The mark (moeft_kv_mark): each thread takes slots, and for each pool
 * sets the bits of the chunks its block overlaps (kv_mark_slot).
 */
#ifndef MOEFT_KVSNAP_ALGO_H
#define MOEFT_KVSNAP_ALGO_H

#include <string.h>

#include "atomics_algo.h"
#include "capture.h"
#include "kvsnap.h"

#ifndef __CUDACC__
/* Aligned words are loaded whole, which spells the hash's little-endian
 * words only on a little-endian host (as every GPU is). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "kv_chunk_hash needs little-endian");
#endif

/* Where a staged chunk goes: its table entry and data offset. */
struct kv_resv {
	uint64_t entry;
	uint64_t data;
};

ALGO_FN int kv_args_ok(const struct kv_snap_args *a)
{
	uint64_t cb = a->chunk_bytes;

	return a->pool && a->sums && a->stage && a->ctl && a->bytes &&
	       !(a->flags & ~(KVSNAP_FRESH | KVSNAP_FORCE)) &&
	       cb >= KVSNAP_MIN_CHUNK && cb <= KVSNAP_MAX_CHUNK && (cb & (cb - 1)) == 0;
}

ALGO_FN uint64_t kv_nchunks(const struct kv_snap_args *a)
{
	return (a->bytes - 1) / a->chunk_bytes + 1;
}

ALGO_FN uint64_t kv_chunk_len(const struct kv_snap_args *a, uint64_t c)
{
	uint64_t rest = a->bytes - c * a->chunk_bytes;

	return rest < a->chunk_bytes ? rest : a->chunk_bytes;
}

ALGO_FN const unsigned char *kv_chunk_src(const struct kv_snap_args *a, uint64_t c)
{
	return (const unsigned char *)a->pool + c * a->chunk_bytes;
}

/* The table and data of a snapshot's staging area, at the offsets its
 * ctl header holds (the same as the area's own). */
ALGO_FN struct kv_stage_entry *kv_table(const struct kv_snap_args *a)
{
	return (struct kv_stage_entry *)((unsigned char *)a->stage + a->ctl->table_off);
}

ALGO_FN unsigned char *kv_data(const struct kv_snap_args *a)
{
	return (unsigned char *)a->stage + a->ctl->data_off;
}

/* 8-byte words in len bytes, the last one maybe partial. */
ALGO_FN uint64_t kv_nwords(uint64_t len)
{
	return len / 8 + (len % 8 != 0);
}

/* splitmix64's finaliser (Stafford's mix 13) of w + i * 2^64 / phi: a
 * bijection of w for each i, so one changed word changes its term. */
ALGO_FN uint64_t kv_mix(uint64_t w, uint64_t i)
{
	uint64_t z = w + i * UINT64_C(0x9E3779B97F4A7C15);

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* Word i of the len bytes at p, little-endian, zero-padded past len.  The
 * memcpy of an aligned word is one 8-byte load for both compilers, and
 * reads the bytes whatever type wrote them. */
ALGO_FN uint64_t kv_word(const unsigned char *p, uint64_t len, uint64_t i)
{
	uint64_t w = 0, n = len - i * 8, k;

	p += i * 8;
	if (n >= 8 && ((uintptr_t)p & 7) == 0) {
		memcpy(&w, __builtin_assume_aligned(p, 8), 8);
		return w;
	}
	for (k = 0; k < n && k < 8; k++)
		w |= (uint64_t)p[k] << (8 * k);
	return w;
}

/* The hash terms of words first, first + step, ... summed: the whole
 * chunk's hash is the sum of the parts, in any order. */
ALGO_FN uint64_t kv_hash_part(const unsigned char *p, uint64_t len, uint64_t first,
			      uint64_t step)
{
	uint64_t n = kv_nwords(len), h = 0, i;

	for (i = first; i < n; i += step)
		h += kv_mix(kv_word(p, len, i), i);
	return h;
}

/*
 * Room for a chunk of len bytes, or count an overflow.  Data first, by one
 * add that may carry used past capacity (what did not fit stays counted,
 * so later reservations fail too rather than overlap).  Then the entry: an
 * add past max_entries is taken back, so entries ends as the number
 * written.  Taking back cannot hand an index out twice: an add fails only
 * when max_entries adds have succeeded, and those never come back, so the
 * counter stays at max_entries or above from then on.  The data of a chunk
 * that found no entry is left unused.
 */
ALGO_FN int kv_reserve(struct kv_stage *s, uint64_t len, struct kv_resv *rv)
{
	uint64_t need = (len + KVSNAP_ALIGN - 1) & ~(uint64_t)(KVSNAP_ALIGN - 1);
	uint64_t cap = s->capacity;

	rv->data = atom_add(&s->used, need);
	if (rv->data <= cap && need <= cap - rv->data) {
		rv->entry = atom_add(&s->entries, 1);
		if (rv->entry < s->max_entries)
			return 1;
		atom_add(&s->entries, UINT64_MAX);	/* minus one */
	}
	atom_add(&s->overflow, 1);
	atom_add(&s->overflow_bytes, len);
	return 0;
}

/* Whether a snapshot hashes only the chunks marked dirty. */
ALGO_FN int kv_sparse(const struct kv_snap_args *a)
{
	return a->dirty && !(a->flags & (KVSNAP_FRESH | KVSNAP_FORCE));
}

ALGO_FN uint64_t kv_dirty_words(const struct kv_snap_args *a)
{
	return (kv_nchunks(a) + 31) / 32;
}

/*
 * A chunk's bit is cleared before its bytes are read, never after: a mark
 * that lands while the snapshot runs (a writer the boundary did not wait
 * for) then stays, and the next snapshot reads the chunk again.  Cleared
 * after the read, it would be lost with the write it marks.
 */

/* One thread: take dirty word w, clearing it, for a sparse snapshot: its
 * set bits that name chunks of the pool (a bitmap that no snapshot has
 * written yet may hold any bits). */
ALGO_FN uint32_t kv_take_word(const struct kv_snap_args *a, uint64_t w)
{
	uint64_t past = kv_nchunks(a) - w * 32;

	/* Most words are clear: a load, not an atomic, for those (a bit set
	 * after it is a later write's, for the next snapshot). */
	if (!atom_ld32(a->dirty + w))
		return 0;
	return atom_xchg32(a->dirty + w, 0) & (past >= 32 ? ~0u : (1u << past) - 1);
}

/* One thread, before a full snapshot reads chunk c: clear its bit. */
ALGO_FN void kv_take_chunk(const struct kv_snap_args *a, uint64_t c)
{
	uint32_t bit = 1u << (c % 32);

	if (a->dirty && !kv_sparse(a) && (atom_ld32(a->dirty + c / 32) & bit))
		atom_and32(a->dirty + c / 32, ~bit);
}

/* The hash chunk c had when last staged. */
ALGO_FN uint64_t kv_prev(const struct kv_snap_args *a, uint64_t c)
{
	if (a->flags & KVSNAP_FRESH)
		return c + 1 < kv_nchunks(a) ? a->zero_whole : a->zero_last;
	return a->sums[c];
}

/* What kv_begin found of a chunk. */
enum { KV_SAME, KV_STAGE, KV_NO_ROOM };

/* One thread, once chunk c's hash h is summed: KV_STAGE when the chunk
 * changed and has room to be staged at rv, KV_NO_ROOM when it changed
 * and has none, else KV_SAME; its bytes count as read.  Where sums[c]
 * would not say that an unstaged chunk changed (fresh, or forced), it is
 * written here; a chunk with no room gets its dirty bit back. */
ALGO_FN int kv_begin(const struct kv_snap_args *a, uint64_t c, uint64_t h, struct kv_resv *rv)
{
	int r = KV_NO_ROOM;

	atom_add(&a->ctl->read, kv_chunk_len(a, c));
	if (!(a->flags & KVSNAP_FORCE) && h == kv_prev(a, c)) {
		if (a->flags & KVSNAP_FRESH)
			a->sums[c] = h;
		r = KV_SAME;
	} else if (kv_reserve(a->ctl, kv_chunk_len(a, c), rv)) {
		r = KV_STAGE;
	} else if (a->flags & (KVSNAP_FRESH | KVSNAP_FORCE)) {
		a->sums[c] = ~h;
	}
	if (r == KV_NO_ROOM && a->dirty)
		atom_or32(a->dirty + c / 32, 1u << (c % 32));
	return r;
}

/* Words first, first + step, ... of the len bytes at src to dst: whole
 * words where both sides are aligned, else byte by byte; never a byte
 * past len on either side. */
ALGO_FN void kv_copy(unsigned char *dst, const unsigned char *src, uint64_t len,
		     uint64_t first, uint64_t step)
{
	int aligned = (((uintptr_t)dst | (uintptr_t)src) & 7) == 0;
	uint64_t n = kv_nwords(len), i, k;

	for (i = first; i < n; i += step) {
		uint64_t off = i * 8, end = len - off < 8 ? len : off + 8;

		if (aligned && end - off == 8)
			memcpy(__builtin_assume_aligned(dst + off, 8),
			       __builtin_assume_aligned(src + off, 8), 8);
		else
			for (k = off; k < end; k++)
				dst[k] = src[k];
	}
}

/* One thread, once the block's copy is done: the entry, then the new hash,
 * so that a chunk counts as staged only when it was. */
ALGO_FN void kv_end(const struct kv_snap_args *a, uint64_t c, uint64_t h,
		    const struct kv_resv *rv)
{
	struct kv_stage_entry *e = kv_table(a) + rv->entry;

	e->pool = a->pool_no;
	e->bytes = (uint32_t)kv_chunk_len(a, c);
	e->chunk = c;
	e->data = rv->data;
	e->hash = h;
	a->sums[c] = h;
}

/* ---- the release --------------------------------------------------------- */

/* The flag only moves forward (cyclically): the host may have released a
 * later boundary already (capture stopped), and an older release that
 * ran after it would hold that boundary's streams again. */
ALGO_FN void kv_release(const struct kv_release_args *a)
{
	if (a->ctl && a->flag && atom_ld_relaxed(&a->ctl->overflow) == 0 &&
	    (int32_t)(atom_ld32(a->flag) - a->gen) < 0)
		atom_publish32(a->flag, a->gen);
}

/* The header, word by word (a header is whole 64-bit words). */
ALGO_FN void kv_header_copy(const struct kv_header_args *a)
{
	const uint64_t *src = (const uint64_t *)a->src;
	uint64_t *dst = (uint64_t *)a->dst;
	unsigned i;

	for (i = 0; i < sizeof(struct kv_stage) / sizeof(uint64_t); i++)
		dst[i] = src[i];
}

/* ---- the mark ---------------------------------------------------------- */

ALGO_FN int kv_mark_ok(const struct kv_mark_args *a)
{
	uint32_t i;

	if (!a->slots || !a->block || a->npool > KVMARK_MAX_POOLS ||
	    (a->dtype != CAP_DT_I32 && a->dtype != CAP_DT_U32 && a->dtype != CAP_DT_I64))
		return 0;
	for (i = 0; i < a->npool; i++) {
		const struct kv_mark_pool *p = &a->pool[i];

		if (!p->dirty || !p->bytes || !p->stride || p->chunk_shift < 12 ||
		    p->chunk_shift > 30)
			return 0;
	}
	return 1;
}

/* Slot i of the list (a u32 slot is never padding). */
ALGO_FN int64_t kv_mark_slot_at(const struct kv_mark_args *a, uint64_t i)
{
	if (a->dtype == CAP_DT_I64)
		return ((const int64_t *)a->slots)[i];
	if (a->dtype == CAP_DT_U32)
		return (int64_t)((const uint32_t *)a->slots)[i];
	return ((const int32_t *)a->slots)[i];
}

/* One thread: mark, in every pool, the chunks that slot s's block
 * overlaps.  A block is marked whole, whatever part of it the slot
 * takes: a layout that spreads a slot over its block (vLLM's older
 * key cache) is covered too. */
ALGO_FN void kv_mark_slot(const struct kv_mark_args *a, int64_t s)
{
	uint64_t b, lo, hi, c;
	uint32_t i;

	if (s < 0)
		return;
	b = (uint64_t)s / a->block;
	for (i = 0; i < a->npool; i++) {
		const struct kv_mark_pool *p = &a->pool[i];

		/* Block b starts inside the pool: off + b * stride < bytes,
		 * asked without overflow. */
		if (p->off >= p->bytes || b > (p->bytes - p->off - 1) / p->stride)
			continue;
		lo = p->off + b * p->stride;
		hi = p->bytes - lo > p->stride ? lo + p->stride : p->bytes;
		for (c = lo >> p->chunk_shift; c <= (hi - 1) >> p->chunk_shift; c++)
			if (!(atom_ld32(p->dirty + c / 32) & (1u << (c % 32))))
				atom_or32(p->dirty + c / 32, 1u << (c % 32));
	}
}

#endif

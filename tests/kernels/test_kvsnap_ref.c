/*
 * test_kvsnap_ref.c - host references of moeft_kv_snapshot and
 * moeft_kv_mark: the chunk hash, which chunks a snapshot stages and what it
 * writes, overflow, fresh and forced snapshots, a header of its own (ctl),
 * the dirty marks and the sparse snapshot, the staging area's setup,
 * threads sharing one staging area.
 *
 * The hash is checked against values worked out independently and against
 * a plain loop written from kvsnap.h's definition.  Staging areas are read
 * straight from the layout in kvsnap.h, and every snapshot starts with the
 * table and data poisoned (0xA5), so a byte the snapshot should have
 * written but did not, or wrote but should not have, shows.  Pools are
 * allocated at their exact size: under ASan a read past one fails.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "kvsnap.h"
#include "kvsnap_algo.h"	/* the steps of a snapshot, to interleave a mark */
#include "testutil.h"

#define CHUNK 4096u
#define POISON 0xA5
#define ALIGN_UP(x) (((x) + KVSNAP_ALIGN - 1) & ~(uint64_t)(KVSNAP_ALIGN - 1))

/* ---- the hash, from its definition ------------------------------------- */

static uint64_t spec_mix(uint64_t w, uint64_t i)
{
	uint64_t z = w + i * 0x9E3779B97F4A7C15u;

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
	return z ^ (z >> 31);
}

static uint64_t spec_word(const unsigned char *p, uint64_t len, uint64_t i)
{
	uint64_t w = 0, k;

	for (k = 0; k < 8 && i * 8 + k < len; k++)
		w |= (uint64_t)p[i * 8 + k] << (8 * k);
	return w;
}

static uint64_t spec_term(const unsigned char *p, uint64_t len, uint64_t i)
{
	return spec_mix(spec_word(p, len, i), i);
}

/* Fixed-seed xorshift64, so failures reproduce. */
static void fill_random(unsigned char *p, size_t len, uint64_t seed)
{
	size_t i;

	for (i = 0; i < len; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		p[i] = (unsigned char)(seed >> 24);
	}
}

static void test_hash_known(void)
{
	static const unsigned char counting[16] = { 0, 1, 2, 3, 4, 5, 6, 7,
						    8, 9, 10, 11, 12, 13, 14, 15 };
	static const uint64_t lens[] = { 0, 1, 7, 8, 9, 15, 16, 17, 1000, 1003,
					 4095, 4096, 4097, 65539 };
	unsigned char *p;
	size_t i;

	/* kv_mix(0, 0) is 0; kv_mix(0, 1) is splitmix64's first output from
	 * seed 0.  The others were computed apart from this code. */
	CU_ASSERT(kv_zero_hash(0) == 0);
	CU_ASSERT(kv_zero_hash(1) == 0);
	CU_ASSERT(kv_zero_hash(8) == 0);
	CU_ASSERT(kv_zero_hash(9) == 0xE220A8397B1DCDAFu);
	CU_ASSERT(kv_zero_hash(16) == 0xE220A8397B1DCDAFu);
	CU_ASSERT(kv_zero_hash(1000) == 0xD8FF00EC603C5BD3u);
	CU_ASSERT(kv_zero_hash(4096) == 0xDD718047559F8B35u);
	p = malloc(16);
	CU_ASSERT_FATAL(p != NULL);
	memcpy(p, counting, 16);
	CU_ASSERT(kv_chunk_hash(p, 16) == 0xC76C4893F5EA4522u);
	CU_ASSERT(kv_chunk_hash(p, 11) == 0xF3EAD733CC132CD4u);
	free(p);

	for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		p = calloc(1, lens[i] ? lens[i] : 1);
		CU_ASSERT_FATAL(p != NULL);
		CU_ASSERT(kv_chunk_hash(p, lens[i]) == kv_zero_hash(lens[i]));
		free(p);
	}
}

/* One changed byte, at any position and of any bit, changes the hash; the
 * buffer's address does not. */
static void test_hash_bytes(void)
{
	enum { LEN = 1003 };
	static const unsigned char flips[] = { 0x01, 0x80, 0xFF, 0x5A };
	unsigned char *p = malloc(LEN), *q = malloc(LEN + 7);
	uint64_t h;
	size_t i, f;

	CU_ASSERT_FATAL(p && q);
	fill_random(p, LEN, 7);
	h = kv_chunk_hash(p, LEN);
	for (i = 0; i < LEN; i++)
		for (f = 0; f < sizeof flips; f++) {
			p[i] ^= flips[f];
			CU_ASSERT(kv_chunk_hash(p, LEN) != h);
			p[i] ^= flips[f];
		}
	CU_ASSERT(kv_chunk_hash(p, LEN) == h);
	for (i = 1; i < 8; i++) {
		memcpy(q + i - 1, p, LEN);
		CU_ASSERT(kv_chunk_hash(q + i - 1, LEN) == h);
	}
	free(p);
	free(q);
}

/* The sum in any order is the hash: forwards, backwards, and as 256
 * threads' parts added pairwise, as a block reduces it. */
static void test_hash_order(void)
{
	enum { LEN = 3 * CHUNK + 13, WORDS = (LEN + 7) / 8, T = 256 };
	unsigned char *p = malloc(LEN);
	uint64_t fwd = 0, bwd = 0, part[T] = { 0 }, i;
	unsigned s;

	CU_ASSERT_FATAL(p != NULL);
	fill_random(p, LEN, 11);
	for (i = 0; i < WORDS; i++)
		fwd += spec_term(p, LEN, i);
	for (i = WORDS; i-- > 0;)
		bwd += spec_term(p, LEN, i);
	for (i = 0; i < WORDS; i++)
		part[i % T] += spec_term(p, LEN, i);
	for (s = T / 2; s > 0; s /= 2)
		for (i = 0; i < s; i++)
			part[i] += part[i + s];
	CU_ASSERT(fwd == bwd && fwd == part[0]);
	CU_ASSERT(kv_chunk_hash(p, LEN) == fwd);
	free(p);
}

/* ---- pools and staging areas ------------------------------------------- */

struct pool {
	uint32_t no;
	uint64_t bytes, n;
	unsigned char *mem;	/* exact size, plus `skew` bytes before it */
	unsigned char *base;
	uint64_t *sums;
	uint64_t *before;	/* sums when the snapshot started */
	unsigned char *staged;	/* per chunk, by check() */
};

static uint64_t chunk_len(const struct pool *p, uint64_t c)
{
	return c + 1 < p->n ? CHUNK : p->bytes - c * CHUNK;
}

static const unsigned char *chunk_at(const struct pool *p, uint64_t c)
{
	return p->base + c * CHUNK;
}

/* A zeroed pool whose sums say every chunk was staged as zeros. */
static void pool_init(struct pool *p, uint32_t no, uint64_t bytes, unsigned skew)
{
	uint64_t c;

	p->no = no;
	p->bytes = bytes;
	p->n = (bytes + CHUNK - 1) / CHUNK;
	p->mem = calloc(1, bytes + skew);
	p->base = p->mem + skew;
	p->sums = malloc(p->n * sizeof *p->sums);
	p->before = malloc(p->n * sizeof *p->before);
	p->staged = malloc(p->n);
	CU_ASSERT_FATAL(p->mem && p->sums && p->before && p->staged);
	for (c = 0; c < p->n; c++)
		p->sums[c] = kv_zero_hash(chunk_len(p, c));
}

static void pool_free(struct pool *p)
{
	free(p->mem);
	free(p->sums);
	free(p->before);
	free(p->staged);
}

static struct kv_snap_args args(const struct pool *p, struct kv_stage *s)
{
	struct kv_snap_args a;

	memset(&a, 0, sizeof a);
	a.pool = p->base;
	a.bytes = p->bytes;
	a.chunk_bytes = CHUNK;
	a.sums = p->sums;
	a.stage = s;
	a.ctl = s;
	a.pool_no = p->no;
	return a;
}

static struct kv_stage *stage_new(size_t len)
{
	struct kv_stage *s = aligned_alloc(64, len);

	CU_ASSERT_FATAL(s != NULL);
	CU_ASSERT_FATAL(kv_stage_init(s, len, CHUNK) == 0);
	return s;
}

static int all_poison(const unsigned char *p, uint64_t len)
{
	uint64_t i;

	for (i = 0; i < len; i++)
		if (p[i] != POISON)
			return 0;
	return 1;
}

/* What the host does before a snapshot, plus the poison and the record of
 * the sums before. */
static void prepare(struct kv_stage *s, struct pool *p, unsigned np)
{
	unsigned i;

	kv_stage_reset(s);
	memset((unsigned char *)s + s->table_off, POISON, s->data_off + s->capacity - s->table_off);
	for (i = 0; i < np; i++)
		memcpy(p[i].before, p[i].sums, p[i].n * sizeof *p[i].sums);
}

static void snapshot(struct kv_stage *s, struct pool *p)
{
	struct kv_snap_args a = args(p, s);

	prepare(s, p, 1);
	kv_snapshot_ref(&a);
}

/*
 * After a snapshot of pools p[0..np) into s: every entry is one chunk of
 * one pool, staged once, with its exact bytes (and not one more: the rest
 * of its 64-byte room is still poison) and hash, in room of its own; a
 * staged chunk's sum is its hash, every other sum is unchanged; a chunk
 * that changed and was not staged counts in overflow, with its bytes.
 * With flags (the snapshot's): KVSNAP_FORCE, every chunk counts as
 * changed; KVSNAP_FRESH or KVSNAP_FORCE, one not staged has the
 * complement of its hash for a sum.  Sets p[].staged and returns the
 * number of entries.
 */
static uint64_t check_flags(const struct kv_stage *s, struct pool *p, unsigned np,
			    uint32_t flags)
{
	const struct kv_stage_entry *t =
		(const void *)((const unsigned char *)s + s->table_off);
	const unsigned char *data = (const unsigned char *)s + s->data_off;
	uint64_t i, j, c, changed = 0, lost_bytes = 0, used = 0, read;
	unsigned k;

	CU_ASSERT_FATAL(s->entries <= s->max_entries);
	for (k = 0; k < np; k++)
		memset(p[k].staged, 0, p[k].n);
	for (i = 0; i < s->entries; i++) {
		const struct kv_stage_entry *e = &t[i];
		struct pool *q = NULL;

		for (k = 0; k < np; k++)
			if (p[k].no == e->pool)
				q = &p[k];
		CU_ASSERT_FATAL(q != NULL && e->chunk < q->n);
		CU_ASSERT_FATAL(!q->staged[e->chunk]);
		q->staged[e->chunk] = 1;
		CU_ASSERT_FATAL(e->bytes == chunk_len(q, e->chunk));
		CU_ASSERT_FATAL(e->data % KVSNAP_ALIGN == 0);
		CU_ASSERT_FATAL(e->data + ALIGN_UP(e->bytes) <= s->capacity);
		CU_ASSERT(memcmp(data + e->data, chunk_at(q, e->chunk), e->bytes) == 0);
		CU_ASSERT(all_poison(data + e->data + e->bytes, ALIGN_UP(e->bytes) - e->bytes));
		CU_ASSERT(e->hash == kv_chunk_hash(chunk_at(q, e->chunk), e->bytes));
		for (j = 0; j < i; j++)
			CU_ASSERT(e->data + ALIGN_UP(e->bytes) <= t[j].data ||
				  t[j].data + ALIGN_UP(t[j].bytes) <= e->data);
		used += ALIGN_UP(e->bytes);
	}
	if (s->entries < s->max_entries)
		CU_ASSERT(all_poison((const unsigned char *)&t[s->entries], sizeof *t));
	for (k = 0; k < np; k++)
		for (c = 0; c < p[k].n; c++) {
			uint64_t h = kv_chunk_hash(chunk_at(&p[k], c), chunk_len(&p[k], c));

			if (!(flags & KVSNAP_FORCE) && h == p[k].before[c]) {
				CU_ASSERT(!p[k].staged[c]);
				CU_ASSERT(p[k].sums[c] == h);
				continue;
			}
			changed++;
			if (p[k].staged[c]) {
				CU_ASSERT(p[k].sums[c] == h);
			} else {
				CU_ASSERT(p[k].sums[c] == (flags & (KVSNAP_FRESH | KVSNAP_FORCE) ?
							   ~h : p[k].before[c]));
				lost_bytes += chunk_len(&p[k], c);
			}
		}
	CU_ASSERT(s->overflow == changed - s->entries);
	CU_ASSERT(s->overflow_bytes == lost_bytes);
	for (k = 0, read = 0; k < np; k++)
		read += p[k].bytes;
	CU_ASSERT(s->read == read);
	CU_ASSERT(s->overflow ? s->used >= used : s->used == used);
	return s->entries;
}

static uint64_t check(const struct kv_stage *s, struct pool *p, unsigned np)
{
	return check_flags(s, p, np, 0);
}

/* ---- snapshots --------------------------------------------------------- */

/* Nine chunks, the last of 1003 bytes (a partial word), at an aligned
 * address and at an odd one. */
static void test_snapshot(void)
{
	enum { BYTES = 8 * CHUNK + 1003 };
	size_t len = 64 * 1024;
	struct kv_stage *s = stage_new(len);
	unsigned skew;

	for (skew = 0; skew < 2; skew++) {
		struct pool p;

		pool_init(&p, 7, BYTES, skew);
		snapshot(s, &p);
		CU_ASSERT(check(s, &p, 1) == 0 && s->used == 0 && s->overflow == 0);
		CU_ASSERT(all_poison((unsigned char *)s + s->table_off,
				     s->data_off + s->capacity - s->table_off));

		p.base[2 * CHUNK] = 1;
		p.base[6 * CHUNK - 1] = 0x80;
		p.base[BYTES - 1] = 0xFF;
		snapshot(s, &p);
		CU_ASSERT(check(s, &p, 1) == 3);
		CU_ASSERT(p.staged[2] && p.staged[5] && p.staged[8]);
		CU_ASSERT(s->used == 2 * CHUNK + 1024 && s->overflow == 0);

		snapshot(s, &p);
		CU_ASSERT(check(s, &p, 1) == 0 && s->used == 0);

		/* back to zeros is a change too */
		p.base[6 * CHUNK - 1] = 0;
		snapshot(s, &p);
		CU_ASSERT(check(s, &p, 1) == 1 && p.staged[5]);
		CU_ASSERT(p.sums[5] == kv_zero_hash(CHUNK));
		pool_free(&p);
	}
	free(s);
}

/* Room for two chunks, three changed: two staged, the third counted and
 * still changed, so the next snapshot stages it. */
static void test_overflow_data(void)
{
	static const uint64_t changed[] = { 0, 1, 3 };
	struct kv_stage *s = stage_new(64 * 1024);
	struct pool p;
	uint64_t lost = UINT64_MAX;
	size_t i;

	pool_init(&p, 1, 4 * CHUNK, 0);
	for (i = 0; i < 3; i++)
		p.base[changed[i] * CHUNK] = 9;
	s->capacity = 2 * CHUNK;
	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == 2);
	CU_ASSERT(s->overflow == 1 && s->overflow_bytes == CHUNK);
	CU_ASSERT(s->used == 3 * CHUNK);	/* what did not fit stays counted */
	for (i = 0; i < 3; i++)
		if (!p.staged[changed[i]])
			lost = changed[i];
	CU_ASSERT_FATAL(lost != UINT64_MAX);
	CU_ASSERT(p.sums[lost] == kv_zero_hash(CHUNK));

	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == 1 && p.staged[lost] && s->overflow == 0);
	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == 0);
	pool_free(&p);

	/* a short chunk that does not fit counts its own length */
	pool_init(&p, 2, 2 * CHUNK + 100, 0);
	p.base[0] = p.base[CHUNK] = p.base[2 * CHUNK + 99] = 9;
	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == 2 && s->overflow == 1);
	CU_ASSERT(s->overflow_bytes == (p.staged[2] ? CHUNK : 100));
	pool_free(&p);
	free(s);
}

/* A full table overflows too; the entry taken past it is given back. */
static void test_overflow_entries(void)
{
	struct kv_stage *s = stage_new(64 * 1024);
	uint64_t max = s->max_entries;
	struct pool p;

	pool_init(&p, 3, 3 * CHUNK, 0);
	p.base[10] = p.base[CHUNK + 10] = p.base[2 * CHUNK + 10] = 1;
	s->max_entries = 2;
	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == 2);
	CU_ASSERT(s->entries == 2 && s->overflow == 1 && s->overflow_bytes == CHUNK);
	CU_ASSERT(s->used == 3 * CHUNK);	/* data is reserved before the entry */

	s->max_entries = max;
	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == 1 && s->overflow == 0);
	pool_free(&p);
	free(s);
}

/* A snapshot with flags, and a dirty bitmap unless NULL; before[] as the
 * chunks' previous hashes, which are the hashes of zeros for a fresh one,
 * whatever sums[] holds. */
static void snapshot_dirty(struct kv_stage *s, struct pool *p, uint32_t *dirty, uint32_t flags)
{
	struct kv_snap_args a = args(p, s);
	uint64_t c;

	prepare(s, p, 1);
	a.flags = flags;
	a.dirty = dirty;
	a.zero_whole = kv_zero_hash(CHUNK);
	a.zero_last = kv_zero_hash(chunk_len(p, p->n - 1));
	if (flags & KVSNAP_FRESH)
		for (c = 0; c < p->n; c++)
			p->before[c] = kv_zero_hash(chunk_len(p, c));
	kv_snapshot_ref(&a);
}

static void snapshot_flags(struct kv_stage *s, struct pool *p, uint32_t flags)
{
	snapshot_dirty(s, p, NULL, flags);
}

/* A fresh snapshot reads no sum and writes them all: over poison, a
 * zeroed pool stages nothing and every sum becomes the hash of zeros (the
 * short last chunk's its own); written chunks are staged, and one that
 * finds no room is staged by the next, plain snapshot. */
static void test_fresh(void)
{
	enum { BYTES = 5 * CHUNK + 1003 };
	struct kv_stage *s = stage_new(64 * 1024);
	struct pool p;
	uint64_t c, lost = UINT64_MAX;

	pool_init(&p, 5, BYTES, 0);
	memset(p.sums, POISON, p.n * sizeof *p.sums);
	snapshot_flags(s, &p, KVSNAP_FRESH);
	CU_ASSERT(check_flags(s, &p, 1, KVSNAP_FRESH) == 0 && s->used == 0);
	for (c = 0; c < p.n; c++)
		CU_ASSERT(p.sums[c] == kv_zero_hash(chunk_len(&p, c)));
	CU_ASSERT(p.sums[p.n - 1] != p.sums[0]);

	memset(p.sums, POISON, p.n * sizeof *p.sums);
	p.base[CHUNK] = p.base[3 * CHUNK + 5] = p.base[BYTES - 1] = 7;
	s->capacity = 2 * CHUNK;
	snapshot_flags(s, &p, KVSNAP_FRESH);
	CU_ASSERT(check_flags(s, &p, 1, KVSNAP_FRESH) == 2 && s->overflow == 1);
	for (c = 1; c < p.n; c += 2)
		if (!p.staged[c])
			lost = c;
	CU_ASSERT_FATAL(lost != UINT64_MAX);
	CU_ASSERT(p.sums[0] == kv_zero_hash(CHUNK) && p.sums[2] == kv_zero_hash(CHUNK));

	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == 1 && p.staged[lost]);
	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == 0);
	pool_free(&p);
	free(s);
}

/* A forced snapshot stages every chunk, changed or not; those that find no
 * room stay changed for the next. */
static void test_force(void)
{
	enum { N = 6 };
	struct kv_stage *s = stage_new(64 * 1024);
	struct pool p;
	uint64_t cap = s->capacity, n;

	pool_init(&p, 6, N * CHUNK, 0);
	fill_random(p.base, N * CHUNK, 5);
	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == N);
	snapshot_flags(s, &p, KVSNAP_FORCE);
	CU_ASSERT(check_flags(s, &p, 1, KVSNAP_FORCE) == N && s->overflow == 0);

	s->capacity = 4 * CHUNK;
	snapshot_flags(s, &p, KVSNAP_FORCE);
	CU_ASSERT(check_flags(s, &p, 1, KVSNAP_FORCE) == 4 && s->overflow == 2);
	s->capacity = cap;
	snapshot(s, &p);
	n = check(s, &p, 1);
	CU_ASSERT(n == 2 && s->overflow == 0);
	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == 0);
	pool_free(&p);
	free(s);
}

/* With a header of its own (ctl, as the preload's copy in device memory),
 * a snapshot reads its limits and adds its counters there, and writes the
 * area's table and data at ctl's offsets; the area's header is untouched. */
static void test_ctl(void)
{
	struct kv_stage *s = stage_new(64 * 1024), ctl, area_header;
	struct kv_snap_args a;
	struct pool p;

	pool_init(&p, 8, 4 * CHUNK, 0);
	p.base[0] = p.base[2 * CHUNK] = p.base[3 * CHUNK + 9] = 1;
	prepare(s, &p, 1);
	ctl = *s;
	ctl.capacity = 2 * CHUNK;	/* the limits read are ctl's */
	memset(s, POISON, sizeof *s);
	area_header = *s;
	a = args(&p, s);
	a.ctl = &ctl;
	kv_snapshot_ref(&a);
	CU_ASSERT(memcmp(s, &area_header, sizeof *s) == 0);
	CU_ASSERT(ctl.entries == 2 && ctl.overflow == 1 && ctl.used == 3 * CHUNK);
	*s = ctl;	/* the preload's copy back */
	CU_ASSERT(check(s, &p, 1) == 2);
	pool_free(&p);
	free(s);
}

/* An invalid request touches nothing. */
static void test_invalid(void)
{
	static const uint64_t bad_chunks[] = { 0, 1, KVSNAP_MIN_CHUNK / 2, KVSNAP_MIN_CHUNK + 1,
					       3 * KVSNAP_MIN_CHUNK, 2ull * KVSNAP_MAX_CHUNK,
					       UINT64_MAX };
	struct kv_stage *s = stage_new(64 * 1024);
	struct kv_snap_args a;
	struct pool p;
	size_t i;

	pool_init(&p, 4, 2 * CHUNK, 0);
	memset(p.base, 3, 2 * CHUNK);
	prepare(s, &p, 1);
	for (i = 0; i < sizeof bad_chunks / sizeof bad_chunks[0]; i++) {
		a = args(&p, s);
		a.chunk_bytes = bad_chunks[i];
		kv_snapshot_ref(&a);
	}
	a = args(&p, s);
	a.bytes = 0;
	kv_snapshot_ref(&a);
	a = args(&p, s);
	a.pool = NULL;
	kv_snapshot_ref(&a);
	a = args(&p, s);
	a.sums = NULL;
	kv_snapshot_ref(&a);
	a = args(&p, s);
	a.stage = NULL;
	kv_snapshot_ref(&a);
	a = args(&p, s);
	a.ctl = NULL;
	kv_snapshot_ref(&a);
	a = args(&p, s);
	a.flags = 4;
	kv_snapshot_ref(&a);
	CU_ASSERT(s->used == 0 && s->entries == 0 && s->overflow == 0 && s->overflow_bytes == 0);
	CU_ASSERT(all_poison((unsigned char *)s + s->table_off,
			     s->data_off + s->capacity - s->table_off));
	CU_ASSERT(memcmp(p.sums, p.before, p.n * sizeof *p.sums) == 0);
	pool_free(&p);
	free(s);
}

/* ---- dirty chunks: the mark and the sparse snapshot ------------------- */

#define DIRTY_WORDS 8u		/* bitmaps of up to 256 chunks */

static int bit(const uint32_t *d, uint64_t c)
{
	return (d[c / 32] >> (c % 32)) & 1;
}

/* The chunks of bytes [lo, hi) of a pool of `bytes`, from the definition
 * in kvsnap.h: set in want[]. */
static void want_range(unsigned char *want, uint64_t lo, uint64_t hi, uint64_t bytes)
{
	uint64_t x;

	if (hi > bytes)
		hi = bytes;
	for (x = lo; x < hi; x++)
		want[x / CHUNK] = 1;
}

static void check_bits(const uint32_t *d, const unsigned char *want, uint64_t n)
{
	uint64_t c;

	for (c = 0; c < DIRTY_WORDS * 32; c++)
		if (bit(d, c) != (c < n && want[c]))
			CU_FAIL("dirty bit differs from the expected one");
}

static struct kv_mark_args mark_args(const void *slots, uint64_t count, uint32_t dtype,
				     uint64_t block)
{
	struct kv_mark_args a;

	memset(&a, 0, sizeof a);
	a.slots = slots;
	a.count = count;
	a.dtype = dtype;
	a.block = block;
	return a;
}

static void add_pool(struct kv_mark_args *a, uint32_t *dirty, uint64_t bytes, uint64_t off,
		     uint64_t stride)
{
	struct kv_mark_pool *p = &a->pool[a->npool++];

	p->dirty = dirty;
	p->bytes = bytes;
	p->off = off;
	p->stride = stride;
	p->chunk_shift = 12;
}

/* Each block's bytes, cut at the pool's end, mark exactly the chunks they
 * overlap, in every pool of the launch; padding and blocks past a pool's
 * end mark nothing; every slot type reads right. */
static void test_mark(void)
{
	enum { BYTES = 40 * CHUNK + 100 };
	/* block = 16: blocks 0, 1, 3, 2, 9, 2000 (past both ends), 33 */
	static const int64_t slots64[] = { 0, 17, -1, 63, 47, -5, 159, 32000, 533 };
	static const int32_t slots32[] = { 0, 17, -1, 63, 47, -5, 159, 32000, 533 };
	static const uint32_t slotsu[] = { 0, 17, 63, 47, 159, 32000, 533 };
	static const struct { const void *p; uint64_t n; uint32_t dt; } lists[] = {
		{ slots64, 9, CAP_DT_I64 }, { slots32, 9, CAP_DT_I32 }, { slotsu, 7, CAP_DT_U32 },
	};
	static const uint64_t blocks[] = { 0, 1, 3, 2, 9, 33, 2000 };
	uint32_t d1[DIRTY_WORDS], d2[DIRTY_WORDS];
	unsigned char w1[256], w2[256];
	uint64_t n = (BYTES + CHUNK - 1) / CHUNK;
	size_t l, b;

	for (l = 0; l < sizeof lists / sizeof lists[0]; l++) {
		struct kv_mark_args a = mark_args(lists[l].p, lists[l].n, lists[l].dt, 16);

		memset(d1, 0, sizeof d1);
		memset(d2, 0, sizeof d2);
		memset(w1, 0, sizeof w1);
		memset(w2, 0, sizeof w2);
		/* pool 1: blocks of 6000 bytes from byte 100, so a block
		 * spans two or three chunks; pool 2: 1 KiB blocks from 0 */
		add_pool(&a, d1, BYTES, 100, 6000);
		add_pool(&a, d2, BYTES, 0, 1024);
		for (b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
			want_range(w1, 100 + blocks[b] * 6000, 100 + (blocks[b] + 1) * 6000, BYTES);
			want_range(w2, blocks[b] * 1024, (blocks[b] + 1) * 1024, BYTES);
		}
		kv_mark_ref(&a);
		check_bits(d1, w1, n);
		check_bits(d2, w2, n);
		CU_ASSERT(bit(d1, 0) && bit(d1, 1) && bit(d1, 2) && !bit(d1, 39) && bit(d2, 8));
	}
	{
		/* a block that reaches past the end is cut there: the last,
		 * short chunk, and not one past it */
		static const int64_t last[] = { 27 * 16 };	/* bytes 162100.. */
		struct kv_mark_args a = mark_args(last, 1, CAP_DT_I64, 16);

		memset(d1, 0, sizeof d1);
		memset(w1, 0, sizeof w1);
		add_pool(&a, d1, BYTES, 100, 6000);
		want_range(w1, 100 + 27 * 6000, 100 + 28 * 6000, BYTES);
		kv_mark_ref(&a);
		check_bits(d1, w1, n);
		CU_ASSERT(bit(d1, n - 1) && !bit(d1, n));
	}
	{
		/* a huge slot cannot wrap the byte offset round into the pool */
		static const int64_t huge[] = { INT64_MAX, INT64_MAX / 16 * 16 };
		struct kv_mark_args a = mark_args(huge, 2, CAP_DT_I64, 1);

		memset(d1, 0, sizeof d1);
		add_pool(&a, d1, BYTES, 0, (uint64_t)1 << 62);
		kv_mark_ref(&a);
		memset(w1, 0, sizeof w1);
		check_bits(d1, w1, n);
	}
}

/* An invalid mark sets no bit. */
static void test_mark_invalid(void)
{
	static const int64_t slots[] = { 0, 16, 32 };
	uint32_t d[DIRTY_WORDS];
	struct kv_mark_args a, ok = mark_args(slots, 3, CAP_DT_I64, 16);
	unsigned i;

	for (i = 0; i < KVMARK_MAX_POOLS; i++)
		add_pool(&ok, d, 64 * CHUNK, 0, CHUNK);	/* all valid, all one bitmap */
	for (i = 0; i < 9; i++) {
		a = ok;
		switch (i) {
		case 0: a.slots = NULL; break;
		case 1: a.block = 0; break;
		case 2: a.dtype = CAP_DT_F32; break;
		case 3: a.npool = KVMARK_MAX_POOLS + 1; break;
		case 4: a.pool[0].dirty = NULL; break;
		case 5: a.pool[0].stride = 0; break;
		case 6: a.pool[0].bytes = 0; break;
		case 7: a.pool[0].chunk_shift = 11; break;
		case 8: a.pool[0].chunk_shift = 31; break;
		}
		memset(d, 0, sizeof d);
		kv_mark_ref(&a);
		CU_ASSERT(d[0] == 0);
	}
	memset(d, 0, sizeof d);
	kv_mark_ref(&ok);
	CU_ASSERT(d[0] == 0x7);
}

/* A sparse snapshot hashes exactly the marked chunks: it stages those that
 * changed, reads nothing else (a changed chunk nobody marked is left: the
 * marks are the contract), and clears their bits; one that finds no room
 * keeps its bit and is staged by the next. */
static void test_sparse(void)
{
	enum { N = 40 };
	struct kv_stage *s = stage_new(64 * 1024);
	uint32_t dirty[DIRTY_WORDS];
	unsigned char marked[256] = { 0 };
	struct pool p;
	uint64_t c, cap = s->capacity;

	pool_init(&p, 3, N * CHUNK + 500, 0);
	memset(dirty, 0, sizeof dirty);
	/* chunks 1 and 33 written and marked; 7 marked, written with the
	 * bytes it held; 20 written, not marked; the short last one (40)
	 * written and marked */
	p.base[CHUNK + 3] = 9;
	p.base[33 * CHUNK] = 1;
	p.base[20 * CHUNK] = 5;
	p.base[N * CHUNK + 499] = 2;
	dirty[0] = 1u << 1 | 1u << 7;
	dirty[1] = 1u << 1 | 1u << 8;
	snapshot_dirty(s, &p, dirty, 0);
	CU_ASSERT(s->entries == 3 && s->overflow == 0);
	CU_ASSERT(s->read == 3 * CHUNK + 500);
	CU_ASSERT(dirty[0] == 0 && dirty[1] == 0);
	for (c = 0; c < s->entries; c++) {
		const struct kv_stage_entry *e =
			(const void *)((const unsigned char *)s + s->table_off + c * sizeof *e);

		CU_ASSERT(e->chunk == 1 || e->chunk == 33 || e->chunk == N);
		CU_ASSERT(e->hash == kv_chunk_hash(chunk_at(&p, e->chunk),
						   chunk_len(&p, e->chunk)));
		marked[e->chunk] = 1;
		CU_ASSERT(p.sums[e->chunk] == e->hash);
	}
	CU_ASSERT(marked[1] && marked[33] && marked[N]);
	CU_ASSERT(p.sums[20] == kv_zero_hash(CHUNK));	/* left, unread */

	/* nothing marked: nothing read */
	snapshot_dirty(s, &p, dirty, 0);
	CU_ASSERT(s->entries == 0 && s->read == 0);

	/* room for one of two: the other keeps its bit */
	p.base[2 * CHUNK] = p.base[5 * CHUNK] = 4;
	dirty[0] = 1u << 2 | 1u << 5;
	s->capacity = CHUNK;
	snapshot_dirty(s, &p, dirty, 0);
	CU_ASSERT(s->entries == 1 && s->overflow == 1);
	CU_ASSERT(dirty[0] == 1u << 2 || dirty[0] == 1u << 5);
	s->capacity = cap;
	snapshot_dirty(s, &p, dirty, 0);
	CU_ASSERT(s->entries == 1 && s->overflow == 0 && dirty[0] == 0);
	pool_free(&p);
	free(s);
}

/* A writer the boundary did not wait for writes chunk 1 and marks it while
 * the snapshot is between reading the chunk and writing its sum: the
 * snapshot took the bit before it read, so the mark stays and the next
 * snapshot stages the new bytes (cleared after the read, the write would
 * be lost for good: the sum says the old bytes were staged). */
static void test_mark_during_snapshot(void)
{
	static const int64_t slot[] = { 1 };
	struct kv_stage *s = stage_new(64 * 1024);
	uint32_t dirty[DIRTY_WORDS] = { 1u << 1 };
	struct kv_mark_args m = mark_args(slot, 1, CAP_DT_I64, 1);
	struct kv_snap_args a;
	struct kv_resv rv = { 0, 0 };
	struct pool p;
	uint64_t h;

	pool_init(&p, 1, 4 * CHUNK, 0);
	add_pool(&m, dirty, 4 * CHUNK, 0, CHUNK);
	p.base[CHUNK] = 1;
	prepare(s, &p, 1);
	a = args(&p, s);
	a.dirty = dirty;
	/* the snapshot, step by step (kvsnap_ref.c) */
	CU_ASSERT_FATAL(kv_take_word(&a, 0) == 1u << 1);
	h = kv_hash_part(chunk_at(&p, 1), CHUNK, 0, 1);
	CU_ASSERT_FATAL(kv_begin(&a, 1, h, &rv) == KV_STAGE);
	kv_copy(kv_data(&a) + rv.data, chunk_at(&p, 1), CHUNK, 0, 1);
	/* the writer */
	p.base[CHUNK + 7] = 2;
	kv_mark_ref(&m);
	kv_end(&a, 1, h, &rv);
	CU_ASSERT(dirty[0] == 1u << 1);

	snapshot_dirty(s, &p, dirty, 0);
	CU_ASSERT(s->entries == 1 && s->read == CHUNK && dirty[0] == 0);
	CU_ASSERT(p.sums[1] == kv_chunk_hash(chunk_at(&p, 1), CHUNK));
	pool_free(&p);
	free(s);
}

/* A fresh or forced snapshot given a bitmap reads every chunk and writes
 * every bit, whatever the bitmap held (bits past the last chunk are
 * never taken for chunks); the next sparse one reads only what then
 * stays marked. */
static void test_dirty_full(void)
{
	enum { N = 37 };
	struct kv_stage *s = stage_new(256 * 1024);
	uint32_t dirty[DIRTY_WORDS];
	struct pool p;
	uint64_t cap = s->capacity;
	unsigned i;

	pool_init(&p, 2, N * CHUNK, 0);
	memset(dirty, 0xff, sizeof dirty);
	p.base[4 * CHUNK] = p.base[30 * CHUNK] = 1;
	snapshot_dirty(s, &p, dirty, KVSNAP_FRESH);
	CU_ASSERT(s->entries == 2 && s->read == N * CHUNK);
	CU_ASSERT(dirty[0] == 0 && (dirty[1] & 0x1f) == 0);
	/* the bits past chunk 36 are not chunks: a sparse pass skips them */
	snapshot_dirty(s, &p, dirty, 0);
	CU_ASSERT(s->entries == 0 && s->read == 0 && s->overflow == 0);

	s->capacity = 3 * CHUNK;
	snapshot_dirty(s, &p, dirty, KVSNAP_FORCE);
	CU_ASSERT(s->entries == 3 && s->overflow == N - 3 && s->read == N * CHUNK);
	for (i = 0; i < N; i++)
		CU_ASSERT(bit(dirty, i) == (p.sums[i] != kv_chunk_hash(chunk_at(&p, i), CHUNK)));
	s->capacity = cap;
	snapshot_dirty(s, &p, dirty, 0);
	CU_ASSERT(s->entries == N - 3 && s->overflow == 0 && s->read == (N - 3) * CHUNK);
	CU_ASSERT(dirty[0] == 0 && (dirty[1] & 0x1f) == 0);
	pool_free(&p);
	free(s);
}

/* ---- the staging area -------------------------------------------------- */

static void test_stage_init(void)
{
	size_t len = 1 << 20;
	unsigned char *m = aligned_alloc(64, len + 64);
	struct kv_stage *s = (struct kv_stage *)m;
	struct pool p;

	CU_ASSERT_FATAL(m != NULL);
	memset(m, POISON, len);
	CU_ASSERT(kv_stage_init((struct kv_stage *)(m + 8), len, CHUNK) == -1);
	CU_ASSERT(kv_stage_init(s, len, 0) == -1);
	CU_ASSERT(kv_stage_init(s, len, KVSNAP_MAX_CHUNK + 1ull) == -1);
	CU_ASSERT(kv_stage_init(s, sizeof *s - 1, 64) == -1);
	/* 64 entries for short chunks take 2 KiB, leaving less than a chunk */
	CU_ASSERT(kv_stage_init(s, CHUNK, CHUNK) == -1);
	CU_ASSERT(all_poison(m, len));

	/* (len - 128) / 4096 + 64 = 319 entries, 10208 bytes, rounded to 10240 */
	CU_ASSERT_FATAL(kv_stage_init(s, len, CHUNK) == 0);
	CU_ASSERT(s->table_off == sizeof *s && s->max_entries == 319);
	CU_ASSERT(s->data_off == 128 + 10240 && s->capacity == len - s->data_off);
	CU_ASSERT(s->used == 0 && s->entries == 0 && s->overflow == 0 && s->overflow_bytes == 0);
	CU_ASSERT(s->max_entries >= s->capacity / CHUNK + 64);

	/* as many chunks as the data area holds, all changed: no overflow */
	pool_init(&p, 0, s->capacity / CHUNK * CHUNK, 0);
	memset(p.base, 1, p.bytes);
	snapshot(s, &p);
	CU_ASSERT(check(s, &p, 1) == p.n && s->overflow == 0);
	pool_free(&p);

	/* chunks of 64 bytes: the table outgrows the data area, and fits it */
	CU_ASSERT_FATAL(kv_stage_init(s, len, 64) == 0);
	CU_ASSERT(s->max_entries >= s->capacity / 64 + 64);
	CU_ASSERT(s->data_off % 64 == 0 && s->data_off + s->capacity == len);
	CU_ASSERT(s->data_off >= s->table_off + s->max_entries * sizeof(struct kv_stage_entry));
	free(m);
}

/* ---- threads ----------------------------------------------------------- */

/* Pools of 64 whole chunks and a short one, one per thread (as concurrent
 * streams), into one staging area; started together. */
#define THREADS 4
#define TCHUNKS 65
#define TBYTES (64 * CHUNK + 500)

static pthread_barrier_t start;

static void *worker(void *arg)
{
	pthread_barrier_wait(&start);
	kv_snapshot_ref(arg);
	return NULL;
}

static uint64_t run_threads(struct kv_stage *s, struct pool *p)
{
	struct kv_snap_args a[THREADS];
	pthread_t th[THREADS];
	unsigned i;

	prepare(s, p, THREADS);
	CU_ASSERT_FATAL(pthread_barrier_init(&start, NULL, THREADS) == 0);
	for (i = 0; i < THREADS; i++) {
		a[i] = args(&p[i], s);
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, worker, &a[i]) == 0);
	}
	for (i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&start);
	return check(s, p, THREADS);
}

/* Change one byte of every chunk. */
static void touch_all(struct pool *p, unsigned char flip)
{
	uint64_t c;
	unsigned i;

	for (i = 0; i < THREADS; i++)
		for (c = 0; c < TCHUNKS; c++)
			p[i].base[c * CHUNK + c % 7] ^= flip;
}

/* Data bytes the entries take. */
static uint64_t staged_bytes(const struct kv_stage *s)
{
	const struct kv_stage_entry *t =
		(const void *)((const unsigned char *)s + s->table_off);
	uint64_t i, sum = 0;

	for (i = 0; i < s->entries; i++)
		sum += ALIGN_UP(t[i].bytes);
	return sum;
}

static void test_concurrent(void)
{
	struct kv_stage *s = stage_new(2 << 20);
	uint64_t max = s->max_entries, cap = s->capacity, n;
	struct pool p[THREADS];
	unsigned i;

	for (i = 0; i < THREADS; i++) {
		pool_init(&p[i], 10 + i, TBYTES, 0);
		fill_random(p[i].base, TBYTES, 100 + i);
	}
	CU_ASSERT(run_threads(s, p) == THREADS * TCHUNKS);
	CU_ASSERT(s->used == THREADS * (64 * CHUNK + 512));
	CU_ASSERT(run_threads(s, p) == 0);

	/* the table fills under contention: exactly max_entries staged */
	touch_all(p, 0x11);
	s->max_entries = 100;
	n = run_threads(s, p);
	CU_ASSERT(n == 100 && s->overflow == THREADS * TCHUNKS - 100);
	s->max_entries = max;
	CU_ASSERT(run_threads(s, p) == THREADS * TCHUNKS - 100 && s->overflow == 0);

	/* so does the data area: reservations are taken in one order, and
	 * all fail from the first that does not fit */
	touch_all(p, 0x22);
	s->capacity = 50 * CHUNK + 1000;
	n = run_threads(s, p);
	CU_ASSERT(staged_bytes(s) > s->capacity - CHUNK);
	CU_ASSERT(s->overflow == THREADS * TCHUNKS - n);
	s->capacity = cap;
	CU_ASSERT(run_threads(s, p) == THREADS * TCHUNKS - n && s->overflow == 0);

	for (i = 0; i < THREADS; i++)
		pool_free(&p[i]);
	free(s);
}

int main(void)
{
	CU_TestInfo hash[] = {
		{ "known", test_hash_known },
		{ "bytes", test_hash_bytes },
		{ "order", test_hash_order },
		CU_TEST_INFO_NULL,
	};
	CU_TestInfo snap[] = {
		{ "snapshot", test_snapshot },
		{ "overflow_data", test_overflow_data },
		{ "overflow_entries", test_overflow_entries },
		{ "fresh", test_fresh },
		{ "force", test_force },
		{ "ctl", test_ctl },
		{ "invalid", test_invalid },
		{ "mark", test_mark },
		{ "mark_invalid", test_mark_invalid },
		{ "sparse", test_sparse },
		{ "dirty_full", test_dirty_full },
		{ "mark_during_snapshot", test_mark_during_snapshot },
		{ "stage_init", test_stage_init },
		{ "concurrent", test_concurrent },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "kv_chunk_hash", NULL, NULL, NULL, NULL, hash },
		{ "kv_snapshot", NULL, NULL, NULL, NULL, snap },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}

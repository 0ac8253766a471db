/*
 * test_kernels_gpu.c - moeft's device kernels against their host
 * references, on a GPU, on fresh random inputs each run.
 *
 * The kernels come from the very image the preload loads (the embedded
 * fatbin, through cuModuleLoadData), so this also proves that image runs
 * on the GPU at hand.  The references are kernels/capture_ref.c and
 * kvsnap_ref.c, compiled from the same algorithm headers.
 *
 *  - moeft_kv_snapshot: pools of several sizes (a short last chunk among
 *    them), chunk sums of which about half are the chunk's true hash
 *    (unchanged chunks) and the rest random (changed); as fresh snapshots
 *    (half the chunks zeros, every sum random) and forced ones too; sums
 *    and the ctl header in device memory, as the preload has them.  With room for
 *    every changed chunk, the device and the reference stage the same set
 *    (compared as sets: blocks take chunks in any order) with the same
 *    bytes and hashes, and leave the same sums and counters.  With room for
 *    a quarter of the pool (fewer bytes than the changed chunks), which
 *    chunks win differs; what must hold: every staged
 *    chunk's bytes and hash are the pool's, exactly the staged chunks'
 *    sums changed, and staged plus overflowed is the changed count.
 *  - moeft_kv_mark, then a sparse moeft_kv_snapshot: random slot lists
 *    (padding among them) mark two pools' dirty bitmaps, which must equal
 *    the reference's bit for bit; a snapshot given the bitmap, with every
 *    chunk's sum changed, stages exactly the marked chunks, reads their
 *    bytes only, and clears the bitmap, as the reference does.
 *  - moeft_capture_append: a sequence of appends of random shapes and
 *    element types (int32, uint32 and int64 ids, out-of-range ones among
 *    them; no gating weights, or float32, bfloat16 or float16 ones of
 *    random bits) into a small ring, so that it wraps; after the same sequence
 *    the device's ring and the reference's are byte-identical; again with
 *    the producers' words in device memory (cap_prod), their states equal too.
 *
 * Usage: test_kernels_gpu [SEED]   (default: from the clock; printed)
 * Last line "N passed, N failed"; exit status 0 when none failed, 2 when
 * no GPU could be used.
 *
 * Built with TEST_ON_FIXTURE, the same test loads the CPU fixture's image
 * instead, whose kernels are the host references themselves: that proves
 * the test (its comparisons, the ring wrapping and filling, the overflow)
 * in CI, where no GPU is.
 */
#include <cuda.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capture.h"
#include "kvsnap.h"

#ifdef TEST_ON_FIXTURE
#include <cuda_runtime_api.h>

#include "fixture.h"
static const char image[] =
	FIXTURE_MODULE_IMAGE("moeft_capture_append\0" "moeft_kv_snapshot\0" "moeft_kv_mark\0"
			     "moeft_kv_header\0");
#else
extern const unsigned char moeft_capture_fatbin[];
static const unsigned char *const image = moeft_capture_fatbin;
#endif

#define RING_CAP 8192u          /* small: the appends wrap it several times */
#define APPENDS 400

static unsigned passed, failed;
static uint64_t rng;
static CUfunction snapshot_fn, append_fn, mark_fn, header_fn;

static void check(int ok, const char *what)
{
	if (ok) {
		passed++;
		return;
	}
	failed++;
	fprintf(stderr, "FAIL: %s\n", what);
}

static void cu(CUresult r, const char *call)
{
	const char *msg = NULL;

	if (r == CUDA_SUCCESS)
		return;
	cuGetErrorString(r, &msg);
	fprintf(stderr, "test_kernels_gpu: %s: %s\n", call, msg ? msg : "unknown error");
	exit(2);
}

#define CU(call) cu((call), #call)

/* xorshift64: fresh each run, reproducible from the printed seed. */
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill(void *p, size_t len)
{
	unsigned char *b = p;

	for (size_t i = 0; i < len; i++)
		b[i] = (unsigned char)(next() >> 24);
}

static void *xmalloc(size_t len)
{
	void *p = aligned_alloc(64, (len + 63) & ~(size_t)63);

	if (!p) {
		fprintf(stderr, "test_kernels_gpu: out of memory\n");
		exit(2);
	}
	return p;
}

/* Pinned host memory the device can address. */
static void *mapped(size_t len, CUdeviceptr *dev)
{
	void *p;

	CU(cuMemHostAlloc(&p, len, CU_MEMHOSTALLOC_DEVICEMAP));
	CU(cuMemHostGetDevicePointer(dev, p, 0));
	return p;
}

/* Both kernels take one struct by value. */
static void launch(CUfunction f, unsigned grid, unsigned block, void *args)
{
	void *params[] = { args };

	CU(cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL));
	CU(cuCtxSynchronize());
}

/* ---- the staging header ---------------------------------------------------- */

/* A random header from mapped host memory into device memory and back
 * into other mapped host memory, by the kernel: every byte as it was. */
static void header_case(void)
{
	CUdeviceptr from_dev, back_dev, ctl;
	struct kv_stage *from = mapped(sizeof *from, &from_dev);
	struct kv_stage *back = mapped(sizeof *back, &back_dev);
	struct kv_header_args in, out;

	fill(from, sizeof *from);
	memset(back, 0, sizeof *back);
	CU(cuMemAlloc(&ctl, sizeof(struct kv_stage)));
	CU(cuMemsetD8(ctl, 0, sizeof(struct kv_stage)));
	in = (struct kv_header_args){ (struct kv_stage *)(uintptr_t)ctl,
				      (const struct kv_stage *)(uintptr_t)from_dev };
	out = (struct kv_header_args){ (struct kv_stage *)(uintptr_t)back_dev,
				       (const struct kv_stage *)(uintptr_t)ctl };
	launch(header_fn, 1, 1, &in);
	launch(header_fn, 1, 1, &out);
	check(memcmp(from, back, sizeof *back) == 0,
	      "header: host -> device -> host by moeft_kv_header, every byte");
	CU(cuMemFree(ctl));
	CU(cuMemFreeHost(from));
	CU(cuMemFreeHost(back));
}

/* ---- the KV snapshot ------------------------------------------------------ */

static const struct kv_stage_entry *table(const struct kv_stage *s)
{
	return (const struct kv_stage_entry *)((const unsigned char *)s + s->table_off);
}

static const unsigned char *data(const struct kv_stage *s)
{
	return (const unsigned char *)s + s->data_off;
}

static int by_chunk(const void *a, const void *b)
{
	const struct kv_stage_entry *x = a, *y = b;

	return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

/* The staged entries of s, sorted by chunk, into out (n of them). */
static uint64_t sorted_entries(const struct kv_stage *s, struct kv_stage_entry *out)
{
	uint64_t n = s->entries < s->max_entries ? s->entries : s->max_entries;

	memcpy(out, table(s), n * sizeof *out);
	qsort(out, n, sizeof *out, by_chunk);
	return n;
}

/* The sum an unstaged chunk must have after a snapshot with flags: its
 * hash h where it did not change (a fresh snapshot writes it), else the
 * complement where fresh or forced, else the sum before. */
static uint64_t unstaged_sum(uint32_t flags, int changed, uint64_t h, uint64_t before)
{
	if (!changed)
		return flags & KVSNAP_FRESH ? h : before;
	return flags & (KVSNAP_FRESH | KVSNAP_FORCE) ? ~h : before;
}

/* Every staged entry holds its chunk's bytes and hash, exactly the staged
 * chunks' sums moved to their hashes, and every other sum is as
 * unstaged_sum says. */
static int entries_are_the_pool(const struct kv_stage *s, const unsigned char *pool,
				uint64_t bytes, uint64_t chunk, uint32_t flags,
				const unsigned char *changed, const uint64_t *sums_before,
				const uint64_t *sums_after, uint64_t nchunks)
{
	uint64_t n = s->entries < s->max_entries ? s->entries : s->max_entries, i, c;
	unsigned char *staged = calloc(nchunks, 1);
	int ok = staged != NULL;

	for (i = 0; ok && i < n; i++) {
		const struct kv_stage_entry *e = &table(s)[i];
		uint64_t len;

		if (e->chunk >= nchunks || staged[e->chunk] || !changed[e->chunk]) {
			ok = 0;
			break;
		}
		staged[e->chunk] = 1;
		len = bytes - e->chunk * chunk < chunk ? bytes - e->chunk * chunk : chunk;
		ok = e->bytes == len && e->data + len <= s->capacity &&
		     memcmp(data(s) + e->data, pool + e->chunk * chunk, len) == 0 &&
		     e->hash == kv_chunk_hash(pool + e->chunk * chunk, len) &&
		     sums_after[e->chunk] == e->hash;
	}
	for (c = 0; ok && c < nchunks; c++) {
		uint64_t len = bytes - c * chunk < chunk ? bytes - c * chunk : chunk;

		if (!staged[c])
			ok = sums_after[c] == unstaged_sum(flags, changed[c],
							   kv_chunk_hash(pool + c * chunk, len),
							   sums_before[c]);
	}
	free(staged);
	return ok;
}

/*
 * A snapshot as the preload makes it: sums and the ctl header in device
 * memory (the header copied in before and back after), with flags.  The
 * pool is random, but for about half its chunks: zeros under KVSNAP_FRESH
 * (their previous hash is that of zeros, whatever sums[] holds), their own
 * hash in sums[] otherwise.  The reference runs on the area's own header.
 */
static void snapshot_case(uint64_t bytes, uint64_t chunk, int roomy, uint32_t flags)
{
	uint64_t nchunks = (bytes + chunk - 1) / chunk, nchanged = 0, c, n_dev, n_ref;
	size_t stage_len = sizeof(struct kv_stage) + (nchunks + 64) * sizeof(struct kv_stage_entry) +
			   (roomy ? bytes + nchunks * KVSNAP_ALIGN : bytes / 4) + KVSNAP_ALIGN;
	uint64_t last = bytes - (nchunks - 1) * chunk;
	unsigned char *pool = xmalloc(bytes), *changed = xmalloc(nchunks);
	uint64_t *sums = xmalloc(nchunks * 8), *sums_dev_after = xmalloc(nchunks * 8),
		 *sums_ref = xmalloc(nchunks * 8);
	struct kv_stage_entry *e_dev = xmalloc((nchunks + 64) * sizeof *e_dev),
			      *e_ref = xmalloc((nchunks + 64) * sizeof *e_ref);
	struct kv_stage *st_ref = xmalloc(stage_len), *st_dev;
	CUdeviceptr pool_dev, sums_dev, stage_dev, ctl_dev;
	struct kv_snap_args a;
	char what[200];
	int same = 1;

	fill(pool, bytes);
	for (c = 0; c < nchunks; c++) {
		uint64_t len = c + 1 < nchunks ? chunk : last;
		int keep = next() & 1;

		sums[c] = next();
		if (keep && (flags & KVSNAP_FRESH))
			memset(pool + c * chunk, 0, len);
		else if (keep)
			sums[c] = kv_chunk_hash(pool + c * chunk, len);
		changed[c] = !keep || (flags & KVSNAP_FORCE);
		nchanged += changed[c];
	}
	CU(cuMemAlloc(&pool_dev, bytes));
	CU(cuMemcpyHtoD(pool_dev, pool, bytes));
	CU(cuMemAlloc(&sums_dev, nchunks * 8));
	CU(cuMemcpyHtoD(sums_dev, sums, nchunks * 8));
	CU(cuMemAlloc(&ctl_dev, sizeof(struct kv_stage)));
	st_dev = mapped(stage_len, &stage_dev);
	if (kv_stage_init(st_dev, stage_len, chunk) < 0 || kv_stage_init(st_ref, stage_len, chunk) < 0) {
		fprintf(stderr, "test_kernels_gpu: kv_stage_init refused %zu bytes\n", stage_len);
		exit(2);
	}
	a = (struct kv_snap_args){ .pool = (const void *)(uintptr_t)pool_dev, .bytes = bytes,
				   .chunk_bytes = chunk, .sums = (uint64_t *)(uintptr_t)sums_dev,
				   .stage = (struct kv_stage *)(uintptr_t)stage_dev,
				   .ctl = (struct kv_stage *)(uintptr_t)ctl_dev,
				   .zero_whole = kv_zero_hash(chunk), .zero_last = kv_zero_hash(last),
				   .pool_no = 3, .flags = flags };
	CU(cuMemcpyHtoD(ctl_dev, st_dev, sizeof(struct kv_stage)));
	launch(snapshot_fn, nchunks < 512 ? (unsigned)nchunks : 512, KVSNAP_THREADS, &a);
	CU(cuMemcpyDtoH(st_dev, ctl_dev, sizeof(struct kv_stage)));
	CU(cuMemcpyDtoH(sums_dev_after, sums_dev, nchunks * 8));

	memcpy(sums_ref, sums, nchunks * 8);
	a.pool = pool;
	a.sums = sums_ref;
	a.stage = a.ctl = st_ref;
	kv_snapshot_ref(&a);

	snprintf(what, sizeof what, "snapshot of %" PRIu64 " bytes in chunks of %" PRIu64
		 " (room for %s, flags %u): a staged chunk is not the pool's, or a sum is wrong",
		 bytes, chunk, roomy ? "all" : "a quarter", (unsigned)flags);
	check(entries_are_the_pool(st_dev, pool, bytes, chunk, flags, changed, sums,
				   sums_dev_after, nchunks), what);
	check(st_dev->entries + st_dev->overflow == nchanged &&
	      st_ref->entries + st_ref->overflow == nchanged,
	      "snapshot: staged plus overflowed chunks are not the changed ones");
	if (roomy) {
		n_dev = sorted_entries(st_dev, e_dev);
		n_ref = sorted_entries(st_ref, e_ref);
		same = n_dev == n_ref && st_dev->overflow == 0 && st_ref->overflow == 0 &&
		       memcmp(sums_dev_after, sums_ref, nchunks * 8) == 0;
		for (c = 0; same && c < n_dev; c++)
			same = e_dev[c].pool == 3 && e_dev[c].pool == e_ref[c].pool &&
			       e_dev[c].bytes == e_ref[c].bytes && e_dev[c].chunk == e_ref[c].chunk &&
			       e_dev[c].hash == e_ref[c].hash &&
			       memcmp(data(st_dev) + e_dev[c].data, data(st_ref) + e_ref[c].data,
				      e_dev[c].bytes) == 0;
		check(same, "snapshot with room for all: the device's staging and sums differ "
		      "from the reference's");
	} else {
		check(st_dev->overflow > 0 && st_ref->overflow > 0,
		      "snapshot with room for a quarter: no overflow counted");
	}
	CU(cuMemFree(pool_dev));
	CU(cuMemFree(sums_dev));
	CU(cuMemFree(ctl_dev));
	CU(cuMemFreeHost(st_dev));
	free(pool);
	free(changed);
	free(sums);
	free(sums_dev_after);
	free(sums_ref);
	free(e_dev);
	free(e_ref);
	free(st_ref);
}

/*
 * Marks, then a sparse snapshot.  Pool 0 has blocks of 6000 bytes from
 * byte 100 (a block spans two or three chunks, the last cut at the end),
 * pool 1 blocks of one chunk; 16 slots a block, 300 random slots with
 * padding among them.  Every sum is random (every chunk changed), so the
 * snapshot stages exactly the marked chunks of the pool it reads.
 */
static void mark_case(void)
{
	enum { SLOTS = 300, CHUNK = 4096, NCHUNKS = 151, WORDS = (NCHUNKS + 31) / 32 };
	const uint64_t bytes = (uint64_t)(NCHUNKS - 1) * CHUNK + 700;
	int64_t slots[SLOTS];
	uint32_t bits_dev[2][WORDS], bits_ref[2][WORDS], after_dev[WORDS];
	uint64_t sums[NCHUNKS], n_dev, n_ref, marked = 0, marked_bytes = 0, c;
	size_t stage_len = sizeof(struct kv_stage) + (NCHUNKS + 64) * 32 + NCHUNKS * 4160 + 64;
	unsigned char *pool = xmalloc(bytes);
	struct kv_stage_entry *e_dev = xmalloc((NCHUNKS + 64) * sizeof *e_dev),
			      *e_ref = xmalloc((NCHUNKS + 64) * sizeof *e_ref);
	struct kv_stage *st_ref = xmalloc(stage_len), *st_dev;
	CUdeviceptr slots_dev, dirty_dev[2], pool_dev, sums_dev, stage_dev;
	struct kv_mark_args m;
	struct kv_snap_args a;
	int i, same, clear;

	for (i = 0; i < SLOTS; i++)
		slots[i] = next() % 5 == 0 ? -1 : (int64_t)(next() % (40 * 16));
	fill(pool, bytes);
	fill(sums, sizeof sums);
	memset(bits_ref, 0, sizeof bits_ref);
	CU(cuMemAlloc(&slots_dev, sizeof slots));
	CU(cuMemcpyHtoD(slots_dev, slots, sizeof slots));
	for (i = 0; i < 2; i++) {
		CU(cuMemAlloc(&dirty_dev[i], sizeof bits_ref[i]));
		CU(cuMemcpyHtoD(dirty_dev[i], bits_ref[i], sizeof bits_ref[i]));
	}
	memset(&m, 0, sizeof m);
	m.slots = (const void *)(uintptr_t)slots_dev;
	m.count = SLOTS;
	m.block = 16;
	m.dtype = CAP_DT_I64;
	m.npool = 2;
	m.pool[0] = (struct kv_mark_pool){ (uint32_t *)(uintptr_t)dirty_dev[0], bytes, 100, 6000,
					   12, 0 };
	m.pool[1] = (struct kv_mark_pool){ (uint32_t *)(uintptr_t)dirty_dev[1], bytes, 0, CHUNK,
					   12, 0 };
	launch(mark_fn, 2, 128, &m);
	for (i = 0; i < 2; i++)
		CU(cuMemcpyDtoH(bits_dev[i], dirty_dev[i], sizeof bits_dev[i]));
	m.slots = slots;
	m.pool[0].dirty = bits_ref[0];
	m.pool[1].dirty = bits_ref[1];
	kv_mark_ref(&m);
	check(memcmp(bits_dev, bits_ref, sizeof bits_ref) == 0,
	      "mark: the device's dirty bits differ from the reference's");

	for (c = 0; c < NCHUNKS; c++)
		if (bits_ref[0][c / 32] >> (c % 32) & 1) {
			marked++;
			marked_bytes += c + 1 < NCHUNKS ? CHUNK : bytes - c * CHUNK;
		}
	/* Bits past the last chunk name no chunk: the snapshot skips them. */
	bits_ref[0][WORDS - 1] |= ~0u << (NCHUNKS % 32);
	CU(cuMemcpyHtoD(dirty_dev[0], bits_ref[0], sizeof bits_ref[0]));
	CU(cuMemAlloc(&pool_dev, bytes));
	CU(cuMemcpyHtoD(pool_dev, pool, bytes));
	CU(cuMemAlloc(&sums_dev, sizeof sums));
	CU(cuMemcpyHtoD(sums_dev, sums, sizeof sums));
	st_dev = mapped(stage_len, &stage_dev);
	if (kv_stage_init(st_dev, stage_len, CHUNK) < 0 || kv_stage_init(st_ref, stage_len, CHUNK) < 0) {
		fprintf(stderr, "test_kernels_gpu: kv_stage_init refused %zu bytes\n", stage_len);
		exit(2);
	}
	a = (struct kv_snap_args){ .pool = (const void *)(uintptr_t)pool_dev, .bytes = bytes,
				   .chunk_bytes = CHUNK, .sums = (uint64_t *)(uintptr_t)sums_dev,
				   .dirty = (uint32_t *)(uintptr_t)dirty_dev[0],
				   .stage = (struct kv_stage *)(uintptr_t)stage_dev,
				   .ctl = (struct kv_stage *)(uintptr_t)stage_dev, .pool_no = 5 };
	launch(snapshot_fn, 64, KVSNAP_THREADS, &a);
	CU(cuMemcpyDtoH(after_dev, dirty_dev[0], sizeof after_dev));
	a.pool = pool;
	a.sums = sums;
	a.dirty = bits_ref[0];
	a.stage = a.ctl = st_ref;
	kv_snapshot_ref(&a);
	n_dev = sorted_entries(st_dev, e_dev);
	n_ref = sorted_entries(st_ref, e_ref);
	same = n_dev == marked && n_ref == marked && st_dev->read == marked_bytes &&
	       st_ref->read == marked_bytes && st_dev->overflow == 0;
	for (c = 0; same && c < n_dev; c++)
		same = e_dev[c].chunk == e_ref[c].chunk && e_dev[c].hash == e_ref[c].hash &&
		       memcmp(data(st_dev) + e_dev[c].data, pool + e_dev[c].chunk * CHUNK,
			      e_dev[c].bytes) == 0;
	check(same, "sparse snapshot: the device did not stage exactly the marked chunks");
	for (c = 0, clear = 1; c < WORDS; c++)
		clear &= after_dev[c] == 0 && bits_ref[0][c] == 0;
	check(clear, "sparse snapshot: dirty bits left set");
	for (i = 0; i < 2; i++)
		CU(cuMemFree(dirty_dev[i]));
	CU(cuMemFree(slots_dev));
	CU(cuMemFree(pool_dev));
	CU(cuMemFree(sums_dev));
	CU(cuMemFreeHost(st_dev));
	free(pool);
	free(e_dev);
	free(e_ref);
	free(st_ref);
}

/* ---- the routing append --------------------------------------------------- */

static void ring_setup(struct cap_ring *r)
{
	memset(r, 0, CAP_DATA_OFF + RING_CAP);
	r->magic = CAP_RING_MAGIC;
	r->version = CAP_RING_VERSION;
	r->capacity = RING_CAP;
}

/* The consumer's part: release everything appended (up to head), so later
 * appends find room and the ring wraps. */
static void ring_release(struct cap_ring *r, uint64_t head)
{
	r->tail = head;
}

/*
 * Appends of random shapes into a ring that wraps, then fills; with prod,
 * the producers count in a cap_prod (device memory for the device, as the
 * preload has it), whose state must end the same as the reference's.
 */
static void append_case(int with_prod)
{
	static const uint32_t dtypes[] = { CAP_DT_I32, CAP_DT_U32, CAP_DT_I64 };
	static const uint32_t wdtypes[] = { 0, CAP_DT_F32, CAP_DT_BF16, CAP_DT_F16 };
	size_t src_max = 64 * 16 * 8, w_max = 64 * 8 * 4;
	unsigned char *src = xmalloc(src_max), *w = xmalloc(w_max);
	struct cap_ring *ring_dev_host, *ring_ref = xmalloc(CAP_DATA_OFF + RING_CAP);
	struct cap_prod prod_ref = { .capacity = RING_CAP }, prod_dev_host;
	CUdeviceptr ring_dev, src_dev, w_dev, prod_dev = 0;
	char what[120];
	int same = 1, i;

	ring_dev_host = mapped(CAP_DATA_OFF + RING_CAP, &ring_dev);
	ring_setup(ring_dev_host);
	ring_setup(ring_ref);
	CU(cuMemAlloc(&src_dev, src_max));
	CU(cuMemAlloc(&w_dev, w_max));
	if (with_prod) {
		CU(cuMemAlloc(&prod_dev, sizeof prod_ref));
		CU(cuMemcpyHtoD(prod_dev, &prod_ref, sizeof prod_ref));
	}
	/* Released after each append, then never: the ring wraps, then fills. */
	for (i = 0; i < APPENDS && same; i++) {
		int fill_up = i >= APPENDS - APPENDS / 8;
		struct cap_append_args a = {
			.tag = next(), .step = next() % 4096,
			.rows = fill_up ? 64 : 1 + (uint32_t)(next() % 64),
			.k = fill_up ? 8 : 1 + (uint32_t)(next() % 8),
			.dtype = dtypes[next() % 3], .wdtype = wdtypes[next() % 4],
		};
		size_t elem = a.dtype == CAP_DT_I64 ? 8 : 4, len, wlen;

		a.stride = a.k + (uint32_t)(next() % 3);	/* padded rows too */
		len = (size_t)a.rows * a.stride * elem;
		wlen = (size_t)a.rows * a.k * cap_weight_bytes(a.wdtype);
		fill(src, len);
		CU(cuMemcpyHtoD(src_dev, src, len));
		if (wlen) {
			fill(w, wlen);
			CU(cuMemcpyHtoD(w_dev, w, wlen));
		}
		a.ring = (struct cap_ring *)(uintptr_t)ring_dev;
		a.src = (const void *)(uintptr_t)src_dev;
		a.wsrc = a.wdtype ? (const void *)(uintptr_t)w_dev : NULL;
		a.prod = (struct cap_prod *)(uintptr_t)prod_dev;
		launch(append_fn, 1, CAP_APPEND_THREADS, &a);
		a.ring = ring_ref;
		a.src = src;
		a.wsrc = a.wdtype ? w : NULL;
		a.prod = with_prod ? &prod_ref : NULL;
		cap_append_ref(&a);
		if (with_prod)
			CU(cuMemcpyDtoH(&prod_dev_host, prod_dev, sizeof prod_dev_host));
		same = memcmp(ring_dev_host, ring_ref, CAP_DATA_OFF + RING_CAP) == 0 &&
		       (!with_prod || memcmp(&prod_dev_host, &prod_ref, sizeof prod_ref) == 0);
		if (!fill_up) {
			ring_release(ring_dev_host, with_prod ? prod_dev_host.head :
					 ring_dev_host->head);
			ring_release(ring_ref, with_prod ? prod_ref.head : ring_ref->head);
		}
	}
	snprintf(what, sizeof what, "capture append%s: the device's ring differs from the "
		 "reference's", with_prod ? " (producers in device memory)" : "");
	check(same, what);
	check((with_prod ? prod_ref.head : ring_ref->head) > 2 * RING_CAP,
	      "capture append: the ring never wrapped");
	check(ring_ref->dropped_entries > 0, "capture append: no append ever found the ring full");
	CU(cuMemFree(src_dev));
	CU(cuMemFree(w_dev));
	if (with_prod)
		CU(cuMemFree(prod_dev));
	CU(cuMemFreeHost(ring_dev_host));
	free(ring_ref);
	free(src);
	free(w);
}

int main(int argc, char **argv)
{
	uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	char name[128];
	uint32_t flags;

	rng = seed ? seed : 1;
	CU(cuInit(0));
	CU(cuDeviceGet(&dev, 0));
	CU(cuDeviceGetName(name, sizeof name, dev));
	CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cuCtxSetCurrent(ctx));
	CU(cuModuleLoadData(&mod, image));
	CU(cuModuleGetFunction(&snapshot_fn, mod, "moeft_kv_snapshot"));
	CU(cuModuleGetFunction(&append_fn, mod, "moeft_capture_append"));
	CU(cuModuleGetFunction(&mark_fn, mod, "moeft_kv_mark"));
	CU(cuModuleGetFunction(&header_fn, mod, "moeft_kv_header"));
	printf("test_kernels_gpu: %s, seed %" PRIu64 "\n", name, seed);
#ifdef TEST_ON_FIXTURE
	{
		/* The fixture's libcudart registers moeft's kernels; a call into
		 * it keeps the linker from dropping it. */
		int n = 0;

		check(cudaGetDeviceCount(&n) == cudaSuccess && n == 1,
		      "fixture: the runtime sees one device");
	}
#endif

	for (flags = 0; flags <= KVSNAP_FORCE; flags++) {
		snapshot_case(37 * 4096 + 123, 4096, 1, flags);
		snapshot_case(1 << 20, 65536, 1, flags);
		snapshot_case(3 * 65536 + 8, 65536, 1, flags);
		snapshot_case(200 * 4096, 4096, 0, flags);
	}
	snapshot_case((64 << 20) + 4096, 65536, 1, 0);
	mark_case();
	header_case();
	append_case(0);
	append_case(1);

	CU(cuModuleUnload(mod));
	CU(cuDevicePrimaryCtxRelease(dev));
	printf("%u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}

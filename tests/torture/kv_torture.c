/*
 * kv_torture.c - SIGKILL a KV-store writer at random instants, again and
 * again, and prove after every kill that the store holds, for the last
 * committed window C, exactly the chunks the windows up to C wrote.
 *
 * K times the parent forks a child that opens the store as a writer with
 * first_uncommitted = C + 1 (C: the last window committed so far), makes
 * sure the pools of its windows exist, and writes windows C+1, C+2, ...
 * as fast as it can.  In window w, child k writes chunk c of pool p when
 * writes(k, p, c, w) says so, its bytes the stream of key(k, p, c, w),
 * and then "commits" w: an aligned store of w into memory it shares with
 * the parent (the commit word of a real log, in effect).  Every child
 * asks for the same POOLS pools, written more of them as windows go by,
 * and adds a pool of its own, of a size of its own, whose chunks it
 * writes each window too; after its first commit it reclaims what it did
 * not ask for, the earlier children's own pools, and their regions' gaps
 * are where the next children's pools go.  So kills land inside kvs_pool
 * (the first child of a log adds the shared pools too), inside a reclaim
 * and inside a pool's addition into a gap; every RELOG_EVERY kills the
 * store changes its log id, and the next child must reformat it, so kills
 * land inside a reformat too.  The parent kills the child as crash_torture
 * does (at once, inside its open, or 0-5 ms into its writing), then reads
 * the store: every chunk of the shared pools, as of C, must be what the
 * newest window <= C that wrote it wrote, or never written, never
 * DAMAGED; read as of any window, a chunk newer than C must be complete
 * window C+1 of the last child that opened the store.  A child's own pool
 * must hold whole chunks that child wrote, or none, and be gone once a
 * later child's reclaim has returned.
 *
 * MOEFT_TORTURE_KILLS sets K (default 200), MOEFT_TORTURE_SEED the seed of
 * all random choices.  On failure the store is kept and its path printed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "common.h"
#include "crc32c.h"
#include "format.h"
#include "kvstore.h"

#define POOLS 6u
#define MAX_CHUNKS 80u
#define MAX_CHUNK (64u << 10)
#define WINDOWS_PER_POOL 24u    /* a new pool every so many windows */
#define RELOG_EVERY 50u
#define MAX_DELAY_NS 5000000u
#define CHILD_FAILED 3

/* Pool i: its description is a function of i alone, so every child adds
 * the same pools in the same order and gets the same numbers. */
static struct kvs_pool_desc pool_desc(uint32_t i)
{
	static const uint32_t chunk[POOLS] = { 4096, 65536, 8192, 16384, 4096, 32768 };
	static const uint32_t chunks[POOLS] = { 32, 4, 16, 8, 24, 4 };

	return (struct kvs_pool_desc){ .fingerprint = 0x4b56000 + i, .chunk_bytes = chunk[i],
				       .size = (uint64_t)chunk[i] * chunks[i] - (i % 2 ? 1000 : 0),
				       .ordinal = i / 3 };
}

/* Child k's own pool: 1.25 MiB (a region of 2.5 MiB, two region units)
 * or 256 KiB, in turn; its chunks written with the pool index POOLS. */
#define OWN_FP 0x7000000u
#define OWN_CHUNK 16384u

static struct kvs_pool_desc own_desc(uint64_t k)
{
	return (struct kvs_pool_desc){ .fingerprint = OWN_FP + k, .chunk_bytes = OWN_CHUNK,
				       .size = (uint64_t)OWN_CHUNK * (k % 2 ? 80 : 16) };
}

static uint32_t pools_of(uint64_t w)
{
	uint64_t n = 2 + w / WINDOWS_PER_POOL;

	return n < POOLS ? (uint32_t)n : POOLS;
}

static uint64_t nchunks_of(const struct kvs_pool_desc *d)
{
	return (d->size + d->chunk_bytes - 1) / d->chunk_bytes;
}

static uint32_t len_of(const struct kvs_pool_desc *d, uint64_t c)
{
	uint64_t left = d->size - c * d->chunk_bytes;

	return (uint32_t)(left < d->chunk_bytes ? left : d->chunk_bytes);
}

static uint64_t key(uint64_t seed, uint64_t k, uint32_t p, uint64_t c, uint64_t w)
{
	uint64_t s = seed ^ k << 48 ^ (uint64_t)p << 40 ^ c << 24 ^ w;

	return rng_next(&s);
}

/* About a quarter of the chunks each window; chunk 0 of pool 0 always. */
static int writes(uint64_t seed, uint64_t k, uint32_t p, uint64_t c, uint64_t w)
{
	return (p == 0 && c == 0) || key(seed, k, p, c, w) % 4 == 0;
}

/* Word i of a chunk's bytes: any other key changes every word. */
static void fill(uint64_t k, uint8_t *buf, uint32_t len)
{
	uint32_t i;

	for (i = 0; i + 8 <= len; i += 8)
		put64(buf + i, k ^ i * UINT64_C(0x9e3779b97f4a7c15));
	for (; i < len; i++)
		buf[i] = (uint8_t)(k >> (i % 8 * 8));
}

/* ---- child ------------------------------------------------------------ */

/* What the child tells the parent through shared memory; a store to it
 * survives SIGKILL. */
struct shared {
	_Atomic int64_t committed; /* last window committed, -1: none */
	_Atomic uint64_t open_ns;  /* how long its kvs_open and pools took; 0: not done */
	_Atomic uint64_t reclaimed;/* the last child whose reclaim returned; 0: none */
};

static void __attribute__((noreturn)) child_fail(const char *what, const char *detail)
{
	fprintf(stderr, "kv-torture: child %ld: %s: %s\n", (long)getpid(), what, detail);
	_exit(CHILD_FAILED);
}

static void ensure_pools(struct kvs *s, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct kvs_pool_desc d = pool_desc(i);
		uint32_t no;
		int ret = kvs_pool(s, &d, &no);

		if (ret < 0)
			child_fail("kvs_pool", wal_strerror(ret));
		if (no != i)
			child_fail("kvs_pool", "a pool got another number than its first time");
	}
}

/* Child k's chunks of window w in pool p (POOLS: its own), numbered no. */
static void put_window(struct kvs *s, uint64_t seed, uint64_t k, uint32_t p, uint32_t no,
		       uint64_t w)
{
	static uint8_t buf[MAX_CHUNK];
	struct kvs_pool_desc d = p < POOLS ? pool_desc(p) : own_desc(k);
	int ret;

	for (uint64_t c = 0; c < nchunks_of(&d); c++) {
		if (!writes(seed, k, p, c, w))
			continue;
		fill(key(seed, k, p, c, w), buf, len_of(&d, c));
		if ((ret = kvs_put(s, no, c, buf, len_of(&d, c), w, NULL, NULL)) < 0)
			child_fail("kvs_put", wal_strerror(ret));
	}
}

/* The child waits for the parent's go: the parent's clock then starts
 * with it, and a kill aimed inside its short open lands there. */
static void __attribute__((noreturn)) run_child(const char *path, uint64_t log_id, uint64_t seed,
						uint64_t k, struct shared *sh, int go)
{
	uint64_t start, first = (uint64_t)(atomic_load(&sh->committed) + 1);
	struct kvs_pool_desc own = own_desc(k);
	struct wal_error err;
	uint32_t own_no;
	struct kvs *s;
	int ret;

	wal_set_log(NULL, WAL_LOG_ERROR); /* reformatting is what it is here for */
	if (read(go, &start, sizeof start) != (ssize_t)sizeof start)
		child_fail("reading the go", strerror(errno));
	start = mono_ns();
	if (kvs_open(path, log_id, -1, first, &s, &err) < 0)
		child_fail("kvs_open", err.msg);
	ensure_pools(s, POOLS);
	if ((ret = kvs_pool(s, &own, &own_no)) < 0)
		child_fail("kvs_pool of its own", wal_strerror(ret));
	atomic_store(&sh->open_ns, mono_ns() - start);
	for (uint64_t w = first;; w++) {
		for (uint32_t p = 0; p < pools_of(w); p++)
			put_window(s, seed, k, p, p, w);
		put_window(s, seed, k, POOLS, own_no, w);
		atomic_store(&sh->committed, (int64_t)w); /* the commit point */
		if (w == first) {
			kvs_reclaim(s);
			atomic_store(&sh->reclaimed, k);
		}
	}
}

/* ---- parent ----------------------------------------------------------- */

struct torture {
	const char *path;
	uint64_t seed, rng, log_id;
	unsigned kill;           /* current kill, from 1 */
	struct shared *sh;
	int64_t committed;       /* C as of the last check */
	int64_t opened;          /* last child that got through its open, -1: none */
	uint64_t open_est;
	/* newest committed window that wrote each chunk, -1: none, and its child */
	int64_t last[POOLS][MAX_CHUNKS];
	uint64_t last_gen[POOLS][MAX_CHUNKS];
	/* totals */
	unsigned at_once, in_open, writing, in_reclaim, relogs;
	uint64_t windows, chunks_ok, chunks_none, newer, own_pools;
};

static void __attribute__((noreturn, format(printf, 2, 3))) die(const struct torture *t,
								  const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kv-torture: kill %u: ", t->kill);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nkv-torture: seed %" PRIu64 ", store kept at %s\n", t->seed, t->path);
	_exit(1); /* no cleanup: the state is what to look at */
}

/* A store of a new log id: nothing of the old one may be read again. */
static void relog(struct torture *t)
{
	t->log_id = rng_next(&t->rng) | 1;
	t->committed = -1;
	t->opened = -1;
	atomic_store(&t->sh->committed, -1);
	atomic_store(&t->sh->reclaimed, 0);
	for (unsigned p = 0; p < POOLS; p++)
		for (unsigned c = 0; c < MAX_CHUNKS; c++)
			t->last[p][c] = -1;
	t->relogs++;
}

/* Take in the windows child k committed, after the last check's C. */
static void advance(struct torture *t, uint64_t k, int64_t committed)
{
	if (committed < t->committed)
		die(t, "the committed window went back from %" PRId64 " to %" PRId64, t->committed,
		    committed);
	for (int64_t w = t->committed + 1; w <= committed; w++) {
		for (uint32_t p = 0; p < pools_of((uint64_t)w); p++) {
			struct kvs_pool_desc d = pool_desc(p);

			for (uint64_t c = 0; c < nchunks_of(&d); c++)
				if (writes(t->seed, k, p, c, (uint64_t)w)) {
					t->last[p][c] = w;
					t->last_gen[p][c] = k;
				}
		}
	}
	t->windows += (uint64_t)(committed - t->committed);
	t->committed = committed;
}

/* A chunk read back holds the bytes child k wrote in window w. */
static void check_bytes(const struct torture *t, uint32_t p, uint64_t c, uint64_t k, uint64_t w,
			const uint8_t *data, uint32_t len, uint32_t crc)
{
	static uint8_t want[MAX_CHUNK];
	struct kvs_pool_desc d = p < POOLS ? pool_desc(p) : own_desc(k);

	if (len != len_of(&d, c))
		die(t, "pool %u chunk %" PRIu64 " window %" PRIu64 ": %u bytes, written %u", p, c, w,
		    len, len_of(&d, c));
	fill(key(t->seed, k, p, c, w), want, len);
	if (memcmp(data, want, len) != 0 || crc != crc32c(0, want, len))
		die(t, "pool %u chunk %" PRIu64 " window %" PRIu64 ": not the bytes child %" PRIu64
		    " wrote", p, c, w, k);
}

/*
 * Pool number no past the shared ones: free, or child j's own pool, j of
 * this log and not before the last child whose reclaim returned; each
 * chunk whole bytes child j wrote, or never written.
 */
static void check_own(struct torture *t, const struct kvs_reader *r, uint32_t no)
{
	struct kvs_pool_info info;
	struct kvs_pool_desc d;
	const uint8_t *data;
	uint64_t j, window, reclaimed = atomic_load(&t->sh->reclaimed);
	uint32_t len, crc;
	int st;

	if (kvs_reader_pool(r, no, &info) < 0)
		return;
	j = info.d.fingerprint - OWN_FP;
	d = own_desc(j);
	if (j > t->kill || info.d.fingerprint != d.fingerprint || info.d.size != d.size ||
	    info.d.chunk_bytes != d.chunk_bytes || info.d.ordinal || info.nchunks != nchunks_of(&d))
		die(t, "pool %u is no child's own pool", no);
	if (j < reclaimed)
		die(t, "pool %u, child %" PRIu64 "'s own, outlived child %" PRIu64 "'s reclaim",
		    no, j, reclaimed);
	for (uint64_t c = 0; c < info.nchunks; c++) {
		st = kvs_reader_chunk(r, no, c, UINT64_MAX, &data, &len, &window, &crc);
		if (st == KVS_CHUNK_OK)
			check_bytes(t, POOLS, c, j, window, data, len, crc);
		else if (st != KVS_CHUNK_NONE)
			die(t, "pool %u (child %" PRIu64 "'s own) chunk %" PRIu64 ": state %d", no, j,
			    c, st);
	}
	t->own_pools++;
}

static void check_store(struct torture *t)
{
	const uint8_t *data;
	struct kvs_pool_info info;
	struct kvs_reader *r;
	struct wal_error err;
	uint64_t window;
	uint32_t len, crc, n;

	if (kvs_reader_open(t->path, t->log_id, &r, &err) < 0) {
		/* Only a store no child of this log has opened may be unreadable
		 * (a kill in the middle of reformatting it). */
		if (t->opened < 0)
			return;
		die(t, "reader: %s", err.msg);
	}
	n = kvs_reader_pools(r);
	if (t->committed >= 0 && n < pools_of((uint64_t)t->committed))
		die(t, "%u pools, window %" PRId64 " committed with %u", n, t->committed,
		    pools_of((uint64_t)t->committed));
	for (uint32_t p = 0; p < n; p++) {
		struct kvs_pool_desc d;

		if (p >= POOLS) {
			check_own(t, r, p);
			continue;
		}
		d = pool_desc(p);
		if (kvs_reader_pool(r, p, &info) < 0 ||
		    info.d.fingerprint != d.fingerprint || info.d.size != d.size ||
		    info.d.chunk_bytes != d.chunk_bytes || info.d.ordinal != d.ordinal ||
		    info.nchunks != nchunks_of(&d))
			die(t, "pool %u is not the pool its writer added", p);
		for (uint64_t c = 0; c < info.nchunks; c++) {
			int64_t w = t->last[p][c];
			int st = t->committed < 0 ? KVS_CHUNK_NONE :
				 kvs_reader_chunk(r, p, c, (uint64_t)t->committed, &data, &len,
						  &window, &crc);

			if (st == KVS_CHUNK_OK && w >= 0 && window == (uint64_t)w) {
				check_bytes(t, p, c, t->last_gen[p][c], window, data, len, crc);
				t->chunks_ok++;
			} else if (st == KVS_CHUNK_NONE && w < 0) {
				t->chunks_none++;
			} else {
				die(t, "pool %u chunk %" PRIu64 " as of window %" PRId64 ": state %d window "
				    "%" PRIu64 ", expected window %" PRId64, p, c, t->committed, st,
				    st == KVS_CHUNK_OK ? window : 0, w);
			}
			/* Past C only window C+1 of the last child to open may show, whole. */
			st = kvs_reader_chunk(r, p, c, UINT64_MAX, &data, &len, &window, &crc);
			if (st == KVS_CHUNK_DAMAGED || st < 0)
				die(t, "pool %u chunk %" PRIu64 ": state %d as of any window", p, c, st);
			if (st == KVS_CHUNK_OK && (int64_t)window > t->committed) {
				if ((int64_t)window != t->committed + 1 || t->opened < 0)
					die(t, "pool %u chunk %" PRIu64 ": window %" PRIu64 " after committed "
					    "window %" PRId64, p, c, window, t->committed);
				check_bytes(t, p, c, (uint64_t)t->opened, window, data, len, crc);
				t->newer++;
			}
		}
	}
	kvs_reader_close(r);
}

static void one_kill(struct torture *t, uint64_t k)
{
	uint64_t delay = pick_kill_delay(&t->rng, t->open_est, MAX_DELAY_NS), start, open_ns;
	int64_t committed;
	int fds[2], status;
	pid_t pid;

	atomic_store(&t->sh->open_ns, 0);
	if (pipe(fds) < 0)
		die(t, "pipe: %s", strerror(errno));
	if ((pid = fork()) < 0)
		die(t, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(fds[1]);
		run_child(t->path, t->log_id, t->seed, k, t->sh, fds[0]);
	}
	close(fds[0]);
	start = mono_ns();
	if (write(fds[1], &start, sizeof start) != (ssize_t)sizeof start)
		die(t, "the child did not start: %s", strerror(errno));
	close(fds[1]);
	t->at_once += !delay;
	if (kill_at(pid, start, delay, &status) < 0)
		die(t, "the child died on its own (status %#x)", (unsigned)status);
	open_ns = atomic_load(&t->sh->open_ns);
	if (open_ns) {
		t->open_est = estimate(t->open_est, open_ns);
		t->opened = (int64_t)k;
	}
	t->in_open += !open_ns;
	t->writing += !!open_ns;
	committed = atomic_load(&t->sh->committed);
	/* Killed after its first commit, before its reclaim returned. */
	t->in_reclaim += committed > t->committed && atomic_load(&t->sh->reclaimed) != k;
	advance(t, k, committed);
	check_store(t);
}

int main(void)
{
	struct torture t = { 0 };
	unsigned kills = (unsigned)env_u64("MOEFT_TORTURE_KILLS", 200);
	char path[4096];
	uint64_t t0 = mono_ns();

	t.seed = env_u64("MOEFT_TORTURE_SEED", mono_ns() ^ (uint64_t)getpid() << 32);
	t.rng = t.seed;
	t.path = scratch_path(path, sizeof path, "kvtorture");
	unlink(path);
	t.sh = mmap(NULL, sizeof *t.sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (t.sh == MAP_FAILED) {
		perror("kv-torture: mmap");
		return 1;
	}
	relog(&t);
	for (t.kill = 1; t.kill <= kills; t.kill++) {
		if (t.kill % RELOG_EVERY == 0)
			relog(&t);
		one_kill(&t, t.kill);
	}
	printf("kv-torture: %u kills (%u at once, %u during open, %u while writing, %u of them "
	       "before a reclaim returned), %u logs, "
	       "%" PRIu64 " windows committed, %" PRIu64 " chunks verified, %" PRIu64 " never "
	       "written, %" PRIu64 " of uncommitted windows seen whole, %" PRIu64 " children's "
	       "own pools not yet reclaimed, child open ~%" PRIu64 " us, seed %" PRIu64 ", %.1f s\n",
	       kills, t.at_once, t.in_open, t.writing, t.in_reclaim, t.relogs, t.windows, t.chunks_ok,
	       t.chunks_none, t.newer, t.own_pools, t.open_est / 1000, t.seed,
	       (double)(mono_ns() - t0) / 1e9);
	unlink(path);
	/* A run long enough to count must have hit the cases that matter. */
	if (kills >= 50 && (!t.in_open || !t.newer || t.relogs < 2 || t.windows < kills / 2)) {
		fprintf(stderr, "kv-torture: no kill inside an open, no uncommitted window seen, "
			"or few windows: the test did not exercise what it must\n");
		return 1;
	}
	return 0;
}

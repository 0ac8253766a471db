/*
 * devcopy.c - moeft_restored_device and moeft_restored_copy on the CPU
 * fixture (devcopy.sh): the device KV an engine moves into other blocks
 * after a restore, as vLLM's connector does for a resumed request.
 *
 * write: a KV pool of BLOCKS blocks; step s (a dc_step launch, then a
 * dc_kv_write of slot s) writes BLOCK bytes of pattern(s) into block s;
 * each step ends in a stream synchronize (so a window past its boundary
 * commits); after STEPS steps the process kills itself (SIGKILL), a crash.
 *
 * check (started by moeft restore -- devcopy check): the same pool, made
 * at the same call site, zeroed by a dc_fill launch (its initialiser: the
 * preload copies the restored KV in after it).  With R the manifest's
 * resume_step, every block b < R must hold pattern(b) and every later
 * block zeros; then:
 *   - moeft_restored_device says 1 for the pool's blocks, -ENODEV for a
 *     scratch allocation and -EINVAL for an empty range;
 *   - every block is overwritten with 0xee (the engine's new work), and
 *     moeft_restored_copy of blocks 0..R-1 into block BLOCKS-1-b and into a
 *     scratch buffer gives pattern(b) (the image, not the pool, is read);
 *   - a copy of the whole pool (two pieces) after a fill of its destination
 *     enqueued on the same stream gives the restored pool;
 *   - a range past the pool's end or longer than the pool is -ENODEV, a
 *     NULL dst or n 0 -EINVAL, a stream being captured -EBUSY.
 * Before its crash, write finds both calls -ENODEV (no restore).
 * Prints "devcopy: R blocks restored, copied and checked" and exits 0;
 * with "reuse", then decodes on and copies blocks 1 and 0 again
 * (store_reused).
 *
 * Usage: devcopy write STEPS | devcopy check [reuse]   (under LD_PRELOAD=libmoeft.so,
 *        MOEFT_PROFILE naming the rules devcopy.sh writes)
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "moeft.h"

#define BLOCK (256u << 10)	/* 64 of them: a copy of the pool is 2 pieces of copyin.c */
#define BLOCKS 64u
#define POOL (BLOCK * BLOCKS)

#define ARG(l, i, t) (*(t const *)(l)->args[i])

static uint8_t pattern(unsigned block, unsigned byte)
{
	return (uint8_t)(block * 37u + byte * 11u + 1u);
}

static void dc_fill(const struct fixture_launch *l)
{
	memset(ARG(l, 0, uint8_t *), ARG(l, 2, int), ARG(l, 1, uint64_t));
}
FIXTURE_KERNEL(dc_fill, "dc_fill", 3, 8, 8, 4)

static void dc_step(const struct fixture_launch *l)
{
	(void)l;
}
FIXTURE_KERNEL(dc_step, "dc_step", 1, 4)

/* Block slots[0] of pool gets its pattern (one slot a block), each byte
 * xor salt (0 before the crash: the pattern itself). */
static void dc_kv_write(const struct fixture_launch *l)
{
	uint8_t *pool = ARG(l, 0, uint8_t *);
	long slot = ARG(l, 1, const long *)[0];
	uint8_t salt = (uint8_t)ARG(l, 3, int);

	for (unsigned i = 0; i < BLOCK; i++)
		pool[(size_t)slot * BLOCK + i] = pattern((unsigned)slot, i) ^ salt;
}
FIXTURE_KERNEL(dc_kv_write, "dc_kv_write", 4, 8, 8, 4, 4)

/* A kernel as cudaLaunchKernel takes it (ISO C converts no function
 * pointer to an object pointer; the bytes are the same). */
static const void *kernel(fixture_kernel_fn fn)
{
	const void *p;

	memcpy(&p, &fn, sizeof p);
	return p;
}

static void check_cuda(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "devcopy: %s: %s\n", what, cudaGetErrorString(e));
		exit(2);
	}
}

__attribute__((format(printf, 1, 2), noreturn))
static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "devcopy: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static void launch(fixture_kernel_fn fn, void **args, cudaStream_t s, const char *what)
{
	check_cuda(cudaLaunchKernel(kernel(fn), (dim3){ 1, 1, 1 }, (dim3){ 1, 1, 1 }, args, 0, s),
		   what);
}

/* The pool, from one call site in both modes: its identity must match. */
static uint8_t *make_pool(cudaStream_t s)
{
	void *p;
	uint64_t n = POOL;
	int zero = 0;
	void *args[] = { &p, &n, &zero };

	check_cuda(cudaMalloc(&p, POOL), "cudaMalloc");
	launch(dc_fill, args, s, "dc_fill");
	check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	return p;
}

/* libmoeft's two calls, looked up as an adapter would. */
static void api(int (**device)(const void *, size_t),
		int (**copy)(const struct moeft_restored_range *, size_t, void *))
{
	void *sym[2] = { dlsym(RTLD_DEFAULT, "moeft_restored_device"),
			 dlsym(RTLD_DEFAULT, "moeft_restored_copy") };

	if (!sym[0] || !sym[1])
		fail("libmoeft's moeft_restored_device or _copy not found");
	memcpy(device, &sym[0], sizeof sym[0]);
	memcpy(copy, &sym[1], sizeof sym[1]);
}

static void write_run(cudaStream_t s, unsigned steps, uint8_t *pool, long *slot)
{
	int (*device)(const void *, size_t);
	int (*copy)(const struct moeft_restored_range *, size_t, void *);
	struct moeft_restored_range r = { pool, pool + BLOCK, BLOCK };
	int rc;

	api(&device, &copy);
	if ((rc = device(pool, BLOCK)) != -ENODEV || (rc = copy(&r, 1, s)) != -ENODEV)
		fail("outside a restore: %d, want -ENODEV", rc);
	int layer = 0, salt = 0;
	unsigned block = BLOCK;
	void *step_args[] = { &layer };
	void *kv_args[] = { &pool, &slot, &block, &salt };

	for (unsigned t = 0; t < steps && t < BLOCKS; t++) {
		check_cuda(cudaMemcpyAsync(slot, &(long){ (long)t }, sizeof(long),
					   cudaMemcpyHostToDevice, s), "slot");
		launch(dc_step, step_args, s, "dc_step");
		launch(dc_kv_write, kv_args, s, "dc_kv_write");
		check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	}
	raise(SIGKILL);
}

static unsigned resume_step(void)
{
	const char *path = getenv("MOEFT_RESTORE_MANIFEST");
	char text[4096], *at;
	size_t n;
	FILE *f;

	if (!path || !(f = fopen(path, "r")))
		fail("no manifest (MOEFT_RESTORE_MANIFEST)");
	n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = '\0';
	if (!(at = strstr(text, "\"resume_step\"")) || !(at = strchr(at, ':')))
		fail("the manifest has no resume_step");
	return (unsigned)strtoul(at + 1, NULL, 10);
}

/* Block b of the host copy h holds pattern(b) (want 1) or zeros (0). */
static void expect_block(const uint8_t *h, unsigned b, int want, const char *what)
{
	for (unsigned i = 0; i < BLOCK; i++)
		if (h[i] != (want ? pattern(b, i) : 0)) {
			fprintf(stderr, "devcopy: %s: block %u byte %u is 0x%02x\n", what, b, i, h[i]);
			exit(1);
		}
}

static void check_run(cudaStream_t s, uint8_t *pool)
{
	int (*device)(const void *, size_t);
	int (*copy)(const struct moeft_restored_range *, size_t, void *);
	struct moeft_restored_range r[2 * BLOCKS];
	unsigned rs = resume_step(), b;
	static uint8_t host[POOL];
	uint8_t *scratch;
	int rc;

	api(&device, &copy);
	if (rs == 0 || rs >= BLOCKS / 2)
		fail("resume step %u, want 1 to %u", rs, BLOCKS / 2 - 1);
	check_cuda(cudaMemcpy(host, pool, POOL, cudaMemcpyDeviceToHost), "read the pool");
	for (b = 0; b < BLOCKS; b++)
		expect_block(host + (size_t)b * BLOCK, b, b < rs, "restored in place");
	check_cuda(cudaMalloc((void **)&scratch, POOL), "cudaMalloc scratch");
	if ((rc = device(pool, POOL)) != 1 || (rc = device(pool + BLOCK, BLOCK)) != 1)
		fail("moeft_restored_device(the pool) is %d, want 1", rc);
	if ((rc = device(scratch, BLOCK)) != -ENODEV)
		fail("moeft_restored_device(scratch) is %d, want -ENODEV", rc);
	if ((rc = device(pool, 0)) != -EINVAL)
		fail("moeft_restored_device(length 0) is %d, want -EINVAL", rc);

	/* The engine's new work overwrites every block. */
	int ee = 0xee;
	uint64_t n = POOL;
	void *args[] = { &pool, &n, &ee };

	launch(dc_fill, args, s, "dc_fill 0xee");
	for (b = 0; b < rs; b++) {
		r[2 * b] = (struct moeft_restored_range){ pool + (size_t)b * BLOCK,
							  pool + (size_t)(BLOCKS - 1 - b) * BLOCK,
							  BLOCK };
		r[2 * b + 1] = (struct moeft_restored_range){ pool + (size_t)b * BLOCK,
							      scratch + (size_t)b * BLOCK, BLOCK };
	}
	if ((rc = copy(r, 2 * rs, s)) != 0)
		fail("moeft_restored_copy of %u ranges: %d", 2 * rs, rc);
	check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	check_cuda(cudaMemcpy(host, pool, POOL, cudaMemcpyDeviceToHost), "read the pool");
	for (b = 0; b < rs; b++)
		expect_block(host + (size_t)(BLOCKS - 1 - b) * BLOCK, b, 1, "copied into the pool");
	check_cuda(cudaMemcpy(host, scratch, (size_t)rs * BLOCK, cudaMemcpyDeviceToHost),
		   "read scratch");
	for (b = 0; b < rs; b++)
		expect_block(host + (size_t)b * BLOCK, b, 1, "copied into scratch");

	/* The whole pool, in two pieces, after a fill of scratch enqueued
	 * before it on the same stream. */
	int x77 = 0x77;
	uint64_t pool_bytes = POOL;
	void *fill[] = { &scratch, &pool_bytes, &x77 };

	launch(dc_fill, fill, s, "dc_fill 0x77");
	r[0] = (struct moeft_restored_range){ pool, scratch, POOL };
	if ((rc = copy(r, 1, s)) != 0)
		fail("moeft_restored_copy of the pool: %d", rc);
	check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	check_cuda(cudaMemcpy(host, scratch, POOL, cudaMemcpyDeviceToHost), "read scratch");
	for (b = 0; b < BLOCKS; b++)
		expect_block(host + (size_t)b * BLOCK, b, b < rs, "the pool copied whole");

	r[0] = (struct moeft_restored_range){ pool + POOL - BLOCK, scratch, 2 * BLOCK };
	if ((rc = copy(r, 1, s)) != -ENODEV)
		fail("a range past the pool: %d, want -ENODEV", rc);
	r[0] = (struct moeft_restored_range){ pool, scratch, POOL + BLOCK };
	if ((rc = copy(r, 1, s)) != -ENODEV)
		fail("a range longer than the pool: %d, want -ENODEV", rc);
	r[0] = (struct moeft_restored_range){ pool, NULL, BLOCK };
	if ((rc = copy(r, 1, s)) != -EINVAL)
		fail("dst NULL: %d, want -EINVAL", rc);
	if ((rc = copy(r, 0, s)) != -EINVAL)
		fail("n 0: %d, want -EINVAL", rc);

	/* A stream being captured into a graph: refused, nothing captured. */
	cudaStream_t cs;
	cudaGraph_t g;

	check_cuda(cudaStreamCreate(&cs), "cudaStreamCreate");
	check_cuda(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed), "begin capture");
	r[0] = (struct moeft_restored_range){ pool, scratch, BLOCK };
	rc = copy(r, 1, cs);
	check_cuda(cudaStreamEndCapture(cs, &g), "end capture");
	if (rc != -EBUSY)
		fail("a capturing stream: %d, want -EBUSY", rc);
	check_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
	printf("devcopy: %u blocks restored, copied and checked\n", rs);
}

/* The restored process's own new work, as a server's: REUSE_STEPS more
 * steps that write block 0 anew each time (three windows of 8 commit: the
 * first stores block 0 into the slot that does not hold its restored
 * copy, the second into the restored copy's).  Then block 1, which the store still holds as restored, is copied
 * again, and block 0, whose restored copy is gone from the store: 0 and
 * right from an image, -EIO from the store (refused, never other bytes).
 * Prints the two codes. */
#define REUSE_STEPS 25u

static void store_reused(cudaStream_t s, uint8_t *pool, long *slot)
{
	int (*device)(const void *, size_t);
	int (*copy)(const struct moeft_restored_range *, size_t, void *);
	static uint8_t host[BLOCK];
	int layer = 0, rc[2], salt;
	unsigned block = BLOCK, b;
	void *step_args[] = { &layer };
	void *kv_args[] = { &pool, &slot, &block, &salt };
	uint8_t *scratch;

	api(&device, &copy);
	check_cuda(cudaMemcpy(slot, &(long){ 0 }, sizeof(long), cudaMemcpyHostToDevice), "slot");
	for (unsigned t = 0; t < REUSE_STEPS; t++) {
		salt = (int)t + 1;
		launch(dc_step, step_args, s, "dc_step");
		launch(dc_kv_write, kv_args, s, "dc_kv_write");
		check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	}
	check_cuda(cudaMalloc((void **)&scratch, BLOCK), "cudaMalloc scratch");
	for (b = 2; b-- > 0;) {
		rc[b] = copy(&(struct moeft_restored_range){ pool + (size_t)b * BLOCK, scratch, BLOCK },
			     1, s);
		if (rc[b] == 0) {
			check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
			check_cuda(cudaMemcpy(host, scratch, BLOCK, cudaMemcpyDeviceToHost), "read");
			expect_block(host, b, 1, "copied after the new windows");
		}
	}
	printf("devcopy: after %u steps of new work, block 1: %d, block 0: %d\n", REUSE_STEPS,
	       rc[1], rc[0]);
}

int main(int argc, char **argv)
{
	cudaStream_t s;
	uint8_t *pool;
	long *slot;

	if (argc < 2 || (strcmp(argv[1], "write") && strcmp(argv[1], "check")) ||
	    (!strcmp(argv[1], "write") && argc != 3) ||
	    (!strcmp(argv[1], "check") && argc > 2 && (argc > 3 || strcmp(argv[2], "reuse")))) {
		fprintf(stderr, "usage: devcopy write STEPS | devcopy check [reuse]\n");
		return 2;
	}
	check_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	pool = make_pool(s);
	check_cuda(cudaMalloc((void **)&slot, sizeof *slot), "cudaMalloc slot");
	if (!strcmp(argv[1], "check")) {
		check_run(s, pool);
		if (argc == 3)
			store_reused(s, pool, slot);
		return 0;
	}
	write_run(s, (unsigned)strtoul(argv[2], NULL, 10), pool, slot);
	return 1;
}

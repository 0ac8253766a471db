/*
 * probe.c - a program on the CPU fixture that takes every path libmoeft.so
 * hooks a known number of times (probe.h); test_preload.c runs it with and
 * without the preload.
 *
 *   probe run    allocations of every kind, a routing kernel launched
 *                through each launch path (runtime, <<<>>>'s entry point,
 *                ExC, a cooperative launch, Triton's dlsym'd cuLaunchKernelEx,
 *                a dlsym'd cuLaunchCooperativeKernel, a cuGetProcAddress
 *                per-thread-stream cuLaunchKernel), a graph captured and
 *                replayed; prints results that must not depend on moeft
 *   probe check [CUDART12]
 *                under the preload: dlsym and cuGetProcAddress answer with
 *                moeft's wrappers exactly where they should, RTLD_NEXT
 *                still means "after the caller", errors pass through; with
 *                the path of a libcudart.so.12, the same for that runtime
 *                opened beside the program's own, whose allocations are seen
 *
 * Built twice: linked to the fixture's libcudart.so.13 (probe) and to its
 * libcudart.so.12 (probe12, PROBE_CUDART set to that soname).
 *   probe fork   allocations around a fork() whose child allocates too
 *   probe crash segv|abort|term|term-before|term-after|exit3
 *                after a few CUDA calls, print the crashing function's
 *                address and die by that signal (term-*: a SIGTERM handler
 *                of the program's own, installed before or after the first
 *                CUDA call, handles it and the program exits 0; exit3:
 *                exit(3), as a program that failed)
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "fixture.h"
#include "probe.h"

/* The address "probe crash segv" stores to: in the zero page, unmapped. */
#define CRASH_ADDR 0x10

#define EXPERTS 8
#define ROWS 4
#define TOPK 2

#define CHECK(call)                                                                     \
	do {                                                                            \
		int rc_ = (int)(call);                                                  \
		if (rc_) {                                                              \
			fprintf(stderr, "probe: %s:%d: %s: error %d\n", __FILE__,       \
				__LINE__, #call, rc_);                                  \
			exit(2);                                                        \
		}                                                                       \
	} while (0)

/* ids[r * k + j]: a function of the launch's `start` argument, so every
 * launch writes its own values. */
static void topk_host(const struct fixture_launch *l)
{
	int rows = *(const int *)l->args[3], k = *(const int *)l->args[6];
	int start = *(const int *)l->args[7], r, j;
	int *ids = *(int *const *)l->args[4];

	for (r = 0; r < rows; r++)
		for (j = 0; j < k; j++)
			ids[r * k + j] = (start + 3 * r + 5 * j) % EXPERTS;
}
FIXTURE_KERNEL(topk_host, PROBE_TOPK_NAME, 9, 8, 8, 8, 4, 8, 8, 4, 4, 4)

static void scale_host(const struct fixture_launch *l)
{
	float *x = *(float *const *)l->args[0], a = *(const float *)l->args[2];
	int n = *(const int *)l->args[1], i;

	for (i = 0; i < n; i++)
		x[i] *= a;
}
FIXTURE_KERNEL(scale_host, PROBE_SCALE_NAME, 3, 8, 4, 4)

/* A function's address as the runtime API takes it (ISO C has no cast
 * from function to object pointers; POSIX makes them the same size). */
#define TOPK_FN code_of(topk_host)
#define SCALE_FN code_of(scale_host)

static const void *code_of(fixture_kernel_fn fn)
{
	const void *p;

	memcpy(&p, &fn, sizeof p);
	return p;
}

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
			       CUdriverProcAddressQueryResult *);

static void *libcuda, *getproc_addr;
static getproc_fn getproc;

static void *sym(const char *name)
{
	void *p = dlsym(libcuda, name);

	if (!p) {
		fprintf(stderr, "probe: dlsym %s: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

/* Function pointers from dlsym's void *, as POSIX allows. */
#define SYM(var, name) memcpy(&(var), &(void *){ sym(name) }, sizeof(var))

static void *proc(const char *name, int version, cuuint64_t flags)
{
	CUdriverProcAddressQueryResult st;
	void *p = NULL;

	return getproc(name, &p, version, flags, &st) == CUDA_SUCCESS ? p : NULL;
}

static void open_driver(void)
{
	CUresult (*init)(unsigned);

	libcuda = dlopen("libcuda.so.1", RTLD_NOW);
	if (!libcuda) {
		fprintf(stderr, "probe: %s\n", dlerror());
		exit(2);
	}
	SYM(init, "cuInit");
	CHECK(init(0));
	getproc_addr = sym("cuGetProcAddress_v2");
	memcpy(&getproc, &getproc_addr, sizeof getproc);
}

/* ---- run ------------------------------------------------------------------ */

struct topk {
	float *gating, *weights;
	unsigned char *finished;
	int *ids, *src;
	int rows, k, start, end;
	void *args[9];
};

/* Arguments of routing launch number n: its ids go to their own rows. */
static void **topk_args(struct topk *t, int *ids, int n)
{
	memset(t, 0, sizeof *t);
	t->ids = ids + n * ROWS * TOPK;
	t->rows = ROWS;
	t->k = TOPK;
	t->start = n;
	t->end = EXPERTS;
	t->args[0] = &t->gating;
	t->args[1] = &t->finished;
	t->args[2] = &t->weights;
	t->args[3] = &t->rows;
	t->args[4] = &t->ids;
	t->args[5] = &t->src;
	t->args[6] = &t->k;
	t->args[7] = &t->start;
	t->args[8] = &t->end;
	return t->args;
}

static int run(void)
{
	CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
	CUresult (*launch_coop)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
				unsigned, unsigned, CUstream, void **);
	CUresult (*launch_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
				unsigned, unsigned, CUstream, void **, void **);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t), (*mem_free)(CUdeviceptr);
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
				CUmemAllocationGranularity_flags);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			   unsigned long long);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			unsigned long long);
	CUresult (*unmap)(CUdeviceptr, size_t), (*release)(CUmemGenericAllocationHandle);
	CUresult (*addr_free)(CUdeviceptr, size_t);
	int host_ids[PROBE_ROUTING_LAUNCHES * ROWS * TOPK], n = 0, i;
	dim3 grid = { ROWS, 1, 1 }, block = { 32, 1, 1 };
	float host_x[64], *x, factor = 1.5f;
	int count = 64, *ids;
	void *scale_args[3] = { &x, &count, &factor };
	void *p, *async_p, *managed;
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle handle;
	cudaLaunchConfig_t rt_cfg;
	CUlaunchConfig cu_cfg;
	CUdeviceptr dptr, va;
	cudaGraphExec_t exec;
	cudaKernel_t kernel;
	cudaGraph_t graph;
	cudaStream_t s;
	CUfunction f;
	struct topk t;
	size_t gran;
	unsigned sum = 0;
	double xsum = 0;

	/* allocations 1 and 2 */
	CHECK(cudaMalloc(&p, 1 << 20));
	CHECK(cudaMalloc((void **)&x, 4096));
	ids = p;
	for (i = 0; i < 64; i++)
		host_x[i] = (float)i;
	CHECK(cudaMemcpy(x, host_x, sizeof host_x, cudaMemcpyHostToDevice));
	CHECK(cudaStreamCreate(&s));

	/* The routing kernel through the runtime's three entry points. */
	CHECK(cudaLaunchKernel(TOPK_FN, grid, block, topk_args(&t, ids, n++), 0, s));
	CHECK(cudaLaunchKernel(TOPK_FN, grid, block, topk_args(&t, ids, n++), 0, s));
	CHECK(__cudaGetKernel(&kernel, TOPK_FN));
	CHECK(__cudaLaunchKernel(kernel, grid, block, topk_args(&t, ids, n++), 0, s));
	memset(&rt_cfg, 0, sizeof rt_cfg);
	rt_cfg.gridDim = grid;
	rt_cfg.blockDim = block;
	rt_cfg.stream = s;
	CHECK(cudaLaunchKernelExC(&rt_cfg, TOPK_FN, topk_args(&t, ids, n++)));
	CHECK(cudaLaunchCooperativeKernel(TOPK_FN, grid, block, topk_args(&t, ids, n++), 0, s));

	/* ... and the driver's: Triton's dlsym, cudart's cuGetProcAddress. */
	open_driver();
	CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&f, TOPK_FN));
	SYM(launch_ex, "cuLaunchKernelEx");
	memset(&cu_cfg, 0, sizeof cu_cfg);
	cu_cfg.gridDimX = ROWS;
	cu_cfg.gridDimY = cu_cfg.gridDimZ = 1;
	cu_cfg.blockDimX = 32;
	cu_cfg.blockDimY = cu_cfg.blockDimZ = 1;
	cu_cfg.hStream = (CUstream)s;
	CHECK(launch_ex(&cu_cfg, f, topk_args(&t, ids, n++), NULL));
	SYM(launch_coop, "cuLaunchCooperativeKernel");
	CHECK(launch_coop(f, ROWS, 1, 1, 32, 1, 1, 0, (CUstream)s, topk_args(&t, ids, n++)));
	memcpy(&launch_ptsz, &(void *){ proc("cuLaunchKernel", CUDA_VERSION,
					     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) },
	       sizeof launch_ptsz);
	CHECK(!launch_ptsz);
	CHECK(launch_ptsz(f, ROWS, 1, 1, 32, 1, 1, 0, (CUstream)s, topk_args(&t, ids, n++), NULL));

	/* A kernel no rule owns. */
	CHECK(cudaLaunchKernel(SCALE_FN, grid, block, scale_args, 0, s));
	CHECK(cudaLaunchKernel(SCALE_FN, grid, block, scale_args, 0, s));

	/* allocation 3, by cudart's route to the driver */
	memcpy(&mem_alloc, &(void *){ proc("cuMemAlloc", CUDA_VERSION, 0) }, sizeof mem_alloc);
	CHECK(!mem_alloc);
	SYM(mem_free, "cuMemFree_v2");
	CHECK(mem_alloc(&dptr, 2048));
	CHECK(mem_free(dptr));

	/* allocations 4 and 5 */
	CHECK(cudaMallocAsync(&async_p, 8192, s));
	CHECK(cudaMemsetAsync(async_p, 0, 8192, s));
	CHECK(cudaFreeAsync(async_p, s));
	CHECK(cudaMallocManaged(&managed, 65536, cudaMemAttachGlobal));
	CHECK(cudaFree(managed));

	/* allocation 6: a mapping, as PyTorch's expandable segments make */
	SYM(granularity, "cuMemGetAllocationGranularity");
	SYM(create, "cuMemCreate");
	SYM(reserve, "cuMemAddressReserve");
	SYM(map, "cuMemMap");
	SYM(unmap, "cuMemUnmap");
	SYM(release, "cuMemRelease");
	SYM(addr_free, "cuMemAddressFree");
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	CHECK(granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK(create(&handle, gran, &prop, 0));
	CHECK(reserve(&va, gran, 0, 0, 0));
	CHECK(map(va, gran, 0, handle, 0));
	CHECK(unmap(va, gran));
	CHECK(release(handle));
	CHECK(addr_free(va, gran));

	/* A graph: one routing and one other launch, replayed twice. */
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	CHECK(cudaLaunchKernel(TOPK_FN, grid, block, topk_args(&t, ids, n++), 0, s));
	CHECK(cudaLaunchKernel(SCALE_FN, grid, block, scale_args, 0, s));
	CHECK(cudaStreamEndCapture(s, &graph));
	CHECK(cudaGraphInstantiate(&exec, graph, 0));
	CHECK(cudaGraphLaunch(exec, s));
	CHECK(cudaGraphLaunch(exec, s));
	CHECK(cudaStreamSynchronize(s));

	CHECK(cudaMemcpy(host_ids, ids, sizeof host_ids, cudaMemcpyDeviceToHost));
	CHECK(cudaMemcpy(host_x, x, sizeof host_x, cudaMemcpyDeviceToHost));
	for (i = 0; i < n * ROWS * TOPK; i++)
		sum = sum * 31 + (unsigned)host_ids[i];
	for (i = 0; i < 64; i++)
		xsum += host_x[i];
	printf("routing launches: %d\nids hash: %u\nscaled sum: %.3f\n", n, sum, xsum);

	CHECK(cudaGraphExecDestroy(exec));
	CHECK(cudaGraphDestroy(graph));
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(x));
	CHECK(cudaFree(p));
	return n == PROBE_ROUTING_LAUNCHES ? 0 : 1;
}

/* ---- check ---------------------------------------------------------------- */

static int failures;

#define EXPECT(cond)                                                                    \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "probe: %s:%d: expected %s\n", __FILE__, __LINE__, \
				#cond);                                                 \
			failures++;                                                     \
		}                                                                       \
	} while (0)

/* Which loaded object p lies in ("" when none). */
static const char *object_of(const void *p)
{
	Dl_info info;
	const char *slash;

	if (!p || !dladdr(p, &info) || !info.dli_fname)
		return "";
	slash = strrchr(info.dli_fname, '/');
	return slash ? slash + 1 : info.dli_fname;
}

static int ours(const void *p)
{
	return strcmp(object_of(p), "libmoeft.so") == 0;
}

/* A second runtime, libcudart.so.12 at path, opened privately beside the
 * program's: its runtime entry points are our 12 twins, which forward to
 * it, and an allocation through it is an allocation moeft sees. */
static void check_second_runtime(const char *path, void *cudart)
{
	cudaError_t (*alloc)(void **, size_t), (*release)(void *);
	void *rt12 = dlopen(path, RTLD_NOW | RTLD_LOCAL), *p, *q, *dev = NULL;

	EXPECT(rt12 != NULL);
	if (!rt12)
		return;
	p = dlsym(rt12, "cudaMalloc");
	q = dlsym(rt12, "cudaFree");
	EXPECT(ours(p) && ours(q) && p != dlsym(cudart, "cudaMalloc"));
	EXPECT(strcmp(object_of(dlsym(rt12, "cudaMemcpy")), "libcudart.so.12") == 0);
	if (!p || !q)
		return;
	memcpy(&alloc, &p, sizeof p);
	memcpy(&release, &q, sizeof q);
	EXPECT(alloc(&dev, PROBE_RT12_SIZE) == cudaSuccess && dev != NULL);
	EXPECT(release(dev) == cudaSuccess);
}

static int check(const char *cudart12)
{
	void *cudart, *p;

	open_driver();
	/* Triton's lookup, and cudart's lookup of cuGetProcAddress. */
	EXPECT(ours(dlsym(libcuda, "cuLaunchKernelEx")));
	EXPECT(dlsym(libcuda, "cuLaunchKernelEx") == dlsym(RTLD_DEFAULT, "cuLaunchKernelEx"));
	EXPECT(ours(dlsym(libcuda, "cuMemAlloc_v2")));
	EXPECT(ours(dlsym(libcuda, "cuLaunchCooperativeKernel")));
	EXPECT(ours(getproc_addr));
	EXPECT(ours(dlsym(libcuda, "cuGetProcAddress")));
	/* Symbols we do not hook are the driver's own; misses stay misses. */
	EXPECT(strcmp(object_of(dlsym(libcuda, "cuStreamIsCapturing")), "libcuda.so.1") == 0);
	dlerror();
	EXPECT(dlsym(libcuda, "cuNoSuchEntryPoint") == NULL && dlerror() != NULL);

	/* cuGetProcAddress: the variant that version and flags select. */
	EXPECT(proc("cuLaunchKernel", CUDA_VERSION, 0) == dlsym(RTLD_DEFAULT, "cuLaunchKernel"));
	EXPECT(proc("cuLaunchKernel", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
	       dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz"));
	EXPECT(proc("cuLaunchCooperativeKernel", CUDA_VERSION,
		    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
	       dlsym(RTLD_DEFAULT, "cuLaunchCooperativeKernel_ptsz"));
	EXPECT(proc("cuMemAlloc", CUDA_VERSION, 0) == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
	EXPECT(proc("cuMemAlloc", 3000, 0) == NULL);            /* the 32-bit one */
	EXPECT(proc("cuMemAllocAsync", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
	       dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz"));
	EXPECT(proc("cuGetProcAddress", CUDA_VERSION, 0) == getproc_addr);
	EXPECT(proc("cuGetProcAddress", 11030, 0) == dlsym(RTLD_DEFAULT, "cuGetProcAddress"));
	/* A newer version than moeft knows, naming the same function. */
	EXPECT(proc("cuLaunchKernelEx", CUDA_VERSION + 20, 0) ==
	       dlsym(RTLD_DEFAULT, "cuLaunchKernelEx"));
	EXPECT(strcmp(object_of(proc("cuStreamIsCapturing", CUDA_VERSION, 0)), "libcuda.so.1") == 0);

	/* A runtime found by dlsym on its handle is the one we forward to. */
	cudart = dlopen(PROBE_CUDART, RTLD_NOW | RTLD_NOLOAD);
	dlerror();
	EXPECT(cudart && ours(dlsym(cudart, "cudaMalloc")) && dlerror() == NULL);
	EXPECT(cudart && !ours(dlsym(cudart, "cudaMemcpy")));

	/* RTLD_NEXT from the program: the next object is libmoeft.so, as
	 * without our dlsym; a dlsym that called the real one would have made
	 * it the object after libmoeft.so. */
	p = dlsym(RTLD_NEXT, "cudaMalloc");
	EXPECT(ours(p) && p == dlsym(RTLD_DEFAULT, "cudaMalloc"));
	EXPECT(strcmp(object_of(dlsym(RTLD_NEXT, "cudaMemcpy")), PROBE_CUDART) == 0);
	if (cudart12)
		check_second_runtime(cudart12, cudart);
	return failures ? 1 : 0;
}

/* ---- fork ----------------------------------------------------------------- */

static int fork_mode(void)
{
	void *a, *b;
	pid_t pid;
	int st;

	CHECK(cudaMalloc(&a, 4096));
	CHECK(cudaDeviceSynchronize());
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		void *c;

		CHECK(cudaMalloc(&c, PROBE_FORK_CHILD_SIZE));
		CHECK(cudaFree(c));
		exit(0);
	}
	CHECK(pid < 0);
	CHECK(waitpid(pid, &st, 0) != pid);
	CHECK(cudaMalloc(&b, 12288));
	CHECK(cudaFree(a));
	CHECK(cudaFree(b));
	printf("child exit status: %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return 0;
}

/* ---- crash ---------------------------------------------------------------- */

static volatile sig_atomic_t got_term;

static void on_term(int sig)
{
	(void)sig;
	got_term = 1;
}

static void own_term_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_term;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGTERM, &sa, NULL));
}

/* Not inlined, so its address is a frame of the backtrace; abort() goes
 * through a volatile pointer, or the compiler would move the noreturn call
 * out to crash_here.cold. */
__attribute__((noinline)) static void crash_here(const char *how)
{
	/* Not NULL: UBSan would stop at a null store before the fault. */
	static int *volatile nowhere = (int *)CRASH_ADDR;
	static void (*volatile die)(void) = abort;

	if (strcmp(how, "segv") == 0)
		*nowhere = 1;
	else if (strcmp(how, "abort") == 0)
		die();
	else if (strcmp(how, "exit3") == 0)
		exit(3);
	else
		kill(getpid(), SIGTERM);
	__asm__ __volatile__("" ::: "memory");	/* no tail call */
}

static int crash_mode(const char *how)
{
	void (*fn)(const char *) = crash_here;
	void *a, *p;
	int i;

	if (strcmp(how, "term-before") == 0)
		own_term_handler();
	CHECK(cudaMalloc(&a, 4096));
	CHECK(cudaFree(a));
	if (strcmp(how, "term-after") == 0)
		own_term_handler();
	memcpy(&p, &fn, sizeof p);
	printf("crash_here %p\n", p);
	fflush(stdout);
	crash_here(strncmp(how, "term", 4) == 0 ? "term" : how);
	for (i = 0; i < 1000 && !got_term; i++)
		usleep(1000);
	printf("handled: %d\n", (int)got_term);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "run";

	if (strcmp(mode, "run") == 0)
		return run();
	if (strcmp(mode, "check") == 0)
		return check(argc > 2 ? argv[2] : NULL);
	if (strcmp(mode, "fork") == 0)
		return fork_mode();
	if (strcmp(mode, "crash") == 0 && argc > 2)
		return crash_mode(argv[2]);
	fprintf(stderr, "probe: unknown mode '%s' (run, check, fork, crash)\n", mode);
	return 2;
}

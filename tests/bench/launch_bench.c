/*
 * launch_bench.c - the launch micro-benchmark behind 'moeft bench launch':
 * what one cudaLaunchKernel costs on the CPU fixture, for a kernel that no
 * rule owns and for one that a built-in rule owns.
 *
 * Both kernels have empty host bodies and the same ten parameters (the
 * sizes of vLLM's topkGating), so the fixture does the same work for
 * each; only the names differ.  "moeft_bench_norule" matches no rule;
 * the other is vLLM's topkGating<128, int>, which the built-in vllm
 * profile owns (ids p4, rows p3, k p6): under the preload each of its
 * launches is evaluated and counted as a rule hit.
 *
 * Method: each kernel is launched once untimed (a handle's first launch
 * names it), then, per repeat, --launches launches in batches of BATCH,
 * each batch timed alone and the stream synchronised between batches,
 * untimed, so the queue stays short.  The two kernels alternate; each
 * figure is the best of --repeats.  stdout is one line:
 *
 *	launch_bench launches=N repeats=R norule_ns=X rule_ns=Y
 *
 * --callgrind: no timing; warm up, then N no-rule launches in calls of
 * norule_batch(), which 'valgrind --tool=callgrind --collect-atstart=no
 * --toggle-collect=norule_batch*' counts alone.  Exit status: 0, 1 on a
 * CUDA error, 2 on bad usage.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture.h"

#define BATCH 256u
#define NPARAMS 10

#define RULE_NAME "_ZN4vllm3moe10topkGatingILi128EiEEvPKfPKbPfiPT0_Piiiii"

static void norule_kernel(const struct fixture_launch *l)
{
	(void)l;
}

static void rule_kernel(const struct fixture_launch *l)
{
	(void)l;
}

FIXTURE_KERNEL(norule_kernel, "moeft_bench_norule", NPARAMS, 8, 8, 8, 4, 8, 8, 4, 4, 4, 4)
FIXTURE_KERNEL(rule_kernel, RULE_NAME, NPARAMS, 8, 8, 8, 4, 8, 8, 4, 4, 4, 4)

/* topkGating's parameters: gating, finished, weights, rows, ids,
 * source rows, k, start expert, end expert, experts. */
struct params {
	void *gating, *finished, *weights;
	int rows;
	void *ids, *source_rows;
	int k, start, end, experts;
	void *args[NPARAMS];
};

static void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "launch_bench: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void launch(fixture_kernel_fn fn, struct params *p, cudaStream_t s)
{
	check(cudaLaunchKernel(fixture_symbol(fn), (dim3){ 1, 1, 1 }, (dim3){ 128, 1, 1 },
			       p->args, 0, s), "cudaLaunchKernel");
}

/* n launches and nothing else: what callgrind counts. */
__attribute__((noinline)) static void norule_batch(struct params *p, cudaStream_t s, unsigned n)
{
	while (n--)
		launch(norule_kernel, p, s);
}

/* n launches of fn, in timed batches; ns per launch. */
static double timed(fixture_kernel_fn fn, struct params *p, cudaStream_t s, unsigned long n)
{
	double ns = 0;

	while (n) {
		unsigned b = n < BATCH ? (unsigned)n : BATCH, i;
		double t = now_ns();

		for (i = 0; i < b; i++)
			launch(fn, p, s);
		ns += now_ns() - t;
		n -= b;
		check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	}
	return ns;
}

static unsigned long number(const char *opt, const char *text, unsigned long max)
{
	char *end;
	unsigned long v;

	v = strtoul(text, &end, 10);
	if (!*text || *end || *text == '-' || v < 1 || v > max) {
		fprintf(stderr, "launch_bench: %s: '%s' is not a number from 1 to %lu\n", opt,
			text, max);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	unsigned long launches = 100000, repeats = 3, r;
	double best_norule = 0, best_rule = 0;
	struct params p;
	cudaStream_t s;
	int cg = 0, i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--launches") && i + 1 < argc)
			launches = number("--launches", argv[++i], 100000000);
		else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
			repeats = number("--repeats", argv[++i], 1000);
		else if (!strcmp(argv[i], "--callgrind"))
			cg = 1;
		else {
			fprintf(stderr, "usage: launch_bench [--launches N] [--repeats R] "
				"[--callgrind]\n");
			return 2;
		}
	}

	memset(&p, 0, sizeof p);
	check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
	check(cudaMalloc(&p.ids, 4096), "cudaMalloc");
	p.rows = 1;
	p.k = 4;
	p.end = p.experts = 16;
	p.args[0] = &p.gating;
	p.args[1] = &p.finished;
	p.args[2] = &p.weights;
	p.args[3] = &p.rows;
	p.args[4] = &p.ids;
	p.args[5] = &p.source_rows;
	p.args[6] = &p.k;
	p.args[7] = &p.start;
	p.args[8] = &p.end;
	p.args[9] = &p.experts;

	/* first launches: naming and rule lookup are not what is measured */
	launch(norule_kernel, &p, s);
	launch(rule_kernel, &p, s);
	check(cudaStreamSynchronize(s), "cudaStreamSynchronize");

	if (cg) {
		for (; launches; launches -= launches < BATCH ? launches : BATCH) {
			norule_batch(&p, s, launches < BATCH ? (unsigned)launches : BATCH);
			check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
		}
		return 0;
	}
	for (r = 0; r < repeats; r++) {
		double a = timed(norule_kernel, &p, s, launches) / (double)launches;
		double b = timed(rule_kernel, &p, s, launches) / (double)launches;

		if (r == 0 || a < best_norule)
			best_norule = a;
		if (r == 0 || b < best_rule)
			best_rule = b;
	}
	check(cudaFree(p.ids), "cudaFree");
	check(cudaStreamDestroy(s), "cudaStreamDestroy");
	printf("launch_bench launches=%lu repeats=%lu norule_ns=%.2f rule_ns=%.2f\n", launches,
	       repeats, best_norule, best_rule);
	return 0;
}

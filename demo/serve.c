/*
 * serve.c - the demo serving program: a small MoE engine that launches
 * what vLLM launches; moeft demo's default command (moeft-serve) and the
 * serving program of moeft's tests.
 *
 * It uses the CUDA runtime API only, plus one driver entry point found the
 * way Triton finds it, so one source runs on the CPU fixture (kernels in
 * tests/serve/serve_kernels_host.c) and on a GPU (serve_kernels.cu).  The
 * kernels and their parameters: serve_kernels.h.
 *
 * The model.  S sequences join and leave at scripted steps: sequence i
 * joins at step 3iN/4S, runs N/4 + (23i mod (N/2 + 1)) steps (at least
 * one) or until step N, and starts from a prompt token derived from the
 * seed.  A step is one batch of decode rows, one per active sequence; per
 * layer it runs the K/V projection, vLLM's reshape_and_cache_flash_kernel
 * into a paged KV pool (16-token blocks, vLLM's FlashAttention layout
 * [2][blocks][16][heads][head size] per layer, the layers in one
 * allocation or one each), attention over the cache, the router, vLLM's
 * topkGating and an expert-MLP stand-in; then a sampler emits one token
 * per row, the row's next input.  Blocks come from a LIFO free list, so a
 * sequence that leaves hands its blocks to the next one to need a block;
 * the pool has as many blocks as the schedule ever holds at once.
 *
 * Streams and threads.  Sequence i belongs to group i % 2; each group has
 * its stream and device buffers, like two engine workers sharing one KV
 * pool.  --threads=2 drives each group from a thread of its own; with 1
 * the main thread drives both.  The KV pool is zeroed on group 0's stream;
 * group 1's stream waits for that on an event.  Groups never touch each
 * other's blocks within a step, and a step ends with the host waiting for
 * both (it needs the tokens to build the next step's inputs, as every
 * engine does), so nothing depends on timing.
 *
 * Modes.  --mode=eager launches every kernel every step, on the real
 * rows.  --mode=graph captures one step per group at start-up, on the
 * group's largest batch (on the group's stream, or with --capture=side on
 * a side stream, as torch.cuda.graph does), and replays it every step; a step's inputs
 * (tokens, slots, block tables, sequence lengths) live in device buffers
 * refreshed with one cudaMemcpyAsync before each replay, and rows past
 * the real ones are padding (slot -1, empty sequence), as in vLLM.  A
 * resumed run captures at start-up too; its first replay is step R's.
 * The sampler is launched Triton-style in both modes: cuLaunchKernelEx
 * from dlsym(dlopen("libcuda.so.1")) on the CUfunction cudaGetFuncBySymbol
 * gives.
 *
 * Ground truth (--truth=PATH), a text file, one item per line:
 *
 *	moeft-serve-truth 1 layers=L experts=E topk=K hidden=H kv-heads=N
 *	  seqs=S steps=N vocab=V seed=X block-size=16 kv-blocks=B [resume=R]
 *	resume-kv CRC               resuming: the KV pool's CRC-32C as the run
 *	                            found it, before its first step
 *	step T                      for each step T the run computed: from 0,
 *	                            or from R when resumed at R > 0
 *	rows S0 S1 ...              sequence of each real row, ascending
 *	layer L A,B,C,D E,F,G,H ... per layer: each row's k routed expert ids
 *	weights L W,W,W,W ...       then per layer: each row's k gating weights,
 *	                            float32 bits as 8 hex digits
 *	kv CRC                      CRC-32C (8 hex digits) of the KV pool after
 *	                            the step, layer after layer
 *	tokens T0 T1 ...            the token each row emitted
 *	seq I join J leave L tokens T,T,...   after the last step, per sequence
 *	token-hash HASH             (these two: journal and computed tokens)
 *
 * Nothing in it depends on --mode, --threads or --kv-layout, so every
 * configuration of one model must write the same file.  Routing ids are
 * copied back after the step completes (the program is the reference, it
 * may synchronise); in graph mode topkGating also routed the padding
 * rows, which the truth leaves out.
 *
 * Journal and resume, what an engine's recovery hook has to work with.
 * --journal=PATH gets a line "step T T0 T1 ..." as each step completes:
 * the token of each active sequence, ascending ids (what the engine
 * streamed to its clients).  When MOEFT_RESTORE_MANIFEST names moeft
 * restore's manifest, the run resumes at its "resume_step" R: steps before
 * R are only scheduled (block tables, free list) and take their tokens
 * from the journal's first R lines, which must be whole and match the
 * schedule; what follows them is cut, and steps from R run as usual.  The
 * KV pool is not serve's to restore: moeft's preload writes the crashed
 * run's pool in stream order before the first step's launches.  An R past
 * --steps resumes at the end, computing nothing.
 *
 * stdout is one line: the configuration, the KV pool's final CRC and the
 * FNV-1a hash of every sequence's tokens, which runs with and without the
 * preload must agree on.  Exit status: 0, 1 on a CUDA or I/O error, 2 on
 * bad usage or a bad manifest or journal.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "decimal.h"
#include "serve_algo.h"
#include "serve_kernels.h"

#define BLOCK_SIZE 16 /* tokens per KV block: vLLM's default */
#define NGROUPS 2
#define ROW_THREADS 128 /* block size of the one-block-per-row kernels */

enum kv_init { KV_FILL, KV_MEMSET, KV_NAN };	/* --kv-init */

struct opts {
	unsigned layers, experts, topk, hidden, kv_heads, seqs, steps, vocab, threads;
	unsigned pool_mib;  /* --kv-pool-mib: the pool's least size, all layers */
	uint32_t seed;
	int graph;  /* --mode=graph */
	int kv_one; /* --kv-layout=one */
	enum kv_init kv_init;
	int capture_side; /* --capture=side */
	const char *truth, *journal;
};

struct seq {
	unsigned join, leave; /* active in steps [join, leave) */
	int32_t prompt;
	int32_t *out;    /* out[i]: the token emitted at step join + i */
	int32_t *blocks; /* block table: max_blocks entries */
	unsigned row;    /* its row in its group's batch, while active */
};

struct group {
	struct serve *sv;
	unsigned max_rows;    /* the group's sequence count: graph batch size */
	unsigned rows;        /* real rows this step */
	unsigned *seq_of_row; /* sequence id of each real row */
	cudaStream_t stream;
	cudaEvent_t done;
	/*
	 * One step's inputs, staged in pinned memory and copied to the device
	 * in one cudaMemcpyAsync: slot_mapping (i64, first for alignment),
	 * input_ids, seq_lens, block_tables (i32), each max_rows long (block
	 * tables max_rows x max_blocks).
	 */
	size_t in_bytes;
	void *h_in, *d_in;
	int64_t *slot_mapping;
	int32_t *input_ids, *seq_lens, *block_tables;
	uint32_t *hidden;
	float *key, *value, *logits;
	int32_t *source_rows, *tokens;
	int32_t **ids;   /* per layer: max_rows x topk */
	float **weights; /* per layer: their gating weights */
	int32_t *h_tokens;
	cudaGraphExec_t exec;
	pthread_t thread;
};

struct serve {
	struct opts o;
	struct seq *seqs;
	unsigned max_blocks; /* per sequence */
	unsigned nblocks;    /* in the pool */
	int32_t *free_blocks;
	unsigned nfree;
	size_t layer_floats; /* one layer's K and V */
	void **pool_alloc;   /* the pool's allocations: 1, or one per layer */
	unsigned npool_alloc;
	float **pool;        /* per layer: its K cache; its V cache follows */
	float *scale;        /* k_scale = v_scale = 1 */
	cudaEvent_t kv_ready;
	struct group g[NGROUPS];
	PFN_cuLaunchKernelEx_v11060 launch_ex;
	CUfunction sample_fn;
	pthread_barrier_t start, finish;
	int stop;
	unsigned char *pool_copy;
	uint32_t *ids_copy[NGROUPS];     /* the int32 ids' bits */
	uint32_t *weights_copy[NGROUPS]; /* the float weights' bits */
	FILE *truth;
	unsigned resume; /* steps before it come from the journal */
	int journal;     /* its descriptor, with --journal */
	char *jline;     /* one journal line, jline_size bytes at most */
	size_t jline_size;
};

static void __attribute__((noreturn, format(printf, 2, 3))) die(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("serve: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

#define CU(call)                                                                  \
	do {                                                                      \
		cudaError_t err_ = (call);                                        \
		if (err_ != cudaSuccess)                                          \
			die(1, "line %d: %s: %s", __LINE__, #call,                \
			    cudaGetErrorString(err_));                            \
	} while (0)

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p)
		die(1, "out of memory");
	return p;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: serve [options]\n"
		"  --layers=N       MoE layers (4)\n"
		"  --experts=N      experts per layer (16)\n"
		"  --topk=N         experts per token (4)\n"
		"  --hidden=N       hidden size (64)\n"
		"  --kv-heads=N     KV heads, dividing the hidden size (2)\n"
		"  --seqs=N         sequences (8)\n"
		"  --steps=N        decode steps (64)\n"
		"  --vocab=N        vocabulary size (512)\n"
		"  --seed=N         model and prompt seed (1)\n"
		"  --mode=eager|graph        launch every kernel, or replay a CUDA graph (eager)\n"
		"  --threads=1|2             host threads driving the two streams (1)\n"
		"  --kv-layout=one|per-layer one KV allocation, or one per layer (per-layer)\n"
		"  --kv-pool-mib=N  a KV pool of at least N MiB, all layers, as engines\n"
		"                   size theirs to memory, not to the load (0: the load's)\n"
		"  --kv-init=fill|memset|nan zero the KV pools with a kernel or with\n"
		"                            cudaMemsetAsync, no launch, or fill them\n"
		"                            with NaN by a kernel, as a debug allocator\n"
		"                            would (fill)\n"
		"  --capture=same|side       graph mode: capture on the replay stream or on\n"
		"                            a side stream (same)\n"
		"  --truth=PATH     write the ground truth there\n"
		"  --journal=PATH   append each step's tokens there\n"
		"environment:\n"
		"  MOEFT_RESTORE_MANIFEST=PATH  resume at the manifest's resume_step, with\n"
		"                               the tokens before it from --journal\n");
}

static void bad_usage(const char *msg, const char *arg)
{
	die(2, "%s%s (try --help)", msg, arg);
}

static unsigned num_arg(const char *name, const char *arg, uint64_t min, uint64_t max)
{
	const char *s = arg;
	uint64_t v;

	if (parse_decimal(&s, max, &v) || *s || v < min)
		die(2, "--%s=%s: want an integer in %" PRIu64 "..%" PRIu64 " (try --help)", name,
		    arg, min, max);
	return (unsigned)v;
}

static int choice_arg(const char *name, const char *arg, const char *no, const char *yes)
{
	if (strcmp(arg, no) == 0)
		return 0;
	if (strcmp(arg, yes) == 0)
		return 1;
	die(2, "--%s=%s: want %s or %s (try --help)", name, arg, no, yes);
}

static enum kv_init kv_init_arg(const char *arg)
{
	static const char *const names[] = { [KV_FILL] = "fill", [KV_MEMSET] = "memset",
					     [KV_NAN] = "nan" };
	unsigned i;

	for (i = 0; i < sizeof names / sizeof *names; i++)
		if (strcmp(arg, names[i]) == 0)
			return (enum kv_init)i;
	die(2, "--kv-init=%s: want fill, memset or nan (try --help)", arg);
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "layers", required_argument, NULL, 'L' },
		{ "experts", required_argument, NULL, 'E' },
		{ "topk", required_argument, NULL, 'k' },
		{ "hidden", required_argument, NULL, 'H' },
		{ "kv-heads", required_argument, NULL, 'n' },
		{ "seqs", required_argument, NULL, 'S' },
		{ "steps", required_argument, NULL, 'N' },
		{ "vocab", required_argument, NULL, 'V' },
		{ "seed", required_argument, NULL, 's' },
		{ "mode", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ "kv-layout", required_argument, NULL, 'l' },
		{ "kv-pool-mib", required_argument, NULL, 'P' },
		{ "kv-init", required_argument, NULL, 'i' },
		{ "capture", required_argument, NULL, 'c' },
		{ "truth", required_argument, NULL, 'T' },
		{ "journal", required_argument, NULL, 'J' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t pool_bytes;
	int c;

	*o = (struct opts){ .layers = 4, .experts = 16, .topk = 4, .hidden = 64, .kv_heads = 2,
			    .seqs = 8, .steps = 64, .vocab = 512, .threads = 1, .seed = 1 };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'L': o->layers = num_arg("layers", optarg, 1, 256); break;
		case 'E': o->experts = num_arg("experts", optarg, 1, 1024); break;
		case 'k': o->topk = num_arg("topk", optarg, 1, 1024); break;
		case 'H': o->hidden = num_arg("hidden", optarg, 1, 8192); break;
		case 'n': o->kv_heads = num_arg("kv-heads", optarg, 1, 8192); break;
		case 'S': o->seqs = num_arg("seqs", optarg, 1, 4096); break;
		case 'N': o->steps = num_arg("steps", optarg, 1, 1000000); break;
		case 'V': o->vocab = num_arg("vocab", optarg, 1, 1u << 24); break;
		case 's': o->seed = num_arg("seed", optarg, 0, UINT32_MAX); break;
		case 'm': o->graph = choice_arg("mode", optarg, "eager", "graph"); break;
		case 't': o->threads = num_arg("threads", optarg, 1, 2); break;
		case 'l': o->kv_one = choice_arg("kv-layout", optarg, "per-layer", "one"); break;
		case 'P': o->pool_mib = num_arg("kv-pool-mib", optarg, 0, 16384); break;
		case 'i': o->kv_init = kv_init_arg(optarg); break;
		case 'c': o->capture_side = choice_arg("capture", optarg, "same", "side"); break;
		case 'T': o->truth = optarg; break;
		case 'J': o->journal = optarg; break;
		case 'h': usage(stdout); exit(0);
		default: exit(2); /* getopt said why */
		}
	}
	if (optind < argc)
		bad_usage("unexpected argument ", argv[optind]);
	if (o->topk > o->experts)
		bad_usage("--topk must not exceed --experts", "");
	if (o->hidden % o->kv_heads)
		bad_usage("--kv-heads must divide --hidden", "");
	/* Every sequence's whole run resident at once bounds the pool. */
	pool_bytes = (uint64_t)o->layers * 2 * o->seqs *
		     ((o->steps + BLOCK_SIZE - 1) / BLOCK_SIZE) * BLOCK_SIZE * o->hidden *
		     sizeof(float);
	if (pool_bytes > (16ull << 30))
		bad_usage("--layers x --seqs x --steps x --hidden need a KV pool over 16 GiB", "");
}

/* The script: when each sequence joins and leaves, and the pool size. */
static void schedule_init(struct serve *sv)
{
	const struct opts *o = &sv->o;
	unsigned i, t, longest = 1;
	uint64_t block_bytes;
	int64_t *delta, held;

	sv->seqs = xcalloc(o->seqs, sizeof *sv->seqs);
	for (i = 0; i < o->seqs; i++) {
		struct seq *s = &sv->seqs[i];
		unsigned len = o->steps / 4 + (23 * i) % (o->steps / 2 + 1);

		s->join = (unsigned)((uint64_t)3 * i * o->steps / (4 * (uint64_t)o->seqs));
		if (len < 1)
			len = 1;
		s->leave = len < o->steps - s->join ? s->join + len : o->steps;
		if (s->leave - s->join > longest)
			longest = s->leave - s->join;
		s->prompt = (int32_t)(sv_mix(o->seed ^ 0x70726f6dU, i) % o->vocab);
	}
	sv->max_blocks = (longest + BLOCK_SIZE - 1) / BLOCK_SIZE;
	/* A pool sized to memory: the blocks past the load's are never used. */
	block_bytes = (uint64_t)o->layers * 2 * BLOCK_SIZE * o->hidden * sizeof(float);
	sv->nblocks = (unsigned)((((uint64_t)o->pool_mib << 20) + block_bytes - 1) / block_bytes);
	for (i = 0; i < o->seqs; i++) {
		sv->seqs[i].out = xcalloc(sv->seqs[i].leave - sv->seqs[i].join, sizeof(int32_t));
		sv->seqs[i].blocks = xcalloc(sv->max_blocks, sizeof(int32_t));
	}
	/* The peak of blocks held at once: a sequence takes one every
	 * BLOCK_SIZE steps from its join and gives them all back as it leaves. */
	delta = xcalloc(o->steps + 1, sizeof *delta);
	for (i = 0; i < o->seqs; i++) {
		const struct seq *s = &sv->seqs[i];

		for (t = s->join; t < s->leave; t += BLOCK_SIZE)
			delta[t]++;
		delta[s->leave] -= (s->leave - 1 - s->join) / BLOCK_SIZE + 1;
	}
	for (t = 0, held = 0; t < o->steps; t++) {
		held += delta[t];
		if ((unsigned)held > sv->nblocks)
			sv->nblocks = (unsigned)held;
	}
	free(delta);
	sv->free_blocks = xcalloc(sv->nblocks, sizeof(int32_t));
	for (i = 0; i < sv->nblocks; i++)
		sv->free_blocks[sv->nfree++] = (int32_t)(sv->nblocks - 1 - i);
}

/* Where the parts of a step's input block lie, from its base address. */
static void in_layout(struct group *g, char *base, int64_t **slot_mapping, int32_t **input_ids,
		      int32_t **seq_lens, int32_t **block_tables)
{
	*slot_mapping = (int64_t *)base;
	*input_ids = (int32_t *)(*slot_mapping + g->max_rows);
	*seq_lens = *input_ids + g->max_rows;
	*block_tables = *seq_lens + g->max_rows;
}

static void *dev_alloc(size_t bytes)
{
	void *p;

	CU(cudaMalloc(&p, bytes));
	return p;
}

static void group_init(struct serve *sv, unsigned idx)
{
	const struct opts *o = &sv->o;
	struct group *g = &sv->g[idx];
	size_t rows, layer;

	g->sv = sv;
	g->max_rows = o->seqs / NGROUPS + (idx < o->seqs % NGROUPS);
	g->seq_of_row = xcalloc(g->max_rows, sizeof *g->seq_of_row);
	CU(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
	CU(cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming));
	if (!g->max_rows)
		return;
	rows = g->max_rows;
	g->in_bytes = rows * (sizeof(int64_t) + (3 + (size_t)sv->max_blocks) * sizeof(int32_t));
	CU(cudaMallocHost(&g->h_in, g->in_bytes));
	g->d_in = dev_alloc(g->in_bytes);
	in_layout(g, g->h_in, &g->slot_mapping, &g->input_ids, &g->seq_lens, &g->block_tables);
	g->hidden = dev_alloc(rows * o->hidden * sizeof(uint32_t));
	g->key = dev_alloc(rows * o->hidden * sizeof(float));
	g->value = dev_alloc(rows * o->hidden * sizeof(float));
	g->logits = dev_alloc(rows * o->experts * sizeof(float));
	g->source_rows = dev_alloc(rows * o->topk * sizeof(int32_t));
	g->tokens = dev_alloc(rows * sizeof(int32_t));
	/* One id and weight buffer per layer, so the truth can read them all
	 * after the step. */
	g->ids = xcalloc(o->layers, sizeof *g->ids);
	g->weights = xcalloc(o->layers, sizeof *g->weights);
	for (layer = 0; layer < o->layers; layer++) {
		g->ids[layer] = dev_alloc(rows * o->topk * sizeof(int32_t));
		g->weights[layer] = dev_alloc(rows * o->topk * sizeof(float));
	}
	CU(cudaMallocHost((void **)&g->h_tokens, rows * sizeof(int32_t)));
	sv->ids_copy[idx] = xcalloc(rows * o->topk * o->layers, sizeof(uint32_t));
	sv->weights_copy[idx] = xcalloc(rows * o->topk * o->layers, sizeof(uint32_t));
}

static void launch(cudaStream_t stream, enum serve_kernel k, unsigned grid, unsigned block,
		   void **args)
{
	dim3 gd = { grid, 1, 1 }, bd = { block, 1, 1 };

	CU(cudaLaunchKernel(serve_kernel_fn(k), gd, bd, args, 0, stream));
}

/* The KV pool, zeroed by a fill kernel like torch.zeros (or filled with
 * NaN); group 1's stream must not write it before that, hence the event. */
static void pool_init(struct serve *sv)
{
	const struct opts *o = &sv->o;
	size_t bytes;
	unsigned a, layer;

	sv->layer_floats = 2 * (size_t)sv->nblocks * BLOCK_SIZE * o->hidden;
	sv->npool_alloc = o->kv_one ? 1 : o->layers;
	bytes = sv->layer_floats * sizeof(float) * (o->kv_one ? o->layers : 1);
	sv->pool_alloc = xcalloc(sv->npool_alloc, sizeof *sv->pool_alloc);
	for (a = 0; a < sv->npool_alloc; a++) {
		void *dst = dev_alloc(bytes);
		uint64_t words = bytes / sizeof(uint32_t), grid = (words + 255) / 256;
		uint32_t word = o->kv_init == KV_NAN ? 0x7fc00000u : 0;
		void *args[] = { &dst, &words, &word };

		sv->pool_alloc[a] = dst;
		if (o->kv_init == KV_MEMSET)
			CU(cudaMemsetAsync(dst, 0, bytes, sv->g[0].stream));
		else
			launch(sv->g[0].stream, SK_FILL, grid < 1024 ? (unsigned)grid : 1024, 256,
			       args);
	}
	sv->pool = xcalloc(o->layers, sizeof *sv->pool);
	for (layer = 0; layer < o->layers; layer++)
		sv->pool[layer] = o->kv_one ? (float *)sv->pool_alloc[0] + layer * sv->layer_floats
					    : sv->pool_alloc[layer];
	CU(cudaEventCreateWithFlags(&sv->kv_ready, cudaEventDisableTiming));
	CU(cudaEventRecord(sv->kv_ready, sv->g[0].stream));
	CU(cudaStreamWaitEvent(sv->g[1].stream, sv->kv_ready, 0));
	sv->pool_copy = xcalloc(o->layers, sv->layer_floats * sizeof(float));
}

/* The sampler is launched as Triton launches its kernels. */
static void *triton_init(struct serve *sv)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW), *sym = NULL;
	cudaFunction_t fn;

	if (lib)
		sym = dlsym(lib, "cuLaunchKernelEx");
	if (!sym)
		die(1, "cuLaunchKernelEx from libcuda.so.1: %s", dlerror());
	/* ISO C has no cast from an object pointer to a function pointer. */
	memcpy(&sv->launch_ex, &sym, sizeof sym);
	CU(cudaGetFuncBySymbol(&fn, serve_kernel_fn(SK_SAMPLE)));
	sv->sample_fn = fn;
	return lib;
}

static unsigned row_threads(unsigned n)
{
	return n < ROW_THREADS ? n : ROW_THREADS;
}

/* One step of group g on its first `rows` rows, on stream: what eager
 * mode launches and graph mode captures. */
static void group_enqueue(struct group *g, unsigned rows, cudaStream_t stream)
{
	struct serve *sv = g->sv;
	const struct opts *o = &sv->o;
	int n = (int)rows, hs = (int)o->hidden, experts = (int)o->experts, k = (int)o->topk;
	int heads = (int)o->kv_heads, head_size = hs / heads, bs = BLOCK_SIZE;
	int maxb = (int)sv->max_blocks, vocab = (int)o->vocab, start = 0, layer;
	int64_t block_stride = (int64_t)BLOCK_SIZE * hs, page_stride = hs, head_stride = head_size;
	int64_t *slots;
	int32_t *input_ids, *seq_lens, *block_tables;
	const void *finished = NULL;
	uint32_t seed = o->seed;
	unsigned threads = row_threads(o->hidden);
	CUlaunchConfig cfg;
	CUresult res;

	in_layout(g, g->d_in, &slots, &input_ids, &seq_lens, &block_tables);
	{
		void *embed[] = { &input_ids, &g->hidden, &n, &hs, &seed };

		launch(stream, SK_EMBED, rows, threads, embed);
	}
	for (layer = 0; layer < (int)o->layers; layer++) {
		float *kc = sv->pool[layer], *vc = kc + sv->layer_floats / 2;
		void *proj[] = { &g->hidden, &g->key, &g->value, &n, &hs, &layer, &seed };
		void *write[] = { &g->key, &g->value, &kc, &vc, &slots, &block_stride,
				  &page_stride, &head_stride, &page_stride, &page_stride,
				  &heads, &head_size, &bs, &sv->scale, &sv->scale };
		void *attn[] = { &g->hidden, &kc, &vc, &block_tables, &seq_lens, &n, &hs,
				 &maxb, &bs, &block_stride };
		void *router[] = { &g->hidden, &g->logits, &n, &hs, &experts, &layer, &seed };
		void *topk[] = { &g->logits, &finished, &g->weights[layer], &n, &g->ids[layer],
				 &g->source_rows, &k, &start, &experts, &experts };
		void *mlp[] = { &g->hidden, &g->ids[layer], &n, &hs, &k, &layer, &seed };

		launch(stream, SK_KV_PROJ, rows, threads, proj);
		launch(stream, SK_KV_WRITE, rows, threads, write);
		launch(stream, SK_ATTN, rows, threads, attn);
		launch(stream, SK_ROUTER, rows, row_threads(o->experts), router);
		launch(stream, SK_TOPK,
		       (rows + SERVE_TOPK_ROWS_PER_BLOCK - 1) / SERVE_TOPK_ROWS_PER_BLOCK,
		       SERVE_TOPK_ROWS_PER_BLOCK, topk);
		launch(stream, SK_MLP, rows, threads, mlp);
	}
	{
		void *sample[] = { &g->hidden, &g->tokens, &n, &hs, &vocab, &seed };

		memset(&cfg, 0, sizeof cfg);
		cfg.gridDimX = rows;
		cfg.gridDimY = cfg.gridDimZ = 1;
		cfg.blockDimX = 32;
		cfg.blockDimY = cfg.blockDimZ = 1;
		cfg.hStream = stream;
		res = sv->launch_ex(&cfg, sv->sample_fn, sample, NULL);
		if (res != CUDA_SUCCESS)
			die(1, "cuLaunchKernelEx: CUresult %d", (int)res);
	}
}

/* Capture group g's step on its own stream, or (--capture=side) on a
 * stream of its own, as torch.cuda.graph does; replays run on the group's. */
static void graph_init(struct group *g)
{
	cudaStream_t on = g->stream;
	cudaGraph_t graph;

	if (g->sv->o.capture_side)
		CU(cudaStreamCreateWithFlags(&on, cudaStreamNonBlocking));
	CU(cudaStreamBeginCapture(on, cudaStreamCaptureModeGlobal));
	group_enqueue(g, g->max_rows, on);
	CU(cudaStreamEndCapture(on, &graph));
	CU(cudaGraphInstantiate(&g->exec, graph, 0));
	CU(cudaGraphDestroy(graph));
	if (on != g->stream)
		CU(cudaStreamDestroy(on));
}

static int32_t block_pop(struct serve *sv)
{
	if (!sv->nfree)
		die(1, "KV pool exhausted (a bug in the schedule)");
	return sv->free_blocks[--sv->nfree];
}

/*
 * Step t's batches: leavers free their blocks first (so a sequence needing
 * a block this step reuses the last freed), then each active sequence
 * takes a row of its group and, at a block boundary, a new block.
 */
static void schedule_step(struct serve *sv, unsigned t)
{
	unsigned i, r, b;
	int gi;

	for (i = 0; i < sv->o.seqs; i++) {
		struct seq *s = &sv->seqs[i];

		if (s->leave != t)
			continue;
		for (b = (s->leave - 1 - s->join) / BLOCK_SIZE + 1; b-- > 0;)
			sv->free_blocks[sv->nfree++] = s->blocks[b];
	}
	for (gi = 0; gi < NGROUPS; gi++) {
		struct group *g = &sv->g[gi];

		g->rows = 0;
		/* Padding, which graph replays run too. */
		for (r = 0; r < g->max_rows; r++) {
			g->slot_mapping[r] = -1;
			g->input_ids[r] = 0;
			g->seq_lens[r] = 0;
		}
		if (g->max_rows)
			memset(g->block_tables, 0,
			       (size_t)g->max_rows * sv->max_blocks * sizeof(int32_t));
	}
	for (i = 0; i < sv->o.seqs; i++) {
		struct seq *s = &sv->seqs[i];
		struct group *g = &sv->g[i % NGROUPS];
		unsigned pos = t - s->join;

		if (t < s->join || t >= s->leave)
			continue;
		if (pos % BLOCK_SIZE == 0)
			s->blocks[pos / BLOCK_SIZE] = block_pop(sv);
		s->row = r = g->rows++;
		g->seq_of_row[r] = i;
		g->input_ids[r] = pos ? s->out[pos - 1] : s->prompt;
		g->seq_lens[r] = (int32_t)pos + 1;
		g->slot_mapping[r] = (int64_t)s->blocks[pos / BLOCK_SIZE] * BLOCK_SIZE +
				     pos % BLOCK_SIZE;
		memcpy(g->block_tables + (size_t)r * sv->max_blocks, s->blocks,
		       sv->max_blocks * sizeof(int32_t));
	}
}

/* Start group g's step; the host reads its tokens once g->done fires. */
static void group_submit(struct group *g)
{
	if (!g->rows)
		return;
	CU(cudaMemcpyAsync(g->d_in, g->h_in, g->in_bytes, cudaMemcpyHostToDevice, g->stream));
	if (g->sv->o.graph)
		CU(cudaGraphLaunch(g->exec, g->stream));
	else
		group_enqueue(g, g->rows, g->stream);
	CU(cudaMemcpyAsync(g->h_tokens, g->tokens, g->rows * sizeof(int32_t),
			   cudaMemcpyDeviceToHost, g->stream));
	CU(cudaEventRecord(g->done, g->stream));
}

static void group_wait(struct group *g)
{
	if (g->rows)
		CU(cudaEventSynchronize(g->done));
}

static void *worker(void *arg)
{
	struct group *g = arg;

	for (;;) {
		pthread_barrier_wait(&g->sv->start);
		if (g->sv->stop)
			return NULL;
		group_submit(g);
		group_wait(g);
		pthread_barrier_wait(&g->sv->finish);
	}
}

static void run_step(struct serve *sv)
{
	int gi;

	if (sv->o.threads == 2) {
		pthread_barrier_wait(&sv->start);
		pthread_barrier_wait(&sv->finish);
		return;
	}
	for (gi = 0; gi < NGROUPS; gi++)
		group_submit(&sv->g[gi]);
	for (gi = 0; gi < NGROUPS; gi++)
		group_wait(&sv->g[gi]);
}

/* CRC-32C of the whole pool, layer after layer: the same bytes in the
 * same order whichever the layout. */
static uint32_t pool_crc(struct serve *sv)
{
	size_t bytes = sv->layer_floats * sizeof(float) * sv->o.layers / sv->npool_alloc;
	unsigned a;

	/* The copies run on the legacy stream, which does not wait for the
	 * groups' streams: a step's work is waited for as the step ends, the
	 * zero fill only by a step with rows, which a resumed run may lack. */
	CU(cudaEventSynchronize(sv->kv_ready));
	for (a = 0; a < sv->npool_alloc; a++)
		CU(cudaMemcpy(sv->pool_copy + a * bytes, sv->pool_alloc[a], bytes,
			      cudaMemcpyDeviceToHost));
	return crc32c(0, sv->pool_copy, bytes * sv->npool_alloc);
}

static int active(const struct seq *s, unsigned t)
{
	return s->join <= t && t < s->leave;
}

/* "KEY LAYER" and each active row's k values of a layer, from the copies
 * truth_step made (ids as signed decimals, weights' bits in hex). */
static void truth_rows(const struct serve *sv, unsigned t, const char *key, unsigned layer,
		       uint32_t *const copy[NGROUPS], const char *fmt)
{
	const struct opts *o = &sv->o;
	unsigned i, j;

	fprintf(sv->truth, "\n%s %u", key, layer);
	for (i = 0; i < o->seqs; i++) {
		const struct group *g = &sv->g[i % NGROUPS];
		const uint32_t *v;

		if (!active(&sv->seqs[i], t))
			continue;
		v = copy[i % NGROUPS] + ((size_t)layer * g->max_rows + sv->seqs[i].row) * o->topk;
		for (j = 0; j < o->topk; j++)
			fprintf(sv->truth, fmt, j ? ',' : ' ', v[j]);
	}
}

static void truth_step(struct serve *sv, unsigned t)
{
	const struct opts *o = &sv->o;
	FILE *f = sv->truth;
	unsigned i, layer;
	int gi;

	for (gi = 0; gi < NGROUPS; gi++) {
		struct group *g = &sv->g[gi];

		for (layer = 0; layer < o->layers && g->rows; layer++) {
			size_t at = (size_t)layer * g->max_rows * o->topk;

			CU(cudaMemcpy(sv->ids_copy[gi] + at, g->ids[layer],
				      (size_t)g->rows * o->topk * sizeof(int32_t),
				      cudaMemcpyDeviceToHost));
			CU(cudaMemcpy(sv->weights_copy[gi] + at, g->weights[layer],
				      (size_t)g->rows * o->topk * sizeof(float),
				      cudaMemcpyDeviceToHost));
		}
	}
	fprintf(f, "step %u\nrows", t);
	for (i = 0; i < o->seqs; i++)
		if (active(&sv->seqs[i], t))
			fprintf(f, " %u", i);
	for (layer = 0; layer < o->layers; layer++)
		truth_rows(sv, t, "layer", layer, sv->ids_copy, "%c%d");
	for (layer = 0; layer < o->layers; layer++)
		truth_rows(sv, t, "weights", layer, sv->weights_copy, "%c%08x");
	fprintf(f, "\nkv %08x\ntokens", (unsigned)pool_crc(sv));
	for (i = 0; i < o->seqs; i++)
		if (active(&sv->seqs[i], t))
			fprintf(f, " %d", (int)sv->seqs[i].out[t - sv->seqs[i].join]);
	fputc('\n', f);
}

static uint64_t fnv1a(uint64_t h, uint32_t v)
{
	int b;

	for (b = 0; b < 4; b++, v >>= 8)
		h = (h ^ (v & 0xff)) * 0x100000001b3ull;
	return h;
}

/* What the runs compare: every sequence's id, join step and tokens. */
static uint64_t token_hash(const struct serve *sv, uint64_t *count)
{
	uint64_t h = 0xcbf29ce484222325ull;
	unsigned i, j;

	*count = 0;
	for (i = 0; i < sv->o.seqs; i++) {
		const struct seq *s = &sv->seqs[i];

		h = fnv1a(fnv1a(fnv1a(h, i), s->join), s->leave - s->join);
		for (j = 0; j < s->leave - s->join; j++)
			h = fnv1a(h, (uint32_t)s->out[j]);
		*count += s->leave - s->join;
	}
	return h;
}

static void truth_open(struct serve *sv)
{
	const struct opts *o = &sv->o;

	sv->truth = fopen(o->truth, "w");
	if (!sv->truth)
		die(1, "%s: %s", o->truth, strerror(errno));
	fprintf(sv->truth,
		"moeft-serve-truth 1 layers=%u experts=%u topk=%u hidden=%u kv-heads=%u seqs=%u "
		"steps=%u vocab=%u seed=%u block-size=%u kv-blocks=%u",
		o->layers, o->experts, o->topk, o->hidden, o->kv_heads, o->seqs, o->steps,
		o->vocab, (unsigned)o->seed, BLOCK_SIZE, sv->nblocks);
	/* Resuming at 0 computes every step: the truth of a run from the start. */
	if (sv->resume)
		fprintf(sv->truth, " resume=%u", sv->resume);
	fputc('\n', sv->truth);
}

static void truth_close(struct serve *sv, uint64_t hash)
{
	FILE *f = sv->truth;
	unsigned i, j;

	for (i = 0; i < sv->o.seqs; i++) {
		const struct seq *s = &sv->seqs[i];

		fprintf(f, "seq %u join %u leave %u tokens", i, s->join, s->leave);
		for (j = 0; j < s->leave - s->join; j++)
			fprintf(f, "%c%d", j ? ',' : ' ', (int)s->out[j]);
		fputc('\n', f);
	}
	fprintf(f, "token-hash %016" PRIx64 "\n", hash);
	if (ferror(f) | fclose(f))
		die(1, "%s: write error", sv->o.truth);
}

/*
 * moeft restore's manifest, a JSON object, of which only "resume_step" is
 * read, strictly: once, an unsigned integer ending where a JSON number
 * ends.
 */
static unsigned manifest_resume_step(const char *path)
{
	static const char key[] = "\"resume_step\"", space[] = " \t\r\n";
	FILE *f = fopen(path, "r");
	char *text = NULL;
	const char *p = NULL;
	size_t cap = 0;
	ssize_t len;
	uint64_t v;

	if (!f)
		die(2, "MOEFT_RESTORE_MANIFEST=%s: %s", path, strerror(errno));
	/* The whole file, but for a NUL, which JSON text never holds. */
	len = getdelim(&text, &cap, '\0', f);
	if (len < 0 && ferror(f))
		die(2, "MOEFT_RESTORE_MANIFEST=%s: %s", path, strerror(errno));
	fclose(f);
	if (len > 0 && strlen(text) == (size_t)len && (p = strstr(text, key))) {
		p += sizeof key - 1;
		p += strspn(p, space);
		if (*p == ':')
			p += 1 + strspn(p + 1, space);
		else
			p = NULL;
	}
	if (!p || parse_decimal(&p, UINT32_MAX, &v) || !*p || !strchr(",} \t\r\n", *p) ||
	    strstr(p, key))
		die(2, "MOEFT_RESTORE_MANIFEST=%s: want one \"resume_step\": N, N unsigned", path);
	free(text);
	return (unsigned)v;
}

/*
 * Resuming: the tokens of steps 0 .. resume - 1 from the journal's first
 * lines, each whole and matching the schedule.  Returns the bytes they
 * take; a partial or extra line after them is the crashed run's, past the
 * step the manifest names.
 */
static off_t journal_read(struct serve *sv)
{
	const struct opts *o = &sv->o;
	FILE *f = fdopen(dup(sv->journal), "r");
	char *line = NULL;
	const char *p;
	size_t cap = 0;
	ssize_t len;
	off_t keep = 0;
	unsigned t, i, want;
	uint64_t v;

	if (!f)
		die(1, "%s: %s", o->journal, strerror(errno));
	for (t = 0; t < sv->resume; t++) {
		len = getline(&line, &cap, f);
		if (len <= 0)
			die(2, "%s: line %u: no line for step %u (resuming at step %u)", o->journal,
			    t + 1, t, sv->resume);
		if (line[len - 1] != '\n')
			die(2, "%s: line %u: step %u's line is cut short (resuming at step %u)",
			    o->journal, t + 1, t, sv->resume);
		p = line + 5;
		if (strncmp(line, "step ", 5) || parse_decimal(&p, UINT32_MAX, &v) || v != t)
			p = NULL;
		for (i = want = 0; i < o->seqs; i++) {
			struct seq *s = &sv->seqs[i];

			if (!active(s, t))
				continue;
			want++;
			if (!p || *p++ != ' ' || parse_decimal(&p, o->vocab - 1, &v))
				p = NULL;
			else
				s->out[t - s->join] = (int32_t)v;
		}
		if (p != line + len - 1)
			die(2, "%s: line %u: want \"step %u\" and one token below %u per active "
			    "sequence (%u)", o->journal, t + 1, t, o->vocab, want);
		keep += len;
	}
	free(line);
	fclose(f);
	return keep;
}

/* Resuming, the journal keeps the steps before the resume point; else it
 * starts empty.  Either way the run's steps are appended after them. */
static void journal_open(struct serve *sv)
{
	const char *path = sv->o.journal;

	sv->journal = open(path, O_APPEND | O_CREAT | (sv->resume ? O_RDWR : O_WRONLY | O_TRUNC),
			   0666);
	if (sv->journal < 0)
		die(1, "%s: %s", path, strerror(errno));
	if (sv->resume && ftruncate(sv->journal, journal_read(sv)))
		die(1, "%s: %s", path, strerror(errno));
	/* "step T", then a space and at most 11 characters a token */
	sv->jline_size = 16 + 12 * (size_t)sv->o.seqs;
	sv->jline = xcalloc(sv->jline_size, 1);
}

/* Step t's line, in one write(2): a killed run leaves whole lines, then
 * at most one partial line. */
static void journal_step(struct serve *sv, unsigned t)
{
	char *p = sv->jline, *end = p + sv->jline_size;
	ssize_t n;
	unsigned i;

	p += snprintf(p, (size_t)(end - p), "step %u", t);
	for (i = 0; i < sv->o.seqs; i++)
		if (active(&sv->seqs[i], t))
			p += snprintf(p, (size_t)(end - p), " %d",
				      (int)sv->seqs[i].out[t - sv->seqs[i].join]);
	*p++ = '\n';
	n = write(sv->journal, sv->jline, (size_t)(p - sv->jline));
	if (n != p - sv->jline)
		die(1, "%s: %s", sv->o.journal, n < 0 ? strerror(errno) : "short write");
}

static void group_fini(struct group *g)
{
	unsigned layer;

	if (g->exec)
		CU(cudaGraphExecDestroy(g->exec));
	if (g->max_rows) {
		for (layer = 0; layer < g->sv->o.layers; layer++) {
			CU(cudaFree(g->ids[layer]));
			CU(cudaFree(g->weights[layer]));
		}
		CU(cudaFree(g->d_in));
		CU(cudaFree(g->hidden));
		CU(cudaFree(g->key));
		CU(cudaFree(g->value));
		CU(cudaFree(g->logits));
		CU(cudaFree(g->source_rows));
		CU(cudaFree(g->tokens));
		CU(cudaFreeHost(g->h_in));
		CU(cudaFreeHost(g->h_tokens));
	}
	CU(cudaEventDestroy(g->done));
	CU(cudaStreamDestroy(g->stream));
	free(g->ids);
	free(g->weights);
	free(g->seq_of_row);
}

int main(int argc, char **argv)
{
	static struct serve sv;
	const struct opts *o = &sv.o;
	const char *manifest = getenv("MOEFT_RESTORE_MANIFEST");
	uint64_t hash, ntokens;
	uint32_t crc;
	unsigned t, i;
	void *libcuda;
	int gi;

	parse_opts(argc, argv, &sv.o);
	if (manifest) {
		if (!o->journal)
			bad_usage("MOEFT_RESTORE_MANIFEST is set: resuming needs --journal", "");
		t = manifest_resume_step(manifest);
		sv.resume = t < o->steps ? t : o->steps;
	}
	schedule_init(&sv);
	if (o->journal)
		journal_open(&sv);
	if (o->truth)
		truth_open(&sv);
	CU(cudaSetDevice(0));
	for (gi = 0; gi < NGROUPS; gi++)
		group_init(&sv, (unsigned)gi);
	pool_init(&sv);
	sv.scale = dev_alloc(sizeof(float));
	CU(cudaMemcpy(sv.scale, &(float){ 1.0f }, sizeof(float), cudaMemcpyHostToDevice));
	libcuda = triton_init(&sv);
	for (gi = 0; gi < NGROUPS && o->graph; gi++)
		if (sv.g[gi].max_rows)
			graph_init(&sv.g[gi]);
	if (o->threads == 2) {
		pthread_barrier_init(&sv.start, NULL, NGROUPS + 1);
		pthread_barrier_init(&sv.finish, NULL, NGROUPS + 1);
		for (gi = 0; gi < NGROUPS; gi++)
			if (pthread_create(&sv.g[gi].thread, NULL, worker, &sv.g[gi]))
				die(1, "pthread_create failed");
	}

	/* What a recovery hook would find in the pool before it resumes. */
	if (sv.truth && sv.resume)
		fprintf(sv.truth, "resume-kv %08x\n", (unsigned)pool_crc(&sv));
	for (t = 0; t < o->steps; t++) {
		schedule_step(&sv, t);
		/* A step before the resume point: its blocks are taken and
		 * freed as the crashed run did, its tokens are the journal's. */
		if (t < sv.resume)
			continue;
		run_step(&sv);
		for (gi = 0; gi < NGROUPS; gi++)
			for (i = 0; i < sv.g[gi].rows; i++) {
				struct seq *s = &sv.seqs[sv.g[gi].seq_of_row[i]];

				s->out[t - s->join] = sv.g[gi].h_tokens[i];
			}
		if (o->journal)
			journal_step(&sv, t);
		if (sv.truth)
			truth_step(&sv, t);
	}

	if (o->threads == 2) {
		sv.stop = 1;
		pthread_barrier_wait(&sv.start);
		for (gi = 0; gi < NGROUPS; gi++)
			pthread_join(sv.g[gi].thread, NULL);
		pthread_barrier_destroy(&sv.start);
		pthread_barrier_destroy(&sv.finish);
	}
	crc = pool_crc(&sv);
	hash = token_hash(&sv, &ntokens);
	if (sv.truth)
		truth_close(&sv, hash);
	printf("serve: mode=%s threads=%u kv-layout=%s layers=%u experts=%u topk=%u hidden=%u "
	       "seqs=%u steps=%u kv-blocks=%u tokens=%" PRIu64 " kv-crc=%08x token-hash=%016" PRIx64
	       "\n",
	       o->graph ? "graph" : "eager", o->threads, o->kv_one ? "one" : "per-layer",
	       o->layers, o->experts, o->topk, o->hidden, o->seqs, o->steps, sv.nblocks, ntokens,
	       (unsigned)crc, hash);

	for (gi = 0; gi < NGROUPS; gi++) {
		group_fini(&sv.g[gi]);
		free(sv.ids_copy[gi]);
		free(sv.weights_copy[gi]);
	}
	for (i = 0; i < sv.npool_alloc; i++)
		CU(cudaFree(sv.pool_alloc[i]));
	CU(cudaFree(sv.scale));
	CU(cudaEventDestroy(sv.kv_ready));
	dlclose(libcuda);
	for (i = 0; i < o->seqs; i++) {
		free(sv.seqs[i].out);
		free(sv.seqs[i].blocks);
	}
	free(sv.seqs);
	free(sv.free_blocks);
	free(sv.pool_alloc);
	free(sv.pool);
	free(sv.pool_copy);
	free(sv.jline);
	if (o->journal && close(sv.journal))
		die(1, "%s: %s", o->journal, strerror(errno));
	return fflush(stdout) ? 1 : 0;
}

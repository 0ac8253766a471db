/*
 * dispatch.c - the shim's events, handed on (dispatch.h).
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "allocs.h"
#include "capturing.h"
#include "dispatch.h"
#include "fingerprint.h"
#include "modules.h"
#include "msg.h"
#include "resume.h"
#include "shim.h"
#include "start.h"
#include "triton.h"
#include "wal.h"

/* The shim's numbers are the log's (enums of their own, so compared as int). */
#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(SHIM_ALLOC_CUDA_MALLOC, ALLOC_API_CUDA_MALLOC) &&
	       SAME(SHIM_ALLOC_CUDA_MALLOC_ASYNC, ALLOC_API_CUDA_MALLOC_ASYNC) &&
	       SAME(SHIM_ALLOC_CUDA_MALLOC_FROM_POOL_ASYNC, ALLOC_API_CUDA_MALLOC_FROM_POOL_ASYNC) &&
	       SAME(SHIM_ALLOC_CUDA_MALLOC_MANAGED, ALLOC_API_CUDA_MALLOC_MANAGED) &&
	       SAME(SHIM_ALLOC_CU_MEM_ALLOC, ALLOC_API_CU_MEM_ALLOC) &&
	       SAME(SHIM_ALLOC_CU_MEM_ALLOC_ASYNC, ALLOC_API_CU_MEM_ALLOC_ASYNC) &&
	       SAME(SHIM_ALLOC_CU_MEM_ALLOC_FROM_POOL_ASYNC, ALLOC_API_CU_MEM_ALLOC_FROM_POOL_ASYNC),
	       "allocation APIs");
_Static_assert(SAME(SHIM_LOG_ERROR, WAL_LOG_ERROR) && SAME(SHIM_LOG_WARN, WAL_LOG_WARN) &&
	       SAME(SHIM_LOG_INFO, WAL_LOG_INFO) && SAME(SHIM_LOG_DEBUG, WAL_LOG_DEBUG),
	       "message levels");
#undef SAME
_Static_assert(KID_MAX_PARAMS == RULE_MAX_PARAMS, "the cache keeps every size a rule reads");
_Static_assert(TRITON_MAX_ARGS == RULE_MAX_PARAMS && TRITON_ELEM_MAX == RULE_ELEM_MAX,
	       "a Triton signature places every name a rule lists");

/* Kernels a triton= rule is placed on (one per compiled specialization). */
#define PLACED_MAX 256

/* A triton= rule placed on one kernel: the shim's rule number for it is
 * prof->count + its index. */
struct placed {
	int origin;                  /* the profile's rule */
	struct rule rule;            /* its pN are the kernel's parameters */
};

static struct {
	const struct profile *prof;
	int kv_selectors;
	atomic_ullong *hits;         /* per rule */
	atomic_ullong graph_launches, capture_begin, capture_end;
	/* Written under the shim's first-launch lock, each entry before the
	 * kernel cache publishes the number that leads to it. */
	struct placed *placed;
	unsigned nplaced;
} dp;

int dispatch_init(const struct profile *prof, int kv_selectors)
{
	dp.prof = prof;
	dp.kv_selectors = kv_selectors;
	dp.hits = calloc(prof->count ? prof->count : 1, sizeof *dp.hits);
	for (unsigned i = 0; i < prof->count && dp.hits && !dp.placed; i++)
		if (prof->rules[i].ntriton && !(dp.placed = calloc(PLACED_MAX, sizeof *dp.placed)))
			dispatch_fini();
	return dp.hits ? 0 : -1;
}

void dispatch_fini(void)
{
	free(dp.hits);
	free(dp.placed);
	dp.hits = NULL;
	dp.placed = NULL;
	dp.nplaced = 0;
}

/* The profile's rule behind the shim's rule number n, and what to evaluate. */
static int origin(int n)
{
	return (unsigned)n < dp.prof->count ? n : dp.placed[n - (int)dp.prof->count].origin;
}

static const struct rule *evaluated(int n)
{
	return (unsigned)n < dp.prof->count ? &dp.prof->rules[n]
					     : &dp.placed[n - (int)dp.prof->count].rule;
}

/* Rule `rule` (triton=) placed on kernel `name` of module (NULL: not
 * known), into the next free entry of dp.placed, which the caller keeps
 * (dp.nplaced++) once the placed rule fits: its number, or -1 with why. */
static int place(int rule, const char *name, void *module, const uint32_t *sizes,
		 unsigned nparams, char *why, size_t len)
{
	const struct rule *r = &dp.prof->rules[rule];
	char dir[PATH_MAX], elem[TRITON_MAX_ARGS][TRITON_ELEM_MAX];
	int8_t map[TRITON_MAX_ARGS];
	struct triton_image img;
	struct placed *p;

	if (dp.nplaced == PLACED_MAX) {
		snprintf(why, len, "more than %d Triton kernels placed", PLACED_MAX);
		return -1;
	}
	p = &dp.placed[dp.nplaced];
	if (triton_cache_dir(dir, sizeof dir) < 0) {
		snprintf(why, len, "no Triton cache directory (TRITON_CACHE_DIR, TRITON_HOME "
			 "and HOME unset)");
		return -1;
	}
	/* Without the cubin it came from, a sibling or an older version in
	 * the cache could stand in for it: refused. */
	if (modules_image(module, &img) < 0) {
		snprintf(why, len, "the cubin it was loaded from is not known (not loaded by "
			 "cuModuleLoadData)");
		return -1;
	}
	if (triton_place(dir, name, &img, sizes, nparams, r->triton, r->ntriton, map, elem, why,
			 len) < 0 ||
	    rule_place(r, map, (const char (*)[RULE_ELEM_MAX])elem, &p->rule, why, len) < 0)
		return -1;
	p->origin = rule;
	return (int)(dp.prof->count + dp.nplaced);
}

/* Module images matter only to triton= rules: without one, no CRC of
 * every image the program loads. */
static void ev_module(void *module, const void *image)
{
	if (dp.placed)
		modules_event(module, image);
}

static void ev_alloc(unsigned api, uint64_t base, uint64_t size, uint64_t fingerprint)
{
	struct alloc_info a;

	if (allocs_new(api, base, size, fingerprint, &a) < 0)
		return;
	if (dp.kv_selectors)
		capture_new_alloc(&a);
	if (resume_active())
		resume_alloc(&a);
}

static void ev_map(uint64_t va, uint64_t size, uint64_t handle, uint64_t fingerprint)
{
	struct alloc_info a;

	allocs_map(va, size, handle, fingerprint, &a);
}

static int ev_claim(const char *name, const uint32_t *sizes, unsigned nparams,
		    int params_known, void *module)
{
	int rule = profile_match(dp.prof, name);
	char label[64], why[512];

	if (rule < 0)
		return -1;
	profile_rule_label(dp.prof, rule, label, sizeof label);
	/* Without sizes a rule could read past a parameter: never. */
	if (!params_known) {
		msg_log(WAL_LOG_WARN, "rule %s owns kernel %s, but the driver does not report its "
			"parameter sizes; it is not evaluated", label, name);
		return -1;
	}
	if (dp.prof->rules[rule].ntriton &&
	    (rule = place(rule, name, module, sizes, nparams, why, sizeof why)) < 0) {
		msg_log(WAL_LOG_WARN, "rule %s (Triton) cannot place the arguments of kernel %s: "
			"%s; it is not evaluated for it", label, name, why);
		return -1;
	}
	/* A rule gone stale for this build of the kernel reads the wrong
	 * argument: refused before its first launch is read. */
	if (rule_fits(evaluated(rule), sizes, nparams, why, sizeof why) < 0) {
		msg_log(WAL_LOG_WARN, "rule %s does not fit kernel %s: %s; it is not evaluated "
			"for it", label, name, why);
		return -1;
	}
	if ((unsigned)rule >= dp.prof->count)
		dp.nplaced++;	/* the placed rule kept */
	msg_log(WAL_LOG_DEBUG, "kernel %s: rule %s", name, label);
	return rule;
}

/* What a launch leaves for after it succeeded, held by the launching
 * thread: a depth-0 launch never nests in another. */
static _Thread_local struct {
	void *stream;
	int restore;            /* enqueue the restore's copies */
	int capture;            /* append the routing of the hit */
	struct capture_after cap;
} after __attribute__((tls_model("initial-exec")));

static int ev_launch(const struct shim_launch *l)
{
	struct kid_match *m = l->match;
	struct rule_hit hit;
	char label[64];
	int r;

	after.stream = l->stream;
	after.restore = resume_initialiser(l->stream);
	after.capture = 0;
	if (!m || !l->args || atomic_load_explicit(&m->off, memory_order_relaxed))
		return after.restore;
	r = rule_eval(evaluated(m->rule), l->args, m->sizes, m->nparams, l->grid, l->block, &hit);
	if (r > 0) {
		atomic_fetch_add_explicit(&dp.hits[origin(m->rule)], 1, memory_order_relaxed);
		after.capture = capture_hit(origin(m->rule), &hit, l->stream, &after.cap);
		return after.capture | after.restore;
	}
	if (r < 0 && !atomic_exchange(&m->off, 1))
		msg_log(WAL_LOG_WARN, "rule %s does not fit kernel %s (it reads a parameter the "
			"kernel lacks or holds a bad value); no longer evaluated for it",
			profile_rule_label(dp.prof, origin(m->rule), label, sizeof label), m->name);
	return after.restore;
}

static void ev_launched(void)
{
	if (after.restore)
		resume_after(after.stream);
	if (after.capture)
		capture_after(&after.cap);
}

static void ev_graph_launch(void *stream)
{
	atomic_fetch_add_explicit(&dp.graph_launches, 1, memory_order_relaxed);
	capture_graph_launch(stream);
}

static void ev_capture(int begin, void *stream)
{
	atomic_fetch_add_explicit(begin ? &dp.capture_begin : &dp.capture_end, 1,
				  memory_order_relaxed);
	if (begin)
		capture_began(stream);
}

const struct shim_events shim_events_above = {
	.start = preload_start,
	.callsite = fingerprint_callsite,
	.alloc = ev_alloc,
	.free = allocs_free,
	.map = ev_map,
	.unmap = allocs_unmap,
	.module = ev_module,
	.claim = ev_claim,
	.launch = ev_launch,
	.launched = ev_launched,
	.graph_launch = ev_graph_launch,
	.capture = ev_capture,
	.sync = capture_sync,
	.log = msg_line,
};

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)

void dispatch_stats(struct dispatch_stats *st)
{
	st->graph_launches = LD(dp.graph_launches);
	st->capture_begin = LD(dp.capture_begin);
	st->capture_end = LD(dp.capture_end);
}

unsigned long long dispatch_rule_hits(unsigned rule)
{
	return LD(dp.hits[rule]);
}

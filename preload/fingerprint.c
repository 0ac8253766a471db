/*
 * fingerprint.c - call-site fingerprints (fingerprint.h).
 */
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "fingerprint.h"
#include "unwind.h"

#define FP_MAX_SKIP 16u
#define FP_MODULES 4096u        /* executable segments of loaded objects */
#define FP_CACHE 1024u          /* raw stack -> fingerprint, direct mapped */

#define FNV_BASIS UINT64_C(0xcbf29ce484222325)
#define FNV_PRIME UINT64_C(0x100000001b3)

struct fp_module {
	uint64_t start, end;    /* an executable PT_LOAD segment */
	uint64_t bias;          /* load address: frame offsets are ip - bias */
	uint64_t name;          /* FNV-1a state after the object's basename */
};

struct dl_gen {
	unsigned long long adds, subs;
};

/* One lock for the module table and the cache: taken once per fingerprint,
 * after the unwind, and held for a cache probe or one stack's lookups. */
static struct {
	pthread_mutex_t lock;
	bool built;
	struct dl_gen gen;      /* loader counters the module table reflects */
	unsigned nmod;
	struct fp_module mod[FP_MODULES];
	struct {
		uint64_t raw, fp;
	} cache[FP_CACHE];
} fpc = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t fnv1a(uint64_t h, const void *p, size_t len)
{
	const unsigned char *b = p;

	while (len--)
		h = (h ^ *b++) * FNV_PRIME;
	return h;
}

uint64_t fingerprint_name(const char *name, size_t len)
{
	static const char tag[] = "moeft adapter pool ";

	return fnv1a(fnv1a(FNV_BASIS, tag, sizeof tag - 1), name, len);
}

static uint64_t fnv1a_u64(uint64_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++, v >>= 8)
		h = (h ^ (v & 0xff)) * FNV_PRIME;
	return h;
}

static void read_gen(const struct dl_phdr_info *info, size_t size, struct dl_gen *g)
{
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
		g->adds = info->dlpi_adds;
		g->subs = info->dlpi_subs;
	}
}

/* The counters are the same in every callback: stop after the first. */
static int gen_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	read_gen(info, size, arg);
	return 1;
}

static int module_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *name = info->dlpi_name ? info->dlpi_name : "", *slash;
	uint64_t h;

	read_gen(info, size, arg);
	if ((slash = strrchr(name, '/')))
		name = slash + 1;
	h = fnv1a(FNV_BASIS, name, strlen(name));
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		if (fpc.nmod == FP_MODULES)
			return 1;       /* frames in the rest count as unknown */
		fpc.mod[fpc.nmod++] = (struct fp_module){
			.start = info->dlpi_addr + ph->p_vaddr,
			.end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz,
			.bias = info->dlpi_addr,
			.name = h,
		};
	}
	return 0;
}

/* Rebuild the module table (by start address) and empty the cache, whose
 * raw addresses may now belong to other objects. */
static void rebuild_modules(void)
{
	struct fp_module m;
	unsigned gap, i, j;

	fpc.nmod = 0;
	dl_iterate_phdr(module_cb, &fpc.gen);
	for (gap = fpc.nmod / 2; gap > 0; gap /= 2)     /* shellsort: no malloc */
		for (i = gap; i < fpc.nmod; i++) {
			m = fpc.mod[i];
			for (j = i; j >= gap && fpc.mod[j - gap].start > m.start; j -= gap)
				fpc.mod[j] = fpc.mod[j - gap];
			fpc.mod[j] = m;
		}
	memset(fpc.cache, 0, sizeof fpc.cache);
	fpc.built = true;
}

static uint64_t frame_hash(uint64_t ip)
{
	unsigned lo = 0, hi = fpc.nmod, mid;
	/* A return address can sit just past its function (a call to a
	 * noreturn function ends it): look up the call instruction's byte. */
	uint64_t a = ip - 1;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (fpc.mod[mid].start <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || a >= fpc.mod[lo - 1].end)
		return fnv1a(FNV_BASIS, "?", 1);
	return fnv1a_u64(fpc.mod[lo - 1].name, ip - fpc.mod[lo - 1].bias);
}

uint64_t fingerprint_callsite(unsigned skip)
{
	void *ip[1 + FP_MAX_SKIP + FP_FRAMES];
	struct dl_gen gen = { 0, 0 };
	uint64_t raw, fp;
	int n, first;

	if (skip > FP_MAX_SKIP)
		skip = FP_MAX_SKIP;
	first = 1 + (int)skip;  /* ip[0] is in this function */
	n = unwind_backtrace(ip, first + (int)FP_FRAMES);
	if (n < first)
		n = first;
	raw = (uint64_t)(n - first);
	for (int i = first; i < n; i++)
		raw = (raw ^ (uintptr_t)ip[i]) * UINT64_C(0x9e3779b97f4a7c15);
	if (!(raw = mix64(raw)))
		raw = 1;        /* 0 marks an empty cache slot */

	/* After the unwind: every object holding one of our frames was loaded
	 * before these counters were read, so a table that matches them has it. */
	dl_iterate_phdr(gen_cb, &gen);

	pthread_mutex_lock(&fpc.lock);
	if (!fpc.built || gen.adds != fpc.gen.adds || gen.subs != fpc.gen.subs)
		rebuild_modules();
	if (fpc.cache[raw % FP_CACHE].raw == raw) {
		fp = fpc.cache[raw % FP_CACHE].fp;
	} else {
		fp = FNV_BASIS;
		for (int i = first; i < n; i++)
			fp = fnv1a_u64(fp, frame_hash((uintptr_t)ip[i]));
		fpc.cache[raw % FP_CACHE].raw = raw;
		fpc.cache[raw % FP_CACHE].fp = fp;
	}
	pthread_mutex_unlock(&fpc.lock);
	return fp;
}

/*
 * real.c - the real CUDA functions behind our wrappers, and the name
 * lookups behind the dlsym and cuGetProcAddress interposition; all of it
 * generated from hooks.def.
 *
 * Resolution is lazy, once per symbol, lock-free: the first call that needs
 * a symbol looks it up and publishes it with a compare-and-swap (racing
 * threads find the same function; the first store wins).  A driver entry
 * point the application looks up itself (dlsym on libcuda's handle,
 * cuGetProcAddress) is published by that lookup when it comes first, so the
 * wrapper calls what the application would have called.  Otherwise:
 *
 *   runtime  dlvsym(RTLD_NEXT, name, "libcudart.so.13"), then the same on
 *            dlopen("libcudart.so.13", RTLD_NOLOAD): PyTorch and others
 *            load cudart RTLD_LOCAL, out of RTLD_NEXT's sight (the twins
 *            of hooks.h the same with libcudart.so.12);
 *   driver   dlsym on dlopen("libcuda.so.1", RTLD_NOLOAD), then RTLD_NEXT
 *            (a program linked with -lcuda).
 *
 * A runtime entry found neither way may still be the caller's: a wheel's
 * private, renamed copy of the runtime (auditwheel's libcudart-HASH.so.12)
 * keeps the version node, so its users bind to our wrapper, yet it is
 * loaded privately under another soname.  Then the lookup is made in the
 * calling object's own scope (its dependencies, which never hold us), and
 * the copy it finds serves that runtime's later lookups too.
 *
 * A symbol found nowhere is logged once; its wrapper returns the API's
 * "not initialized" error.  A lookup that answers with our own wrapper (a
 * handle whose scope includes us) never counts as the real symbol.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "hooks.h"

/* ---- prototypes checked against the toolkit's headers ------------------ */

/* PFN_<query>_v<version>[_ptsz]: built by pasting, so that query (a macro
 * in cuda.h for cuMemAlloc, cuMemFree, cuGetProcAddress) is never expanded. */
#define SHIM_PFN_ANY(pfn) pfn
#define SHIM_PFN_LEGACY(pfn) pfn
#define SHIM_PFN_PTSZ(pfn) pfn##_ptsz

#define RT(name, decl, kind, params, args)						\
	_Static_assert(__builtin_types_compatible_p(__typeof__(&decl), cudaError_t(*) params), \
		       #name ": prototype differs from " #decl);
#define DRV(name, query, version, flavor, kind, params, args)				\
	_Static_assert(__builtin_types_compatible_p(SHIM_PFN_##flavor(PFN_##query##_v##version), \
						    CUresult(*) params),		\
		       #name ": prototype differs from cudaTypedefs.h");
#define RT_USE(name, params)								\
	_Static_assert(__builtin_types_compatible_p(__typeof__(&name), cudaError_t(*) params), \
		       #name ": prototype differs from cuda_runtime_api.h");
#define DRV_USE(name, params)								\
	_Static_assert(__builtin_types_compatible_p(__typeof__(&name), CUresult(*) params), \
		       #name ": prototype differs from cuda.h");
#include "hooks.def"
#undef RT
#undef DRV
#undef RT_USE
#undef DRV_USE

/* ---- tables -------------------------------------------------------------- */

enum { LIB_RT = 1, LIB_RT12, LIB_DRV };

static const char *const sonames[] = {
	[LIB_RT] = SHIM_CUDART_SONAME, [LIB_RT12] = SHIM_CUDART12_SONAME,
	[LIB_DRV] = SHIM_CUDA_SONAME,
};
enum { FLAVOR_ANY = 0, FLAVOR_LEGACY = 1, FLAVOR_PTSZ = 2 };

struct sym {
	const char *name;
	unsigned char lib;
	unsigned char exported;
	unsigned short twin;	/* a runtime entry's libcudart.so.12 twin */
};

static const struct sym syms[SHIM_COUNT] = {
#define RT(name, decl, kind, params, args)						\
	[SHIM_##name] = { #name, LIB_RT, 1, SHIM_##name##_rt12 },			\
	[SHIM_##name##_rt12] = { #name, LIB_RT12, 0, 0 },
#define DRV(name, query, version, flavor, kind, params, args) [SHIM_##name] = { #name, LIB_DRV, 1, 0 },
#define RT_USE(name, params)								\
	[SHIM_##name] = { #name, LIB_RT, 0, SHIM_##name##_rt12 },			\
	[SHIM_##name##_rt12] = { #name, LIB_RT12, 0, 0 },
#define DRV_USE(name, params) [SHIM_##name] = { #name, LIB_DRV, 0, 0 },
#include "hooks.def"
#undef RT
#undef DRV
#undef RT_USE
#undef DRV_USE
};

/* What cuGetProcAddress returns for which (query, version, flags). */
struct proc {
	const char *query;
	int version;
	int flavor;
	unsigned id;
};

static const struct proc procs[] = {
#define RT(name, decl, kind, params, args)
#define DRV(name, query, version, flavor, kind, params, args)				\
	{ #query, version, FLAVOR_##flavor, SHIM_##name },
#define RT_USE(name, params)
#define DRV_USE(name, params)
#include "hooks.def"
#undef RT
#undef DRV
#undef RT_USE
#undef DRV_USE
};

_Atomic(void *) shim_reals[SHIM_COUNT];
static atomic_bool missing_said[SHIM_COUNT];
/* Per runtime: a privately loaded copy found through a caller (a handle
 * held for good: the copy was loaded, and stays). */
static _Atomic(void *) private_rt[LIB_DRV];

/* ---- resolution ---------------------------------------------------------- */

static void *in_loaded(const char *soname, const char *name, const char *version)
{
	void *h = dlopen(soname, RTLD_NOLOAD | RTLD_LAZY), *p;

	if (!h)
		return NULL;
	p = version ? dlvsym(h, name, version) : shim_real_dlsym(h, name);
	/* Loaded before we asked, so it stays loaded: drop our reference. */
	dlclose(h);
	return p;
}

static void *find(unsigned id)
{
	const char *name = syms[id].name;
	void *p;

	if (syms[id].lib != LIB_DRV) {
		const char *rt = sonames[syms[id].lib];
		void *copy = atomic_load_explicit(&private_rt[syms[id].lib], memory_order_acquire);

		p = dlvsym(RTLD_NEXT, name, rt);
		if (!p)
			p = in_loaded(rt, name, rt);
		if (!p && copy)
			p = dlvsym(copy, name, rt);
	} else {
		p = in_loaded(SHIM_CUDA_SONAME, name, NULL);
		if (!p)
			p = shim_real_dlsym(RTLD_NEXT, name);
	}
	return p == shim_wrapper(id) ? NULL : p;
}

/* Publish p as the real id unless one is there already; return the one
 * that is. */
static void *publish(unsigned id, void *p)
{
	void *expected = NULL;

	if (atomic_compare_exchange_strong_explicit(&shim_reals[id], &expected, p,
						    memory_order_acq_rel, memory_order_acquire))
		return p;
	return expected;
}

/* The real id if it can be found now, without a word: for comparisons. */
static void *known(unsigned id)
{
	void *p = atomic_load_explicit(&shim_reals[id], memory_order_acquire);

	if (!p && (p = find(id)))
		p = publish(id, p);
	return p;
}

void *shim_probe(unsigned id)
{
	return known(id);
}

/* Runtime entry id as the object holding caller (a code address) would
 * have bound it without us: from that object's own scope.  The runtime
 * found there is kept for this runtime's other entries. */
static void *from_caller(unsigned id, const void *caller)
{
	const char *rt = sonames[syms[id].lib];
	void *h, *copy, *none = NULL, *p = NULL;
	Dl_info who, def;

	if (!caller || !dladdr(caller, &who) || !who.dli_fname || !who.dli_fname[0] ||
	    !(h = dlopen(who.dli_fname, RTLD_NOLOAD | RTLD_LAZY)))
		return NULL;
	p = dlvsym(h, syms[id].name, rt);
	dlclose(h);
	if (!p || p == shim_wrapper(id) || !dladdr(p, &def) || !def.dli_fname ||
	    !(copy = dlopen(def.dli_fname, RTLD_NOLOAD | RTLD_LAZY)))
		return NULL;
	if (atomic_compare_exchange_strong(&private_rt[syms[id].lib], &none, copy))
		shim_log(SHIM_LOG_INFO, "%s's calls to %s go to %s, its private copy of the runtime",
			 who.dli_fname, rt, def.dli_fname);
	else
		dlclose(copy);
	return p;
}

void *shim_resolve_for(unsigned id, const void *caller)
{
	void *p = known(id);

	if (!p && syms[id].lib != LIB_DRV && (p = from_caller(id, caller)))
		p = publish(id, p);
	if (!p && !atomic_exchange_explicit(&missing_said[id], 1, memory_order_relaxed))
		shim_log(SHIM_LOG_ERROR, "cannot find the real %s in %s; calls to it fail", syms[id].name,
		       sonames[syms[id].lib]);
	return p;
}

void *shim_resolve(unsigned id)
{
	return shim_resolve_for(id, NULL);
}

/*
 * The driver is one library per process: whatever a lookup finds for a
 * driver symbol is the real one (cuGetProcAddress may return another
 * address than the export for the same entry point; both are the driver's).
 * A process may hold several runtimes (libcudart.so.12 beside 13, or a
 * private copy): only one that a wrapper of ours forwards to may be wrapped,
 * by that wrapper.
 * A handle whose scope includes libmoeft.so finds our wrapper itself.
 */
static void *adopt(unsigned id, void *p, void *mine)
{
	if (!p || p == shim_wrapper(id))
		return p;
	if (syms[id].lib == LIB_DRV) {
		publish(id, p);
		return shim_wrapper(id);
	}
	return p == mine ? shim_wrapper(id) : p;
}

void *shim_dlsym(unsigned id, void *handle)
{
	void *mine = NULL, *mine12 = NULL, *p;

	/* Our own lookups first: the caller's must be the last to set dlerror. */
	if (syms[id].lib == LIB_RT) {
		mine = known(id);
		mine12 = known(syms[id].twin);
	}
	p = shim_real_dlsym(handle, syms[id].name);
	if (p && p == mine12)
		return shim_wrapper(syms[id].twin);
	return adopt(id, p, mine);
}

int shim_export_id(const char *name)
{
	unsigned i;

	/* dlsym is busy (every Python extension module, every ctypes name):
	 * leave quickly for anything that cannot be ours. */
	if (name[0] != 'c' && name[0] != '_')
		return -1;
	for (i = 0; i < SHIM_COUNT; i++)
		if (syms[i].exported && strcmp(syms[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* ---- cuGetProcAddress ---------------------------------------------------- */

/*
 * The variant cuGetProcAddress returns for (symbol, version, flags): among
 * the entries for symbol whose flavor fits the flags, the newest one not
 * newer than the version asked for.  -1 when we hook none (cuMemAlloc at
 * 2000 is the 32-bit cuMemAlloc, not ours).
 */
static int proc_variant(const char *symbol, int version, uint64_t flags)
{
	int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
	int best = -1, best_version = -1;
	size_t i;

	for (i = 0; i < sizeof procs / sizeof procs[0]; i++) {
		const struct proc *e = &procs[i];

		if (strcmp(e->query, symbol) != 0 || version < e->version ||
		    (e->flavor == FLAVOR_PTSZ && !ptsz) || (e->flavor == FLAVOR_LEGACY && ptsz))
			continue;
		if (e->version > best_version) {
			best = (int)e->id;
			best_version = e->version;
		}
	}
	return best;
}

/* Ask the real driver which function (symbol, version, flags) names. */
static void *proc_ask(const char *symbol, int version, uint64_t flags)
{
	CUresult (*v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
	CUresult (*v1)(const char *, void **, int, cuuint64_t);
	CUdriverProcAddressQueryResult status;
	void *f, *p = NULL;

	if ((f = known(SHIM_cuGetProcAddress_v2))) {
		memcpy(&v2, &f, sizeof v2);
		if (v2(symbol, &p, version, flags, &status) != CUDA_SUCCESS)
			p = NULL;
	} else if ((f = known(SHIM_cuGetProcAddress))) {
		memcpy(&v1, &f, sizeof v1);
		if (v1(symbol, &p, version, flags) != CUDA_SUCCESS)
			p = NULL;
	}
	return p;
}

/*
 * Our table knows every variant up to the toolkit we were built with
 * (CUDA_VERSION).  A caller asking for a newer version could be handed a
 * variant introduced since, with another ABI: we wrap only if the driver
 * gives the same function for our version, and otherwise pass it on (once
 * logged) rather than call it with the wrong arguments.
 */
void *shim_proc_adopt(const char *symbol, int version, uint64_t flags, void *p)
{
	static atomic_bool newer_said;
	int id = proc_variant(symbol, version, flags);

	if (id < 0)
		return p;
	if (version > CUDA_VERSION && proc_ask(symbol, CUDA_VERSION, flags) != p) {
		if (!atomic_exchange_explicit(&newer_said, 1, memory_order_relaxed))
			shim_log(SHIM_LOG_WARN, "cuGetProcAddress(%s, %d): a variant newer than CUDA %d "
			       "that moeft does not know; calls through it are not seen",
			       symbol, version, CUDA_VERSION);
		return p;
	}
	return adopt((unsigned)id, p, NULL);
}

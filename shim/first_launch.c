/*
 * first_launch.c - a kernel handle's first launch: name it through the real
 * runtime and driver, ask the layer above whether a rule claims it, and
 * cache the decision (kernel_id.h), so that every later launch of the
 * handle costs one lookup.
 */
#include <pthread.h>
#include <string.h>

#include "hooks.h"

/* The runtime keeps a per-thread "last error" that the application reads
 * (PyTorch checks cudaGetLastError after every launch): a failure of ours
 * must not show up there. */
static int func_by_symbol(int rt12, const void *symbol, CUfunction *f)
{
	cudaError_t (*by_symbol)(cudaFunction_t *, const void *);
	cudaError_t (*last)(void);
	void *p = shim_real(rt12 ? SHIM_cudaGetFuncBySymbol_rt12 : SHIM_cudaGetFuncBySymbol);
	int clean = 0;

	if (!p)
		return -1;
	memcpy(&by_symbol, &p, sizeof by_symbol);
	if ((p = shim_real(rt12 ? SHIM_cudaPeekAtLastError_rt12 : SHIM_cudaPeekAtLastError))) {
		memcpy(&last, &p, sizeof last);
		clean = last() == cudaSuccess;
	}
	if (by_symbol(f, symbol) == cudaSuccess)
		return 0;
	if (clean && (p = shim_real(rt12 ? SHIM_cudaGetLastError_rt12 : SHIM_cudaGetLastError))) {
		memcpy(&last, &p, sizeof last);
		last();
	}
	return -1;
}

/* cuFuncGet* and cuKernelGet* differ only in the handle's type. */
static int name_and_params(const void *h, int is_kernel, struct kid_desc *d)
{
	CUresult (*fname)(const char **, CUfunction), (*kname)(const char **, CUkernel);
	CUresult (*fparam)(CUfunction, size_t, size_t *, size_t *);
	CUresult (*kparam)(CUkernel, size_t, size_t *, size_t *);
	CUresult r = CUDA_ERROR_NOT_FOUND;
	size_t i = 0, off, size;
	void *p;

	d->name = NULL;
	d->nparams = 0;
	d->params_known = 0;
	d->module = NULL;
	if (!(p = shim_real(is_kernel ? SHIM_cuKernelGetName : SHIM_cuFuncGetName)))
		return -1;
	memcpy(&fname, &p, sizeof p);
	memcpy(&kname, &p, sizeof p);
	if ((is_kernel ? kname(&d->name, (CUkernel)h) : fname(&d->name, (CUfunction)h)) !=
	    CUDA_SUCCESS || !d->name)
		return -1;
	if ((p = shim_real(is_kernel ? SHIM_cuKernelGetParamInfo : SHIM_cuFuncGetParamInfo))) {
		memcpy(&fparam, &p, sizeof p);
		memcpy(&kparam, &p, sizeof p);
		for (; i < KID_MAX_PARAMS; i++) {
			r = is_kernel ? kparam((CUkernel)h, i, &off, &size)
				      : fparam((CUfunction)h, i, &off, &size);
			if (r != CUDA_SUCCESS)
				break;
			d->sizes[i] = (uint32_t)size;
		}
	}
	d->nparams = (unsigned)i;
	/* The first index past the last parameter is an invalid value. */
	d->params_known = r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE;
	if (!is_kernel && (p = shim_real(SHIM_cuFuncGetModule))) {
		CUresult (*fmodule)(CUmodule *, CUfunction);
		CUmodule mod;

		memcpy(&fmodule, &p, sizeof p);
		if (fmodule(&mod, (CUfunction)h) == CUDA_SUCCESS)
			d->module = mod;
	}
	return 0;
}

static int identify(int kind, int rt12, const void *func, struct kid_desc *d)
{
	CUfunction f;

	if (kind == SHIM_FUNC_KERNEL)
		return name_and_params(func, 1, d);
	if (kind == SHIM_FUNC_DRIVER)
		return name_and_params(func, 0, d);
	if (func_by_symbol(rt12, func, &f) < 0)
		return -1;
	return name_and_params(f, 0, d);
}

/*
 * Serialised, so that the layer above is asked once per handle and two
 * threads never race to insert the same one (first launches are rare:
 * once per kernel).
 */
int shim_first_launch(int kind, int rt12, const void *func, struct kid_match **m)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static atomic_bool full, match_full_said;
	struct kid_desc d;
	int r;

	if (atomic_load_explicit(&full, memory_order_relaxed))
		return KID_NONE;
	pthread_mutex_lock(&lock);
	if ((r = kid_lookup(shim_kids, func, m)) != KID_UNKNOWN)
		goto out;
	memset(&d, 0, sizeof d);
	d.rule = -1;
	if (identify(kind, rt12, func, &d) == 0 && d.name)
		d.rule = shim_events_above.claim(d.name, d.sizes, d.nparams, d.params_known,
						 d.module);
	r = kid_insert(shim_kids, func, &d, m);
	if (r == KID_FULL && d.rule >= 0) {
		if (!atomic_exchange_explicit(&match_full_said, 1, memory_order_relaxed))
			shim_log(SHIM_LOG_WARN, "more than %u kernels owned by rules; %s and later "
				 "ones are not evaluated", shim_kids->max_match, d.name);
		d.rule = -1;
		r = kid_insert(shim_kids, func, &d, m);
	}
	if (r == KID_FULL) {
		atomic_store_explicit(&full, 1, memory_order_relaxed);
		shim_log(SHIM_LOG_WARN, "more than %u distinct kernels; later ones are not "
			 "identified", kid_count(shim_kids));
		r = KID_NONE;
	}
out:
	pthread_mutex_unlock(&lock);
	return r;
}

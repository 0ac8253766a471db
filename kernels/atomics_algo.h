/*
 * atomics_algo.h - the memory primitives of the shared algorithm texts.
 *
 * capture_algo.h and kvsnap_algo.h are each one text for two compilers:
 * nvcc compiles them as device code into kernels/capture.cu, a C compiler
 * as the host references.  Only these primitives differ, and they sit side
 * by side below so the mapping can be checked at a glance:
 *
 *   primitive        device (PTX)                   host (C11)
 *   atom_ld_acquire  ld.acquire.sys                 load, acquire
 *   atom_ld_relaxed  volatile load                  load, relaxed
 *   atom_cas         atomicCAS                      strong CAS, relaxed
 *   atom_add         atomicAdd                      fetch_add, relaxed
 *   atom_or32        atomicOr                       fetch_or, relaxed
 *   atom_and32       atomicAnd                      fetch_and, relaxed
 *   atom_xchg32      atomicExch; __threadfence      exchange, acq_rel
 *   atom_ld32        volatile load                  load, relaxed
 *   atom_max_release __threadfence; atomicMax       CAS loop, release
 *   atom_fence_sys   __threadfence_system           fence, release
 *   atom_publish     __threadfence_system; store    store, release
 *   atom_publish32   the same, 32 bits
 *
 * ALGO_FN declares the texts' functions.  Private to kernels/.
 */
#ifndef MOEFT_ATOMICS_ALGO_H
#define MOEFT_ATOMICS_ALGO_H

#include <stdint.h>

#ifdef __CUDACC__

#define ALGO_FN static __device__ __forceinline__

ALGO_FN uint64_t atom_ld_acquire(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

ALGO_FN uint64_t atom_ld_relaxed(const uint64_t *p)
{
	return *(const volatile uint64_t *)p;
}

ALGO_FN int atom_cas(uint64_t *p, uint64_t expect, uint64_t desired)
{
	return atomicCAS((unsigned long long *)p, expect, desired) == expect;
}

/* The value before the add. */
ALGO_FN uint64_t atom_add(uint64_t *p, uint64_t v)
{
	return atomicAdd((unsigned long long *)p, v);
}

ALGO_FN void atom_or32(uint32_t *p, uint32_t v)
{
	atomicOr(p, v);
}

ALGO_FN void atom_and32(uint32_t *p, uint32_t v)
{
	atomicAnd(p, v);
}

/* The value before; the fence orders the exchange before the reads that
 * follow it in this thread (and, past a __syncthreads, in its block). */
ALGO_FN uint32_t atom_xchg32(uint32_t *p, uint32_t v)
{
	uint32_t old = atomicExch(p, v);

	__threadfence();
	return old;
}

ALGO_FN uint32_t atom_ld32(const uint32_t *p)
{
	return *(const volatile uint32_t *)p;
}

/* Raise *p to v, ordering what this thread saw before it (its acquire
 * loads included) before the new value: the fence makes the relaxed RMW
 * a release. */
ALGO_FN void atom_max_release(uint64_t *p, uint64_t v)
{
	__threadfence();
	atomicMax((unsigned long long *)p, v);
}

/* The fence is cumulative: stores that other threads of the block made
 * before a __syncthreads that this thread passed are ordered too (the
 * pattern cooperative groups' grid sync relies on). */
ALGO_FN void atom_fence_sys(void)
{
	__threadfence_system();
}

ALGO_FN void atom_publish(uint64_t *p, uint64_t v)
{
	atom_fence_sys();
	*(volatile uint64_t *)p = v;
}

ALGO_FN void atom_publish32(uint32_t *p, uint32_t v)
{
	atom_fence_sys();
	*(volatile uint32_t *)p = v;
}

#else

#include <stdatomic.h>

#define ALGO_FN static inline

/* The shared layouts are plain C (nvcc reads them too), so the words are
 * accessed through _Atomic-qualified pointers, as liburing does. */
#define ATOM_P(p) ((_Atomic uint64_t *)(p))

_Static_assert(sizeof(_Atomic uint64_t) == sizeof(uint64_t), "atomic u64 layout");
_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic u32 layout");

ALGO_FN uint64_t atom_ld_acquire(const uint64_t *p)
{
	return atomic_load_explicit((const _Atomic uint64_t *)p, memory_order_acquire);
}

ALGO_FN uint64_t atom_ld_relaxed(const uint64_t *p)
{
	return atomic_load_explicit((const _Atomic uint64_t *)p, memory_order_relaxed);
}

ALGO_FN int atom_cas(uint64_t *p, uint64_t expect, uint64_t desired)
{
	return atomic_compare_exchange_strong_explicit(ATOM_P(p), &expect, desired,
						       memory_order_relaxed,
						       memory_order_relaxed);
}

ALGO_FN uint64_t atom_add(uint64_t *p, uint64_t v)
{
	return atomic_fetch_add_explicit(ATOM_P(p), v, memory_order_relaxed);
}

ALGO_FN void atom_or32(uint32_t *p, uint32_t v)
{
	atomic_fetch_or_explicit((_Atomic uint32_t *)p, v, memory_order_relaxed);
}

ALGO_FN void atom_and32(uint32_t *p, uint32_t v)
{
	atomic_fetch_and_explicit((_Atomic uint32_t *)p, v, memory_order_relaxed);
}

ALGO_FN uint32_t atom_xchg32(uint32_t *p, uint32_t v)
{
	return atomic_exchange_explicit((_Atomic uint32_t *)p, v, memory_order_acq_rel);
}

ALGO_FN uint32_t atom_ld32(const uint32_t *p)
{
	return atomic_load_explicit((const _Atomic uint32_t *)p, memory_order_relaxed);
}

ALGO_FN void atom_max_release(uint64_t *p, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(ATOM_P(p), memory_order_relaxed);

	while (cur < v && !atomic_compare_exchange_weak_explicit(ATOM_P(p), &cur, v,
								 memory_order_release,
								 memory_order_relaxed))
		;
}

ALGO_FN void atom_fence_sys(void)
{
	atomic_thread_fence(memory_order_release);
}

ALGO_FN void atom_publish(uint64_t *p, uint64_t v)
{
	atomic_store_explicit(ATOM_P(p), v, memory_order_release);
}

ALGO_FN void atom_publish32(uint32_t *p, uint32_t v)
{
	atomic_store_explicit((_Atomic uint32_t *)p, v, memory_order_release);
}

#endif

#endif

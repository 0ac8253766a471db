/*
 * fingerprint.h - call-site fingerprints: which line of the application's
 * code made an allocation, the same in every run of the same binaries.
 */
#ifndef MOEFT_FINGERPRINT_H
#define MOEFT_FINGERPRINT_H

#include <stdint.h>

/*
 * A 64-bit hash of the calling thread's stack that is the same in every run
 * of the same binaries, whatever ASLR does: up to FP_FRAMES return
 * addresses, each taken as (basename of its module, offset in the module),
 * FNV-1a'd.  skip 0 starts with the address in the caller where it called
 * this; skip k starts k frames further out, so an interposed cudaMalloc
 * that calls a helper that calls this passes 2 to start at the
 * application's call to cudaMalloc.  An address in no module (JIT code)
 * counts as one fixed marker, as the address itself varies per run.
 *
 * Cost: one libunwind backtrace, a read of the loader's load/unload
 * counters, and a probe of a cache keyed by a 64-bit hash of the raw
 * addresses; only a new stack maps its frames to modules (a table of the
 * executable segments of every loaded object, rebuilt when the counters
 * move).  Measured with a 24-deep stack: 0.3-0.55 us cached, of which the
 * unwind is 0.3-0.45; 0.65-1.1 us uncached.  Thread-safe (one mutex, not
 * held during the unwind); not async-signal-safe; no malloc of its own.
 *
 * Native frames only: two Python call sites reach the allocator through
 * the same C frames of the interpreter and get the same fingerprint; the
 * ordinal then tells their allocations apart.
 */
#define FP_FRAMES 16u
uint64_t fingerprint_callsite(unsigned skip);

/* The fingerprint of memory an engine adapter names (moeft_kv_pool): the
 * same name, the same in every process, and never a call site's. */
uint64_t fingerprint_name(const char *name, size_t len);

/* A 64-bit finaliser (MurmurHash3's fmix64): every input bit moves every
 * output bit, for hash tables keyed by fingerprints. */
static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	x *= UINT64_C(0xc4ceb9fe1a85ec53);
	return x ^ (x >> 33);
}

#endif

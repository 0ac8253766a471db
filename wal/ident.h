/*
 * ident.h - the identity of a device allocation across processes.
 *
 * Addresses differ from one run to the next; what stays is the call site
 * that made the allocation (its fingerprint), its size, and its ordinal
 * among the live allocations of equal fingerprint and size.  The log's
 * ALLOC records (record.h), the KV store's pools (kvstore.h) and restore
 * mode's plan (preload/plan.h) each carry these three; whether two of them
 * name the same allocation is decided here only.
 */
#ifndef MOEFT_IDENT_H
#define MOEFT_IDENT_H

#include <stdint.h>

struct alloc_ident {
	uint64_t fingerprint;   /* hash of the call site */
	uint64_t size;          /* bytes */
	uint32_t ordinal;       /* lowest not held by a live allocation of equal
				   fingerprint and size */
};

static inline int alloc_ident_eq(struct alloc_ident a, struct alloc_ident b)
{
	return a.fingerprint == b.fingerprint && a.size == b.size && a.ordinal == b.ordinal;
}

#endif

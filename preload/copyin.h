/*
 * copyin.h - a restore plan's pools into device memory at the speed of
 * the bus.
 *
 * A pool's bytes come from its image (a file restore.h opened) or, with a
 * chunk map (kvmap.h), chunk by chunk from the KV store, each chunk's
 * CRC-32C checked as it is read: a chunk changed since the restore read
 * it fails the copy.  Holes of an image and runs of chunks never written
 * become device memsets, enqueued after the data (copies queued behind
 * them would wait); the data goes through a few pinned buffers per
 * thread, filled with pread by up to COPYIN_THREADS threads while the
 * copy engine drains the ones filled before.  So the bytes read are the
 * live data, the pinned memory is a few buffers whatever the pools' size,
 * and no page of a file is ever mapped (a pageable copy of a mapping
 * faults every page in, at a thirtieth of the bus's speed; a file cut
 * short under a mapping would be a SIGBUS).
 */
#ifndef MOEFT_COPYIN_H
#define MOEFT_COPYIN_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

#define COPYIN_THREADS 8u

struct copyin_stats {
	uint64_t data;      /* bytes copied from the images or the KV store */
	uint64_t live;      /* of them, bytes read from the KV store (pools
			       restored from their chunk maps) */
	uint64_t zero;      /* bytes of holes set to zero on the device */
	double data_s;      /* the data's time: from the reading threads'
			       start to the end of their last copy */
	unsigned threads;   /* that read them */
	int pageable;       /* 1: no pinned memory, pageable buffers instead */
};

/*
 * Copy every device pool of p (each claimed: base set, fd open on its
 * image as restore_plan_load found it, or its chunk map read and the store
 * open as restore_plan_maps left them; host pools are left out) into its
 * allocation, after the work enqueued
 * on stream so far and before the work enqueued there after the return.
 * Returns when every byte of data has been read and copied (the memsets of
 * holes may still run, at the device's speed); *done is an event of all of
 * it for other streams to wait on.  0, or -1 with one line in err (the
 * pool, the offset, the call and its error): the pools then hold anything,
 * and the caller must not resume.
 */
int copyin_pools(const struct restore_plan *p, void *stream, void **done,
		 struct copyin_stats *st, char *err, size_t errlen);

/* Bytes of a claimed device pool's image (the plan's pools[pool]) to copy
 * to a device address. */
struct copyin_range {
	unsigned pool;
	uint64_t offset, length, dev;
};

/*
 * Copy each of the n ranges (inside their pools, whose images or chunk
 * maps are as copyin_pools found them; of a map, the whole chunks that
 * hold a range are read and checked) to its device address, as
 * copyin_pools does:
 * after the work enqueued on stream so far, before the work enqueued there
 * after the return, which comes once every byte has been read and copied
 * (so once that earlier work has ended).  Holes are read as the zeros they
 * are.  0, or -1 with one line in err.
 */
int copyin_ranges(const struct restore_plan *p, const struct copyin_range *r, size_t n,
		  void *stream, char *err, size_t errlen);

#endif

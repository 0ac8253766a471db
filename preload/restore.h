/*
 * restore.h - restore mode: a fresh process gets the KV pools of the
 * crashed one, as of its last committed window.
 *
 * `moeft restore --wal W -- CMD` materialises that state into a directory
 * (manifest.json, one image per KV pool) and starts CMD with
 * MOEFT_RESTORE naming the directory's plan file (plan.h).
 *
 * In CMD the preload matches each new device allocation to a pool of the
 * plan by identity (ident.h), never by address: same call-site
 * fingerprint, size and ordinal among equal ones.  After the application's
 * own initialisation of the pools (such as torch.zeros' fill kernel) and
 * before their first real use, the images are copied in, in stream order
 * (resume.h says when: MOEFT_RESTORE_AT); every other stream waits for the
 * copy before its own first step.  A pool of
 * the plan that no allocation matched by then, or a KV write into an
 * allocation that claimed none, means another model or configuration: the
 * process is stopped with a message naming it.
 */
#ifndef MOEFT_RESTORE_H
#define MOEFT_RESTORE_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

/* Read and parse the plan at path, then open each pool's image (a regular
 * file of exactly the pool's size in the plan's directory, not a link):
 * 0, or -1 with one line in err naming the file, and p empty.  The
 * descriptors stay open for the process's life: the copies (copyin.h),
 * then the reads of host pools and the copies again of device KV
 * (resume.h).  Pools read from the KV store wait for restore_plan_maps. */
int restore_plan_load(const char *path, struct restore_plan *p, char *err, size_t errlen);
/* Once the log is known: read each pool's chunk map (kvmap.h) beside the
 * plan at path, checked against the plan and against the KV store at
 * store_path, which is opened to read (once) when a pool has a map.  0,
 * or -1 with one line in err naming the file (p is left to close). */
int restore_plan_maps(const char *path, const char *store_path, struct restore_plan *p,
		      char *err, size_t errlen);
/* Close what restore_plan_load opened, and free p. */
void restore_plan_close(struct restore_plan *p);

/* A new allocation: claims the plan's first unclaimed pool of the same
 * identity.  Returns the pool, or NULL. */
const struct restore_pool *restore_match(struct restore_plan *p, uint64_t fingerprint,
					 uint64_t size, uint32_t ordinal, uint64_t base);

/* Whether the allocation at base claimed a pool of the plan. */
int restore_claimed(const struct restore_plan *p, uint64_t base);

/* The first pool no allocation claimed, or NULL when all are. */
const struct restore_pool *restore_unmatched(const struct restore_plan *p);

#endif

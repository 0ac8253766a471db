/*
 * restore.h - restore mode: a fresh process gets the KV pools of the
 * crashed one, as of its last committed window.
 *
 * `moeft restore --wal W -- CMD` materialises that state into a directory
 * (manifest.json, one image per KV pool) and starts CMD with
 * MOEFT_RESTORE naming the directory's plan file: a few lines of text,
 *
 *	moeft-restore-plan 1
 *	log LOG_ID                      (16 hex digits)
 *	window ID FIRST_STEP LAST_STEP
 *	pool NO FINGERPRINT SIZE ORDINAL CHUNK_BYTES FILE
 *	...                             (one line per KV pool, FILE in the
 *	                                 plan's directory, no '/')
 *
 * In CMD the preload matches each new device allocation to a pool of the
 * plan by identity, never by address: same call-site fingerprint, size and
 * ordinal among equal ones.  At the first decode step (the step clock's
 * first step, before its first launch, so after the application's own
 * initialisation of the pool, such as torch.zeros' fill kernel, and before
 * its first real use) the images are copied in, in stream order; every
 * other stream waits for the copy before its own first step.  A pool of
 * the plan that no allocation matched by then, or a KV write into an
 * allocation that claimed none, means another model or configuration: the
 * process is stopped with a message naming it.
 */
#ifndef MOEFT_RESTORE_H
#define MOEFT_RESTORE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "kvstore.h"

#define RESTORE_PLAN_MAX (1u << 16)   /* bytes of a plan file */
#define RESTORE_NAME_MAX 64u          /* bytes of an image's file name */

struct restore_pool {
	uint32_t no;                  /* the KV store's pool number */
	uint32_t ordinal;
	uint64_t fingerprint, size, chunk_bytes;
	char file[RESTORE_NAME_MAX];
	const void *image;            /* mapped by restore_plan_load */
	uint64_t base;                /* the matching allocation; 0: none yet */
};

struct restore_plan {
	uint64_t log_id;
	uint64_t window, first_step, last_step;
	unsigned npools;
	struct restore_pool pools[KVS_MAX_POOLS];
};

/* Parse plan text: 0, or -1 with "LINE: what is wrong" in err. */
int restore_plan_parse(const char *text, struct restore_plan *p, char *err, size_t errlen);

/* Read and parse the plan at path, then map each pool's image (a regular
 * file of exactly the pool's size in the plan's directory): 0, or -1 with
 * one line in err naming the file.  Mappings last as long as the process:
 * the copies read them asynchronously. */
int restore_plan_load(const char *path, struct restore_plan *p, char *err, size_t errlen);

/* A new allocation: claims the plan's first unclaimed pool of the same
 * identity.  Returns the pool, or NULL. */
const struct restore_pool *restore_match(struct restore_plan *p, uint64_t fingerprint,
					 uint64_t size, uint32_t ordinal, uint64_t base);

/* Whether the allocation at base claimed a pool of the plan. */
int restore_claimed(const struct restore_plan *p, uint64_t base);

/* The first pool no allocation claimed, or NULL when all are. */
const struct restore_pool *restore_unmatched(const struct restore_plan *p);

#endif

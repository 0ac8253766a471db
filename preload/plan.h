/*
 * plan.h - the restore plan: the file `moeft restore --wal W -- CMD` writes
 * beside the images it materialised, and restore mode (restore.h) reads in
 * CMD.  Writer and parser live here together, so the two cannot drift;
 * no CUDA, so tools link it.
 *
 * A few lines of text, each ending in '\n', fields split by one space:
 *
 *	moeft-restore-plan 1
 *	log LOG_ID
 *	window ID FIRST_STEP LAST_STEP
 *	pool NO FINGERPRINT SIZE ORDINAL CHUNK_BYTES FILE
 *	lost CHUNK
 *	...
 *
 * LOG_ID and FINGERPRINT: exactly 16 lowercase hex digits.  Every other
 * number: decimal digits only (no sign, no space), at most 2^64 - 1,
 * ORDINAL at most 2^32 - 1, NO at most KVS_MAX_POOLS - 1.  FIRST_STEP <=
 * LAST_STEP.  One "pool" line per KV pool of the window (none is a plan
 * too), at most KVS_MAX_POOLS: NO is its number in the KV store, then the
 * identity of the allocation that holds it (ident.h), then its chunk
 * size; SIZE and CHUNK_BYTES are not 0.  FILE: the pool's image in the
 * plan's directory, 1 to RESTORE_NAME_MAX - 1 bytes of [A-Za-z0-9._-],
 * not "." or ".." (so never a path).  No two pools share NO or FILE.
 * A FILE that ends in ".map" is the pool's chunk map (kvmap.h): its bytes
 * are read from the KV store beside the log, not from an image.
 * "lost" lines follow their pool's line (never a map's): the chunks of it
 * the restore found damaged (zeros in the image), each index below the pool's chunk
 * count, increasing, at most RESTORE_LOST_MAX in a plan.  Only an
 * adapter's host pool may have them: its engine serves none of their
 * bytes (moeft_restored_intact), where a device pool's would be copied
 * in as they are.  Nothing else: no blank lines, no comments.  A whole
 * plan is at most RESTORE_PLAN_MAX bytes: its first lines, KVS_MAX_POOLS
 * pool lines and RESTORE_LOST_MAX lost lines, each at its widest.
 */
#ifndef MOEFT_PLAN_H
#define MOEFT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kvmap.h"
#include "kvstore.h"

/* The names moeft restore gives the plan and the manifest in its output
 * directory: restore mode hands CMD the manifest beside the plan it took. */
#define RESTORE_PLAN_NAME "plan"
#define RESTORE_MANIFEST_NAME "manifest.json"
#define RESTORE_NAME_MAX 64u          /* bytes of an image's file name */

/*
 * A server's restore (moeft restore --wal DIR -- CMD over several logs)
 * writes each log's state into OUT/NAME and then OUT/set, the names whose
 * state CMD's processes take, one per line after "moeft-restore-set 1":
 * restore mode takes OUT as a set only with this file, and a process
 * whose log's name it does not list starts fresh.
 */
#define RESTORE_SET_NAME "set"
#define RESTORE_SET_HEAD "moeft-restore-set 1\n"
#define RESTORE_SET_MAX (1u << 20)    /* bytes of the file */

/* The regular file at path (not a link), at most max bytes, read whole
 * into a new buffer with a NUL after it (*len bytes): NULL with one line
 * in err and errno set (ENOENT: there is none) when it cannot be. */
char *restore_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen);

/* Whether the set file's text (NUL-terminated) lists name: 1, 0, or -1
 * when it is no set file (each line a name of [A-Za-z0-9._-], ended). */
int restore_set_lists(const char *text, const char *name);

/* Bytes of a plan file: the version, log and window lines at their widest
 * (21 + 21 + 70), then KVS_MAX_POOLS pool lines at theirs: "pool", NO of 5
 * digits, 16 hex digits, 20, 10 and 20 digits, the longest FILE, six
 * spaces and the newline (4.7 MB). */
#define RESTORE_POOL_LINE_MAX (4u + 5 + 16 + 20 + 10 + 20 + (RESTORE_NAME_MAX - 1) + 6 + 1)
#define RESTORE_LOST_MAX 65536u
#define RESTORE_LOST_LINE_MAX (4u + 1 + 20 + 1)
#define RESTORE_PLAN_MAX (112u + KVS_MAX_POOLS * RESTORE_POOL_LINE_MAX + \
			  RESTORE_LOST_MAX * RESTORE_LOST_LINE_MAX)

struct restore_pool {
	uint32_t no;                  /* the KV store's pool number */
	uint32_t ordinal;
	uint64_t fingerprint, size, chunk_bytes;
	char file[RESTORE_NAME_MAX];
	uint64_t *lost;               /* nlost damaged chunks, increasing */
	uint32_t nlost;
	/* Restore mode's, not the file's: */
	int fd;                       /* the image, opened by restore_plan_load;
					 -1 until then, and for a map */
	uint64_t file_dev, file_ino;  /* the file fd was opened on */
	struct kvmap map;             /* its chunk map, read by restore_plan_maps
					 (map.e NULL: an image, or not yet) */
	uint64_t base;                /* the matching allocation; 0: none yet */
	int host;                     /* it is host memory an adapter
					 registered: read from the image, never
					 copied in */
};

struct restore_plan {
	uint64_t log_id;
	uint64_t window, first_step, last_step;
	unsigned npools;
	struct restore_pool *pools;   /* npools of them (restore_plan_free) */
	/* Restore mode's: the KV store the maps point into, opened to read by
	 * restore_plan_maps when a pool has one (-1: none). */
	int store_fd;
	uint64_t store_dev, store_ino, store_bytes;
};

/* Whether a plan's FILE names a chunk map (kvmap.h), not an image. */
int restore_file_is_map(const char *file);

/* Parse plan text (NUL-terminated) into p, whose pools are then allocated
 * (an earlier plan in p must be freed first): 0, or -1 with "line N: what
 * is wrong" in err and p empty.  A line that breaks the syntax is found
 * before two lines that share a pool number or a file; of those, the
 * later one is named. */
int restore_plan_parse(const char *text, struct restore_plan *p, char *err, size_t errlen);

/* Whether pool q lost any chunk of its bytes [offset, offset + length). */
int restore_pool_lost(const struct restore_pool *q, uint64_t offset, uint64_t length);

/* Free the pools of a plan restore_plan_parse filled in (their lost
 * chunks too); p is left empty. */
void restore_plan_free(struct restore_plan *p);

/*
 * The text of plan p into buf, NUL-terminated: its length, or -1 with err
 * saying why: it does not fit in len bytes, or it is no plan (what
 * restore_plan_parse would say of the text, naming the line).  So what is
 * written always parses back to the same fields.  The pools' image and
 * base are not part of it.
 */
int restore_plan_format(const struct restore_plan *p, char *buf, size_t len, char *err,
			size_t errlen);

#endif

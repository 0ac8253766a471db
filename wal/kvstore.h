/*
 * kvstore.h - the KV store: the bytes of KV-pool chunks, beside the log.
 *
 * The log (wal.h) holds routing and small records; KV data is too large to
 * pass through its ring, so it lives in a second file next to it (the
 * log's path + ".kv", kvs_path; on the same medium and NUMA node), written
 * by the same process.  Each KV pool the preload tracks has a region of chunks,
 * and each chunk two slots, so that writing a chunk for the open window
 * never overwrites the copy the last committed window refers to (the
 * commit protocol of shared/DESIGN.md: data, persist, WINDOW record,
 * persist, commit word).
 *
 * A slot carries a header: the id of the window that wrote it (the log's
 * window id, wal_stats.open_window), the chunk's index, length and
 * CRC-32C.  Which slot holds a chunk's state as of committed window C: the
 * slot with the highest window id <= C; if it fails a CRC the chunk is
 * damaged (the older slot is never taken instead: it would restore stale
 * bytes as current).  Only the two newest copies exist, so asking for a
 * window older than the last committed one may find neither.  Slots of
 * windows that never committed are erased when a writer opens the store
 * (kvs_open's first_uncommitted), so a later epoch reusing their window
 * ids cannot mistake them for its own.
 *
 * The store is bound to its log by the log's id: a store of another log
 * (the log was formatted again) is reformatted on open.  Layout and
 * checks: wal/FORMAT.md, "KV store".  Never includes a CUDA header.
 *
 * Pools outlive the process that added them: the next process of the
 * same model gets them back by identity.  Those of other models stay
 * until the writer says no restore can take them any more (kvs_reclaim),
 * which frees their table entries and gives their regions' blocks back.
 */
#ifndef MOEFT_KVSTORE_H
#define MOEFT_KVSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "ident.h"
#include "wal.h"

/* Pool numbers run from 0 to KVS_MAX_POOLS - 1: the pool table fills the
 * store's first 2 MiB (FORMAT.md).  A process's mappings may run out
 * first (a region is a mapping of its own; vm.max_map_count), which
 * kvs_pool reports like any other failure to add a pool. */
#define KVS_MAX_POOLS 32704u

/* A KV pool: the allocation that holds it (ident.h), and its chunk size. */
struct kvs_pool_desc {
	uint64_t fingerprint;   /* allocation call site (rec_alloc.fingerprint) */
	uint64_t size;          /* allocation bytes */
	uint64_t chunk_bytes;   /* power of two, 4 KiB to 1 GiB */
	uint32_t ordinal;       /* rec_alloc.ordinal */
	uint32_t pad;           /* ignored */
};

static inline struct alloc_ident kvs_pool_ident(const struct kvs_pool_desc *d)
{
	return (struct alloc_ident){ d->fingerprint, d->size, d->ordinal };
}

struct kvs;

/* The path of the store beside the log at wal_path: wal_path + ".kv", into
 * out.  0, or -1 (out emptied) when it does not fit in len bytes. */
int kvs_path(const char *wal_path, char *out, size_t len);

/*
 * Open (creating it when missing) the store at path for writing, bound to
 * the log with id log_id (not 0), its pages bound to numa_node (-1: none).
 * A file that is not a store of this log is formatted (a line is logged).
 * Slot headers with window id >= first_uncommitted are erased (durably)
 * before it returns.  0, or a negative wal_status with err->msg saying
 * why: a damaged pool table is refused (WAL_ECORRUPT), never guessed at.
 * Only regular files (tmpfs, DAX filesystems) are supported.  The caller
 * holds the log's writer lock, which covers the store; the store takes
 * its own flock too (WAL_EBUSY).
 *
 * kvs_put may run in several threads at once for distinct chunks, and
 * beside kvs_pool and kvs_reclaim; the same chunk must not be put by two
 * threads at once.
 */
int kvs_open(const char *path, uint64_t log_id, int numa_node, uint64_t first_uncommitted,
	     struct kvs **out, struct wal_error *err);
void kvs_close(struct kvs *s);

/* The pool number of d, which this handle then holds (kvs_reclaim keeps
 * it): an existing pool with the same fingerprint, size, chunk size and
 * ordinal, or a new one, in the lowest free table entry, its region in the
 * first gap between the regions in use that holds it or else at the end
 * of the file (durable when it returns).  0, WAL_EFULL when all
 * KVS_MAX_POOLS entries are in use, WAL_EINVAL for a chunk size or pool
 * size the store cannot hold, or another negative status (the reason is
 * logged). */
int kvs_pool(struct kvs *s, const struct kvs_pool_desc *d, uint32_t *pool_no);

/*
 * Drop every pool this handle has not asked for with kvs_pool since it
 * opened the store: their table entries become free (durably, one store
 * each), then their regions' blocks go back to the filesystem, and the
 * file ends with the last region in use.  The caller's word that no
 * restore can want them: the rule (FORMAT.md, "Reclaim") is that the
 * writer's own epoch has committed a decode window, so the last committed
 * window, the one a restore takes, is this process's, and its pools are
 * the ones it asked for.  No chunk of a dropped pool may be put after
 * this.  Returns the number dropped (one line at info level says how many
 * bytes of KV that was).
 */
unsigned kvs_reclaim(struct kvs *s);

/*
 * Write chunk `chunk` of pool pool_no (1 to chunk-size bytes; the pool's
 * last chunk holds only what is left of the pool) for window `window`:
 * into the slot that does not hold the chunk's newest copy of an earlier
 * window, data first, then the header, each made durable.  Returns 0 with
 * the byte offset of the slot's data in the file (*store_off) and the
 * data's CRC-32C (*crc), computed while copying; either may be NULL.
 * WAL_EINVAL for a pool, chunk, length or window (>= 2^63 - 1) out of range.
 */
int kvs_put(struct kvs *s, uint32_t pool_no, uint64_t chunk, const void *data, uint32_t len,
	    uint64_t window, uint64_t *store_off, uint32_t *crc);

/*
 * Undo kvs_put of chunk `chunk` of pool pool_no for window `window`,
 * whose commit failed (wal_abort): the log gives that window id to its
 * next commit, which must not name these bytes, and the chunk's next copy
 * must go into this slot, not over its committed copy.  The slot is
 * emptied; a chunk with no copy of that window is left as it is.  0, or
 * WAL_EINVAL for a pool or chunk out of range.
 */
int kvs_unput(struct kvs *s, uint32_t pool_no, uint64_t chunk, uint64_t window);

/* ---- Reading (restore, verification) ----------------------------------- */

struct kvs_reader;

struct kvs_pool_info {
	struct kvs_pool_desc d;
	uint64_t nchunks;
	uint64_t off;           /* its region's offset in the file */
};

/* Map a store read-only.  Its content is untrusted: every header is checked
 * before use, and a pool table that fails a check, or whose regions lie
 * past the end of the file, is refused.  expect_log_id != 0: refuse
 * (WAL_ENOTLOG, with a message naming both ids) a store of another log. */
int kvs_reader_open(const char *path, uint64_t expect_log_id, struct kvs_reader **out,
		    struct wal_error *err);
/* The same over a byte image of a store, which must outlive the reader. */
int kvs_reader_open_buf(const void *buf, size_t len, uint64_t expect_log_id,
			struct kvs_reader **out, struct wal_error *err);
void kvs_reader_close(struct kvs_reader *r);

/* One past the highest pool number in use: numbers below it may be free
 * (their pools reclaimed), which kvs_reader_pool says with WAL_EINVAL, as
 * it does for a number out of range. */
unsigned kvs_reader_pools(const struct kvs_reader *r);
int kvs_reader_pool(const struct kvs_reader *r, uint32_t pool_no, struct kvs_pool_info *out);

enum kvs_chunk_state {
	KVS_CHUNK_NONE = 0,     /* no slot of a window <= the one asked for:
				   never written as of the last committed
				   window (its bytes are zeros) */
	KVS_CHUNK_OK = 1,       /* *data, *len, *window, *crc filled */
	KVS_CHUNK_DAMAGED = 2   /* the newest slot of a window <= upto fails
				   its data CRC, or a slot's header fails its
				   CRC (its window is unknown) */
};

/* The state of a chunk as of committed window `upto`: enum kvs_chunk_state,
 * or WAL_EINVAL for a pool not in use or a chunk out of range.  The outputs are set for
 * KVS_CHUNK_OK only; *data points into the mapping (valid until
 * kvs_reader_close). */
int kvs_reader_chunk(const struct kvs_reader *r, uint32_t pool_no, uint64_t chunk,
		     uint64_t upto, const uint8_t **data, uint32_t *len, uint64_t *window,
		     uint32_t *crc);

/* The store's bytes, and the offset in it of bytes kvs_reader_chunk
 * pointed to (what a reader of the file with pread finds there). */
uint64_t kvs_reader_size(const struct kvs_reader *r);
uint64_t kvs_reader_offset(const struct kvs_reader *r, const uint8_t *data);
/* The offset of the header of the slot whose bytes kvs_reader_chunk gave
 * for chunk `chunk` of pool pool_no (data), and the window of its copy:
 * the header's first 8 bytes are the slot's window word (kvformat.h),
 * cleared before a writer changes the slot's bytes and written after.
 * 0, or WAL_EINVAL (not such bytes, or a slot that is no copy). */
int kvs_reader_header(const struct kvs_reader *r, uint32_t pool_no, uint64_t chunk,
		      const uint8_t *data, uint64_t *hdr_off, uint64_t *window);

#endif

/*
 * kvmap.h - a pool's chunk map: where, in the KV store beside the log,
 * each chunk's bytes as of the restored window lie.
 *
 * An online restore (moeft restore --wal W -- CMD) of a device pool writes
 * no image of it: it writes this map, and restore mode in CMD copies the
 * chunks from the store straight into device memory, checking each one's
 * CRC-32C as it reads it (copyin.h).  So the bytes moved are the live
 * chunks, once, whatever the pool's size, and no page is allocated for
 * an image.  The map is tied to the store by the log's id and the window
 * (the store is bound to its log, kvstore.h).  The restarted process's
 * windows reuse the store's slots: bytes read again later (copies again)
 * are taken only while the slot's header still names the copy's window,
 * before and after the read (a writer clears it first and sets it last),
 * and match their CRC.
 *
 * The file, little-endian:
 *
 *	0   "moeftmap"          magic, 8 bytes
 *	8   version             u32, 1
 *	12  pool                u32, the store's pool number
 *	16  log id              u64
 *	24  window              u64, the restored window
 *	32  size                u64, the pool's bytes (not 0)
 *	40  chunk bytes         u64, a power of two, 4 KiB to KVMAP_CHUNK_MAX
 *	48  chunks              u64, size / chunk bytes rounded up
 *	56  CRC-32C of bytes 0-55, u32; then 4 zero bytes
 *	64  an entry per chunk, 32 bytes each:
 *	      store offset u64, length u32, CRC-32C u32 of the bytes,
 *	      header offset u64 (the slot's header in the store),
 *	      window u64 (the window that wrote the copy)
 *	    length 0 (and every other field 0): the chunk is zeros; else 1
 *	    to the chunk's length (the rest of the chunk is zeros), its bytes
 *	    and the header's first 8 wholly below the store's end, the
 *	    window at most the map's
 *	64 + 32 n: CRC-32C of the entries, u32
 *
 * Nothing else; a file of any other length is refused.  Writer and parser
 * are both here; the parser checks the writer's output too.  No CUDA, so
 * tools link it.
 */
#ifndef MOEFT_KVMAP_H
#define MOEFT_KVMAP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KVMAP_HDR 64u
#define KVMAP_ENTRY 32u
/* Larger chunks are restored from images: copyin.h buffers whole chunks
 * of a map, in pieces of 8 MiB. */
#define KVMAP_CHUNK_MAX (4u << 20)

struct kvmap_entry {
	uint64_t off;           /* in the store; 0 with len 0: zeros */
	uint32_t len, crc;
	uint64_t hdr, window;   /* the slot's header, the copy's window */
};

struct kvmap {
	uint32_t pool;
	uint64_t log_id, window, size, chunk_bytes, nchunks;
	struct kvmap_entry *e;  /* nchunks of them */
};

/* Whether chunks of chunk_bytes are ones a map holds: a power of two,
 * 4 KiB to KVMAP_CHUNK_MAX. */
static inline int kvmap_chunk_ok(uint64_t chunk_bytes)
{
	return chunk_bytes >= 4096 && chunk_bytes <= KVMAP_CHUNK_MAX &&
	       !(chunk_bytes & (chunk_bytes - 1));
}

/* The file's length for a pool of size bytes in chunks of chunk_bytes. */
static inline uint64_t kvmap_chunks(uint64_t size, uint64_t chunk_bytes)
{
	return size / chunk_bytes + (size % chunk_bytes != 0);
}

static inline uint64_t kvmap_file_bytes(uint64_t size, uint64_t chunk_bytes)
{
	return KVMAP_HDR + kvmap_chunks(size, chunk_bytes) * KVMAP_ENTRY + 4;
}

/* The bytes of chunk c of m (the last one may be short). */
static inline uint64_t kvmap_chunk_len(const struct kvmap *m, uint64_t c)
{
	uint64_t at = c * m->chunk_bytes;

	return m->size - at < m->chunk_bytes ? m->size - at : m->chunk_bytes;
}

/* Write m to f (the caller checks ferror and closes).  0, or -1 with err
 * saying why: m breaks a rule of the format, checked as the parser would
 * (store_bytes: the store's length). */
int kvmap_write(FILE *f, const struct kvmap *m, uint64_t store_bytes, char *err, size_t errlen);

/* Parse len bytes into m (its entries allocated; kvmap_free), checking
 * every rule above, entries against a store of store_bytes.  0, or -1
 * with err naming what is wrong (and m empty). */
int kvmap_parse(const uint8_t *buf, size_t len, uint64_t store_bytes, struct kvmap *m,
		char *err, size_t errlen);

void kvmap_free(struct kvmap *m);

#endif

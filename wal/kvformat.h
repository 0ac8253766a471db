/*
 * kvformat.h - internal: the on-media layout of a KV store (FORMAT.md, "KV
 * store"), for kvstore.c and the tests that forge or damage stores.
 *
 * As in format.h, every field is little-endian and goes through put/get,
 * never through a cast of the mapping, so a damaged or hostile image can
 * only yield wrong values, not wrong reads.
 */
#ifndef MOEFT_KVFORMAT_H
#define MOEFT_KVFORMAT_H

#include <stdint.h>

#include "format.h"
#include "kvstore.h"

#define KVS_VERSION 2u
#define KVS_HDR_SIZE 64u           /* bytes of the header page in use */
#define KVS_TABLE_OFF 4096u
#define KVS_ENTRY_SIZE 64u
#define KVS_REGION_ALIGN (UINT64_C(2) << 20)
#define KVS_META_SIZE KVS_REGION_ALIGN /* the header page and the table: regions follow */
#define KVS_SLOT_SIZE 32u          /* a chunk's two slot headers: one cache line */
#define KVS_DATA_ALIGN 4096u       /* a region's data, after its slot headers */
#define KVS_MIN_CHUNK 4096u
#define KVS_MAX_CHUNK (UINT64_C(1) << 30)
#define KVS_SLOT_FULL (UINT64_C(1) << 63) /* in every full slot's window word */
#define KVS_MAX_WINDOW (KVS_SLOT_FULL - 2)
/* The word of a table entry in use: "MOEFTKVP" (0: the entry is free). */
#define KVS_ENTRY_LIVE UINT64_C(0x50564b5446454f4d)

_Static_assert(KVS_TABLE_OFF + (uint64_t)KVS_MAX_POOLS * KVS_ENTRY_SIZE == KVS_META_SIZE,
	       "the pool table fills the store's first 2 MiB");

static const char KVS_MAGIC[8] = { 'M', 'O', 'E', 'F', 'T', 'K', 'V', 'S' };

struct kvs_hdr {
	uint32_t version;
	uint32_t table;        /* pool table entries, 1 to KVS_MAX_POOLS */
	uint64_t log_id;       /* the log this store belongs to; seeds every other CRC */
};

/* Where a pool's region lies: slot headers [nchunks][2] at off, data
 * [nchunks][2][chunk_bytes] at off + data_off. */
struct kvs_geom {
	uint64_t nchunks;
	uint64_t off;          /* in the file, a multiple of KVS_REGION_ALIGN */
	uint64_t data_off;     /* from off */
	uint64_t len;          /* region bytes */
};

/* A slot header.  Its first 8 bytes, the window word, hold window + 1 with
 * KVS_SLOT_FULL set, or 0 for an empty slot, and are stored last, with one
 * aligned store.  A full word has two bits set at least, so no single bit
 * flip makes a full slot look empty. */
struct kvs_slot {
	uint64_t window;
	uint64_t chunk;
	uint32_t len;
	uint32_t crc;          /* CRC-32C of the len data bytes, unseeded */
	uint32_t pool;
};

/* 0, or WAL_ENOTLOG (no magic), WAL_ECORRUPT (CRC, or a table size out of
 * range), WAL_EVERSION (h->version set).  The CRC is unseeded: it is what
 * tells the log id. */
void kvs_hdr_encode(uint8_t out[KVS_HDR_SIZE], const struct kvs_hdr *h);
int kvs_hdr_decode(const uint8_t in[KVS_HDR_SIZE], struct kvs_hdr *h);

/* The region of pool d at off: 0, or -1 when d is no pool a store can
 * hold (chunk size, or a region past the largest file offset). */
int kvs_geometry(const struct kvs_pool_desc *d, uint64_t off, struct kvs_geom *g);
/* Where the region after g starts. */
uint64_t kvs_next_region(const struct kvs_geom *g);

/* Pool table entry pool_no, in use (its word KVS_ENTRY_LIVE, which the CRC
 * covers).  Decode: 0 when the entry is free (word 0: its other bytes mean
 * nothing), 1 when it is in use and verifies, naming pool_no; -1 damaged (a
 * word that is neither, a CRC that fails, another pool number). */
void kvs_entry_encode(uint8_t out[KVS_ENTRY_SIZE], const struct kvs_pool_desc *d,
		      uint32_t pool_no, const struct kvs_geom *g, uint32_t id);
int kvs_entry_decode(const uint8_t in[KVS_ENTRY_SIZE], uint32_t pool_no, uint32_t id,
		     struct kvs_pool_desc *d, uint64_t *nchunks, uint64_t *off);

/* Decode: 0 empty (window word 0), 1 valid, -1 its header CRC fails. */
void kvs_slot_encode(uint8_t out[KVS_SLOT_SIZE], const struct kvs_slot *s, uint32_t id);
int kvs_slot_decode(const uint8_t in[KVS_SLOT_SIZE], struct kvs_slot *s, uint32_t id);

#endif

/*
 * format.h - internal: the on-media layout of a log (see FORMAT.md).
 *
 * Every multi-byte field is little-endian and is read and written through
 * the encoders below, never by casting the mapping to a struct, so a
 * damaged or hostile image can only yield wrong values, not wrong reads.
 */
#ifndef MOEFT_FORMAT_H
#define MOEFT_FORMAT_H

#include <stdint.h>
#include <string.h>

#define WAL_VERSION 1u

/* Fixed offsets of the metadata area (the first page). */
#define SB_COPY0_OFF 0u
#define SB_COPY1_OFF 256u
#define SB_SIZE 128u
#define CKPT_SLOT0_OFF 512u
#define CKPT_SLOT1_OFF 576u
#define CKPT_SIZE 64u
#define COMMIT_WORD_OFF 640u
#define WAL_DATA_OFF 4096u

#define REC_HDR_SIZE 48u
#define REC_ALIGN 16u
#define REC_CRC_OFF 44u  /* the CRC field ends the header's covered bytes */
#define REC_MAGIC 0x5254464du /* "MFTR" */
#define COMMIT_LSN_BITS 48
#define COMMIT_LSN_MASK ((UINT64_C(1) << COMMIT_LSN_BITS) - 1)

static const char SB_MAGIC[8] = { 'M', 'O', 'E', 'F', 'T', 'W', 'A', 'L' };

/* Static superblock: written at format time only, two identical copies. */
struct sb {
	uint32_t version;
	uint64_t log_id;     /* random per format; seeds every CRC */
	uint64_t created_ns;
	uint64_t size;       /* bytes of the medium the log owns */
	uint64_t data_off;
	uint64_t capacity;   /* ring bytes, a multiple of REC_ALIGN */
};

/* Checkpoint slot: rewritten at each epoch start and reclaim, two copies
 * written alternately; the valid one with the higher generation wins. */
struct ckpt {
	uint64_t gen;
	uint32_t epoch;      /* epoch of the current (or last) writer */
	uint64_t tail_pos;   /* logical ring position of the oldest record kept */
	uint64_t tail_lsn;
	uint64_t tail_window;
};

struct rec_hdr {
	uint32_t magic;
	uint16_t type;
	uint16_t flags;      /* reserved, 0 */
	uint32_t len;        /* payload bytes */
	uint32_t index;      /* position of the record within its window */
	uint64_t lsn;
	uint64_t window;
	uint32_t epoch;
	uint32_t crc;        /* see rec_crc() */
};

/* Fixed part of a WINDOW record's payload; caller bytes follow it. */
#define WINDOW_FIXED_SIZE 32u
struct window_fixed {
	uint64_t first_lsn;
	uint32_t records;    /* including the WINDOW record itself */
	uint32_t extra_len;
	uint64_t bytes;      /* ring bytes from the first record to the end of this one */
	uint64_t commit_ns;
};

/* ---- little-endian access ------------------------------------------- */

static inline void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static inline uint64_t rec_size(uint32_t len)
{
	return ((uint64_t)REC_HDR_SIZE + len + REC_ALIGN - 1) & ~(uint64_t)(REC_ALIGN - 1);
}

/* ---- encoders and checkers (format.c) -------------------------------- */

void sb_encode(uint8_t out[SB_SIZE], const struct sb *sb);
/* 0: valid; WAL_ENOTLOG: no magic; WAL_EVERSION; WAL_ECORRUPT: bad CRC. */
int sb_decode(const uint8_t in[SB_SIZE], struct sb *sb);

void ckpt_encode(uint8_t out[CKPT_SIZE], const struct ckpt *c, uint64_t log_id);
int ckpt_decode(const uint8_t in[CKPT_SIZE], struct ckpt *c, uint64_t log_id); /* 1 valid, 0 not */

uint64_t commit_word_encode(uint64_t lsn, uint64_t log_id);
int commit_word_decode(uint64_t word, uint64_t log_id, uint64_t *lsn); /* 1 valid, 0 not */

/* crc(0, log_id): seeds every CRC of a log (and of its KV store) but the
 * superblock's, so structures of another log never verify. */
uint32_t log_id_crc(uint64_t log_id);

/* Seed of every record CRC of one log and epoch: a reused region or a
 * reformatted log never validates an old record. */
uint32_t rec_seed(uint64_t log_id, uint32_t epoch);
/* CRC of a record: over the payload first, then the header without its CRC
 * field, so the payload part can be computed before the LSN is known. */
uint32_t rec_crc_finish(uint32_t payload_crc, const uint8_t hdr[REC_HDR_SIZE]);
void rec_hdr_encode(uint8_t out[REC_HDR_SIZE], const struct rec_hdr *h);
void rec_hdr_decode(const uint8_t in[REC_HDR_SIZE], struct rec_hdr *h);

void window_fixed_encode(uint8_t out[WINDOW_FIXED_SIZE], const struct window_fixed *w);
void window_fixed_decode(const uint8_t in[WINDOW_FIXED_SIZE], struct window_fixed *w);

#endif

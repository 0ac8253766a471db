/*
 * format.c - encode and check the fixed structures of a log.
 */
#include "crc32c.h"
#include "format.h"
#include "wal.h"

#define SB_CRC_OFF (SB_SIZE - 4)
#define CKPT_CRC_OFF (CKPT_SIZE - 4)

void sb_encode(uint8_t out[SB_SIZE], const struct sb *sb)
{
	memset(out, 0, SB_SIZE);
	memcpy(out, SB_MAGIC, sizeof SB_MAGIC);
	put32(out + 8, sb->version);
	put32(out + 12, SB_SIZE);
	put64(out + 16, sb->log_id);
	put64(out + 24, sb->created_ns);
	put64(out + 32, sb->size);
	put64(out + 40, sb->data_off);
	put64(out + 48, sb->capacity);
	put32(out + 56, REC_ALIGN);
	put32(out + SB_CRC_OFF, crc32c(0, out, SB_CRC_OFF));
}

int sb_decode(const uint8_t in[SB_SIZE], struct sb *sb)
{
	if (memcmp(in, SB_MAGIC, sizeof SB_MAGIC) != 0)
		return WAL_ENOTLOG;
	if (crc32c(0, in, SB_CRC_OFF) != get32(in + SB_CRC_OFF))
		return WAL_ECORRUPT;
	sb->version = get32(in + 8);
	if (sb->version != WAL_VERSION)
		return WAL_EVERSION;
	sb->log_id = get64(in + 16);
	sb->created_ns = get64(in + 24);
	sb->size = get64(in + 32);
	sb->data_off = get64(in + 40);
	sb->capacity = get64(in + 48);
	if (get32(in + 12) != SB_SIZE || get32(in + 56) != REC_ALIGN)
		return WAL_ECORRUPT;
	return 0;
}

uint32_t log_id_crc(uint64_t log_id)
{
	uint8_t b[8];

	put64(b, log_id);
	return crc32c(0, b, sizeof b);
}

void ckpt_encode(uint8_t out[CKPT_SIZE], const struct ckpt *c, uint64_t log_id)
{
	memset(out, 0, CKPT_SIZE);
	put64(out, c->gen);
	put32(out + 8, c->epoch);
	put64(out + 16, c->tail_pos);
	put64(out + 24, c->tail_lsn);
	put64(out + 32, c->tail_window);
	put32(out + CKPT_CRC_OFF, crc32c(log_id_crc(log_id), out, CKPT_CRC_OFF));
}

int ckpt_decode(const uint8_t in[CKPT_SIZE], struct ckpt *c, uint64_t log_id)
{
	if (crc32c(log_id_crc(log_id), in, CKPT_CRC_OFF) != get32(in + CKPT_CRC_OFF))
		return 0;
	c->gen = get64(in);
	c->epoch = get32(in + 8);
	c->tail_pos = get64(in + 16);
	c->tail_lsn = get64(in + 24);
	c->tail_window = get64(in + 32);
	return c->gen != 0; /* generation 0 is never written */
}

static uint64_t commit_check(uint64_t lsn, uint64_t log_id)
{
	uint8_t b[8];

	put64(b, lsn);
	return (uint64_t)(crc32c(log_id_crc(log_id), b, sizeof b) >> 16);
}

uint64_t commit_word_encode(uint64_t lsn, uint64_t log_id)
{
	lsn &= COMMIT_LSN_MASK;
	return lsn | commit_check(lsn, log_id) << COMMIT_LSN_BITS;
}

int commit_word_decode(uint64_t word, uint64_t log_id, uint64_t *lsn)
{
	uint64_t v = word & COMMIT_LSN_MASK;

	if (word >> COMMIT_LSN_BITS != commit_check(v, log_id))
		return 0;
	*lsn = v;
	return 1;
}

uint32_t rec_seed(uint64_t log_id, uint32_t epoch)
{
	uint8_t b[4];

	put32(b, epoch);
	return crc32c(log_id_crc(log_id), b, sizeof b);
}

uint32_t rec_crc_finish(uint32_t payload_crc, const uint8_t hdr[REC_HDR_SIZE])
{
	return crc32c(payload_crc, hdr, REC_CRC_OFF);
}

void rec_hdr_encode(uint8_t out[REC_HDR_SIZE], const struct rec_hdr *h)
{
	put32(out, h->magic);
	put16(out + 4, h->type);
	put16(out + 6, h->flags);
	put32(out + 8, h->len);
	put32(out + 12, h->index);
	put64(out + 16, h->lsn);
	put64(out + 24, h->window);
	put32(out + 32, h->epoch);
	memset(out + 36, 0, 8);
	put32(out + REC_CRC_OFF, h->crc);
}

void rec_hdr_decode(const uint8_t in[REC_HDR_SIZE], struct rec_hdr *h)
{
	h->magic = get32(in);
	h->type = get16(in + 4);
	h->flags = get16(in + 6);
	h->len = get32(in + 8);
	h->index = get32(in + 12);
	h->lsn = get64(in + 16);
	h->window = get64(in + 24);
	h->epoch = get32(in + 32);
	h->crc = get32(in + REC_CRC_OFF);
}

void window_fixed_encode(uint8_t out[WINDOW_FIXED_SIZE], const struct window_fixed *w)
{
	put64(out, w->first_lsn);
	put32(out + 8, w->records);
	put32(out + 12, w->extra_len);
	put64(out + 16, w->bytes);
	put64(out + 24, w->commit_ns);
}

void window_fixed_decode(const uint8_t in[WINDOW_FIXED_SIZE], struct window_fixed *w)
{
	w->first_lsn = get64(in);
	w->records = get32(in + 8);
	w->extra_len = get32(in + 12);
	w->bytes = get64(in + 16);
	w->commit_ns = get64(in + 24);
}

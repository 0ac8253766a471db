/*
 * fuzz_reader.c - libFuzzer target: recover any byte image as a log.
 *
 * Every record of every intact window is decoded according to its type
 * and every byte the reader hands out is read, so a read past the image
 * (ASan), an overflow or bad shift (UBSan) in recovery, iteration or a
 * payload decoder shows up; a few invariants of the reader's answer are
 * checked too.  A custom mutator re-seals the CRCs after most mutations:
 * without it nearly every mutated image fails its first CRC, and the
 * scan, resync and window logic behind the CRCs would go unexplored.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "format.h"
#include "held.h"
#include "record.h"
#include "wal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static volatile uint64_t sink;

static void touch(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += b[i];
	sink += sum;
}

static void decode_payload(const struct wal_record *rec)
{
	struct rec_epoch e;
	struct rec_routing rt;
	struct rec_kvref kv;
	struct rec_alloc al;
	struct rec_free fr;
	struct rec_crash cr;
	struct rec_exit ex;
	struct rec_window_steps ws;
	struct rec_request rq;

	switch (rec->type) {
	case WAL_REC_EPOCH:
		if (rec_epoch_decode(rec->payload, rec->len, &e) == 0)
			sink += e.prev_commit_lsn;
		break;
	case WAL_REC_ROUTING:
		if (rec_routing_decode(rec->payload, rec->len, &rt) == 0)
			for (size_t i = 0; i < (size_t)rt.tokens * rt.k; i++)
				sink += rec_routing_id(&rt, i);
		break;
	case WAL_REC_KVREF:
		if (rec_kvref_decode(rec->payload, rec->len, &kv) == 0)
			sink += kv.store_off;
		break;
	case WAL_REC_ALLOC:
		if (rec_alloc_decode(rec->payload, rec->len, &al) == 0)
			sink += al.fingerprint;
		break;
	case WAL_REC_FREE:
		if (rec_free_decode(rec->payload, rec->len, &fr) == 0)
			sink += fr.base;
		break;
	case WAL_REC_CRASH:
		if (rec_crash_decode(rec->payload, rec->len, &cr) == 0)
			sink += cr.nframes ? cr.frames[cr.nframes - 1] : 0;
		break;
	case WAL_REC_EXIT:
		if (rec_exit_decode(rec->payload, rec->len, &ex) == 0)
			sink += ex.pid;
		break;
	case WAL_REC_REQUEST:
		/* Every token and block the decoder vouched for is read. */
		if (rec_request_decode(rec->payload, rec->len, &rq) == 0) {
			sink += rq.id[rq.id_len - 1];
			for (size_t i = 0; i < rq.ntokens; i++)
				sink += rec_request_token(&rq, i);
			for (unsigned g = 0; g < rq.ngroups; g++)
				for (size_t i = 0; i < rq.nblocks[g]; i++)
					sink += rec_request_block(&rq, g, i);
		}
		break;
	case WAL_REC_WINDOW:
		/* The reader vouched for the fixed part of an intact window. */
		if (rec->len < WINDOW_FIXED_SIZE)
			abort();
		if (rec_window_steps_decode(rec->payload + WINDOW_FIXED_SIZE,
					    rec->len - WINDOW_FIXED_SIZE, &ws) == 0)
			sink += ws.tokens;
		break;
	}
	touch(rec->payload, rec->len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct wal_recovery *rc;
	const struct wal_window *win;
	struct wal_reader *r;
	struct wal_error err;
	struct wal_record rec;
	struct wal_iter it;
	uint64_t last_lsn = 0, intact = 0;
	struct held_state held;
	size_t nwin;

	if (wal_reader_open_buf(data, size, &r, &err) < 0) {
		touch(err.msg, strlen(err.msg));
		return 0;
	}
	rc = wal_reader_recovery(r);
	touch(rc->tail_stop, strlen(rc->tail_stop));
	for (size_t i = 0; i < rc->damage_count && i < sizeof rc->damage / sizeof rc->damage[0]; i++)
		touch(rc->damage[i].reason, strlen(rc->damage[i].reason));
	for (unsigned i = 0; i < rc->note_count; i++)
		touch(rc->notes[i], strlen(rc->notes[i]));
	win = wal_reader_windows(r, &nwin);
	for (size_t i = 0; i < nwin; i++) {
		if (win[i].extra)
			touch(win[i].extra, win[i].extra_len);
		intact += win[i].state == WAL_WINDOW_INTACT;
	}
	if (intact != rc->intact_windows || nwin != rc->committed_windows ||
	    (!rc->damage_count && intact != nwin))
		abort();
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec)) {
		/* One LSN order, and every record inside the image. */
		if (rec.lsn <= last_lsn || rec.offset + REC_HDR_SIZE + rec.len > size ||
		    rec.payload != data + rec.offset + REC_HDR_SIZE)
			abort();
		last_lsn = rec.lsn;
		decode_payload(&rec);
	}
	/* What a starting preload decides from the log: held state never
	 * without a restorable window. */
	held_read(r, &held);
	if (held.held && !held.epoch)
		abort();
	sink += held.window + held.last_step + held.pid;
	wal_reader_close(r);
	return 0;
}

/* Recompute every CRC and check field the reader verifies.  Records go
 * from the highest offset down, so one nested in another's payload is
 * sealed before the record that covers it. */
static void reseal(uint8_t *data, size_t size)
{
	static const uint32_t ckpt_off[2] = { CKPT_SLOT0_OFF, CKPT_SLOT1_OFF };
	/* The copy the reader takes the log id from. */
	const uint8_t *sb = memcmp(data, SB_MAGIC, sizeof SB_MAGIC) ? data + SB_COPY1_OFF : data;
	uint64_t log_id;
	uint32_t id_crc;
	uint8_t id[8];

	if (size < WAL_DATA_OFF)
		return;
	log_id = get64(sb + 16);
	for (size_t off = (size - REC_HDR_SIZE) & ~(size_t)(REC_ALIGN - 1); off >= WAL_DATA_OFF;
	     off -= REC_ALIGN) {
		uint8_t *p = data + off;
		uint32_t len = get32(p + 8), crc;
		int pad = get16(p + 4) == WAL_REC_PAD;

		if (get32(p) != REC_MAGIC || (!pad && len > size - off - REC_HDR_SIZE))
			continue;
		crc = rec_seed(log_id, get32(p + 32));
		if (!pad)
			crc = crc32c(crc, p + REC_HDR_SIZE, len);
		put32(p + REC_CRC_OFF, rec_crc_finish(crc, p));
	}
	put64(id, log_id);
	id_crc = crc32c(0, id, sizeof id);
	for (int i = 0; i < 2; i++)
		if (get64(data + ckpt_off[i])) /* generation 0: a slot never written */
			put32(data + ckpt_off[i] + CKPT_SIZE - 4,
			      crc32c(id_crc, data + ckpt_off[i], CKPT_SIZE - 4));
	put64(data + COMMIT_WORD_OFF, commit_word_encode(get64(data + COMMIT_WORD_OFF), log_id));
	for (uint32_t off = SB_COPY0_OFF; off <= SB_COPY1_OFF; off += SB_COPY1_OFF)
		put32(data + off + SB_SIZE - 4, crc32c(0, data + off, SB_SIZE - 4));
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
	size = LLVMFuzzerMutate(data, size, max_size);
	/* One mutation in eight stays unsealed: CRC failures need exploring too. */
	if (seed % 8)
		reseal(data, size);
	return size;
}

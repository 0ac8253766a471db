/*
 * test_reader.c - reader.c on images built byte by byte here (independent
 * of writer.c) and on logs the writer made and the test then damaged:
 * short buffers, empty logs, the commit word, superblock copies, torn
 * checkpoints, torn and stale tails, the iterator, truncated images.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "crc32c.h"
#include "format.h"
#include "record.h"
#include "testutil.h"
#include "wal.h"

#define IMG_CAP 65536u
#define IMG_SIZE (WAL_DATA_OFF + IMG_CAP)
#define IMG_ID UINT64_C(0x5eed5eed12345678)

/* ---- an image builder: a minimal writer, separate from writer.c -------- */

struct img {
	uint8_t *b;
	uint64_t size, cap;
	uint32_t epoch;
	uint64_t gen;                    /* last checkpoint generation written */
	uint64_t tail_pos, tail_lsn, tail_window;
	uint64_t pos, lsn, window;       /* where the next record goes */
	uint32_t index;
	uint64_t win_pos, win_first;
};

static void img_ckpt(struct img *m)
{
	struct ckpt c = { .gen = ++m->gen, .epoch = m->epoch, .tail_pos = m->tail_pos,
			  .tail_lsn = m->tail_lsn, .tail_window = m->tail_window };

	ckpt_encode(m->b + (c.gen & 1 ? CKPT_SLOT1_OFF : CKPT_SLOT0_OFF), &c, IMG_ID);
}

static void img_publish(struct img *m, uint64_t lsn)
{
	put64(m->b + COMMIT_WORD_OFF, commit_word_encode(lsn, IMG_ID));
}

/* A formatted log of `size` bytes in epoch 1 with nothing committed. */
static void img_init(struct img *m, uint64_t size)
{
	struct sb sb = { .version = WAL_VERSION, .log_id = IMG_ID, .created_ns = 1, .size = size,
			 .data_off = WAL_DATA_OFF, .capacity = size - WAL_DATA_OFF };

	memset(m, 0, sizeof *m);
	m->b = calloc(1, size);
	CU_ASSERT_FATAL(m->b != NULL);
	m->size = size;
	m->cap = sb.capacity;
	m->epoch = 1;
	m->lsn = m->tail_lsn = m->win_first = 1;
	sb_encode(m->b + SB_COPY0_OFF, &sb);
	sb_encode(m->b + SB_COPY1_OFF, &sb);
	img_ckpt(m);
	img_publish(m, 0);
}

static void img_free(struct img *m)
{
	free(m->b);
	m->b = NULL;
}

static uint64_t img_off(const struct img *m, uint64_t pos)
{
	return WAL_DATA_OFF + pos % m->cap;
}

static uint64_t img_place(struct img *m, unsigned type, const void *a, uint32_t alen,
			  const void *b, uint32_t blen)
{
	uint8_t *p = m->b + img_off(m, m->pos), hdr[REC_HDR_SIZE];
	struct rec_hdr h = { .magic = REC_MAGIC, .type = (uint16_t)type, .len = alen + blen,
			     .index = m->index, .lsn = m->lsn, .window = m->window, .epoch = m->epoch };
	uint32_t crc = rec_seed(IMG_ID, m->epoch);

	if (a)
		memcpy(p + REC_HDR_SIZE, a, alen);
	if (blen)
		memcpy(p + REC_HDR_SIZE + alen, b, blen);
	if (type != WAL_REC_PAD)
		crc = crc32c(crc, p + REC_HDR_SIZE, alen + blen);
	rec_hdr_encode(hdr, &h);
	put32(hdr + REC_CRC_OFF, rec_crc_finish(crc, hdr));
	memcpy(p, hdr, REC_HDR_SIZE);
	m->pos += rec_size(h.len);
	m->index++;
	m->lsn++;
	return (uint64_t)(p - m->b);
}

/* Append a record, with a PAD (or a gap) at the end of the lap; returns the
 * medium offset of its header. */
static uint64_t img_put(struct img *m, unsigned type, const void *p, uint32_t len)
{
	uint64_t to_end = m->cap - m->pos % m->cap;

	if (to_end < rec_size(len)) {
		if (to_end >= REC_HDR_SIZE)
			img_place(m, WAL_REC_PAD, NULL, (uint32_t)(to_end - REC_HDR_SIZE), NULL, 0);
		else
			m->pos += to_end;
	}
	return img_place(m, type, p, len, NULL, 0);
}

/* Close the window with its WINDOW record (not yet published): its LSN. */
static uint64_t img_window(struct img *m)
{
	uint8_t fixed[WINDOW_FIXED_SIZE];
	struct window_fixed wf = { .first_lsn = m->win_first, .records = m->index + 1,
				   .commit_ns = 77,
				   .bytes = m->pos + rec_size(WINDOW_FIXED_SIZE) - m->win_pos };

	window_fixed_encode(fixed, &wf);
	img_put(m, WAL_REC_WINDOW, fixed, sizeof fixed);
	m->window++;
	m->index = 0;
	m->win_first = m->lsn;
	m->win_pos = m->pos;
	return m->lsn - 1;
}

static uint64_t img_commit(struct img *m)
{
	uint64_t lsn = img_window(m);

	img_publish(m, lsn);
	return lsn;
}

/* A USER record whose payload is `len` bytes of (lsn + i). */
static uint64_t img_user(struct img *m, uint32_t len)
{
	uint8_t buf[2048];
	uint32_t i;

	for (i = 0; i < len; i++)
		buf[i] = (uint8_t)(m->lsn + i);
	return img_put(m, WAL_REC_USER, buf, len);
}

/* Start epoch `e` at the current position, as a new writer would. */
static void img_epoch(struct img *m, uint32_t e, uint64_t prev_commit)
{
	uint8_t buf[EPOCH_PAYLOAD_SIZE];
	struct rec_epoch ep = { .prev_epoch = m->epoch, .pid = 1, .prev_commit_lsn = prev_commit };

	m->epoch = e;
	img_ckpt(m);
	rec_epoch_encode(buf, &ep);
	img_put(m, WAL_REC_EPOCH, buf, sizeof buf);
}

/* `nwin` committed windows of `per` USER records of `len` bytes. */
static void img_windows(struct img *m, unsigned nwin, unsigned per, uint32_t len)
{
	unsigned w, i;

	for (w = 0; w < nwin; w++) {
		for (i = 0; i < per; i++)
			img_user(m, len);
		img_commit(m);
	}
}

/* ---- helpers ------------------------------------------------------------ */

static struct wal_reader *open_img(const void *buf, size_t len)
{
	struct wal_error err = { 0 };
	struct wal_reader *r = NULL;

	if (wal_reader_open_buf(buf, len, &r, &err) != 0)
		fprintf(stderr, "\nwal_reader_open_buf: %s\n", err.msg);
	return r;
}

/* Open must fail with `code`, leave *out NULL and say `why`. */
static void open_fails(const void *buf, size_t len, int code, const char *why)
{
	static char sentinel;
	struct wal_error err = { 0 };
	struct wal_reader *r = (struct wal_reader *)(void *)&sentinel;

	CU_ASSERT_EQUAL(wal_reader_open_buf(buf, len, &r, &err), code);
	CU_ASSERT_PTR_NULL(r);
	CU_ASSERT_EQUAL(err.code, code);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, why));
}

static size_t count_iterated(const struct wal_reader *r)
{
	struct wal_iter it;
	struct wal_record rec;
	size_t n = 0;

	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec) == 1)
		n++;
	return n;
}

/* A log made by the real writer: `nwin` committed windows of one 40-byte
 * USER record each, in the file at path.  The image is returned too. */
static uint8_t *writer_log(const char *path, unsigned nwin, size_t *len)
{
	struct wal_options opt;
	struct wal_error err = { 0 };
	uint8_t payload[40] = { 0 };
	struct wal *w = NULL;
	unsigned i;

	wal_options_init(&opt);
	opt.size = IMG_SIZE;
	if (wal_open(path, &opt, &w, &err) != 0) {
		fprintf(stderr, "\nwal_open: %s\n", err.msg);
		return NULL;
	}
	for (i = 0; i < nwin; i++) {
		payload[0] = (uint8_t)i;
		CU_ASSERT(wal_append(w, WAL_REC_USER, payload, sizeof payload) > 0);
		CU_ASSERT_EQUAL(wal_commit(w, NULL, 0, NULL), 0);
	}
	wal_close(w);
	return test_slurp(path, len);
}

/* ---- short and empty inputs ---------------------------------------------- */

static void test_short_buffers(void)
{
	static const size_t lens[] = { 0, 100, 4095 };
	uint8_t *zero = calloc(1, IMG_SIZE);
	size_t i;

	CU_ASSERT_FATAL(zero != NULL);
	open_fails(NULL, 0, WAL_ENOTLOG, "not a moeft log");
	for (i = 0; i < sizeof lens / sizeof lens[0]; i++)
		open_fails(zero, lens[i], WAL_ENOTLOG, "not a moeft log");
	open_fails(zero, IMG_SIZE, WAL_ENOTLOG, "not a moeft log");
	free(zero);
}

/* Prefixes of a real image: no superblock, then no checkpoint, then a
 * truncated log whose committed records are all gone. */
static void test_short_prefixes(void)
{
	const struct wal_recovery *rv;
	struct wal_reader *r;
	struct img m;

	img_init(&m, IMG_SIZE);
	img_windows(&m, 2, 2, 100);
	open_fails(m.b, 0, WAL_ENOTLOG, "not a moeft log");
	open_fails(m.b, 100, WAL_ENOTLOG, "not a moeft log");
	open_fails(m.b, 300, WAL_ECORRUPT, "no valid checkpoint copy");
	r = open_img(m.b, 4095);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->note_count, 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->notes[0], "truncated"));
	CU_ASSERT_EQUAL(rv->damage_count, 1);
	CU_ASSERT_EQUAL(rv->damage[0].offset, WAL_DATA_OFF);
	CU_ASSERT_EQUAL(rv->damage[0].lsn, 1);
	CU_ASSERT_EQUAL(rv->damage[0].lost_records, 6);
	CU_ASSERT_EQUAL(rv->intact_windows, 0);
	CU_ASSERT_EQUAL(count_iterated(r), 0);
	wal_reader_close(r);
	img_free(&m);
}

static void test_fresh_image(void)
{
	const struct wal_recovery *rv;
	struct wal_reader *r;
	size_t n = 99;
	struct img m;

	img_init(&m, IMG_SIZE);
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->version, WAL_VERSION);
	CU_ASSERT_EQUAL(rv->log_id, IMG_ID);
	CU_ASSERT_EQUAL(rv->size, IMG_SIZE);
	CU_ASSERT_EQUAL(rv->capacity, IMG_CAP);
	CU_ASSERT_EQUAL(rv->data_off, WAL_DATA_OFF);
	CU_ASSERT_EQUAL(rv->ckpt_gen, 1);
	CU_ASSERT_EQUAL(rv->epoch, 1);
	CU_ASSERT_EQUAL(rv->tail_lsn, 1);
	CU_ASSERT_EQUAL(rv->head_pos, 0);
	CU_ASSERT_EQUAL(rv->last_committed_lsn, 0);
	CU_ASSERT_EQUAL(rv->first_lsn, 0);
	CU_ASSERT_EQUAL(rv->committed_windows, 0);
	CU_ASSERT_EQUAL(rv->records, 0);
	CU_ASSERT_EQUAL(rv->tail_records, 0);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->note_count, 0); /* a zero checkpoint slot is no finding */
	wal_reader_windows(r, &n);
	CU_ASSERT_EQUAL(n, 0);
	CU_ASSERT_EQUAL(count_iterated(r), 0);
	wal_reader_close(r);
	img_free(&m);
}

/* What wal_open leaves: only its uncommitted EPOCH record. */
static void test_fresh_writer_log(void)
{
	const struct wal_recovery *rv;
	struct wal_error err = { 0 };
	struct wal_reader *r = NULL;
	uint8_t *img;
	char path[256];
	size_t len;

	img = writer_log(test_path(path, sizeof path, "fresh"), 0, &len);
	CU_ASSERT_FATAL(img != NULL);
	free(img);
	CU_ASSERT_EQUAL_FATAL(wal_reader_open_path(path, &r, &err), 0);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->committed_windows, 0);
	CU_ASSERT_EQUAL(rv->last_committed_lsn, 0);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->tail_records, 1);
	CU_ASSERT_EQUAL(rv->epoch, 1);
	wal_reader_close(r);
	unlink(path);
	CU_ASSERT_EQUAL(wal_reader_open_path(path, &r, &err), WAL_EIO);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
}

/* ---- the commit word ------------------------------------------------------ */

static void test_commit_not_window(void)
{
	const struct wal_recovery *rv;
	struct wal_reader *r;
	struct img m;

	img_init(&m, IMG_SIZE);
	img_windows(&m, 1, 2, 50);   /* LSN 1-3 */
	img_user(&m, 50);            /* LSN 4-5, window 1 */
	img_user(&m, 50);
	img_window(&m);              /* LSN 6 */
	img_publish(&m, 5);
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->damage[0].reason, "commit point is not a WINDOW record"));
	CU_ASSERT_EQUAL(rv->committed_windows, 1);
	CU_ASSERT_EQUAL(rv->intact_windows, 1);
	CU_ASSERT_EQUAL(count_iterated(r), 3);
	wal_reader_close(r);

	img_publish(&m, 6); /* the same image, correctly published, is clean */
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->damage_count, 0);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->intact_windows, 2);
	wal_reader_close(r);
	img_free(&m);
}

/* A damaged word: trust valid records up to the last WINDOW record. */
static void test_commit_word_damaged(void)
{
	const struct wal_recovery *rv;
	struct wal_reader *r;
	struct img m;

	img_init(&m, IMG_SIZE);
	img_windows(&m, 2, 2, 30);   /* LSN 1-6 */
	img_user(&m, 30);            /* LSN 7-8: never committed */
	img_user(&m, 30);
	m.b[COMMIT_WORD_OFF + 7] ^= 0x10;
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 1);
	CU_ASSERT_EQUAL(rv->damage[0].offset, COMMIT_WORD_OFF);
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->damage[0].reason, "commit word damaged"));
	CU_ASSERT_EQUAL(rv->committed_windows, 2);
	CU_ASSERT_EQUAL(rv->intact_windows, 2);
	CU_ASSERT_EQUAL(rv->last_committed_lsn, 6);
	CU_ASSERT_EQUAL(rv->records, 6);
	CU_ASSERT_EQUAL(rv->rec_count[0], 4); /* USER, counted under index 0 */
	CU_ASSERT_EQUAL(rv->rec_count[WAL_REC_WINDOW], 2);
	CU_ASSERT_EQUAL(count_iterated(r), 6);
	wal_reader_close(r);

	/* A WINDOW record written but not yet published counts too. */
	img_window(&m);              /* LSN 9 */
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->last_committed_lsn, 9);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->intact_windows, 3);
	wal_reader_close(r);
	img_free(&m);
}

/* ---- superblock copies --------------------------------------------------- */

static void test_superblock_copies(void)
{
	const struct wal_recovery *rv;
	struct wal_reader *r;
	struct img m;
	int i;

	img_init(&m, IMG_SIZE);
	img_windows(&m, 3, 1, 20);
	for (i = 0; i < 2; i++) {
		uint32_t off = i ? SB_COPY1_OFF : SB_COPY0_OFF;

		m.b[off + 20] ^= 0x01;
		r = open_img(m.b, IMG_SIZE);
		CU_ASSERT_FATAL(r != NULL);
		rv = wal_reader_recovery(r);
		CU_ASSERT_EQUAL(rv->damage_count, 1);
		CU_ASSERT_EQUAL(rv->damage[0].offset, off);
		CU_ASSERT_PTR_NOT_NULL(strstr(rv->damage[0].reason, "superblock copy damaged"));
		CU_ASSERT_EQUAL(rv->log_id, IMG_ID);
		CU_ASSERT_EQUAL(rv->intact_windows, 3);
		CU_ASSERT_EQUAL(count_iterated(r), 6);
		wal_reader_close(r);
		m.b[off + 20] ^= 0x01;
	}
	m.b[SB_COPY0_OFF + 20] ^= 0x01;
	m.b[SB_COPY1_OFF + 40] ^= 0x80;
	open_fails(m.b, IMG_SIZE, WAL_ECORRUPT, "both superblock copies are damaged");
	img_free(&m);
}

static void test_superblock_magic_version(void)
{
	struct sb sb = { .version = 2, .log_id = IMG_ID, .size = IMG_SIZE, .data_off = WAL_DATA_OFF,
			 .capacity = IMG_CAP };
	struct img m;

	img_init(&m, IMG_SIZE);
	m.b[SB_COPY0_OFF] = 'X';
	m.b[SB_COPY1_OFF] = 'X';
	open_fails(m.b, IMG_SIZE, WAL_ENOTLOG, "not a moeft log");
	sb_encode(m.b + SB_COPY0_OFF, &sb);
	sb_encode(m.b + SB_COPY1_OFF, &sb);
	open_fails(m.b, IMG_SIZE, WAL_EVERSION, "version 2");
	img_free(&m);
}

/* ---- checkpoint slots ------------------------------------------------------ */

/* Written by the writer: format (gen 1, slot 1), epoch 1 (gen 2, slot 0),
 * reopen as epoch 2 (gen 3, slot 1).  Then epoch 2's checkpoint is torn. */
static void test_torn_checkpoint(void)
{
	const struct wal_recovery *rv;
	struct wal_options opt;
	struct wal_error err = { 0 };
	struct wal_reader *r;
	struct wal *w = NULL;
	uint8_t *img;
	char path[256];
	size_t len;
	struct ckpt c;

	img = writer_log(test_path(path, sizeof path, "torn"), 3, &len);
	CU_ASSERT_FATAL(img != NULL);
	free(img);
	wal_options_init(&opt);
	CU_ASSERT_EQUAL_FATAL(wal_open(path, &opt, &w, &err), 0);
	wal_close(w);
	img = test_slurp(path, &len);
	CU_ASSERT_FATAL(img != NULL);
	CU_ASSERT_EQUAL(ckpt_decode(img + CKPT_SLOT1_OFF, &c, get64(img + 16)), 1);
	CU_ASSERT_EQUAL(c.gen, 3);
	memset(img + CKPT_SLOT1_OFF + 32, 0xa5, CKPT_SIZE - 32); /* only half landed */

	r = open_img(img, len);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->note_count, 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->notes[0], "checkpoint copy 1 invalid"));
	CU_ASSERT_EQUAL(rv->ckpt_gen, 2);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->intact_windows, 3);
	CU_ASSERT_EQUAL(rv->last_committed_lsn, 7);
	/* The torn slot may have been the newer one, so epoch 2 (one past
	 * the slot used) is still readable: its EPOCH record is the tail. */
	CU_ASSERT_EQUAL(rv->epoch, 2);
	CU_ASSERT_EQUAL(rv->tail_records, 1);
	wal_reader_close(r);

	/* A writer takes the torn log up again as epoch 3. */
	CU_ASSERT_EQUAL_FATAL(test_spew(path, img, len), 0);
	CU_ASSERT_EQUAL_FATAL(wal_open(path, &opt, &w, &err), 0);
	wal_close(w);
	r = NULL;
	CU_ASSERT_EQUAL_FATAL(wal_reader_open_path(path, &r, &err), 0);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->epoch, 3);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->intact_windows, 3);
	wal_reader_close(r);
	free(img);
	unlink(path);
}

/* ---- uncommitted tails ------------------------------------------------------- */

static void test_torn_tail(void)
{
	const struct wal_recovery *rv;
	struct wal_reader *r;
	uint64_t off;
	struct img m;

	img_init(&m, IMG_SIZE);
	img_windows(&m, 1, 2, 40);   /* LSN 1-3 */
	img_user(&m, 40);            /* LSN 4, 5: valid */
	img_user(&m, 40);
	off = img_user(&m, 40);      /* LSN 6: torn */
	img_user(&m, 40);            /* LSN 7: valid, but after the tear */
	m.b[off + REC_HDR_SIZE + 39] ^= 0x04;
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->last_committed_lsn, 3);
	CU_ASSERT_EQUAL(rv->tail_records, 2);
	CU_ASSERT_EQUAL(rv->tail_bytes, 2 * rec_size(40));
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->tail_stop, "LSN 6"));
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->tail_stop, "bad CRC"));
	CU_ASSERT_EQUAL(count_iterated(r), 3);
	wal_reader_close(r);
	img_free(&m);
}

/* Epoch 1 left 5 uncommitted records; epoch 2 wrote 2 over the first two.
 * The third, with the very LSN epoch 2 would use next, is stale. */
static void test_stale_epoch_tail(void)
{
	const struct wal_recovery *rv;
	struct wal_reader *r;
	struct img m, committed;
	int i;

	img_init(&m, IMG_SIZE);
	img_windows(&m, 1, 1, 24);   /* LSN 1-2 */
	committed = m;
	for (i = 0; i < 5; i++)
		img_user(&m, EPOCH_PAYLOAD_SIZE); /* LSN 3-7, 80 bytes each */
	m = committed;
	img_epoch(&m, 2, 2);         /* LSN 3 */
	img_user(&m, EPOCH_PAYLOAD_SIZE); /* LSN 4 */
	CU_ASSERT_EQUAL(get64(m.b + img_off(&m, m.pos) + 16), 5); /* stale LSN 5 follows */
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->epoch, 2);
	CU_ASSERT_EQUAL(rv->tail_records, 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->tail_stop, "LSN 5"));
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->tail_stop, "epoch out of sequence"));
	wal_reader_close(r);

	/* Committed, epoch 2's window ends the log; the stale record is tail junk. */
	img_commit(&m);              /* LSN 5 */
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->intact_windows, 2);
	CU_ASSERT_EQUAL(rv->tail_records, 0);
	CU_ASSERT_EQUAL(rv->first_epoch, 1);
	wal_reader_close(r);
	img_free(&m);
}

/* Helper for the next test: fill committed windows of one record until
 * the head sits `left` bytes before the physical end of the ring. */
static void fill_to_ring_end(struct wal *w, uint64_t left)
{
	uint8_t buf[1100] = { 0 };
	struct wal_stats st;

	for (;;) {
		uint64_t room;
		uint32_t len;

		wal_stats(w, &st);
		room = st.capacity - left - st.used; /* tail is still 0 */
		if (room == 0)
			return;
		/* A window is one USER record plus an 80-byte WINDOW record:
		 * 1088 bytes, and the last one exactly what is left. */
		len = (uint32_t)(room >= 1088 + 128 ? 1088 : room) - 80 - REC_HDR_SIZE;
		CU_ASSERT_FATAL(wal_append(w, WAL_REC_USER, buf, len) > 0);
		CU_ASSERT_EQUAL_FATAL(wal_commit(w, NULL, 0, NULL), 0);
	}
}

/* A new epoch that begins 64 bytes before the ring's end opens with a PAD
 * record (the EPOCH record does not fit), so the PAD carries the new epoch.
 * Its uncommitted records are still the tail: PAD, EPOCH and two USER. */
static void test_epoch_starting_with_pad(void)
{
	const struct wal_recovery *rv;
	struct wal_options opt;
	struct wal_error err = { 0 };
	struct wal_reader *r = NULL;
	struct wal *w = NULL;
	char path[256];

	wal_options_init(&opt);
	opt.size = IMG_SIZE;
	CU_ASSERT_EQUAL_FATAL(wal_open(test_path(path, sizeof path, "padepoch"), &opt, &w, &err), 0);
	fill_to_ring_end(w, 64);
	wal_close(w);
	CU_ASSERT_EQUAL_FATAL(wal_open(path, &opt, &w, &err), 0);
	CU_ASSERT(wal_append(w, WAL_REC_USER, "abcd", 4) > 0);
	CU_ASSERT(wal_append(w, WAL_REC_USER, "efgh", 4) > 0);
	wal_close(w);

	CU_ASSERT_EQUAL_FATAL(wal_reader_open_path(path, &r, &err), 0);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->head_pos, IMG_CAP - 64);
	CU_ASSERT_EQUAL(rv->tail_records, 4);
	CU_ASSERT_EQUAL(rv->tail_bytes, 64 + 80 + 64 + 64);
	wal_reader_close(r);
	unlink(path);
}

/* ---- the iterator -------------------------------------------------------- */

struct want {
	unsigned type;
	uint64_t lsn, window, offset;
	uint32_t index, epoch, len;
};

static void test_iterator(void)
{
	struct want want[16];
	struct wal_iter it;
	struct wal_record rec;
	const struct wal_recovery *rv;
	struct wal_reader *r;
	uint64_t bad_off = 0, bad_lsn = 0;
	unsigned n = 0, got = 0, w, i;
	struct img m;

	img_init(&m, IMG_SIZE);
	for (w = 0; w < 3; w++) {            /* windows 0-2, epoch 1; window 1 gets damaged */
		for (i = 0; i < 3; i++) {
			uint64_t lsn = m.lsn, off = img_user(&m, 20 + 10 * i);

			if (w == 1 && i == 1) {
				bad_off = off;
				bad_lsn = lsn;
			} else if (w != 1) {
				want[n++] = (struct want){ WAL_REC_USER, lsn, w, off, i, 1,
							   20 + 10 * i };
			}
		}
		if (w != 1)
			want[n++] = (struct want){ WAL_REC_WINDOW, m.lsn, w, WAL_DATA_OFF + m.pos,
						   3, 1, 32 };
		img_commit(&m);
	}
	want[n++] = (struct want){ WAL_REC_EPOCH, m.lsn, 3, WAL_DATA_OFF + m.pos, 0, 2, 24 };
	img_epoch(&m, 2, m.lsn - 1);         /* window 3, epoch 2 */
	want[n++] = (struct want){ WAL_REC_USER, m.lsn, 3, WAL_DATA_OFF + m.pos, 1, 2, 5 };
	img_user(&m, 5);
	want[n++] = (struct want){ WAL_REC_WINDOW, m.lsn, 3, WAL_DATA_OFF + m.pos, 2, 2, 32 };
	img_commit(&m);
	m.b[bad_off + REC_HDR_SIZE + 3] ^= 0xff;

	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 1);
	CU_ASSERT_EQUAL(rv->damage[0].offset, bad_off);
	CU_ASSERT_EQUAL(rv->damage[0].lsn, bad_lsn);
	CU_ASSERT_EQUAL(rv->damage[0].lost_records, 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->damage[0].reason, "bad CRC"));
	CU_ASSERT_EQUAL(rv->committed_windows, 4);
	CU_ASSERT_EQUAL(rv->damaged_windows, 1);
	CU_ASSERT_EQUAL(wal_reader_windows(r, &(size_t){ 0 })[1].state, WAL_WINDOW_DAMAGED);

	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec) == 1) {
		const struct want *x = &want[got];

		CU_ASSERT_FATAL(got < n);
		CU_ASSERT_EQUAL(rec.type, x->type);
		CU_ASSERT_EQUAL(rec.lsn, x->lsn);
		CU_ASSERT_EQUAL(rec.window, x->window);
		CU_ASSERT_EQUAL(rec.index, x->index);
		CU_ASSERT_EQUAL(rec.epoch, x->epoch);
		CU_ASSERT_EQUAL(rec.len, x->len);
		CU_ASSERT_EQUAL(rec.offset, x->offset);
		CU_ASSERT_PTR_EQUAL(rec.payload, m.b + x->offset + REC_HDR_SIZE);
		if (rec.type == WAL_REC_USER)
			CU_ASSERT_EQUAL(rec.payload[rec.len - 1], (uint8_t)(rec.lsn + rec.len - 1));
		got++;
	}
	CU_ASSERT_EQUAL(got, n);
	CU_ASSERT_EQUAL(wal_iter_next(&it, &rec), 0); /* stays at the end */
	wal_reader_close(r);
	img_free(&m);
}

/* Across the physical end: a PAD record, never iterated. */
static void test_iterator_skips_pad(void)
{
	const struct wal_recovery *rv;
	struct wal_iter it;
	struct wal_record rec;
	struct wal_reader *r;
	uint64_t lsn = 0;
	struct img m;

	unsigned w;

	/* 70 windows of 1136 bytes: 57 fit a lap, window 57 opens with a
	 * 784-byte PAD, and lap 2 overwrites windows 0-12: the tail moves on
	 * to window 14. */
	img_init(&m, IMG_SIZE);
	for (w = 0; w < 70; w++) {
		if (w == 14) {
			m.tail_pos = m.pos;
			m.tail_lsn = m.lsn;
			m.tail_window = m.window;
		}
		img_windows(&m, 1, 1, 1000);
	}
	img_ckpt(&m);
	CU_ASSERT_EQUAL(m.tail_pos, 14 * 1136);
	CU_ASSERT_EQUAL(m.pos - m.tail_pos, 56 * 1136 + 784);
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->rec_count[WAL_REC_PAD], 1);
	CU_ASSERT_EQUAL(rv->committed_windows, 56);
	CU_ASSERT_EQUAL(rv->tail_window, 14);
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec) == 1) {
		CU_ASSERT_NOT_EQUAL(rec.type, WAL_REC_PAD);
		CU_ASSERT(rec.lsn > lsn);
		lsn = rec.lsn;
	}
	CU_ASSERT_EQUAL(lsn, rv->last_committed_lsn);
	wal_reader_close(r);
	img_free(&m);
}

/* After a bad record the scan resynchronises on the next valid one.  A
 * record (valid CRC: a hostile image can compute one) that claims window
 * 2^20 right after window 0 cannot be next: LSNs 2 to 3 cannot span 2^20
 * windows.  Trusting it lists a million phantom windows (2^40 exhausts
 * memory); the scan must skip it and find LSN 4. */
static void test_resync_ignores_far_window(void)
{
	const struct wal_recovery *rv;
	struct wal_reader *r;
	uint64_t bad;
	struct img m;

	img_init(&m, IMG_SIZE);
	img_user(&m, 16);                    /* LSN 1 */
	bad = img_user(&m, 16);              /* LSN 2: damaged below */
	m.window = UINT64_C(1) << 20;        /* LSN 3: claims a far window */
	m.index = 0;
	img_user(&m, 16);
	m.window = 0;
	m.index = 3;
	img_commit(&m);                      /* LSN 4 closes window 0 */
	m.b[bad + REC_HDR_SIZE] ^= 1;
	r = open_img(m.b, IMG_SIZE);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->committed_windows, 1);
	CU_ASSERT_EQUAL(rv->damaged_windows, 1);
	CU_ASSERT_EQUAL(rv->damage[0].lsn, 2);
	CU_ASSERT_EQUAL(rv->damage[0].lost_records, 2);
	CU_ASSERT_EQUAL(count_iterated(r), 0);
	wal_reader_close(r);
	img_free(&m);
}

/* ---- truncated images ----------------------------------------------------- */

static void test_truncated(void)
{
	const struct wal_recovery *rv;
	const struct wal_window *win;
	struct wal_reader *r;
	uint64_t cut;
	size_t n;
	struct img m;

	img_init(&m, IMG_SIZE);
	img_windows(&m, 2, 2, 200);          /* LSN 1-6 */
	img_user(&m, 200);                   /* window 2: LSN 7, 8, 9 */
	cut = img_user(&m, 200) + 100;       /* cut inside LSN 8 */
	img_commit(&m);
	img_windows(&m, 1, 2, 200);          /* window 3: LSN 10-12 */
	r = open_img(m.b, cut);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->note_count, 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(rv->notes[0], "truncated"));
	CU_ASSERT_EQUAL(rv->damage_count, 1);
	CU_ASSERT_EQUAL(rv->damage[0].lsn, 8);
	CU_ASSERT_EQUAL(rv->damage[0].lost_records, 5);
	CU_ASSERT_EQUAL(rv->intact_windows, 2);
	win = wal_reader_windows(r, &n);
	CU_ASSERT_EQUAL_FATAL(n, 3);
	CU_ASSERT_EQUAL(win[2].id, 2);
	CU_ASSERT_EQUAL(win[2].state, WAL_WINDOW_DAMAGED);
	CU_ASSERT_EQUAL(count_iterated(r), 6);
	wal_reader_close(r);
	img_free(&m);
}

/* A truncated copy of a large log (1 TiB declared, 68 KiB present) must be
 * recovered in about the time its bytes take, not the declared ring's: run
 * it in a child with a 5 s alarm. */
static void test_truncated_large_log_is_fast(void)
{
	struct sb sb;
	struct img m;
	int status = 0;
	pid_t pid;

	img_init(&m, IMG_SIZE);
	img_windows(&m, 3, 2, 100);          /* LSN 1-9 in the image */
	img_publish(&m, 30);                 /* the big log committed more */
	CU_ASSERT_EQUAL_FATAL(sb_decode(m.b, &sb), 0);
	sb.size = UINT64_C(1) << 40;
	sb.capacity = sb.size - WAL_DATA_OFF;
	sb_encode(m.b + SB_COPY0_OFF, &sb);
	sb_encode(m.b + SB_COPY1_OFF, &sb);
	fflush(NULL);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		struct wal_reader *r;
		struct wal_error err;
		int ok;

		alarm(5);
		ok = wal_reader_open_buf(m.b, IMG_SIZE, &r, &err) == 0 &&
		     wal_reader_recovery(r)->intact_windows == 3 &&
		     wal_reader_recovery(r)->damage_count == 1;
		_exit(ok ? 0 : 1);
	}
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM);
	CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	img_free(&m);
}

static CU_TestInfo input_tests[] = {
	{ "empty and short buffers", test_short_buffers },
	{ "short prefixes of a log", test_short_prefixes },
	{ "fresh image, nothing committed", test_fresh_image },
	{ "fresh log from the writer", test_fresh_writer_log },
	CU_TEST_INFO_NULL
};

static CU_TestInfo meta_tests[] = {
	{ "commit word names a non-WINDOW record", test_commit_not_window },
	{ "commit word damaged: lenient recovery", test_commit_word_damaged },
	{ "one or both superblock copies damaged", test_superblock_copies },
	{ "superblock magic and version", test_superblock_magic_version },
	{ "torn checkpoint: older slot used", test_torn_checkpoint },
	CU_TEST_INFO_NULL
};

static CU_TestInfo tail_tests[] = {
	{ "torn tail stops the count", test_torn_tail },
	{ "stale record of an older epoch", test_stale_epoch_tail },
	{ "new epoch opening with a PAD", test_epoch_starting_with_pad },
	CU_TEST_INFO_NULL
};

static CU_TestInfo iter_tests[] = {
	{ "fields, order, damaged window skipped", test_iterator },
	{ "PAD records are not iterated", test_iterator_skips_pad },
	{ "resync ignores a record claiming a far window", test_resync_ignores_far_window },
	{ "truncated image", test_truncated },
	{ "truncated large log recovers quickly", test_truncated_large_log_is_fast },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ .pName = "inputs", .pTests = input_tests },
	{ .pName = "metadata", .pTests = meta_tests },
	{ .pName = "tail", .pTests = tail_tests },
	{ .pName = "iterator", .pTests = iter_tests },
	CU_SUITE_INFO_NULL
};

int main(void)
{
	return cu_run(suites);
}

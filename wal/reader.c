/*
 * reader.c - recovery: find what a log committed, and prove it intact.
 *
 * The image is untrusted (a crash, a bit flip or a fuzzer made it).  The
 * scan starts at the checkpointed tail and walks records by LSN up to the
 * commit word's LSN.  Inside that committed part every record must verify;
 * a record that does not is reported, the scan resynchronises on the next
 * valid record, and the windows that lost records are marked damaged and
 * never iterated.  Past the commit point, records are the uncommitted tail:
 * counted, reported and dropped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "diag.h"
#include "format.h"
#include "media.h"
#include "wal.h"

struct wal_reader {
	const uint8_t *buf;
	uint64_t avail;          /* readable bytes of buf */
	struct media media;      /* set when opened by path */
	struct sb sb;
	uint32_t max_epoch;      /* no record may claim a later epoch */
	uint32_t prev_epoch;     /* epoch of the last accepted record */
	struct wal_recovery rec;
	struct wal_window *win;
	size_t nwin, capwin;
};

/* Outcome of looking at one ring position. */
struct slot {
	struct rec_hdr h;
	const uint8_t *hdr;
	uint64_t size;           /* ring bytes of the record */
};

/* Ring bytes too short for a header at the physical end are skipped. */
static uint64_t skip_gap(const struct wal_reader *r, uint64_t pos)
{
	uint64_t to_end = r->sb.capacity - pos % r->sb.capacity;

	return to_end < REC_HDR_SIZE ? pos + to_end : pos;
}

static uint64_t medium_offset(const struct wal_reader *r, uint64_t pos)
{
	return r->sb.data_off + pos % r->sb.capacity;
}

/*
 * Verify the record at logical `pos` (already past any gap).  expect_lsn 0
 * accepts any LSN.  Returns 1 and fills *s, or 0 with `why` set.
 */
static int read_record(const struct wal_reader *r, uint64_t pos, uint64_t expect_lsn,
		       struct slot *s, const char **why)
{
	uint64_t phys = pos % r->sb.capacity, off = r->sb.data_off + phys;
	uint32_t crc;

	if (off + REC_HDR_SIZE > r->avail) {
		*why = "beyond the end of the medium";
		return 0;
	}
	s->hdr = r->buf + off;
	rec_hdr_decode(s->hdr, &s->h);
	if (s->h.magic != REC_MAGIC) {
		*why = "no record header (bad magic)";
		return 0;
	}
	s->size = rec_size(s->h.len);
	if (s->size > r->sb.capacity - phys || off + s->size > r->avail) {
		*why = "record length runs past the ring";
		return 0;
	}
	if (expect_lsn && s->h.lsn != expect_lsn) {
		*why = "LSN out of sequence";
		return 0;
	}
	if (s->h.epoch > r->max_epoch || s->h.epoch < r->prev_epoch) {
		*why = "epoch out of sequence";
		return 0;
	}
	crc = rec_seed(r->sb.log_id, s->h.epoch);
	if (s->h.type != WAL_REC_PAD)
		crc = crc32c(crc, s->hdr + REC_HDR_SIZE, s->h.len);
	if (rec_crc_finish(crc, s->hdr) != s->h.crc) {
		*why = "bad CRC";
		return 0;
	}
	if (s->h.type == 0) {
		*why = "record type 0";
		return 0;
	}
	return 1;
}

static void note(struct wal_reader *r, const char *fmt, ...)
{
	va_list ap;

	if (r->rec.note_count >= sizeof r->rec.notes / sizeof r->rec.notes[0])
		return;
	va_start(ap, fmt);
	vsnprintf(r->rec.notes[r->rec.note_count++], sizeof r->rec.notes[0], fmt, ap);
	va_end(ap);
}

static void damage(struct wal_reader *r, uint64_t offset, uint64_t lsn, const char *why)
{
	struct wal_damage *d;

	if (r->rec.damage_count++ >= sizeof r->rec.damage / sizeof r->rec.damage[0])
		return;
	d = &r->rec.damage[r->rec.damage_count - 1];
	d->offset = offset;
	d->lsn = lsn;
	d->lost_records = 0;
	snprintf(d->reason, sizeof d->reason, "%s", why);
}

/* The finding just added, or NULL when the list was already full. */
static struct wal_damage *last_damage(struct wal_reader *r)
{
	size_t cap = sizeof r->rec.damage / sizeof r->rec.damage[0];

	return r->rec.damage_count <= cap ? &r->rec.damage[r->rec.damage_count - 1] : NULL;
}

static struct wal_window *push_window(struct wal_reader *r, uint64_t id)
{
	struct wal_window *w;

	if (r->nwin == r->capwin) {
		size_t n = r->capwin ? 2 * r->capwin : 64;
		w = realloc(r->win, n * sizeof *w);
		if (!w)
			return NULL;
		r->win = w;
		r->capwin = n;
	}
	w = &r->win[r->nwin++];
	memset(w, 0, sizeof *w);
	w->id = id;
	w->state = WAL_WINDOW_DAMAGED;
	return w;
}

/* Scan state of the window being walked. */
struct cursor {
	uint64_t pos, lsn;       /* next record expected here, with this LSN */
	uint64_t window;         /* its window id and index within the window */
	uint32_t index;
	uint64_t win_pos, win_first_lsn;
	int win_damaged;
};

static int accept_window(struct wal_reader *r, struct cursor *c, const struct slot *s)
{
	struct window_fixed wf;
	struct wal_window *w;
	int ok = s->h.len >= WINDOW_FIXED_SIZE;

	if (ok) {
		window_fixed_decode(s->hdr + REC_HDR_SIZE, &wf);
		ok = wf.extra_len == s->h.len - WINDOW_FIXED_SIZE &&
		     wf.records == c->index + 1 && wf.first_lsn == c->win_first_lsn;
	}
	if (!ok) {
		damage(r, medium_offset(r, c->pos), s->h.lsn, "WINDOW record disagrees with its window");
		c->win_damaged = 1;
	}
	if (!(w = push_window(r, c->window)))
		return WAL_ENOMEM;
	w->epoch = s->h.epoch;
	w->first_lsn = c->win_first_lsn;
	w->last_lsn = s->h.lsn;
	w->pos = c->win_pos;
	w->bytes = c->pos + s->size - c->win_pos;
	if (ok) {
		w->records = wf.records;
		w->commit_ns = wf.commit_ns;
		w->extra = s->hdr + REC_HDR_SIZE + WINDOW_FIXED_SIZE;
		w->extra_len = wf.extra_len;
	}
	if (!c->win_damaged)
		w->state = WAL_WINDOW_INTACT;
	return 0;
}

static void count_record(struct wal_reader *r, const struct slot *s)
{
	unsigned t = s->h.type < 16 ? s->h.type : 0;

	r->rec.records++;
	r->rec.bytes += s->size;
	r->rec.rec_count[t]++;
	r->rec.rec_bytes[t] += s->size;
	if (!r->rec.first_lsn)
		r->rec.first_lsn = s->h.lsn;
	if (!r->rec.first_epoch)
		r->rec.first_epoch = s->h.epoch;
}

/*
 * After a bad record at c->pos, find the next valid record of the committed
 * part within one ring length.  The lost LSNs tell which windows lost data:
 * the current one always (it holds the first lost record), every window
 * that lies wholly in the gap, and the found record's window unless that
 * record is its first.
 */
static int resync(struct wal_reader *r, struct cursor *c, uint64_t limit_lsn, uint64_t end)
{
	struct slot s;
	const char *why;
	struct wal_damage *d = last_damage(r);

	for (uint64_t q = skip_gap(r, c->pos + REC_ALIGN); q < end; q = skip_gap(r, q + REC_ALIGN)) {
		uint64_t off = medium_offset(r, q);
		if (off + REC_HDR_SIZE > r->avail) {
			/* Truncated medium: nothing more on this lap. */
			q += r->sb.capacity - q % r->sb.capacity - REC_ALIGN;
			continue;
		}
		if (get32(r->buf + off) != REC_MAGIC)
			continue;
		/* Each lost record took at least a header's bytes before q, and
		 * each window at least one record: a candidate claiming more
		 * is not one of ours (and must not make us list its gap). */
		if (!read_record(r, q, 0, &s, &why) || s.h.lsn <= c->lsn || s.h.lsn > limit_lsn ||
		    s.h.window < c->window || s.h.index > s.h.lsn ||
		    s.h.lsn - c->lsn > (q - c->pos) / REC_HDR_SIZE ||
		    s.h.window - c->window > s.h.lsn - c->lsn)
			continue;
		if (d)
			d->lost_records = s.h.lsn - c->lsn;
		if (s.h.window > c->window) {
			struct wal_window *w = push_window(r, c->window);
			if (!w)
				return WAL_ENOMEM;
			w->first_lsn = c->win_first_lsn;
			w->pos = c->win_pos;
			for (uint64_t id = c->window + 1; id < s.h.window; id++)
				if (!push_window(r, id))
					return WAL_ENOMEM;
			c->window = s.h.window;
			c->win_first_lsn = s.h.lsn - s.h.index;
			c->win_pos = q;
			c->win_damaged = s.h.index > 0;
		} else {
			c->win_damaged = 1;
		}
		c->pos = q;
		c->lsn = s.h.lsn;
		c->index = s.h.index;
		return 1;
	}
	return 0;
}

/* Take a verified record at the cursor and move past it. */
static int accept_record(struct wal_reader *r, struct cursor *c, const struct slot *s)
{
	int ret;

	if (s->h.window != c->window || s->h.index != c->index) {
		damage(r, medium_offset(r, c->pos), c->lsn, "record claims another window");
		c->win_damaged = 1;
	}
	if (s->h.epoch > r->prev_epoch)
		r->prev_epoch = s->h.epoch;
	count_record(r, s);
	if (s->h.type == WAL_REC_WINDOW && (ret = accept_window(r, c, s)) < 0)
		return ret;
	c->pos += s->size;
	c->lsn++;
	if (s->h.type != WAL_REC_WINDOW) {
		c->index++;
		return 0;
	}
	c->window++;
	c->index = 0;
	c->win_first_lsn = c->lsn;
	c->win_pos = c->pos;
	c->win_damaged = 0;
	return 0;
}

/* Nothing valid follows a bad record: the rest of the committed part is lost. */
static int lose_rest(struct wal_reader *r, const struct cursor *c, uint64_t commit_lsn)
{
	struct wal_window *w = push_window(r, c->window);

	if (!w)
		return WAL_ENOMEM;
	w->first_lsn = c->win_first_lsn;
	w->pos = c->win_pos;
	if (last_damage(r))
		last_damage(r)->lost_records = commit_lsn - c->lsn + 1;
	return 0;
}

/*
 * Walk the committed part: records c->lsn .. commit_lsn.  `lenient` is for
 * a damaged commit word: trust every valid record and end at the last
 * WINDOW record seen.
 */
static int scan_committed(struct wal_reader *r, struct cursor *c, uint64_t commit_lsn, int lenient)
{
	uint64_t end = r->rec.tail_pos + r->sb.capacity;
	struct cursor committed = *c;
	struct wal_recovery counted = r->rec;
	struct slot s;
	const char *why = "commit point not found within one ring length";
	int ret;

	while (c->lsn <= commit_lsn) {
		c->pos = skip_gap(r, c->pos);
		if (c->pos >= end || !read_record(r, c->pos, c->lsn, &s, &why)) {
			if (lenient)
				break;
			damage(r, medium_offset(r, c->pos), c->lsn, why);
			ret = c->pos < end ? resync(r, c, commit_lsn, end) : 0;
			if (ret < 0)
				return ret;
			if (ret == 0)
				return lose_rest(r, c, commit_lsn);
			continue;
		}
		if ((ret = accept_record(r, c, &s)) < 0)
			return ret;
		if (s.h.type == WAL_REC_WINDOW) {
			committed = *c;
			if (lenient)
				counted = r->rec;
		}
	}
	if (!lenient && committed.lsn != c->lsn)
		damage(r, medium_offset(r, committed.pos), commit_lsn, "commit point is not a WINDOW record");
	if (lenient) {
		/* Records after the last WINDOW record were never committed. */
		*c = committed;
		counted.damage_count = r->rec.damage_count;
		memcpy(counted.damage, r->rec.damage, sizeof counted.damage);
		r->rec = counted;
	}
	return 0;
}

/* Count the uncommitted records after the commit point, then stop. */
static void scan_tail(struct wal_reader *r, struct cursor *c)
{
	uint64_t end = r->rec.tail_pos + r->sb.capacity, pos = c->pos, lsn = c->lsn;
	struct slot s;
	const char *why = "end of the ring";

	for (pos = skip_gap(r, pos); pos < end; pos = skip_gap(r, pos)) {
		if (!read_record(r, pos, lsn, &s, &why))
			break;
		if (s.h.epoch > r->prev_epoch) {
			/* A new epoch opens with its EPOCH record, or with the
			 * PAD that had to precede it at the end of a lap. */
			if (s.h.type != WAL_REC_EPOCH && s.h.type != WAL_REC_PAD) {
				why = "epoch changes without an EPOCH record";
				break;
			}
			r->prev_epoch = s.h.epoch;
		}
		r->rec.tail_records++;
		r->rec.tail_bytes += s.size;
		pos += s.size;
		lsn++;
	}
	r->rec.tail_end_pos = pos;
	snprintf(r->rec.tail_stop, sizeof r->rec.tail_stop, "LSN %llu at offset %llu: %s",
		 (unsigned long long)lsn, (unsigned long long)medium_offset(r, pos), why);
}

static int read_superblock(struct wal_reader *r, struct wal_error *err)
{
	static const uint32_t off[2] = { SB_COPY0_OFF, SB_COPY1_OFF };
	struct sb copy[2];
	int st[2];

	for (int i = 0; i < 2; i++)
		st[i] = r->avail >= off[i] + SB_SIZE ? sb_decode(r->buf + off[i], &copy[i]) : WAL_ENOTLOG;
	if (st[0] && st[1]) {
		if (st[0] == WAL_ENOTLOG && st[1] == WAL_ENOTLOG)
			return wal_fail(err, WAL_ENOTLOG, "not a moeft log (no superblock magic)");
		if (st[0] == WAL_EVERSION || st[1] == WAL_EVERSION)
			return wal_fail(err, WAL_EVERSION, "log version %u is not supported (this moeft reads %u)",
					st[0] == WAL_EVERSION ? copy[0].version : copy[1].version, WAL_VERSION);
		return wal_fail(err, WAL_ECORRUPT, "both superblock copies are damaged");
	}
	for (int i = 0; i < 2; i++)
		if (st[i])
			damage(r, off[i], 0, st[i] == WAL_ENOTLOG ? "superblock copy missing"
								  : "superblock copy damaged");
	r->sb = copy[st[0] ? 1 : 0];
	if (!st[0] && !st[1] && memcmp(r->buf + SB_COPY0_OFF, r->buf + SB_COPY1_OFF, SB_SIZE) != 0)
		damage(r, SB_COPY1_OFF, 0, "superblock copies disagree");
	if (r->sb.data_off != WAL_DATA_OFF || r->sb.capacity < REC_ALIGN * 64 ||
	    r->sb.capacity % REC_ALIGN || r->sb.size < r->sb.data_off ||
	    r->sb.capacity > r->sb.size - r->sb.data_off)
		return wal_fail(err, WAL_ECORRUPT, "superblock geometry is impossible");
	if (r->avail < r->sb.size)
		note(r, "medium holds %llu of the log's %llu bytes (truncated)",
		     (unsigned long long)r->avail, (unsigned long long)r->sb.size);
	else
		r->avail = r->sb.size;
	return 0;
}

static int read_checkpoint(struct wal_reader *r, struct ckpt *ck, struct wal_error *err)
{
	static const uint32_t off[2] = { CKPT_SLOT0_OFF, CKPT_SLOT1_OFF };
	static const uint8_t zero[CKPT_SIZE];
	struct ckpt c[2] = { { 0 }, { 0 } };
	int ok[2];

	for (int i = 0; i < 2; i++)
		ok[i] = r->avail >= off[i] + CKPT_SIZE && ckpt_decode(r->buf + off[i], &c[i], r->sb.log_id);
	if (!ok[0] && !ok[1])
		return wal_fail(err, WAL_ECORRUPT, "no valid checkpoint copy");
	*ck = c[ok[0] && (!ok[1] || c[0].gen > c[1].gen) ? 0 : 1];
	r->max_epoch = ck->epoch;
	/* A slot never written is zero.  An invalid written one is a torn
	 * checkpoint or damage; either way it may have been the newer one,
	 * whose epoch (one more: every epoch start writes a checkpoint) may
	 * already have records. */
	for (int i = 0; i < 2; i++)
		if (!ok[i] && r->avail >= off[i] + CKPT_SIZE && memcmp(r->buf + off[i], zero, CKPT_SIZE)) {
			note(r, "checkpoint copy %d invalid (torn write or damage); copy %d used", i, !i);
			r->max_epoch = ck->epoch + 1;
		}
	if (ck->tail_pos > UINT64_MAX / 4 || ck->tail_lsn == 0 || ck->tail_lsn > COMMIT_LSN_MASK)
		return wal_fail(err, WAL_ECORRUPT, "checkpoint tail is out of range");
	return 0;
}

static int recover(struct wal_reader *r, struct wal_error *err)
{
	struct ckpt ck = { 0 };
	struct cursor c;
	uint64_t commit_lsn = 0;
	int lenient = 0, ret;

	if ((ret = read_superblock(r, err)) < 0 || (ret = read_checkpoint(r, &ck, err)) < 0)
		return ret;
	r->rec.version = r->sb.version;
	r->rec.log_id = r->sb.log_id;
	r->rec.size = r->sb.size;
	r->rec.capacity = r->sb.capacity;
	r->rec.data_off = r->sb.data_off;
	r->rec.ckpt_gen = ck.gen;
	r->rec.tail_pos = ck.tail_pos;
	r->rec.tail_lsn = ck.tail_lsn;
	r->rec.tail_window = ck.tail_window;
	if (r->avail < COMMIT_WORD_OFF + 8 ||
	    !commit_word_decode(get64(r->buf + COMMIT_WORD_OFF), r->sb.log_id, &commit_lsn)) {
		damage(r, COMMIT_WORD_OFF, 0, "commit word damaged; trusting the last valid WINDOW record");
		commit_lsn = COMMIT_LSN_MASK;
		lenient = 1;
	} else if (commit_lsn + 1 < ck.tail_lsn) {
		damage(r, COMMIT_WORD_OFF, commit_lsn, "commit point lies before the checkpointed tail");
		commit_lsn = ck.tail_lsn - 1;
	}
	c = (struct cursor){ .pos = ck.tail_pos, .lsn = ck.tail_lsn, .window = ck.tail_window,
			     .win_pos = ck.tail_pos, .win_first_lsn = ck.tail_lsn };
	if ((ret = scan_committed(r, &c, commit_lsn, lenient)) < 0)
		return wal_fail(err, ret, "out of memory during recovery");
	r->rec.last_committed_lsn = c.lsn - 1;
	r->rec.head_pos = c.pos;
	for (size_t i = 0; i < r->nwin; i++) {
		if (r->win[i].state == WAL_WINDOW_INTACT)
			r->rec.intact_windows++;
		else
			r->rec.damaged_windows++;
	}
	r->rec.committed_windows = r->nwin;
	if (!r->rec.damage_count)
		scan_tail(r, &c);
	/* Tail records count too: a new writer must not reuse their epoch. */
	r->rec.epoch = r->prev_epoch > ck.epoch ? r->prev_epoch : ck.epoch;
	return 0;
}

int wal_reader_open_buf(const void *buf, size_t len, struct wal_reader **out, struct wal_error *err)
{
	struct wal_reader *r = calloc(1, sizeof *r);
	int ret;

	*out = NULL;
	if (!r)
		return wal_fail(err, WAL_ENOMEM, "out of memory");
	r->buf = buf;
	r->avail = len;
	r->media.fd = -1;
	if ((ret = recover(r, err)) < 0) {
		wal_reader_close(r);
		return ret;
	}
	*out = r;
	return 0;
}

int wal_reader_open_path(const char *path, struct wal_reader **out, struct wal_error *err)
{
	struct media m;
	int ret;

	*out = NULL;
	if ((ret = media_open(&m, path, MEDIA_READ, 0, -1, 0, err)) < 0)
		return ret;
	if ((ret = wal_reader_open_buf(m.base, m.size, out, err)) < 0) {
		size_t n = strlen(err ? err->msg : "");
		if (err && n + strlen(path) + 2 < sizeof err->msg) {
			memmove(err->msg + strlen(path) + 2, err->msg, n + 1);
			memcpy(err->msg, path, strlen(path));
			memcpy(err->msg + strlen(path), ": ", 2);
		}
		media_close(&m);
		return ret;
	}
	(*out)->media = m;
	return 0;
}

void wal_reader_close(struct wal_reader *r)
{
	if (!r)
		return;
	if (r->media.base)
		media_close(&r->media);
	free(r->win);
	free(r);
}

const struct wal_recovery *wal_reader_recovery(const struct wal_reader *r)
{
	return &r->rec;
}

const struct wal_window *wal_reader_windows(const struct wal_reader *r, size_t *count)
{
	*count = r->nwin;
	return r->win;
}

void wal_iter_init(struct wal_iter *it, const struct wal_reader *r)
{
	memset(it, 0, sizeof *it);
	it->r = r;
}

int wal_iter_next(struct wal_iter *it, struct wal_record *rec)
{
	const struct wal_reader *r = it->r;
	struct rec_hdr h;

	for (;;) {
		const uint8_t *p;
		if (!it->left) {
			while (it->window < r->nwin && r->win[it->window].state != WAL_WINDOW_INTACT)
				it->window++;
			if (it->window >= r->nwin)
				return 0;
			it->pos = r->win[it->window].pos;
			it->left = r->win[it->window].records;
			it->window++;
		}
		it->pos = skip_gap(r, it->pos);
		p = r->buf + medium_offset(r, it->pos);
		rec_hdr_decode(p, &h);
		it->pos += rec_size(h.len);
		it->left--;
		if (h.type == WAL_REC_PAD)
			continue;
		rec->type = h.type;
		rec->len = h.len;
		rec->index = h.index;
		rec->epoch = h.epoch;
		rec->lsn = h.lsn;
		rec->window = h.window;
		rec->offset = (uint64_t)(p - r->buf);
		rec->payload = p + REC_HDR_SIZE;
		return 1;
	}
}

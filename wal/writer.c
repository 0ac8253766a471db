/*
 * writer.c - append records, commit windows, reclaim space.
 *
 * One mutex orders every append and commit (one LSN order, one commit
 * order); a payload is checksummed in the same pass that copies it in.  A commit makes the
 * window's records durable, then publishes the WINDOW record's LSN with one
 * aligned 8-byte store: the single instant at which the window becomes
 * committed.  Space is a ring with a checkpointed tail that only moves over
 * whole windows, and never past the start of the last committed window, so
 * a committed window survives until a newer one supersedes it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "blank.h"
#include "crc32c.h"
#include "diag.h"
#include "format.h"
#include "media.h"
#include "record.h"
#include "wal.h"

#define WAL_DEFAULT_SIZE (UINT64_C(64) << 20)

struct wal {
	pthread_mutex_t lock;
	struct media m;
	struct sb sb;
	uint8_t *ring;
	uint64_t cap;
	uint32_t epoch, seed;
	struct ckpt ckpt;        /* last durable checkpoint */
	uint64_t head;           /* logical end of the last appended record */
	uint64_t committed_end;  /* logical end of the last WINDOW record */
	uint64_t next_lsn, last_commit_lsn;
	/* the open window */
	uint64_t window, win_pos, win_first_lsn;
	uint32_t win_index;
	/* where wal_abort takes the head back to: after the last commit, or
	 * after the epoch's EPOCH record while the epoch has committed nothing */
	uint64_t open_head, open_lsn;
	uint32_t open_index;
	/* start of the last committed window: the tail never passes it */
	int have_commit;
	uint64_t keep_pos, keep_lsn, keep_window;
	int ended;               /* wal_end: nothing more is written */
	struct wal_stats st;
};

void wal_options_init(struct wal_options *opt)
{
	opt->size = 0;
	opt->numa_node = -1;
	opt->flags = WAL_OPEN_CREATE;
}

const char *wal_media_name(int media)
{
	switch (media) {
	case WAL_MEDIA_SHM: return "shared memory";
	case WAL_MEDIA_DAXFILE: return "DAX file";
	case WAL_MEDIA_DEVDAX: return "device DAX";
	}
	return "unknown";
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Persist [pos, pos+len) of the ring, which may wrap. */
static void persist_ring(struct wal *w, uint64_t pos, uint64_t len)
{
	while (len) {
		uint64_t phys = pos % w->cap, n = w->cap - phys < len ? w->cap - phys : len;
		media_persist(&w->m, w->ring + phys, n);
		pos += n;
		len -= n;
	}
}

static void write_ckpt(struct wal *w, uint64_t pos, uint64_t lsn, uint64_t window)
{
	struct ckpt c = { .gen = w->ckpt.gen + 1, .epoch = w->epoch,
			  .tail_pos = pos, .tail_lsn = lsn, .tail_window = window };
	uint8_t *slot = w->m.base + (c.gen & 1 ? CKPT_SLOT1_OFF : CKPT_SLOT0_OFF);

	ckpt_encode(slot, &c, w->sb.log_id);
	media_persist(&w->m, slot, CKPT_SIZE);
	w->ckpt = c;
}

static void store_commit_word(struct wal *w, uint64_t lsn)
{
	uint64_t *word = (uint64_t *)(void *)(w->m.base + COMMIT_WORD_OFF);

	__atomic_store_n(word, commit_word_encode(lsn, w->sb.log_id), __ATOMIC_RELEASE);
	media_persist(&w->m, word, sizeof *word);
}

/*
 * Lay out an empty log.  The superblock copies go last, each with its magic
 * written after the rest, so a crash mid-format never leaves a copy that
 * looks valid over missing metadata.
 */
static int format(struct wal *w, struct wal_error *err)
{
	uint8_t buf[SB_SIZE];
	struct sb sb = { .version = WAL_VERSION, .created_ns = now_ns(), .size = w->m.size,
			 .data_off = WAL_DATA_OFF };

	if (w->m.size < WAL_DATA_OFF + 64 * 1024)
		return wal_fail(err, WAL_EINVAL, "medium of %llu bytes is too small for a log",
				(unsigned long long)w->m.size);
	sb.capacity = (w->m.size - WAL_DATA_OFF) & ~(uint64_t)(REC_ALIGN - 1);
	if (getrandom(&sb.log_id, sizeof sb.log_id, 0) != sizeof sb.log_id)
		sb.log_id = sb.created_ns ^ (uint64_t)getpid() << 32;
	w->sb = sb;
	memset(w->m.base, 0, WAL_DATA_OFF);
	w->ckpt = (struct ckpt){ 0 };
	write_ckpt(w, 0, 1, 0);
	store_commit_word(w, 0);
	sb_encode(buf, &sb);
	for (int i = 1; i >= 0; i--) {
		uint8_t *copy = w->m.base + (i ? SB_COPY1_OFF : SB_COPY0_OFF);
		memcpy(copy + sizeof SB_MAGIC, buf + sizeof SB_MAGIC, SB_SIZE - sizeof SB_MAGIC);
		media_persist(&w->m, copy, SB_SIZE);
		memcpy(copy, buf, sizeof SB_MAGIC);
		media_persist(&w->m, copy, SB_SIZE);
	}
	return 0;
}

/* A new medium is formatted before it appears at its path (media.h). */
static int format_new(struct media *m, void *w, struct wal_error *err)
{
	(void)m;
	return format(w, err);
}

/*
 * Zero [pos, pos+len) of the ring, last byte first.  The dropped tail of an
 * epoch reuses LSNs and window ids that the next epoch hands out again; left
 * in place, its valid records could be taken for the new epoch's by a
 * reader resynchronising after damage.  Erasing from the end keeps what is
 * left after a crash mid-erase a valid tail prefix, which the next open
 * erases in turn.
 */
static void erase_backwards(struct wal *w, uint64_t pos, uint64_t len)
{
	while (len) {
		uint64_t end = pos + len, phys = (end - 1) % w->cap + 1;
		uint64_t n = phys < len ? phys : len;
		n = n < 4096 ? n : 4096;
		memset(w->ring + phys - n, 0, n);
		media_persist(&w->m, w->ring + phys - n, n);
		len -= n;
	}
}

/* Continue after what an existing log committed, in a new epoch. */
static int resume(struct wal *w, const char *path, int may_format, struct wal_error *err)
{
	struct wal_reader *r;
	const struct wal_recovery *rec;
	const struct wal_window *win;
	size_t nwin;
	int ret = wal_reader_open_buf(w->m.base, w->m.size, &r, err);

	if (ret < 0)
		return ret;
	rec = wal_reader_recovery(r);
	win = wal_reader_windows(r, &nwin);
	if (rec->damage_count && !rec->last_committed_lsn && !nwin && may_format) {
		/* Nothing was ever committed (e.g. a crash while formatting). */
		wal_logf(WAL_LOG_WARN, "%s: unreadable log with nothing committed; formatting it", path);
		wal_reader_close(r);
		ret = format(w, err);
		return ret < 0 ? ret : resume(w, path, 0, err);
	}
	if (rec->damage_count) {
		ret = wal_fail(err, WAL_ECORRUPT,
			       "%s has damage inside its committed part (%s at offset %llu); "
			       "run 'moeft verify --wal %s', format it to start over",
			       path, rec->damage[0].reason, (unsigned long long)rec->damage[0].offset, path);
		wal_reader_close(r);
		return ret;
	}
	w->sb = (struct sb){ .version = rec->version, .log_id = rec->log_id, .size = rec->size,
			     .data_off = rec->data_off, .capacity = rec->capacity };
	w->ring = w->m.base + w->sb.data_off;
	w->cap = w->sb.capacity;
	if (rec->tail_records) {
		wal_logf(WAL_LOG_INFO, "%s: dropping an uncommitted tail of %llu records", path,
			 (unsigned long long)rec->tail_records);
		erase_backwards(w, rec->head_pos, rec->tail_end_pos - rec->head_pos);
	}
	w->ckpt = (struct ckpt){ .gen = rec->ckpt_gen, .tail_pos = rec->tail_pos,
				 .tail_lsn = rec->tail_lsn, .tail_window = rec->tail_window };
	w->epoch = rec->epoch + 1;
	w->head = w->committed_end = rec->head_pos;
	w->last_commit_lsn = rec->last_committed_lsn;
	w->next_lsn = rec->last_committed_lsn + 1;
	w->window = nwin ? win[nwin - 1].id + 1 : rec->tail_window;
	if (nwin) {
		w->have_commit = 1;
		w->keep_pos = win[nwin - 1].pos;
		w->keep_lsn = win[nwin - 1].first_lsn;
		w->keep_window = win[nwin - 1].id;
	}
	wal_reader_close(r);
	return 0;
}

/* Walk from `*pos` past the next WINDOW record: the start of the next window. */
static int skip_window(struct wal *w, uint64_t *pos, uint64_t *lsn, uint64_t *window)
{
	struct rec_hdr h;

	do {
		uint64_t to_end = w->cap - *pos % w->cap;
		if (to_end < REC_HDR_SIZE)
			*pos += to_end;
		rec_hdr_decode(w->ring + *pos % w->cap, &h);
		if (h.magic != REC_MAGIC || h.lsn != *lsn)
			return -1; /* cannot happen: the log was verified at open */
		*pos += rec_size(h.len);
		*lsn = h.lsn + 1;
	} while (h.type != WAL_REC_WINDOW);
	*window = h.window + 1;
	return 0;
}

/* Free at least `need` ring bytes by moving the tail over old windows. */
static int reclaim(struct wal *w, uint64_t need)
{
	uint64_t pos = w->ckpt.tail_pos, lsn = w->ckpt.tail_lsn, window = w->ckpt.tail_window;

	while (w->cap - (w->head - pos) < need) {
		if (!w->have_commit || pos >= w->keep_pos || skip_window(w, &pos, &lsn, &window) < 0) {
			w->st.full_errors++;
			return WAL_EFULL;
		}
	}
	if (pos != w->ckpt.tail_pos) {
		/* Durable before any byte of the freed space is reused. */
		write_ckpt(w, pos, lsn, window);
		w->st.reclaims++;
	}
	return 0;
}

/*
 * Stamp and place one record at the head; the caller made room.  The
 * payload is checksummed while it is copied; a NULL `a` leaves its alen
 * bytes as they are (PAD filler, which the CRC does not cover).
 */
static uint64_t place(struct wal *w, unsigned type, const void *a, uint32_t alen,
		      const void *b, uint32_t blen)
{
	uint8_t *p = w->ring + w->head % w->cap, hdr[REC_HDR_SIZE];
	struct rec_hdr h = { .magic = REC_MAGIC, .type = (uint16_t)type, .len = alen + blen,
			     .index = w->win_index, .lsn = w->next_lsn, .window = w->window,
			     .epoch = w->epoch };
	uint32_t crc = w->seed;

	if (a)
		crc = crc32c_copy(crc, p + REC_HDR_SIZE, a, alen);
	if (blen)
		crc = crc32c_copy(crc, p + REC_HDR_SIZE + alen, b, blen);
	rec_hdr_encode(hdr, &h);
	put32(hdr + REC_CRC_OFF, rec_crc_finish(crc, hdr));
	memcpy(p, hdr, REC_HDR_SIZE);
	w->head += rec_size(h.len);
	w->win_index++;
	return w->next_lsn++;
}

/*
 * Make room for a record of `len` payload bytes at the head: records never
 * straddle the physical end of the ring, so the rest of the lap becomes a
 * PAD record (or a gap, when too short for a header).
 */
static int make_room(struct wal *w, uint32_t len)
{
	uint64_t need = rec_size(len), to_end = w->cap - w->head % w->cap;
	uint64_t skip = to_end < need ? to_end : 0;
	int ret;

	if (need > w->cap / 2)
		return WAL_E2BIG;
	if (w->cap - (w->head - w->ckpt.tail_pos) < skip + need && (ret = reclaim(w, skip + need)) < 0)
		return ret;
	if (skip >= REC_HDR_SIZE)
		place(w, WAL_REC_PAD, NULL, (uint32_t)(skip - REC_HDR_SIZE), NULL, 0);
	else
		w->head += skip;
	return 0;
}

static int64_t append_locked(struct wal *w, unsigned type, const void *a, uint32_t alen,
			     const void *b, uint32_t blen)
{
	int ret = w->ended ? WAL_EENDED : make_room(w, alen + blen);

	if (ret < 0)
		return ret;
	w->st.appends++;
	w->st.append_bytes += alen + blen;
	return (int64_t)place(w, type, a, alen, b, blen);
}

int64_t wal_append(struct wal *w, unsigned type, const void *payload, uint32_t len)
{
	int64_t ret;

	if (!w || type == 0 || type == WAL_REC_PAD || type == WAL_REC_WINDOW ||
	    type == WAL_REC_EPOCH || type == WAL_REC_EXIT || type > 0xffff || (len && !payload))
		return WAL_EINVAL;
	pthread_mutex_lock(&w->lock);
	ret = append_locked(w, type, len ? payload : NULL, len, NULL, 0);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

/* What the open window holds so far is kept by wal_abort. */
static void mark_open(struct wal *w)
{
	w->open_head = w->head;
	w->open_lsn = w->next_lsn;
	w->open_index = w->win_index;
}

/* Close the open window; the lock is held.  Async-signal-safe (see
 * wal_append_crash): stores, cache flushes and clock_gettime only. */
static int commit_locked(struct wal *w, const void *extra, uint32_t extra_len,
			 struct wal_commit_info *info)
{
	uint8_t fixed[WINDOW_FIXED_SIZE];
	struct window_fixed wf;
	uint64_t lsn;
	int ret;

	if (w->ended)
		return WAL_EENDED;
	if ((ret = make_room(w, WINDOW_FIXED_SIZE + extra_len)) < 0)
		return ret;
	wf = (struct window_fixed){ .first_lsn = w->win_first_lsn, .records = w->win_index + 1,
				    .extra_len = extra_len, .commit_ns = now_ns(),
				    .bytes = w->head + rec_size(WINDOW_FIXED_SIZE + extra_len) - w->win_pos };
	window_fixed_encode(fixed, &wf);
	lsn = place(w, WAL_REC_WINDOW, fixed, WINDOW_FIXED_SIZE, extra, extra_len);
	persist_ring(w, w->committed_end, w->head - w->committed_end);
	store_commit_word(w, lsn); /* the commit point */
	if (info)
		*info = (struct wal_commit_info){ .window = w->window, .lsn = lsn,
						  .first_lsn = wf.first_lsn, .records = wf.records,
						  .bytes = wf.bytes };
	w->have_commit = 1;
	w->keep_pos = w->win_pos;
	w->keep_lsn = w->win_first_lsn;
	w->keep_window = w->window;
	w->last_commit_lsn = lsn;
	w->committed_end = w->head;
	w->window++;
	w->win_index = 0;
	w->win_first_lsn = w->next_lsn;
	w->win_pos = w->head;
	w->st.commits++;
	mark_open(w);
	return 0;
}

int wal_commit(struct wal *w, const void *extra, uint32_t extra_len, struct wal_commit_info *info)
{
	int ret;

	if (!w || (extra_len && !extra) || extra_len > UINT32_MAX - WINDOW_FIXED_SIZE)
		return WAL_EINVAL;
	pthread_mutex_lock(&w->lock);
	ret = commit_locked(w, extra, extra_len, info);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

/*
 * From a signal handler: everything on this path is a store into the
 * mapping, a cache-line flush or clock_gettime, and the checksum tables
 * were built when wal_open checksummed the EPOCH record.  The lock is only
 * tried: it may be held by the very thread the signal interrupted, and
 * waiting for it would hang a dying process.
 */
static void abort_locked(struct wal *w)
{
	if (w->head > w->open_head) {
		erase_backwards(w, w->open_head, w->head - w->open_head);
		w->head = w->open_head;
		w->next_lsn = w->open_lsn;
		w->win_index = w->open_index;
		w->st.aborts++;
	}
}

void wal_abort(struct wal *w)
{
	pthread_mutex_lock(&w->lock);
	abort_locked(w);
	pthread_mutex_unlock(&w->lock);
}

/* The lock is held; async-signal-safe, as commit_locked. */
static int end_locked(struct wal *w, const void *payload, uint32_t len)
{
	int64_t lsn;
	int ret;

	abort_locked(w);
	lsn = append_locked(w, WAL_REC_EXIT, len ? payload : NULL, len, NULL, 0);
	ret = lsn < 0 ? (int)lsn : commit_locked(w, NULL, 0, NULL);
	if (ret == 0)
		w->ended = 1;
	else if (lsn > 0)
		abort_locked(w);
	return ret;
}

int wal_end(struct wal *w, const void *payload, uint32_t len)
{
	int ret;

	if (!w || (len && !payload))
		return WAL_EINVAL;
	pthread_mutex_lock(&w->lock);
	ret = end_locked(w, payload, len);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

int wal_end_signal(struct wal *w, const void *payload, uint32_t len)
{
	int ret;

	if (!w || (len && !payload))
		return WAL_EINVAL;
	if (pthread_mutex_trylock(&w->lock) != 0)
		return WAL_EBUSY;
	ret = end_locked(w, payload, len);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

int wal_append_crash(struct wal *w, const void *payload, uint32_t len)
{
	int64_t lsn;
	int ret;

	if (!w || !payload || !len)
		return WAL_EINVAL;
	if (pthread_mutex_trylock(&w->lock) != 0)
		return WAL_EBUSY;
	lsn = append_locked(w, WAL_REC_CRASH, payload, len, NULL, 0);
	ret = lsn < 0 ? (int)lsn : commit_locked(w, NULL, 0, NULL);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

int wal_checkpoint(struct wal *w)
{
	if (!w)
		return WAL_EINVAL;
	pthread_mutex_lock(&w->lock);
	if (w->have_commit && w->ckpt.tail_pos != w->keep_pos)
		write_ckpt(w, w->keep_pos, w->keep_lsn, w->keep_window);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

/* Every epoch opens with an EPOCH record naming what it continues from. */
static int start_epoch(struct wal *w, uint32_t prev_epoch)
{
	uint8_t buf[EPOCH_PAYLOAD_SIZE];
	struct rec_epoch e = { .prev_epoch = prev_epoch, .prev_commit_lsn = w->last_commit_lsn,
			       .pid = (uint32_t)getpid(), .start_ns = now_ns() };
	int64_t ret;

	w->seed = rec_seed(w->sb.log_id, w->epoch);
	write_ckpt(w, w->ckpt.tail_pos, w->ckpt.tail_lsn, w->ckpt.tail_window);
	w->win_pos = w->head;
	w->win_first_lsn = w->next_lsn;
	rec_epoch_encode(buf, &e);
	ret = append_locked(w, WAL_REC_EPOCH, buf, sizeof buf, NULL, 0);
	if (ret < 0)
		return (int)ret;
	mark_open(w);
	return 0;
}

int wal_open(const char *path, const struct wal_options *opt, struct wal **out,
	     struct wal_error *err)
{
	struct wal_options defaults;
	struct wal *w;
	int ret;

	*out = NULL;
	if (!path || !*path)
		return wal_fail(err, WAL_EINVAL, "no log path given");
	if (!opt) {
		wal_options_init(&defaults);
		opt = &defaults;
	}
	if (!(w = calloc(1, sizeof *w)))
		return wal_fail(err, WAL_ENOMEM, "out of memory");
	w->m.fd = -1;
	pthread_mutex_init(&w->lock, NULL);
	ret = media_open_init(&w->m, path, MEDIA_WRITE, opt->size ? opt->size : WAL_DEFAULT_SIZE,
			      opt->numa_node, opt->flags, format_new, w, err);
	if (ret == 0 && !w->m.created) {
		int state = opt->flags & WAL_OPEN_FORMAT ? WAL_MEDIUM_BLANK :
			    wal_medium_state(&w->m);

		if (state == WAL_MEDIUM_BLANK)
			ret = format(w, err);
		else if (state == WAL_MEDIUM_FOREIGN)
			ret = wal_fail(err, WAL_ENOTLOG, "%s holds data that is not a moeft log; "
				       "refusing to overwrite it", path);
	}
	if (ret == 0)
		ret = resume(w, path, 1, err);
	if (ret == 0) {
		ret = start_epoch(w, w->epoch - 1);
		if (ret < 0)
			wal_fail(err, ret, "%s: cannot start a new epoch: %s", path, wal_strerror(ret));
	}
	if (ret < 0) {
		wal_close(w);
		return ret;
	}
	*out = w;
	return 0;
}

void wal_close(struct wal *w)
{
	if (!w)
		return;
	media_close(&w->m);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

void wal_stats(struct wal *w, struct wal_stats *st)
{
	pthread_mutex_lock(&w->lock);
	*st = w->st;
	st->media = w->m.kind;
	st->numa_node = w->m.numa_node;
	st->size = w->m.size;
	st->capacity = w->cap;
	st->used = w->head - w->ckpt.tail_pos;
	st->epoch = w->epoch;
	st->next_lsn = w->next_lsn;
	st->last_committed_lsn = w->last_commit_lsn;
	st->open_window = w->window;
	st->log_id = w->sb.log_id;
	pthread_mutex_unlock(&w->lock);
}

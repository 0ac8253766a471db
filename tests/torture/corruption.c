/*
 * corruption.c - damage a log the ways a medium can, and hold the reader
 * (and `moeft verify`) to exactly the windows it must give up.
 *
 * One log is built through the API: five epochs, a ring that wrapped more
 * than twice, uncommitted tails dropped between epochs (one of them under
 * the PAD record of the next epoch) and an uncommitted tail at the end.
 * A map of every committed record's bytes, PAD records included (walked
 * with format.h), gives the expectation of each trial on a private copy of
 * the image: a window is damaged exactly when one of its records changed
 * a CRC-covered byte or lost part of its slot to a truncation; it may be
 * missing from the list only when every record of it is unreadable and
 * nothing readable follows; every intact window iterates exactly what its
 * writer committed.  Kinds: bit flips in committed records, zeroed ranges,
 * bit flips in the uncommitted tail (which may cost tail records only),
 * truncations, and flips in a superblock copy, the commit word or a
 * checkpoint slot.  The first trials of each kind also run `moeft verify`
 * on the damaged copy: its exit status and its JSON list of damaged
 * windows must match.
 *
 * Usage: corruption [MOEFT_BINARY].  MOEFT_CORRUPTION_TRIALS (default 300)
 * and MOEFT_CORRUPTION_SEED pick the trials; each seed is deterministic.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "common.h"
#include "format.h"

#define LOG_SIZE (WAL_DATA_OFF + (256u << 10))
#define MAX_RECORD (8u << 10)
#define CLI_TRIALS 10u      /* first trials of each kind also run moeft verify */
#define MAX_IDS 4096u

enum kind { FLIP, ZERO, TAIL, TRUNC, META, NKINDS };
enum meta { SB0, SB1, COMMIT, CKPT_OLD, CKPT_NEW, NMETA };

static const char *const kind_name[NKINDS] = {
	"flip", "zero", "tail", "trunc", "meta"
};

/* One record of the original image. */
struct span {
	uint64_t off;    /* medium offset of its header */
	uint64_t cover;  /* bytes from off its CRC covers (the header only, for PAD) */
	uint64_t slot;   /* ring bytes it occupies */
	uint64_t lsn;
	unsigned type;
	size_t win;      /* committed records: index of its window */
};

struct ctx {
	const char *moeft;
	uint64_t rng;
	/* the original image */
	uint8_t *img;
	size_t len;
	struct wal_recovery rc;
	struct wal_window *win;
	size_t nwin;
	struct span *rec, *tail;  /* committed records and the tail, LSN order */
	size_t nrec, ntail;
	unsigned ckpt_old;        /* slot holding the older checkpoint */
	/* findings */
	unsigned trials[NKINDS], failed[NKINDS], cli_runs;
	uint64_t detected, false_pos, false_neg;
};

/* One damaged copy and what was done to it. */
struct trial {
	unsigned n;
	enum kind kind;
	enum meta meta;
	uint8_t *img;
	size_t len;
	char what[160];
	char why[512];    /* the first problem found */
};

static void __attribute__((noreturn, format(printf, 1, 2))) setup_fail(const char *fmt, ...)
{
	va_list ap;

	fputs("corruption: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* Record the first problem of a trial; later ones only count. */
static void __attribute__((format(printf, 2, 3))) problem(struct trial *t, const char *fmt, ...)
{
	va_list ap;

	if (!t->why[0]) {
		va_start(ap, fmt);
		vsnprintf(t->why, sizeof t->why, fmt, ap);
		va_end(ap);
	}
}

static void __attribute__((format(printf, 2, 3))) note_what(struct trial *t, const char *fmt, ...)
{
	size_t used = strlen(t->what);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t->what + used, sizeof t->what - used, fmt, ap);
	va_end(ap);
}

/* ---- building the log ------------------------------------------------- */

struct builder {
	const char *path;
	struct wal *w;
	uint64_t window, rng;
	uint8_t buf[MAX_RECORD];
};

static void session_open(struct builder *b, unsigned flags)
{
	struct wal_options opt;
	struct wal_error err;
	struct wal_stats st;

	wal_options_init(&opt);
	opt.size = LOG_SIZE;
	opt.flags = flags;
	if (wal_open(b->path, &opt, &b->w, &err) < 0)
		setup_fail("wal_open %s: %s", b->path, err.msg);
	wal_stats(b->w, &st);
	b->window = st.open_window;
}

static void append_checked(struct builder *b, int64_t lsn)
{
	if (lsn < 0)
		setup_fail("wal_append: %s", wal_strerror((int)lsn));
}

static void commit_checked(struct builder *b, uint32_t users, uint64_t digest)
{
	int ret = commit_window(b->w, b->window, users, digest, NULL);

	if (ret < 0)
		setup_fail("wal_commit: %s", wal_strerror(ret));
	b->window++;
}

/* A window of 1-10 random records, now and then some of up to 8 KiB. */
static void random_window(struct builder *b)
{
	uint32_t n = 1 + (uint32_t)rng_below(&b->rng, 10);
	uint32_t max_len = rng_below(&b->rng, 8) ? 2048 : MAX_RECORD;
	uint64_t digest = 0;

	for (uint32_t i = 0; i < n; i++)
		append_checked(b, append_random(b->w, b->window, &b->rng, b->buf, max_len, &digest));
	commit_checked(b, n, digest);
}

/* A window of one record of `len` bytes. */
static void fixed_window(struct builder *b, uint32_t len)
{
	uint64_t digest = 0;

	append_checked(b, append_record(b->w, b->window, WAL_REC_USER, len, rng_next(&b->rng),
					b->buf, &digest));
	commit_checked(b, 1, digest);
}

/* Bytes from the committed end to the physical end of the ring. */
static uint64_t committed_to_end(const char *path)
{
	const struct wal_recovery *rc;
	struct wal_reader *r;
	struct wal_error err;
	uint64_t n;

	if (wal_reader_open_path(path, &r, &err) < 0)
		setup_fail("wal_reader_open_path: %s", err.msg);
	rc = wal_reader_recovery(r);
	n = rc->capacity - rc->head_pos % rc->capacity;
	wal_reader_close(r);
	return n;
}

/*
 * Five epochs, each ended by closing with an uncommitted tail (or none).
 * Epoch 4 ends its last window 1-1.2 KiB before the end of the ring and
 * leaves six small uncommitted records after it; epoch 5 opens with an
 * EPOCH record there, then a record too long for the rest of the lap: its
 * PAD record covers five stale but valid records of epoch 4 that carry
 * the LSNs and window id epoch 5 reuses.
 */
static void build_log(struct ctx *cx, const char *path)
{
	static const struct { unsigned windows, tail; } plan[] = {
		{ 40, 0 }, { 30, 3 }, { 30, 0 }, { 30, 6 }, { 20, 4 }
	};
	struct builder *b = calloc(1, sizeof *b);
	uint64_t digest = 0;

	if (!b)
		setup_fail("out of memory");
	b->path = path;
	b->rng = rng_next(&cx->rng);
	for (unsigned s = 0; s < sizeof plan / sizeof plan[0]; s++) {
		session_open(b, s ? 0 : WAL_OPEN_CREATE | WAL_OPEN_FORMAT);
		if (s == 4)
			fixed_window(b, 2048);
		for (unsigned i = 0; i < plan[s].windows; i++)
			random_window(b);
		if (s == 3) {
			/* Then one window with a record sized to land there. */
			uint64_t left;

			while ((left = committed_to_end(path)) < 1024 || left >= 1200) {
				if (left < 1260 || left >= 1260 + MAX_RECORD)
					random_window(b);
				else
					fixed_window(b, (uint32_t)(left - 1260) & ~(REC_ALIGN - 1));
			}
		}
		for (unsigned i = 0; i < plan[s].tail; i++)
			append_checked(b, append_record(b->w, b->window, WAL_REC_KVREF, s == 3 ? 100 : 300,
							rng_next(&b->rng), b->buf, &digest));
		wal_close(b->w);
	}
	free(b);
}

/* Map n records from logical ring position pos. */
static void walk(const struct ctx *cx, uint64_t pos, uint64_t n, size_t win, struct span *out)
{
	uint64_t cap = cx->rc.capacity;

	for (uint64_t i = 0; i < n; i++) {
		struct rec_hdr h;
		uint64_t off;

		if (cap - pos % cap < REC_HDR_SIZE)
			pos += cap - pos % cap;
		off = cx->rc.data_off + pos % cap;
		rec_hdr_decode(cx->img + off, &h);
		out[i] = (struct span){ .off = off, .slot = rec_size(h.len), .lsn = h.lsn,
					.type = h.type, .win = win,
					.cover = REC_HDR_SIZE + (h.type == WAL_REC_PAD ? 0 : h.len) };
		pos += rec_size(h.len);
	}
}

/* Recover the original image, check it is whole, and map it. */
static void load_original(struct ctx *cx, const char *path)
{
	struct verify_stats st = { 0 };
	const struct wal_window *win;
	struct wal_reader *r;
	struct wal_error err;
	struct ckpt ck[2];
	char why[512];
	size_t n = 0;

	if (!(cx->img = read_file(path, &cx->len)))
		setup_fail("cannot read %s: %s", path, strerror(errno));
	if (wal_reader_open_buf(cx->img, cx->len, &r, &err) < 0)
		setup_fail("recovering the original log: %s", err.msg);
	cx->rc = *wal_reader_recovery(r);
	win = wal_reader_windows(r, &cx->nwin);
	if (cx->rc.damage_count || cx->rc.damaged_windows || cx->rc.tail_records != 4 ||
	    cx->rc.head_pos < 2 * cx->rc.capacity || !cx->nwin ||
	    verify_intact(r, cx->img, cx->len, 0, &st, why, sizeof why) < 0)
		setup_fail("the original log is not as built: %llu findings, %llu damaged windows, "
			   "%llu tail records, head at %llu: %s", ULL(cx->rc.damage_count),
			   ULL(cx->rc.damaged_windows), ULL(cx->rc.tail_records), ULL(cx->rc.head_pos),
			   why);
	if (!(cx->win = malloc(cx->nwin * sizeof *cx->win)))
		setup_fail("out of memory");
	memcpy(cx->win, win, cx->nwin * sizeof *cx->win);
	wal_reader_close(r);
	cx->nrec = 0;
	for (size_t i = 0; i < cx->nwin; i++)
		cx->nrec += cx->win[i].records;
	cx->ntail = cx->rc.tail_records;
	if (!(cx->rec = malloc(cx->nrec * sizeof *cx->rec)) ||
	    !(cx->tail = malloc(cx->ntail * sizeof *cx->tail)))
		setup_fail("out of memory");
	for (size_t i = 0; i < cx->nwin; i++) {
		walk(cx, cx->win[i].pos, cx->win[i].records, i, cx->rec + n);
		n += cx->win[i].records;
	}
	walk(cx, cx->rc.head_pos, cx->ntail, 0, cx->tail);
	for (size_t i = 0; i < 2; i++)
		if (!ckpt_decode(cx->img + (i ? CKPT_SLOT1_OFF : CKPT_SLOT0_OFF), &ck[i], cx->rc.log_id))
			setup_fail("checkpoint slot %zu of the original log is invalid", i);
	cx->ckpt_old = ck[0].gen < ck[1].gen ? 0 : 1;
	printf("corruption: log of %zu windows (%zu records, %llu PAD, %llu EPOCH), ring wrapped "
	       "%llu times, %zu tail records\n", cx->nwin, cx->nrec, ULL(st.pads), ULL(st.epochs),
	       ULL(cx->rc.head_pos / cx->rc.capacity), cx->ntail);
}

/* ---- damage ----------------------------------------------------------- */

static void flip_bit(struct trial *t, uint64_t off, unsigned bit)
{
	t->img[off] ^= (uint8_t)(1u << bit);
	note_what(t, " %llu.%u", ULL(off), bit);
}

/* Flip one bit of the CRC-covered bytes of each of k distinct records. */
static void flip_records(struct ctx *cx, struct trial *t, const struct span *recs, size_t nrecs,
			 unsigned k)
{
	size_t pick[3];

	for (unsigned i = 0; i < k; i++) {
		int again;

		do {
			pick[i] = (size_t)rng_below(&cx->rng, nrecs);
			again = 0;
			for (unsigned j = 0; j < i; j++)
				again |= pick[j] == pick[i];
		} while (again);
		note_what(t, " LSN %llu (%s):", ULL(recs[pick[i]].lsn), wal_rec_type_name(recs[pick[i]].type));
		flip_bit(t, recs[pick[i]].off + rng_below(&cx->rng, recs[pick[i]].cover),
			 (unsigned)rng_below(&cx->rng, 8));
	}
}

/* The committed PAD and EPOCH records: rare, so sometimes aimed at. */
static const struct span *pick_special(struct ctx *cx)
{
	size_t n = 0, k;

	for (size_t i = 0; i + 1 < cx->nrec; i++)
		n += cx->rec[i].type == WAL_REC_PAD || cx->rec[i].type == WAL_REC_EPOCH;
	if (!n)
		return NULL;
	k = (size_t)rng_below(&cx->rng, n);
	for (size_t i = 0; i + 1 < cx->nrec; i++)
		if ((cx->rec[i].type == WAL_REC_PAD || cx->rec[i].type == WAL_REC_EPOCH) && !k--)
			return &cx->rec[i];
	return NULL;
}

static void damage_flip(struct ctx *cx, struct trial *t)
{
	const struct span *s = rng_below(&cx->rng, 8) ? NULL : pick_special(cx);
	unsigned k = 1 + (unsigned)rng_below(&cx->rng, 3);

	note_what(t, "bit flips at");
	if (s) {
		note_what(t, " LSN %llu (%s):", ULL(s->lsn), wal_rec_type_name(s->type));
		flip_bit(t, s->off + rng_below(&cx->rng, s->cover), (unsigned)rng_below(&cx->rng, 8));
		k--;
	}
	flip_records(cx, t, cx->rec, cx->nrec, k);
}

/* Zero a range starting inside a committed record: short, medium or long,
 * now and then exactly an EPOCH or PAD record and the header after it. */
static void damage_zero(struct ctx *cx, struct trial *t)
{
	const struct span *s = rng_below(&cx->rng, 8) ? NULL : pick_special(cx);
	uint64_t r = rng_below(&cx->rng, 8), start, n;

	if (s) {
		start = s->off;
		n = s[1].off > s->off ? s[1].off + REC_HDR_SIZE - s->off : s->cover;
	} else {
		s = &cx->rec[rng_below(&cx->rng, cx->nrec)];
		start = s->off + rng_below(&cx->rng, s->cover);
		n = 1 + rng_below(&cx->rng, r < 4 ? 64 : r < 7 ? 4096 : cx->rc.capacity / 4);
	}
	if (n > cx->len - start)
		n = cx->len - start;
	memset(t->img + start, 0, n);
	note_what(t, "zeroed [%llu, %llu) from LSN %llu (%s)", ULL(start), ULL(start + n),
		  ULL(s->lsn), wal_rec_type_name(s->type));
}

static void damage_tail(struct ctx *cx, struct trial *t)
{
	note_what(t, "tail bit flips at");
	flip_records(cx, t, cx->tail, cx->ntail, 1 + (unsigned)rng_below(&cx->rng, 2));
}

/* Mostly cuts inside the ring, some inside the metadata page. */
static void damage_trunc(struct ctx *cx, struct trial *t)
{
	t->len = rng_below(&cx->rng, 8) ? WAL_DATA_OFF + rng_below(&cx->rng, cx->len - WAL_DATA_OFF)
					: rng_below(&cx->rng, WAL_DATA_OFF);
	note_what(t, "truncated to %zu bytes", t->len);
}

static void damage_meta(struct ctx *cx, struct trial *t)
{
	static const char *const name[NMETA] = {
		"superblock copy 0", "superblock copy 1", "commit word", "older checkpoint slot",
		"newer checkpoint slot"
	};
	static const uint32_t off[NMETA] = { SB_COPY0_OFF, SB_COPY1_OFF, COMMIT_WORD_OFF };
	uint32_t base, size;
	unsigned bits = 1 + (unsigned)rng_below(&cx->rng, 3), done[3];

	t->meta = (enum meta)(t->n / NKINDS % NMETA);
	switch (t->meta) {
	case SB0: case SB1: base = off[t->meta]; size = SB_SIZE; break;
	case COMMIT: base = off[t->meta]; size = 8; break;
	default:
		base = (t->meta == CKPT_OLD) == (cx->ckpt_old == 0) ? CKPT_SLOT0_OFF : CKPT_SLOT1_OFF;
		size = CKPT_SIZE;
	}
	note_what(t, "%s: bit flips at", name[t->meta]);
	/* Distinct bits: two flips of one bit would cancel out. */
	for (unsigned i = 0; i < bits; i++) {
		int again;

		do {
			done[i] = (unsigned)rng_below(&cx->rng, size * 8);
			again = 0;
			for (unsigned j = 0; j < i; j++)
				again |= done[j] == done[i];
		} while (again);
		flip_bit(t, base + done[i] / 8, done[i] % 8);
	}
}

/* ---- expectations ----------------------------------------------------- */

/* Whether a record of the original reads differently from the copy. */
static int changed(const struct ctx *cx, const struct trial *t, const struct span *s)
{
	return s->off + s->slot > t->len || memcmp(cx->img + s->off, t->img + s->off, s->cover) != 0;
}

/*
 * Every intact window: self-consistent, and the original one where its id
 * was in the original (an older one comes from an older lap, vouched for
 * by its self-description).  Positions compare modulo the ring: after a
 * fall-back to an older checkpoint whose tail was overwritten since, the
 * reader's resync cannot know the lap of what it finds.
 */
static void check_content(const struct ctx *cx, struct trial *t, const struct wal_reader *r)
{
	struct verify_stats st = { 0 };
	const struct wal_window *win;
	char why[512];
	size_t nwin;

	if (verify_intact(r, t->img, t->len, 0, &st, why, sizeof why) < 0)
		problem(t, "an intact window iterates wrong content: %s", why);
	win = wal_reader_windows(r, &nwin);
	for (size_t i = 0; i < nwin; i++) {
		uint64_t k = win[i].id - cx->win[0].id; /* wraps for older ids */
		const struct wal_window *o = k < cx->nwin ? &cx->win[k] : NULL;

		if (win[i].state == WAL_WINDOW_INTACT && o &&
		    (o->first_lsn != win[i].first_lsn || o->last_lsn != win[i].last_lsn ||
		     o->pos % cx->rc.capacity != win[i].pos % cx->rc.capacity ||
		     o->records != win[i].records || o->epoch != win[i].epoch))
			problem(t, "window %llu is intact but not the original one", ULL(win[i].id));
	}
}

/* The reader found exactly the original windows, all intact. */
static void check_all_intact(struct ctx *cx, struct trial *t, const struct wal_reader *r)
{
	const struct wal_window *win;
	size_t nwin;

	win = wal_reader_windows(r, &nwin);
	if (nwin != cx->nwin || win[0].id != cx->win[0].id)
		problem(t, "%zu windows from id %llu, the original has %zu from %llu", nwin,
			ULL(nwin ? win[0].id : 0), cx->nwin, ULL(cx->win[0].id));
	for (size_t i = 0; i < nwin; i++)
		if (win[i].state != WAL_WINDOW_INTACT) {
			problem(t, "window %llu reported damaged", ULL(win[i].id));
			cx->false_pos++;
		}
}

/*
 * Judge by changed records: damage reported iff a committed record
 * changed; then window by window, damaged (or missing, if every record of
 * it changed and it lies after the last window listed) exactly when one of
 * its records changed.  Without damage the tail must end at its first
 * changed record.
 */
static void judge(struct ctx *cx, struct trial *t, const struct wal_reader *r)
{
	const struct wal_recovery *rc = wal_reader_recovery(r);
	const struct wal_window *win;
	size_t nwin, hit = 0, tail_ok = 0;
	unsigned *lost = calloc(cx->nwin, sizeof *lost);

	if (!lost)
		setup_fail("out of memory");
	win = wal_reader_windows(r, &nwin);
	for (size_t i = 0; i < cx->nrec; i++)
		if (changed(cx, t, &cx->rec[i]) && lost[cx->rec[i].win]++ == 0)
			hit++;
	while (tail_ok < cx->ntail && !changed(cx, t, &cx->tail[tail_ok]))
		tail_ok++;
	if (!hit) {
		if (rc->damage_count)
			problem(t, "no committed byte changed, yet damage: %s at offset %llu",
				rc->damage[0].reason, ULL(rc->damage[0].offset));
		check_all_intact(cx, t, r);
		if (rc->tail_records != tail_ok)
			problem(t, "uncommitted tail of %llu records, expected %zu", ULL(rc->tail_records),
				tail_ok);
		free(lost);
		return;
	}
	if (!rc->damage_count)
		problem(t, "%zu windows lost records, yet no damage is reported", hit);
	if (rc->tail_records)
		problem(t, "the tail was scanned despite damage");
	if (nwin > cx->nwin || (nwin && win[0].id != cx->win[0].id))
		problem(t, "%zu windows from id %llu, the original has %zu from %llu", nwin,
			ULL(nwin ? win[0].id : 0), cx->nwin, ULL(cx->win[0].id));
	for (size_t i = 0; i < nwin && i < cx->nwin; i++)
		if (win[i].id != cx->win[i].id)
			problem(t, "window #%zu has id %llu, expected %llu", i, ULL(win[i].id),
				ULL(cx->win[i].id));
	for (size_t i = 0; i < cx->nwin; i++) {
		int state = i < nwin ? (int)win[i].state : -1;

		if (lost[i] && state == WAL_WINDOW_INTACT) {
			cx->false_neg++;
			problem(t, "window %llu lost %u records but is reported intact", ULL(cx->win[i].id),
				lost[i]);
		} else if (lost[i] && state < 0 && lost[i] != cx->win[i].records) {
			cx->false_pos++;
			problem(t, "window %llu is missing, but only %u of its %u records were damaged",
				ULL(cx->win[i].id), lost[i], cx->win[i].records);
		} else if (!lost[i] && state != WAL_WINDOW_INTACT) {
			cx->false_pos++;
			problem(t, "window %llu is reported %s, but none of its records changed "
				"(damage: %s at offset %llu, LSN %llu)", ULL(cx->win[i].id),
				state < 0 ? "missing" : "damaged", rc->damage[0].reason,
				ULL(rc->damage[0].offset), ULL(rc->damage[0].lsn));
		} else if (lost[i]) {
			cx->detected++;
		}
	}
	free(lost);
}

static int has_note(const struct wal_recovery *rc, const char *what)
{
	for (unsigned i = 0; i < rc->note_count; i++)
		if (strstr(rc->notes[i], what))
			return 1;
	return 0;
}

/* Metadata damage: the windows survive it, but it is reported. */
static void judge_meta(struct ctx *cx, struct trial *t, const struct wal_reader *r)
{
	const struct wal_recovery *rc = wal_reader_recovery(r);

	switch (t->meta) {
	case SB0: case SB1: case COMMIT:
		if (rc->damage_count != 1 || rc->damage[0].offset != (t->meta == SB0 ? SB_COPY0_OFF :
								      t->meta == SB1 ? SB_COPY1_OFF : COMMIT_WORD_OFF))
			problem(t, "%llu findings, expected exactly one at the damaged structure "
				"(first: %s at offset %llu)", ULL(rc->damage_count),
				rc->damage_count ? rc->damage[0].reason : "none",
				ULL(rc->damage_count ? rc->damage[0].offset : 0));
		check_all_intact(cx, t, r);
		break;
	case CKPT_OLD:
		if (rc->damage_count)
			problem(t, "damage: %s", rc->damage[0].reason);
		check_all_intact(cx, t, r);
		if (rc->tail_records != cx->ntail)
			problem(t, "tail of %llu records, expected %zu", ULL(rc->tail_records), cx->ntail);
		/* fall through */
	case CKPT_NEW:
		if (!has_note(rc, "checkpoint copy"))
			problem(t, "no note about the damaged checkpoint slot");
		break;
	default:
		break;
	}
}

/* ---- moeft verify ----------------------------------------------------- */

/* Run `moeft verify --wal path [--json]`, stdout into out; returns its
 * exit status, or -1 when it could not run or died of a signal. */
static int run_verify(const char *moeft, const char *path, int json, char *out, size_t outlen)
{
	char buf[4096];
	int fds[2], status;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	if (pipe(fds) < 0 || (pid = fork()) < 0)
		setup_fail("pipe/fork: %s", strerror(errno));
	if (pid == 0) {
		char *argv[] = { (char *)moeft, "verify", "--wal", (char *)path, json ? "--json" : NULL, NULL };

		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execv(moeft, argv);
		_exit(127);
	}
	close(fds[1]);
	/* Read to the end (so it never blocks), keep what fits. */
	while ((n = read(fds[0], buf, sizeof buf)) > 0) {
		size_t k = (size_t)n < outlen - 1 - got ? (size_t)n : outlen - 1 - got;

		memcpy(out + got, buf, k);
		got += k;
	}
	out[got] = 0;
	close(fds[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

/* The integers of the JSON array after "key":, into ids; -1 if absent. */
static long json_ids(const char *json, const char *key, uint64_t *ids, size_t max)
{
	char pat[64];
	const char *p;
	long n = 0;

	snprintf(pat, sizeof pat, "\"%s\"", key);
	if (!(p = strstr(json, pat)))
		return -1;
	p += strlen(pat);
	p += strspn(p, " \t\n:");
	if (*p++ != '[')
		return -1;
	for (;;) {
		char *end;
		unsigned long long v;

		p += strspn(p, " \t\n,");
		if (*p == ']')
			return n;
		v = strtoull(p, &end, 10);
		if (end == p || (size_t)n >= max)
			return -1;
		ids[n++] = v;
		p = end;
	}
}

/* The CLI must agree with the library on the same damaged copy. */
static void check_cli(struct ctx *cx, struct trial *t, const struct wal_reader *r)
{
	static uint64_t ids[MAX_IDS];
	static char out[1 << 16];
	const struct wal_recovery *rc = wal_reader_recovery(r);
	const struct wal_window *win;
	char path[4096];
	size_t nwin, k = 0;
	long n;
	int fd, want = rc->damage_count ? 1 : 0, got;

	win = wal_reader_windows(r, &nwin);
	scratch_path(path, sizeof path, "corruption-copy");
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0 ||
	    write(fd, t->img, t->len) != (ssize_t)t->len || close(fd) < 0)
		setup_fail("writing %s: %s", path, strerror(errno));
	cx->cli_runs++;
	if ((got = run_verify(cx->moeft, path, 0, out, sizeof out)) != want)
		problem(t, "moeft verify exits %d, expected %d", got, want);
	if ((got = run_verify(cx->moeft, path, 1, out, sizeof out)) != want)
		problem(t, "moeft verify --json exits %d, expected %d", got, want);
	if ((n = json_ids(out, "damaged_windows", ids, MAX_IDS)) < 0)
		problem(t, "moeft verify --json: no \"damaged_windows\" array in: %.200s", out);
	for (size_t i = 0; n >= 0 && i < nwin; i++)
		if (win[i].state != WAL_WINDOW_INTACT && (k >= (size_t)n || ids[k++] != win[i].id))
			problem(t, "moeft verify --json lists other damaged windows than the reader "
				"finds (window %llu)", ULL(win[i].id));
	if (n >= 0 && k != (size_t)n)
		problem(t, "moeft verify --json lists %ld damaged windows, the reader %zu", n, k);
	unlink(path);
}

/* ---- trials ----------------------------------------------------------- */

/* With MOEFT_CORRUPTION_KEEP=DIR, failed copies are kept for a closer look
 * (and the original, as trial-N.wal for N = the number of trials). */
static void keep_copy(const struct trial *t)
{
	const char *dir = getenv("MOEFT_CORRUPTION_KEEP");
	char path[4096];
	int fd;

	if (!dir || !*dir)
		return;
	snprintf(path, sizeof path, "%s/trial-%u.wal", dir, t->n);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0 ||
	    write(fd, t->img, t->len) != (ssize_t)t->len || close(fd) < 0)
		fprintf(stderr, "corruption: cannot keep %s: %s\n", path, strerror(errno));
	else
		fprintf(stderr, "corruption: kept %s\n", path);
}

static void run_trial(struct ctx *cx, unsigned n)
{
	struct trial t = { .n = n, .kind = (enum kind)(n % NKINDS), .len = cx->len };
	struct wal_reader *r;
	struct wal_error err;
	int ret;

	if (!(t.img = malloc(cx->len)))
		setup_fail("out of memory");
	memcpy(t.img, cx->img, cx->len);
	switch (t.kind) {
	case FLIP: damage_flip(cx, &t); break;
	case ZERO: damage_zero(cx, &t); break;
	case TAIL: damage_tail(cx, &t); break;
	case TRUNC: damage_trunc(cx, &t); break;
	default: damage_meta(cx, &t); break;
	}
	/* A copy of exactly the damaged length, so a read past it is caught. */
	if (t.kind == TRUNC && !(t.img = realloc(t.img, t.len ? t.len : 1)))
		setup_fail("out of memory");
	ret = wal_reader_open_buf(t.img, t.len, &r, &err);
	if (ret < 0) {
		/* Only cutting into the checkpoint slots may make a log unreadable. */
		if (t.kind != TRUNC || t.len >= CKPT_SLOT1_OFF + CKPT_SIZE)
			problem(&t, "recovery failed: %s", err.msg);
	} else {
		if (t.kind == META)
			judge_meta(cx, &t, r);
		else if (t.kind != TRUNC || t.len >= CKPT_SLOT1_OFF + CKPT_SIZE)
			judge(cx, &t, r);
		else if (wal_reader_recovery(r)->intact_windows)
			problem(&t, "intact windows in a log cut inside its metadata");
		check_content(cx, &t, r);
		if (cx->moeft && n / NKINDS < CLI_TRIALS)
			check_cli(cx, &t, r);
		wal_reader_close(r);
	}
	cx->trials[t.kind]++;
	if (t.why[0]) {
		cx->failed[t.kind]++;
		fprintf(stderr, "corruption: trial %u (%s): %s: %s\n", n, kind_name[t.kind], t.what, t.why);
		keep_copy(&t);
	}
	free(t.img);
}

int main(int argc, char **argv)
{
	struct ctx cx = { .moeft = argc > 1 ? argv[1] : NULL };
	unsigned trials = (unsigned)env_u64("MOEFT_CORRUPTION_TRIALS", 300), failed = 0;
	char path[4096];

	cx.rng = env_u64("MOEFT_CORRUPTION_SEED", 1);
	scratch_path(path, sizeof path, "corruption");
	unlink(path);
	build_log(&cx, path);
	load_original(&cx, path);
	if (getenv("MOEFT_CORRUPTION_KEEP"))
		keep_copy(&(struct trial){ .n = trials, .img = cx.img, .len = cx.len });
	unlink(path);
	for (unsigned n = 0; n < trials; n++)
		run_trial(&cx, n);
	printf("corruption: trials");
	for (unsigned k = 0; k < NKINDS; k++) {
		printf(" %s %u%s", kind_name[k], cx.trials[k], k + 1 < NKINDS ? "," : ";");
		failed += cx.failed[k];
	}
	printf(" %llu damaged windows detected, %llu false positives, %llu false negatives, "
	       "%u moeft verify checks%s; %u trials failed\n", ULL(cx.detected), ULL(cx.false_pos),
	       ULL(cx.false_neg), cx.cli_runs, cx.moeft ? "" : " (no moeft binary given)", failed);
	free(cx.img);
	free(cx.win);
	free(cx.rec);
	free(cx.tail);
	return failed ? 1 : 0;
}

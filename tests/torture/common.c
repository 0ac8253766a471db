/*
 * common.c - self-describing logs and their checker; see common.h.
 *
 * A payload of at least PAYLOAD_TAG_SIZE bytes starts with its window id
 * and a random seed; the rest is the byte stream of a key derived from
 * (seed, type, length).  A shorter payload is the stream of a key derived
 * from (window, type, length), all of which the record header carries.
 * Window digests add keys, so they do not depend on the order in which
 * concurrent appenders got their LSNs.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common.h"
#include "format.h"
#include "record.h"

/* Bytes of a payload that carry its window id and seed. */
#define PAYLOAD_TAG_SIZE 16u
/* Extra bytes of every WINDOW record: window id, user records, digest. */
#define EXTRA_SIZE 24u

uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

uint64_t rng_below(uint64_t *state, uint64_t n)
{
	return rng_next(state) % n;
}

static uint64_t key_of(uint64_t seed, unsigned type, uint32_t len)
{
	uint64_t s = seed ^ ((uint64_t)type << 32 | len);

	return rng_next(&s);
}

/* The next 64 bytes of a key's stream. */
static void stream_chunk(uint64_t *state, uint8_t out[64])
{
	for (int i = 0; i < 64; i += 8)
		put64(out + i, rng_next(state));
}

static void stream_fill(uint64_t key, uint8_t *p, uint32_t n)
{
	uint8_t chunk[64];

	for (uint32_t i = 0; i < n; i += 64) {
		stream_chunk(&key, chunk);
		memcpy(p + i, chunk, n - i < 64 ? n - i : 64);
	}
}

static int stream_equal(uint64_t key, const uint8_t *p, uint32_t n)
{
	uint8_t chunk[64];

	for (uint32_t i = 0; i < n; i += 64) {
		stream_chunk(&key, chunk);
		if (memcmp(p + i, chunk, n - i < 64 ? n - i : 64) != 0)
			return 0;
	}
	return 1;
}

static int is_user_type(unsigned type)
{
	return type == WAL_REC_ROUTING || type == WAL_REC_KVREF || type == WAL_REC_ALLOC ||
	       (type >= WAL_REC_USER && type < WAL_REC_USER + 16);
}

/* Mostly small records, some up to max_len, a few shorter than the tag. */
static uint32_t pick_len(uint64_t *rng, uint32_t max_len)
{
	uint64_t r = rng_below(rng, 8);

	if (r == 0)
		return (uint32_t)rng_below(rng, PAYLOAD_TAG_SIZE);
	if (r < 5 && max_len > 1024)
		max_len = 1024;
	return PAYLOAD_TAG_SIZE + (uint32_t)rng_below(rng, max_len - PAYLOAD_TAG_SIZE + 1);
}

int64_t append_record(struct wal *w, uint64_t window, unsigned type, uint32_t len,
		      uint64_t seed, uint8_t *buf, uint64_t *digest)
{
	uint64_t key;
	int64_t lsn;

	if (len < PAYLOAD_TAG_SIZE) {
		key = key_of(window, type, len);
		stream_fill(key, buf, len);
	} else {
		key = key_of(seed, type, len);
		put64(buf, window);
		put64(buf + 8, seed);
		stream_fill(key, buf + PAYLOAD_TAG_SIZE, len - PAYLOAD_TAG_SIZE);
	}
	lsn = wal_append(w, type, buf, len);
	if (lsn > 0)
		*digest += key;
	return lsn;
}

int64_t append_random(struct wal *w, uint64_t window, uint64_t *rng, uint8_t *buf,
		      uint32_t max_len, uint64_t *digest)
{
	static const unsigned types[] = { WAL_REC_ROUTING, WAL_REC_KVREF, WAL_REC_ALLOC };
	uint64_t r = rng_below(rng, 4), seed = rng_next(rng);
	unsigned type = r < 3 ? types[r] : WAL_REC_USER + (unsigned)rng_below(rng, 16);

	return append_record(w, window, type, pick_len(rng, max_len), seed, buf, digest);
}

int commit_window(struct wal *w, uint64_t window, uint32_t users, uint64_t digest,
		  struct wal_commit_info *info)
{
	uint8_t extra[EXTRA_SIZE];

	put64(extra, window);
	put32(extra + 8, users);
	put32(extra + 12, 0);
	put64(extra + 16, digest);
	return wal_commit(w, extra, sizeof extra, info);
}

/* Whether a user record holds the payload its header and seed say it
 * must; *key is its key either way. */
static int payload_key(const struct wal_record *rec, uint64_t *key)
{
	if (rec->len < PAYLOAD_TAG_SIZE) {
		*key = key_of(rec->window, rec->type, rec->len);
		return stream_equal(*key, rec->payload, rec->len);
	}
	*key = key_of(get64(rec->payload + 8), rec->type, rec->len);
	return get64(rec->payload) == rec->window &&
	       stream_equal(*key, rec->payload + PAYLOAD_TAG_SIZE, rec->len - PAYLOAD_TAG_SIZE);
}

/* Medium offset where the record at logical ring position pos starts
 * (too close to the ring end for a header, it wraps to the start). */
static uint64_t ring_offset(const struct wal_recovery *rc, uint64_t pos)
{
	uint64_t phys = pos % rc->capacity;

	return rc->data_off + (rc->capacity - phys < REC_HDR_SIZE ? 0 : phys);
}

static int __attribute__((format(printf, 3, 4))) fail(char *why, size_t whylen,
						      const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return -1;
}

/* A window's WINDOW record: fixed part and extra bytes against the window. */
static int check_window_record(const struct wal_window *w, const struct wal_record *rec,
			       uint32_t users, uint64_t digest, char *why, size_t whylen)
{
	struct window_fixed wf;

	if (rec->lsn != w->last_lsn || rec->index + 1 != w->records ||
	    rec->len != WINDOW_FIXED_SIZE + EXTRA_SIZE)
		return fail(why, whylen, "window %llu: WINDOW record LSN %llu index %u len %u, "
			    "window says last LSN %llu, %u records", ULL(w->id), ULL(rec->lsn),
			    rec->index, rec->len, ULL(w->last_lsn), w->records);
	window_fixed_decode(rec->payload, &wf);
	if (wf.first_lsn != w->first_lsn || wf.records != w->records ||
	    wf.extra_len != EXTRA_SIZE || wf.bytes != w->bytes)
		return fail(why, whylen, "window %llu: WINDOW record says first LSN %llu, %u records, "
			    "%llu bytes; reader says %llu, %u, %llu", ULL(w->id), ULL(wf.first_lsn),
			    wf.records, ULL(wf.bytes), ULL(w->first_lsn), w->records, ULL(w->bytes));
	if (w->extra != rec->payload + WINDOW_FIXED_SIZE || w->extra_len != EXTRA_SIZE)
		return fail(why, whylen, "window %llu: extra bytes not those of its WINDOW record",
			    ULL(w->id));
	if (get64(w->extra) != w->id || get32(w->extra + 8) != users || get64(w->extra + 16) != digest)
		return fail(why, whylen, "window %llu: holds %u user records (digest %016llx), "
			    "its writer committed window %llu with %u (digest %016llx)", ULL(w->id),
			    users, ULL(digest), ULL(get64(w->extra)), get32(w->extra + 8),
			    ULL(get64(w->extra + 16)));
	return 0;
}

/*
 * The records of one intact window, pulled from the iterator.  *prev_epoch
 * is the epoch of the window before it (0: none known); an EPOCH record
 * must open exactly the windows where the epoch rises.
 */
static int check_window(const struct wal_reader *r, const uint8_t *img, size_t len,
			const struct wal_window *w, struct wal_iter *it, uint32_t prev_epoch,
			struct verify_stats *st, char *why, size_t whylen)
{
	const struct wal_recovery *rc = wal_reader_recovery(r);
	uint64_t off = ring_offset(rc, w->pos), lsn = w->first_lsn, digest = 0, key;
	uint64_t ring_end = rc->data_off + rc->capacity;
	uint32_t users = 0, pads = 0, epochs = 0;
	struct wal_record rec;
	struct rec_epoch e;
	struct rec_hdr h;

	for (;;) {
		if (!wal_iter_next(it, &rec))
			return fail(why, whylen, "window %llu: iterator ends at LSN %llu, before the "
				    "window's WINDOW record", ULL(w->id), ULL(lsn));
		if (rec.lsn < lsn)
			return fail(why, whylen, "window %llu: LSN %llu after %llu", ULL(w->id),
				    ULL(rec.lsn), ULL(lsn - 1));
		/* The iterator skips PAD records; nothing else may be missing. */
		for (; lsn < rec.lsn; lsn++, pads++) {
			if (off + REC_HDR_SIZE <= len)
				rec_hdr_decode(img + off, &h);
			if (off + REC_HDR_SIZE > len || h.magic != REC_MAGIC || h.type != WAL_REC_PAD ||
			    h.lsn != lsn || h.window != w->id || h.index != lsn - w->first_lsn ||
			    h.epoch != w->epoch || off + rec_size(h.len) != ring_end)
				return fail(why, whylen, "window %llu: LSN %llu skipped, and offset %llu "
					    "holds no PAD record reaching the end of the ring",
					    ULL(w->id), ULL(lsn), ULL(off));
			off = rc->data_off;
		}
		if (rec.offset != off || rec.window != w->id || rec.index != lsn - w->first_lsn ||
		    rec.epoch != w->epoch)
			return fail(why, whylen, "window %llu: LSN %llu at offset %llu window %llu index %u "
				    "epoch %u, expected offset %llu index %llu epoch %u", ULL(w->id),
				    ULL(rec.lsn), ULL(rec.offset), ULL(rec.window), rec.index, rec.epoch,
				    ULL(off), ULL(lsn - w->first_lsn), w->epoch);
		off += rec_size(rec.len);
		off = ring_end - off < REC_HDR_SIZE ? rc->data_off : off;
		lsn++;
		if (rec.type == WAL_REC_WINDOW)
			break;
		if (rec.type == WAL_REC_EPOCH) {
			/* Only behind a PAD, when the ring wrapped just before it. */
			if (rec.index != pads || rec_epoch_decode(rec.payload, rec.len, &e) < 0 ||
			    e.prev_epoch + 1 != rec.epoch || e.prev_commit_lsn + 1 != w->first_lsn)
				return fail(why, whylen, "window %llu: bad EPOCH record at LSN %llu",
					    ULL(w->id), ULL(rec.lsn));
			epochs++;
		} else if (!is_user_type(rec.type) || !payload_key(&rec, &key)) {
			return fail(why, whylen, "window %llu: record LSN %llu (type %u, %u bytes) "
				    "does not hold the payload its writer made", ULL(w->id),
				    ULL(rec.lsn), rec.type, rec.len);
		} else {
			users++;
			digest += key;
		}
	}
	if (check_window_record(w, &rec, users, digest, why, whylen) < 0)
		return -1;
	if (prev_epoch && (w->epoch < prev_epoch || (w->epoch > prev_epoch) != (epochs > 0)))
		return fail(why, whylen, "window %llu: epoch %u after epoch %u with %u EPOCH records",
			    ULL(w->id), w->epoch, prev_epoch, epochs);
	st->windows++;
	st->records += users;
	st->pads += pads;
	st->epochs += epochs;
	return 0;
}

int verify_intact(const struct wal_reader *r, const uint8_t *img, size_t len,
		  uint64_t count_from, struct verify_stats *st, char *why, size_t whylen)
{
	size_t nwin;
	const struct wal_window *win = wal_reader_windows(r, &nwin);
	struct verify_stats mine = { 0 }, none = { 0 };
	struct wal_iter it;
	struct wal_record rec;

	wal_iter_init(&it, r);
	for (size_t i = 0; i < nwin; i++) {
		/* Epochs are compared only between neighbours both intact. */
		uint32_t prev = i && win[i - 1].state == WAL_WINDOW_INTACT ? win[i - 1].epoch : 0;

		if (win[i].state != WAL_WINDOW_INTACT)
			continue;
		if (check_window(r, img, len, &win[i], &it, prev, win[i].id >= count_from ? &mine : &none,
				 why, whylen) < 0)
			return -1;
	}
	if (wal_iter_next(&it, &rec))
		return fail(why, whylen, "iterator yields LSN %llu after the last intact window",
			    ULL(rec.lsn));
	st->windows += mine.windows;
	st->records += mine.records;
	st->pads += mine.pads;
	st->epochs += mine.epochs;
	return 0;
}

uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t estimate(uint64_t est, uint64_t sample)
{
	return est ? (3 * est + sample) / 4 : sample;
}

uint64_t pick_kill_delay(uint64_t *rng, uint64_t open_est, uint64_t max_ns)
{
	uint64_t r = rng_below(rng, 8);

	if (r == 0)
		return 0;
	if (r <= 2 && open_est)
		return rng_below(rng, open_est);
	return open_est + rng_below(rng, max_ns + 1);
}

int kill_at(pid_t pid, uint64_t start_ns, uint64_t delay, int *status)
{
	uint64_t until_ns = start_ns + delay;
	struct timespec until = { .tv_sec = (time_t)(until_ns / 1000000000u),
				  .tv_nsec = (long)(until_ns % 1000000000u) };

	while (delay && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
	kill(pid, SIGKILL);
	if (waitpid(pid, status, 0) != pid) {
		*status = -1;
		return -1;
	}
	return WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL ? 0 : -1;
}

uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end) {
		fprintf(stderr, "%s=%s is not a number\n", name, s);
		exit(2);
	}
	return v;
}

const char *scratch_path(char *buf, size_t len, const char *tag)
{
	const char *dir = getenv("MOEFT_TEST_DIR");

	snprintf(buf, len, "%s/moeft-%s-%ld.wal", dir && *dir ? dir : "/dev/shm", tag, (long)getpid());
	return buf;
}

uint8_t *read_file(const char *path, size_t *len)
{
	struct stat sb;
	uint8_t *buf = NULL;
	size_t got = 0;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &sb) == 0 && (buf = malloc(sb.st_size ? (size_t)sb.st_size : 1))) {
		while (got < (size_t)sb.st_size) {
			ssize_t n = read(fd, buf + got, (size_t)sb.st_size - got);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		if (got != (size_t)sb.st_size) {
			free(buf);
			buf = NULL;
		}
	}
	close(fd);
	*len = got;
	return buf;
}

/*
 * make_corpus.c - seed corpus of fuzz_reader: small real logs.
 *
 * Usage: make_corpus DIR.  Writes logs of the smallest size the writer
 * makes (64 KiB ring) through the API, so every seed is a valid image the
 * fuzzer mutates from: an empty log, windows holding each record type
 * with well-formed payloads, a ring wrapped several times, an uncommitted
 * tail, several epochs, and a torn (truncated) copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "record.h"
#include "wal.h"

#define SEED_SIZE (4096u + (64u << 10))

static const char *dir;
static unsigned long step;

static void __attribute__((noreturn)) fail(const char *what, const char *msg)
{
	fprintf(stderr, "make_corpus: %s: %s\n", what, msg);
	exit(1);
}

static struct wal *open_log(const char *name, unsigned flags)
{
	struct wal_options opt;
	struct wal_error err;
	struct wal *w;
	char path[4096];

	snprintf(path, sizeof path, "%s/%s.wal", dir, name);
	if (flags & WAL_OPEN_FORMAT)
		unlink(path);
	wal_options_init(&opt);
	opt.size = SEED_SIZE;
	opt.flags = flags;
	if (wal_open(path, &opt, &w, &err) < 0)
		fail(path, err.msg);
	return w;
}

static void append(struct wal *w, unsigned type, const void *p, size_t len)
{
	int64_t ret = wal_append(w, type, p, (uint32_t)len);

	if (ret < 0)
		fail("wal_append", wal_strerror((int)ret));
}

/* One record of each type the preload writes, with valid payloads. */
static void typed_records(struct wal *w)
{
	uint8_t buf[CRASH_HDR_SIZE + 8 * CRASH_MAX_FRAMES];
	struct rec_routing rt = { .step = step, .layer = 3, .tokens = 4, .k = 2, .id_bytes = 1,
				  .experts = 64 };
	struct rec_kvref kv = { .pool = 1, .bytes = 4096, .block = step, .store_off = step << 12,
				.step = step, .crc = 0x1234 };
	struct rec_alloc al = { .alloc_id = step, .base = 0x7f0000000000u + (step << 20),
				.size = 1 << 20, .fingerprint = 0xabcdef, .api = 1, .role = 2 };
	struct rec_free fr = { .alloc_id = step, .base = al.base };
	struct rec_crash cr = { .signo = 11, .code = 1, .addr = 0xdead, .pid = 42, .nframes = 3,
				.frames = { 0x401000, 0x402000, 0x403000 } };

	rec_routing_encode(buf, &rt);
	for (unsigned i = 0; i < rt.tokens * rt.k; i++)
		buf[ROUTING_HDR_SIZE + i] = (uint8_t)((step + i * 7) % rt.experts);
	append(w, WAL_REC_ROUTING, buf, ROUTING_HDR_SIZE + rt.tokens * rt.k);
	rec_kvref_encode(buf, &kv);
	append(w, WAL_REC_KVREF, buf, KVREF_PAYLOAD_SIZE);
	rec_alloc_encode(buf, &al);
	append(w, WAL_REC_ALLOC, buf, ALLOC_PAYLOAD_SIZE);
	rec_free_encode(buf, &fr);
	append(w, WAL_REC_FREE, buf, FREE_PAYLOAD_SIZE);
	append(w, WAL_REC_CRASH, buf, rec_crash_encode(buf, sizeof buf, &cr));
	memset(buf, (int)step, 100);
	append(w, WAL_REC_USER + 1, buf, step % 100);
}

static void commit(struct wal *w)
{
	uint8_t extra[WINDOW_STEPS_SIZE];
	struct rec_window_steps s = { .first_step = step, .steps = 1, .tokens = 4 };
	int ret;

	rec_window_steps_encode(extra, &s);
	if ((ret = wal_commit(w, extra, sizeof extra, NULL)) < 0)
		fail("wal_commit", wal_strerror(ret));
	step++;
}

static void windows(struct wal *w, unsigned n)
{
	while (n--) {
		typed_records(w);
		commit(w);
	}
}

int main(int argc, char **argv)
{
	char path[4096];
	struct wal *w;

	if (argc != 2) {
		fprintf(stderr, "usage: make_corpus DIR\n");
		return 2;
	}
	dir = argv[1];
	wal_close(open_log("empty", WAL_OPEN_CREATE | WAL_OPEN_FORMAT));

	w = open_log("windows", WAL_OPEN_CREATE | WAL_OPEN_FORMAT);
	windows(w, 3);
	wal_close(w);

	/* About 500 ring bytes a window: 400 windows wrap 64 KiB thrice. */
	w = open_log("wrapped", WAL_OPEN_CREATE | WAL_OPEN_FORMAT);
	windows(w, 400);
	wal_close(w);

	/* A clean end after the windows: an EXIT record in a window of its own. */
	w = open_log("exited", WAL_OPEN_CREATE | WAL_OPEN_FORMAT);
	windows(w, 3);
	typed_records(w);	/* dropped by the end */
	if (wal_end(w, "\1\0\0\0", EXIT_PAYLOAD_SIZE) < 0)
		fail("wal_end", "failed");
	wal_close(w);

	w = open_log("tail", WAL_OPEN_CREATE | WAL_OPEN_FORMAT);
	windows(w, 5);
	typed_records(w);
	wal_close(w);

	for (int i = 0; i < 3; i++) {
		w = open_log("epochs", i ? 0 : WAL_OPEN_CREATE | WAL_OPEN_FORMAT);
		windows(w, 40);
		typed_records(w);
		wal_close(w);
	}

	w = open_log("torn", WAL_OPEN_CREATE | WAL_OPEN_FORMAT);
	windows(w, 60);
	wal_close(w);
	snprintf(path, sizeof path, "%s/torn.wal", dir);
	if (truncate(path, SEED_SIZE / 2) < 0)
		fail(path, "truncate failed");
	return 0;
}

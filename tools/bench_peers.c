/*
 * bench_peers.c - moeft bench wal --peers: the same appends and the same
 * walk of a full log on PMDK's libpmemlog, the log library persistent
 * memory users know, on the same medium in the same run (bench.h).
 *
 * libpmemlog is opened at run time (libpmemlog.so.1), so that moeft
 * neither builds nor runs against it otherwise.  Its pool is a file made
 * beside moeft's benchmark log, exclusively, as large, and removed after.
 * Fair terms: libpmemlog appends bytes, not records, so each record goes
 * in after an 8-byte length, the least a reader needs to find it again;
 * a batch of records that moeft appends and then commits is one
 * pmemlog_appendv of the same records (libpmemlog makes each call
 * durable, as a commit is); when the pool is full it is rewound, as
 * moeft's ring reclaims.  On a medium that is not persistent memory
 * (tmpfs, a page-cache file) moeft flushes no cache lines: libpmemlog is
 * told the same (PMEM_IS_PMEM_FORCE=1, PMEM_NO_FLUSH=1, unless the
 * environment sets them), or it would msync after every append.  The walk
 * of a full log reads every record and checks it as moeft's scan does:
 * its length, and a CRC-32C of its bytes (libpmemlog keeps none, so a
 * reader that wants one computes it; moeft's records carry theirs).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "bench.h"
#include "crc32c.h"

#define PEER_LIB "libpmemlog.so.1"
#define WALK_RECORD 4096u
#define BATCH_MAX 64u		/* records per appendv (two iovecs each) */

/* libpmemlog's API, as its manual documents it (libpmemlog(7)). */
typedef struct pmemlogpool PMEMlogpool;
static struct {
	PMEMlogpool *(*create)(const char *path, size_t poolsize, mode_t mode);
	void (*close)(PMEMlogpool *plp);
	int (*appendv)(PMEMlogpool *plp, const struct iovec *iov, int iovcnt);
	void (*rewind)(PMEMlogpool *plp);
	void (*walk)(PMEMlogpool *plp, size_t chunksize,
		     int (*process_chunk)(const void *buf, size_t len, void *arg), void *arg);
	const char *(*errormsg)(void);
} pl;

static int load(int memory, char *err, size_t errlen)
{
	static const struct { const char *name; void **fn; } syms[] = {
		{ "pmemlog_create", (void **)&pl.create },
		{ "pmemlog_close", (void **)&pl.close },
		{ "pmemlog_appendv", (void **)&pl.appendv },
		{ "pmemlog_rewind", (void **)&pl.rewind },
		{ "pmemlog_walk", (void **)&pl.walk },
		{ "pmemlog_errormsg", (void **)&pl.errormsg },
	};
	void *h;

	/* Read by libpmem when it loads. */
	if (memory) {
		setenv("PMEM_IS_PMEM_FORCE", "1", 0);
		setenv("PMEM_NO_FLUSH", "1", 0);
	}
	if (!(h = dlopen(PEER_LIB, RTLD_NOW | RTLD_LOCAL))) {
		snprintf(err, errlen, "cannot load %s, PMDK's libpmemlog (Debian and Ubuntu: "
			 "apt install libpmemlog1): %s", PEER_LIB, dlerror());
		return -1;
	}
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
		if (!(*syms[i].fn = dlsym(h, syms[i].name))) {
			snprintf(err, errlen, "%s has no %s", PEER_LIB, syms[i].name);
			return -1;
		}
	return 0;
}

/* iov: n records of size bytes, each after its length. */
static void frame(struct iovec *iov, uint64_t *len, const uint8_t *src, uint32_t size, uint32_t n)
{
	*len = size;
	for (uint32_t i = 0; i < n; i++) {
		iov[2 * i] = (struct iovec){ .iov_base = len, .iov_len = sizeof *len };
		iov[2 * i + 1] = (struct iovec){ .iov_base = (void *)src, .iov_len = size };
	}
}

/* A batch, appended as one durable call; a full pool is rewound first.
 * 0, or -1 with errno. */
static int append_batch(PMEMlogpool *p, const struct iovec *iov, uint32_t n)
{
	if (pl.appendv(p, iov, (int)(2 * n)) == 0)
		return 0;
	if (errno != ENOSPC)
		return -1;
	pl.rewind(p);
	return pl.appendv(p, iov, (int)(2 * n));
}

static uint32_t batch_of(const struct peer_run *r, uint32_t size)
{
	uint32_t n = r->per_commit(size);

	return n > BATCH_MAX ? BATCH_MAX : n;
}

static int run_appends(const struct peer_run *r, PMEMlogpool *p, uint32_t size, double *rps)
{
	uint32_t n = batch_of(r, size);
	struct iovec iov[2 * BATCH_MAX];
	double t0 = cli_now(), t;
	uint64_t done = 0, len;

	frame(iov, &len, r->src, size, n);
	do {
		if (append_batch(p, iov, n) < 0)
			return -1;
		done += n;
	} while ((t = cli_now() - t0) < r->run_s);
	*rps = (double)done / t;
	return 0;
}

/* Fill the pool once with the largest records, and rewind it. */
static int warm(const struct peer_run *r, PMEMlogpool *p)
{
	uint32_t size = r->sizes[r->nsizes - 1], n = batch_of(r, size);
	struct iovec iov[2 * BATCH_MAX];
	uint64_t len;

	frame(iov, &len, r->src, size, n);
	while (pl.appendv(p, iov, (int)(2 * n)) == 0)
		;
	if (errno != ENOSPC)
		return -1;
	pl.rewind(p);
	return 0;
}

struct walked {
	uint64_t bytes;		/* of records read and checked */
	uint32_t crc;		/* of the last one, kept */
	int bad;		/* a length that runs past the log */
};

/* The whole log at once (chunk size 0): each record's length, then its
 * CRC. */
static int check_records(const void *buf, size_t len, void *arg)
{
	const uint8_t *p = buf, *end = p + len;
	struct walked *w = arg;
	uint64_t n;

	while ((size_t)(end - p) >= sizeof n) {
		memcpy(&n, p, sizeof n);
		if (n > (size_t)(end - p) - sizeof n) {
			w->bad = 1;
			break;
		}
		w->crc = crc32c(0, p + sizeof n, n);
		w->bytes += sizeof n + n;
		p += sizeof n + n;
	}
	return 0;	/* one call holds it all */
}

/* Fill the rewound pool with 4 KiB records, as moeft's scan is of a
 * nearly full log of them, then time its walk.  0, or -1 with err. */
static int run_walk(const struct peer_run *r, PMEMlogpool *p, struct peer_results *res,
		    char *err, size_t errlen)
{
	uint32_t n = batch_of(r, WALK_RECORD);
	struct iovec iov[2 * BATCH_MAX];
	uint64_t len;

	frame(iov, &len, r->src, WALK_RECORD, n);
	pl.rewind(p);
	while (pl.appendv(p, iov, (int)(2 * n)) == 0)
		;
	if (errno != ENOSPC) {
		snprintf(err, errlen, "%s: filling the pool: %s", r->path, pl.errormsg());
		return -1;
	}
	for (int k = 0; k < r->repeats; k++) {
		struct walked w = { 0 };
		double t = cli_now(), bps;

		pl.walk(p, 0, check_records, &w);
		bps = (double)w.bytes / (cli_now() - t);
		if (w.bad || !w.bytes) {
			snprintf(err, errlen, "%s: the walk found %s", r->path, w.bad ?
				 "a record's length past the log's end" : "no record");
			return -1;
		}
		res->walk_bytes = w.bytes;
		if (bps > res->walk_bps)
			res->walk_bps = bps;
	}
	return 0;
}

int bench_pmemlog_load(int memory, char *err, size_t errlen)
{
	return load(memory, err, errlen);
}

int bench_pmemlog(const struct peer_run *r, struct peer_results *res, char *err, size_t errlen)
{
	const char *force = getenv("PMEM_IS_PMEM_FORCE"), *noflush = getenv("PMEM_NO_FLUSH");
	PMEMlogpool *p;
	int ret = 0;

	memset(res, 0, sizeof *res);
	if (!pl.create && load(r->memory, err, errlen) < 0)
		return -1;
	/* As libpmem read them when it loaded: ours, or the user's. */
	snprintf(res->how, sizeof res->how, "%s (PMEM_IS_PMEM_FORCE=%s, PMEM_NO_FLUSH=%s)",
		 PEER_LIB, force ? force : "unset", noflush ? noflush : "unset");
	if (!(p = pl.create(r->path, r->size, 0600))) {
		snprintf(err, errlen, "%s: cannot make libpmemlog's pool there: %s", r->path,
			 pl.errormsg());
		return -1;
	}
	/* Every page of the pool faulted in before timing, as moeft's ring
	 * is (bench.c, warm_up). */
	ret = warm(r, p);
	for (size_t s = 0; s < r->nsizes && ret == 0; s++)
		for (int k = 0; k < r->repeats && ret == 0; k++) {
			double rps;

			if ((ret = run_appends(r, p, r->sizes[s], &rps)) == 0 &&
			    rps > res->append_rps[s])
				res->append_rps[s] = rps;
		}
	if (ret < 0)
		snprintf(err, errlen, "%s: appending: %s", r->path, pl.errormsg());
	else
		ret = run_walk(r, p, res, err, errlen);
	pl.close(p);
	unlink(r->path);
	return ret;
}

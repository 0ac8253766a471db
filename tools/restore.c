/*
 * restore.c - moeft restore: the state of the last committed decode window
 * of a log (state.h), written into a directory without CUDA: one image per
 * KV pool, the routing, and manifest.json saying what they are (README,
 * "Restore output").  With a command after "--", the restore is online:
 * the command then starts under the preload in restore mode (launch.h),
 * following the plan file written beside the images (preload/plan.h).
 *
 * Every file is written under a temporary name, made durable and renamed,
 * manifest.json last, so a restore killed at any point leaves whole files
 * only, and a directory the next restore accepts.  Nothing in the files
 * depends on the time or the run: restoring twice gives the same bytes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "blank.h"
#include "cli.h"
#include "config.h"
#include "crc32c.h"
#include "guard.h"
#include "kvmap.h"
#include "json.h"
#include "logname.h"
#include "logset.h"
#include "launch.h"
#include "leftovers.h"
#include "media.h"
#include "plan.h"
#include "record.h"
#include "reqindex.h"
#include "shmlist.h"
#include "restore.h"
#include "state.h"

#define MANIFEST RESTORE_MANIFEST_NAME
#define ROUTING "routing.bin"
#define PLAN RESTORE_PLAN_NAME
#define REQUESTS REQINDEX_NAME
/* The earlier restore's manifest while this one writes: what it lists may
 * be removed, and no manifest names a set that is half this one's. */
#define RETIRED MANIFEST ".old"
#define MANIFEST_HEAD "{\"format\":1,\"log\":"
#define MAX_PROBLEMS 8
#define LOST_LINES 32   /* lost chunks named on stderr; all are in the manifest */
#define RESTORE_NOTHING (-1)  /* run(): online, and the log has nothing to restore */

struct image {
	char file[32];
	uint32_t crc;
	uint64_t stored, stored_bytes;  /* chunks, bytes from the store */
	uint64_t *lost;
	size_t nlost, lostcap;
};

struct restore {
	const struct cli_command *cmd;
	int json;
	int images;                     /* --images: no chunk maps */
	const char *wal, *out;
	char **cmdv;                    /* the command after "--"; NULL: offline */
	const char *logs_dir;           /* where the preload keeps the lists of
					   the logs' processes (shmlist.h);
					   NULL: it keeps none */
	int dir;                        /* the output directory */
	int hold;                       /* the log, held against writers */
	struct state s;
	struct image *img;              /* per s.pool */
	uint64_t bytes, chunks, lost, routing, requests;
	uint64_t routing_weights;       /* of the routing: records with gating weights */
	uint64_t stored, stored_bytes;  /* of those: from the store (the rest: zeros) */
	unsigned lost_named;            /* under lock, with done and shown */
	pthread_mutex_t lock;           /* the image writers' shared lines */
	char problem[MAX_PROBLEMS][192];/* why the exit status is 1 */
	unsigned nproblem;
	int quiet;                      /* no summary (restore_offline) */
	uint64_t at_step;               /* the state's last step: STATE_NEWEST, or
					   a set's cut (set_cut) */
	char (*listed)[32];             /* images the earlier restore's manifest lists */
	size_t nlisted;
	/* The progress line on a terminal: bytes in all, done, last shown. */
	uint64_t total, done, shown;
	double load_s, images_s;        /* what the parts took (restore.h) */
};

static void problem(struct restore *rs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(struct restore *rs, const char *fmt, ...)
{
	va_list ap;

	if (rs->nproblem == MAX_PROBLEMS)
		return;
	va_start(ap, fmt);
	vsnprintf(rs->problem[rs->nproblem++], sizeof rs->problem[0], fmt, ap);
	va_end(ap);
}

/* ---- the output directory ----------------------------------------------- */

/* A name restore writes: manifest.json (and, while it writes, the earlier
 * one as manifest.json.old), routing.bin, plan, requests, kv-pool-N.bin,
 * or one of them with ".tmp" after it (what a killed restore leaves). */
static int ours(const char *name, int *tmp)
{
	size_t n = strlen(name), d;

	*tmp = n > 4 && !strcmp(name + n - 4, ".tmp");
	if (*tmp)
		n -= 4;
	if ((n == strlen(MANIFEST) && !strncmp(name, MANIFEST, n)) ||
	    (n == strlen(RETIRED) && !strncmp(name, RETIRED, n)) ||
	    (n == strlen(ROUTING) && !strncmp(name, ROUTING, n)) ||
	    (n == strlen(PLAN) && !strncmp(name, PLAN, n)) ||
	    (n == strlen(REQUESTS) && !strncmp(name, REQUESTS, n)))
		return 1;
	if (n < 13 || strncmp(name, "kv-pool-", 8) ||
	    (strncmp(name + n - 4, ".bin", 4) && strncmp(name + n - 4, ".map", 4)))
		return 0;
	d = strspn(name + 8, "0123456789");
	return d > 0 && d < 6 && 8 + d + 4 == n;
}

/* The directory holds a manifest that a restore wrote under name. */
static int has_manifest(int dir, const char *name)
{
	char head[sizeof MANIFEST_HEAD - 1];
	int fd = openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, head, sizeof head);
	close(fd);
	return n == (ssize_t)sizeof head && !memcmp(head, MANIFEST_HEAD, sizeof head);
}

/* The largest manifest.json read back: far more than one of 64K pools. */
#define MANIFEST_MAX (UINT64_C(64) << 20)

/*
 * The images (kv-pool-N.bin) that an earlier restore's manifest (name)
 * lists, added to rs->listed: those, and no other file of that name, are a
 * later restore's to remove.  json.c writes a key and its string value as
 * "file":"VALUE", a sequence that cannot occur inside a string, where every
 * quote is escaped.  0, or -1 with errno set.
 */
static int read_listed(struct restore *rs, const char *name)
{
	static const char key[] = "\"file\":\"";
	int fd = openat(rs->dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), tmp, ret = -1;
	char *text = NULL, *p, *end;
	struct stat st;
	ssize_t n;

	if (fd < 0 || fstat(fd, &st) < 0)
		goto out;
	if ((uint64_t)st.st_size > MANIFEST_MAX) {
		errno = EFBIG;
		goto out;
	}
	if (!(text = malloc((size_t)st.st_size + 1)) ||
	    (n = pread(fd, text, (size_t)st.st_size, 0)) < 0)
		goto out;
	text[n] = '\0';
	for (p = text; (p = strstr(p, key)); p = end) {
		p += sizeof key - 1;
		if (!(end = strchr(p, '"')))
			break;
		*end++ = '\0';
		if (!ours(p, &tmp) || tmp || strncmp(p, "kv-pool-", 8))
			continue;
		if (!(rs->nlisted & (rs->nlisted + 1))) {	/* 0, 1, 3, 7, ...: full */
			char (*l)[32] = realloc(rs->listed, (rs->nlisted * 2 + 1) * sizeof *l);

			if (!l)
				goto out;
			rs->listed = l;
		}
		snprintf(rs->listed[rs->nlisted++], sizeof *rs->listed, "%s", p);
	}
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	free(text);
	return ret;
}

static int is_listed(const struct restore *rs, const char *name)
{
	for (size_t i = 0; i < rs->nlisted; i++)
		if (!strcmp(rs->listed[i], name))
			return 1;
	return 0;
}

/* A file of the directory that restore may replace or remove, by
 * guard.h's rule (the log read among them); 0, or the failure reported. */
static int may_replace(struct restore *rs, const struct stat *log, const char *name)
{
	char path[PATH_MAX], msg[PATH_MAX + 128];

	if (snprintf(path, sizeof path, "%s/%s", rs->out, name) >= (int)sizeof path)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s: path too long", rs->out);
	if (guard_check(path, log, msg, sizeof msg) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s", msg);
	return 0;
}

static int io_fail(struct restore *rs, const char *name, int err)
{
	return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s/%s: %s", rs->out, name, strerror(err));
}

/*
 * Open --out, creating it when missing.  A directory that holds anything
 * else than what a restore writes is refused unless it holds a restore's
 * manifest.json: a restore never writes over files it did not make.  Nor
 * over a moeft log or KV store, or the log it reads, whatever their names;
 * nor into a link, or a directory others could have made first or can
 * write (media_trust): the KV cache is the user's.
 */
static int open_out(struct restore *rs)
{
	struct wal_error err;
	struct dirent *e;
	struct stat log, *in;
	DIR *d;
	int fd, tmp, foreign = 0, ret = 0;

	if ((rs->dir = media_open_dir(rs->out, 1, &err)) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s", err.msg);
	/* One restore at a time writes a directory; the lock goes with the
	 * descriptor (at exit, or with the restored CMD: bring_back). */
	if (flock(rs->dir, LOCK_EX | LOCK_NB) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s: %s", rs->out,
				errno == EWOULDBLOCK ? "another moeft restore is writing it (or "
				"the process it restored still runs on it)" :
				strerror(errno));
	if ((fd = dup(rs->dir)) < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s: %s", rs->out,
				strerror(errno));
	}
	in = stat(rs->wal, &log) == 0 ? &log : NULL;
	while (!ret && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (!ours(e->d_name, &tmp))
			foreign = 1;
		else
			ret = may_replace(rs, in, e->d_name);
	}
	closedir(d);
	if (ret)
		return ret;
	for (unsigned i = 0; i < 2; i++) {
		const char *name = i ? RETIRED : MANIFEST;

		if (!has_manifest(rs->dir, name))
			continue;
		if (read_listed(rs, name) < 0)
			return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s/%s: cannot read "
					"it: %s", rs->out, name, strerror(errno));
		foreign = 0;
	}
	if (foreign)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s: not empty, and not the "
				"output of an earlier restore (no manifest.json of one); refusing "
				"to write into it", rs->out);
	return 0;
}

/* A fresh NAME.tmp in the directory, or NULL with errno set. */
static FILE *tmp_open(struct restore *rs, const char *name, char *tmp, size_t len)
{
	FILE *f;
	int fd;

	snprintf(tmp, len, "%s.tmp", name);
	if (unlinkat(rs->dir, tmp, 0) < 0 && errno != ENOENT)
		return NULL;
	fd = openat(rs->dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return NULL;
	if (!(f = fdopen(fd, "w"))) {
		int err = errno;

		close(fd);
		unlinkat(rs->dir, tmp, 0);
		errno = err;
	}
	return f;
}

/* Unless err (an errno) is set already: make NAME.tmp durable and give it
 * its name.  f is closed; 0, or the failure reported (EXIT_USAGE). */
static int tmp_commit(struct restore *rs, FILE *f, const char *tmp, const char *name, int err)
{
	errno = 0;
	if (!err && (fflush(f) != 0 || ferror(f)))
		err = errno ? errno : EIO;
	if (!err && fdatasync(fileno(f)) < 0)
		err = errno;
	if (fclose(f) != 0 && !err)
		err = errno;
	if (!err && renameat(rs->dir, tmp, rs->dir, name) < 0)
		err = errno;
	if (!err)
		return 0;
	unlinkat(rs->dir, tmp, 0);
	return io_fail(rs, name, err);
}

/*
 * Before the first file of this restore lands: every image the earlier
 * restores' manifests list (manifest.json, and what a killed restore put
 * aside) goes into one retired list, written whole before manifest.json
 * and the plan are removed, durably.  So a restore killed anywhere leaves
 * nothing that names a set half of which is another restore's, and the
 * next one still knows every image it may remove, however many were
 * killed in a row.
 */
static int retire(struct restore *rs)
{
	char tmp[40];
	FILE *f;
	int ret;

	if (!rs->nlisted) {
		if (unlinkat(rs->dir, RETIRED, 0) < 0 && errno != ENOENT)
			return io_fail(rs, RETIRED, errno);
	} else {
		if (!(f = tmp_open(rs, RETIRED, tmp, sizeof tmp)))
			return io_fail(rs, tmp, errno);
		fputs(MANIFEST_HEAD "null,\"retired\":[", f);
		for (size_t i = 0; i < rs->nlisted; i++)
			fprintf(f, "%s{\"file\":\"%s\"}", i ? "," : "", rs->listed[i]);
		fputs("]}\n", f);
		if ((ret = tmp_commit(rs, f, tmp, RETIRED, 0)))
			return ret;
	}
	if (unlinkat(rs->dir, MANIFEST, 0) < 0 && errno != ENOENT)
		return io_fail(rs, MANIFEST, errno);
	if (unlinkat(rs->dir, PLAN, 0) < 0 && errno != ENOENT)
		return io_fail(rs, PLAN, errno);
	if (unlinkat(rs->dir, REQUESTS, 0) < 0 && errno != ENOENT)
		return io_fail(rs, REQUESTS, errno);
	if (fsync(rs->dir) < 0)
		return io_fail(rs, ".", errno);
	return 0;
}

static int pwrite_all(int fd, const uint8_t *p, uint64_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, p, len < (1u << 30) ? len : (1u << 30), (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

/* ---- the files -------------------------------------------------------------- */

static int add_lost(struct restore *rs, struct image *im, const struct state_pool *p,
		    uint64_t chunk, const char *why)
{
	uint64_t *l = im->lost;

	if (im->nlost == im->lostcap) {
		im->lostcap = im->lostcap ? im->lostcap * 2 : 16;
		if (!(l = realloc(im->lost, im->lostcap * sizeof *l)))
			return -1;
		im->lost = l;
	}
	im->lost[im->nlost++] = chunk;
	pthread_mutex_lock(&rs->lock);
	if (rs->lost_named++ < LOST_LINES)
		fprintf(stderr, "moeft restore: pool %" PRIu32 " chunk %" PRIu64 " lost (bytes %"
			PRIu64 "-%" PRIu64 " of %s are zeros): %s\n", p->no, chunk,
			chunk * p->info.d.chunk_bytes,
			chunk * p->info.d.chunk_bytes + state_chunk_len(p, chunk) - 1, im->file, why);
	pthread_mutex_unlock(&rs->lock);
	return 0;
}

/* A restore this large shows its progress on a terminal. */
#define PROGRESS_MIN (UINT64_C(256) << 20)

/* After each chunk: the progress line, redrawn at each percent. */
static void progress(struct restore *rs, uint64_t len)
{
	if (!rs->total)
		return;
	pthread_mutex_lock(&rs->lock);
	rs->done += len;
	if (rs->done - rs->shown >= rs->total / 100 + 1) {
		rs->shown = rs->done;
		fprintf(stderr, "\rmoeft restore: %3u%% of %" PRIu64 " MiB",
			(unsigned)(rs->done * 100 / rs->total), rs->total >> 20);
		if (rs->done >= rs->total)
			fputs("\r\033[K", stderr);
	}
	pthread_mutex_unlock(&rs->lock);
}

/* Whether pool i is host memory an engine adapter registered. */
static int adapter_pool(const struct restore *rs, unsigned i)
{
	const struct state_alloc *a = rs->s.pool[i].alloc;

	return a && a->a.api == ALLOC_API_ADAPTER;
}

/* Whether pool i is restored from the KV store through its chunk map
 * (kvmap.h), not from an image: an online restore's device pool (an
 * adapter's host pool is read again while the server runs, which the
 * store's slots do not outlive), of chunks a map holds, unless --images. */
static int mapped(const struct restore *rs, unsigned i)
{
	const struct state_alloc *a = rs->s.pool[i].alloc;
	uint64_t cb = rs->s.pool[i].info.d.chunk_bytes;

	/* An allocation the log no longer shows (an incomplete history) may
	 * be an adapter's: it gets an image. */
	return rs->cmdv && !rs->images && a && a->a.api != ALLOC_API_ADAPTER &&
	       kvmap_chunk_ok(cb);
}

/* kv-pool-N.map (mapped) or kv-pool-N.bin: where each chunk's bytes as of
 * C lie in the store, or the pool's bytes with lost and unwritten chunks
 * as the file's holes (zeros).  Every chunk's CRC is checked either way,
 * so a damaged one is found before CMD starts. */
static int write_pool(struct restore *rs, unsigned i)
{
	const struct state_pool *p = &rs->s.pool[i];
	struct image *im = &rs->img[i];
	struct kvmap m = { 0 };
	char tmp[40], why[160];
	const uint8_t *data;
	uint64_t c, len;
	uint32_t crc;
	FILE *f;
	int kind, err = 0;

	if (mapped(rs, i)) {
		m = (struct kvmap){ .pool = p->no, .log_id = rs->s.rec->log_id, .window = rs->s.c->id,
				    .size = p->info.d.size, .chunk_bytes = p->info.d.chunk_bytes,
				    .nchunks = p->info.nchunks };
		if (!(m.e = calloc(m.nchunks, sizeof *m.e)))
			return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "out of memory");
	}
	snprintf(im->file, sizeof im->file, "kv-pool-%" PRIu32 ".%s", p->no, m.e ? "map" : "bin");
	if (!(f = tmp_open(rs, im->file, tmp, sizeof tmp))) {
		free(m.e);
		return io_fail(rs, tmp, errno);
	}
	if (!m.e && ftruncate(fileno(f), (off_t)p->info.d.size) < 0)
		err = errno;
	for (c = 0; !err && c < p->info.nchunks; c++) {
		len = state_chunk_len(p, c);
		kind = state_chunk(&rs->s, p, c, &data, &crc, why, sizeof why);
		progress(rs, len);
		if (kind == STATE_CHUNK_DATA) {
			/* The chunk's CRC is verified: the image's is combined, not
			 * computed over the bytes again. */
			im->crc = crc32c_combine(im->crc, crc, len);
			if (m.e) {
				struct kvmap_entry *e = &m.e[c];

				*e = (struct kvmap_entry){ kvs_reader_offset(rs->s.kv, data),
							   (uint32_t)len, crc, 0, 0 };
				if (kvs_reader_header(rs->s.kv, p->no, c, data, &e->hdr,
						      &e->window) < 0)
					err = EIO;
			} else if (pwrite_all(fileno(f), data, len, c * p->info.d.chunk_bytes) < 0)
				err = errno ? errno : EIO;
			im->stored++;
			im->stored_bytes += len;
			continue;
		}
		if (kind == STATE_CHUNK_LOST && add_lost(rs, im, p, c, why) < 0)
			err = ENOMEM;
		im->crc = crc32c_zeros(im->crc, len);
	}
	if (m.e && !err && kvmap_write(f, &m, kvs_reader_size(rs->s.kv), why, sizeof why) < 0) {
		free(m.e);
		fclose(f);
		unlinkat(rs->dir, tmp, 0);
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s/%s: %s", rs->out, im->file, why);
	}
	free(m.e);
	return tmp_commit(rs, f, tmp, im->file, err);
}

/*
 * The images are written by up to this many threads, a pool each at a
 * time: the work (checking each chunk's CRC, faulting in the files' pages)
 * grows with the cores put to it.
 */
#define IMAGE_THREADS 16

struct image_jobs {
	struct restore *rs;
	atomic_uint next;       /* the next pool to take */
	atomic_int ret;         /* the first failure; 0 while none */
};

static void *image_worker(void *arg)
{
	struct image_jobs *j = arg;
	struct restore *rs = j->rs;
	unsigned i;
	int ret, none;

	while (!atomic_load(&j->ret) && (i = atomic_fetch_add(&j->next, 1)) < rs->s.npools)
		if ((ret = write_pool(rs, i))) {
			none = 0;
			atomic_compare_exchange_strong(&j->ret, &none, ret);
		}
	return NULL;
}

/* Every pool's image, by as many threads as there are pools and cores. */
static int write_images(struct restore *rs)
{
	struct image_jobs j = { .rs = rs };
	pthread_t t[IMAGE_THREADS - 1];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned want = rs->s.npools, started = 0, i;

	if (cpus > 0 && want > (unsigned long)cpus)
		want = (unsigned)cpus;
	if (want > IMAGE_THREADS)
		want = IMAGE_THREADS;
	/* A thread that cannot be made leaves its share to the others. */
	while (started + 1 < want && pthread_create(&t[started], NULL, image_worker, &j) == 0)
		started++;
	image_worker(&j);
	for (i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < rs->s.npools; i++) {
		rs->bytes += rs->s.pool[i].info.d.size;
		rs->chunks += rs->s.pool[i].info.nchunks;
		rs->lost += rs->img[i].nlost;
		rs->stored += rs->img[i].stored;
		rs->stored_bytes += rs->img[i].stored_bytes;
	}
	return atomic_load(&j.ret);
}

/* routing.bin: each ROUTING payload after its length, u32 little-endian. */
static int write_routing(struct restore *rs)
{
	struct state_iter it;
	struct wal_record rec;
	char tmp[32];
	FILE *f;

	if (!(f = tmp_open(rs, ROUTING, tmp, sizeof tmp)))
		return io_fail(rs, tmp, errno);
	state_routing_init(&it, &rs->s);
	while (state_routing_next(&it, &rec)) {
		uint8_t len[4] = { (uint8_t)rec.len, (uint8_t)(rec.len >> 8),
				   (uint8_t)(rec.len >> 16), (uint8_t)(rec.len >> 24) };

		struct rec_routing rt;

		fwrite(len, 1, sizeof len, f);
		fwrite(rec.payload, 1, rec.len, f);
		rs->routing++;
		if (rec_routing_decode(rec.payload, rec.len, &rt) == 0 && rt.weights)
			rs->routing_weights++;
	}
	return tmp_commit(rs, f, tmp, ROUTING, 0);
}

/* requests (reqindex.h): the engine's requests as of the state's adapter
 * window, when the log has one. */
static int write_requests(struct restore *rs)
{
	const struct state_requests *q = &rs->s.req;
	struct reqindex x = { .log_id = rs->s.rec->log_id };
	size_t len;
	uint8_t *buf;
	char tmp[32];
	FILE *f;
	int ret;

	if (!q->w)
		return 0;
	x.window = q->w->id;
	x.first_step = q->s.first_step;
	x.last_step = q->s.first_step + q->s.steps - 1;
	/* The preload never commits such a window: the log is not its own. */
	if (!(len = reqindex_format(NULL, 0, &x, q->payload, q->len, q->n))) {
		problem(rs, "window %" PRIu64 " holds requests no index can hold (two of one id, "
			"or more than %u): none restored", q->w->id, REQINDEX_MAX_REQUESTS);
		return 0;
	}
	if (!(buf = malloc(len)))
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "out of memory");
	reqindex_format(buf, len, &x, q->payload, q->len, q->n);
	if (!(f = tmp_open(rs, REQUESTS, tmp, sizeof tmp))) {
		free(buf);
		return io_fail(rs, tmp, errno);
	}
	fwrite(buf, 1, len, f);
	free(buf);
	ret = tmp_commit(rs, f, tmp, REQUESTS, 0);
	if (!ret)
		rs->requests = q->n;
	return ret;
}

static void requests_json(struct json *j, const struct restore *rs)
{
	const struct state_requests *q = &rs->s.req;

	json_key(j, "requests");
	if (!q->w) {
		json_str(j, NULL);
		return;
	}
	json_obj_begin(j);
	json_kv_str(j, "file", REQUESTS);
	json_kv_u64(j, "window", q->w->id);
	json_kv_u64(j, "first_step", q->s.first_step);
	json_kv_u64(j, "last_step", q->s.first_step + q->s.steps - 1);
	json_kv_u64(j, "count", rs->requests);
	json_obj_end(j);
}

/* "0x" and `digits` hex digits */
static void kv_hex(struct json *j, const char *key, int digits, uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof buf, "0x%0*" PRIx64, digits, v);
	json_kv_str(j, key, buf);
}

static void window_json(struct json *j, const struct state_window *w)
{
	json_obj_begin(j);
	json_kv_u64(j, "id", w->id);
	json_kv_u64(j, "first_step", w->s.first_step);
	json_kv_u64(j, "steps", w->s.steps);
	json_kv_u64(j, "flags", w->s.flags);
	json_obj_end(j);
}

static void allocations_json(struct json *j, const struct state *s)
{
	json_key(j, "allocations");
	json_arr_begin(j);
	for (size_t i = 0; i < s->nalloc; i++) {
		const struct rec_alloc *a = &s->alloc[i].a;

		json_obj_begin(j);
		json_kv_u64(j, "alloc_id", a->alloc_id);
		json_kv_u64(j, "base", a->base);
		json_kv_u64(j, "size", a->size);
		kv_hex(j, "fingerprint", 16, a->fingerprint);
		json_kv_u64(j, "ordinal", a->ordinal);
		json_kv_u64(j, "api", a->api);
		json_kv_u64(j, "role", a->role);
		json_obj_end(j);
	}
	json_arr_end(j);
}

static void pools_json(struct json *j, const struct restore *rs)
{
	json_key(j, "kv_pools");
	json_arr_begin(j);
	for (unsigned i = 0; i < rs->s.npools; i++) {
		const struct state_pool *p = &rs->s.pool[i];
		const struct image *im = &rs->img[i];

		json_obj_begin(j);
		json_kv_u64(j, "pool", p->no);
		kv_hex(j, "fingerprint", 16, p->info.d.fingerprint);
		json_kv_u64(j, "size", p->info.d.size);
		json_kv_u64(j, "ordinal", p->info.d.ordinal);
		json_kv_u64(j, "chunk_bytes", p->info.d.chunk_bytes);
		json_kv_u64(j, "chunks", p->info.nchunks);
		json_kv_u64(j, "stored_chunks", im->stored);
		json_kv_str(j, "file", im->file);
		kv_hex(j, "crc32c", 8, im->crc);
		json_key(j, "lost_chunks");
		json_arr_begin(j);
		for (size_t k = 0; k < im->nlost; k++)
			json_u64(j, im->lost[k]);
		json_arr_end(j);
		json_key(j, "alloc_id");
		if (p->alloc)
			json_u64(j, p->alloc->a.alloc_id);
		else
			json_str(j, NULL);
		json_obj_end(j);
	}
	json_arr_end(j);
}

static void experts_json(struct json *j, const struct hist *h)
{
	json_key(j, "experts");
	json_arr_begin(j);
	for (uint32_t l = 0; l < h->nlayers; l++) {
		const struct hist_layer *hl = &h->layer[l];

		if (!hl->tokens)
			continue;
		json_obj_begin(j);
		json_kv_u64(j, "layer", l);
		json_kv_u64(j, "tokens", hl->tokens);
		json_key(j, "counts");
		json_arr_begin(j);
		for (uint32_t e = 0; e < h->experts; e++)
			json_u64(j, e < hl->n ? hl->count[e] : 0);
		json_arr_end(j);
		json_obj_end(j);
	}
	json_arr_end(j);
}

static void problems_json(struct json *j, const struct restore *rs)
{
	json_key(j, "problems");
	json_arr_begin(j);
	for (unsigned i = 0; i < rs->nproblem; i++)
		json_str(j, rs->problem[i]);
	json_arr_end(j);
}

static void manifest_json(struct json *j, const struct restore *rs)
{
	const struct state *s = &rs->s;
	const struct rec_window_steps *cs = &s->cs;

	json_obj_begin(j);
	json_kv_u64(j, "format", 1);
	json_key(j, "log");
	json_obj_begin(j);
	json_kv_str(j, "path", rs->wal);
	kv_hex(j, "log_id", 16, s->rec->log_id);
	json_kv_u64(j, "epoch", s->c->epoch);
	json_kv_u64(j, "windows", s->rec->committed_windows);
	json_obj_end(j);
	json_key(j, "window");
	json_obj_begin(j);
	json_kv_u64(j, "id", s->c->id);
	json_kv_u64(j, "first_step", cs->first_step);
	json_kv_u64(j, "last_step", cs->first_step + cs->steps - 1);
	json_kv_u64(j, "steps", cs->steps);
	json_kv_u64(j, "flags", cs->flags);
	json_obj_end(j);
	json_kv_u64(j, "resume_step", cs->first_step + cs->steps);
	allocations_json(j, s);
	pools_json(j, rs);
	json_key(j, "routing");
	json_obj_begin(j);
	json_kv_str(j, "file", ROUTING);
	json_kv_u64(j, "records", rs->routing);
	json_kv_u64(j, "with_weights", rs->routing_weights);
	json_key(j, "windows");
	json_arr_begin(j);
	for (size_t i = 0; i < s->nwin; i++)
		window_json(j, &s->win[i]);
	json_arr_end(j);
	json_obj_end(j);
	experts_json(j, &s->hist);
	requests_json(j, rs);
	json_kv_u64(j, "lost_chunks", rs->lost);
	json_kv_bool(j, "history_complete", s->history_complete);
	problems_json(j, rs);
	json_obj_end(j);
}

/* The plan of restore mode (preload/plan.h): what the preload of the
 * command must copy in, and where from. */
static int write_plan(struct restore *rs)
{
	const struct state *s = &rs->s;
	struct restore_plan p = { .log_id = s->rec->log_id, .window = s->c->id,
				  .first_step = s->cs.first_step,
				  .last_step = s->cs.first_step + s->cs.steps - 1,
				  .npools = s->npools };
	char tmp[32], why[200], *text = malloc(RESTORE_PLAN_MAX + 1);
	FILE *f = NULL;
	int n = -1, ret;

	if (text && (p.pools = calloc(s->npools ? s->npools : 1, sizeof *p.pools))) {
		for (unsigned i = 0; i < s->npools; i++) {
			const struct kvs_pool_desc *d = &s->pool[i].info.d;

			p.pools[i] = (struct restore_pool){ .no = s->pool[i].no,
							    .ordinal = d->ordinal,
							    .fingerprint = d->fingerprint,
							    .size = d->size,
							    .chunk_bytes = d->chunk_bytes,
							    .lost = rs->img[i].lost,
							    .nlost = (uint32_t)rs->img[i].nlost };
			snprintf(p.pools[i].file, sizeof p.pools[i].file, "%s", rs->img[i].file);
		}
		n = restore_plan_format(&p, text, RESTORE_PLAN_MAX + 1, why, sizeof why);
	} else {
		snprintf(why, sizeof why, "out of memory");
	}
	if (n < 0) {
		ret = cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s/%s: %s", rs->out, PLAN, why);
	} else if (!(f = tmp_open(rs, PLAN, tmp, sizeof tmp))) {
		ret = io_fail(rs, tmp, errno);
	} else {
		fwrite(text, 1, (size_t)n, f);
		ret = tmp_commit(rs, f, tmp, PLAN, 0);
	}
	free(p.pools);
	free(text);
	return ret;
}

static int write_manifest(struct restore *rs)
{
	struct json j;
	char tmp[32];
	FILE *f;

	if (!(f = tmp_open(rs, MANIFEST, tmp, sizeof tmp)))
		return io_fail(rs, tmp, errno);
	json_init(&j, f);
	manifest_json(&j, rs);
	return tmp_commit(rs, f, tmp, MANIFEST, 0);
}

/*
 * After the manifest: the images of pools the earlier restore's manifest
 * listed and this restore has not, and the temporary files (NAME.tmp, a
 * restore's own names) a killed restore left.  A kv-pool-N.bin that no
 * manifest listed is not restore's: it stays.
 */
static void remove_stale(struct restore *rs)
{
	struct dirent *e;
	DIR *d;
	int fd = dup(rs->dir), tmp;

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d); /* open_out read through the same open file */
	while ((e = readdir(d))) {
		int keep;

		if (!ours(e->d_name, &tmp))
			continue;
		keep = !tmp && strcmp(e->d_name, RETIRED) &&
		       (strncmp(e->d_name, "kv-pool-", 8) || !is_listed(rs, e->d_name));
		for (unsigned i = 0; !tmp && i < rs->s.npools && !keep; i++)
			keep = !strcmp(e->d_name, rs->img[i].file);
		if (!keep)
			unlinkat(rs->dir, e->d_name, 0);
	}
	closedir(d);
}

/* ---- what went wrong ------------------------------------------------------ */

/* Whether the lost chunks, if any, are all an adapter's to leave out: its
 * engine serves none (moeft_restored_intact), so they cost a recompute,
 * where a device pool's would be copied in as zeros.  The plan lists at
 * most RESTORE_LOST_MAX. */
static int lost_servable(const struct restore *rs)
{
	if (rs->lost > RESTORE_LOST_MAX)
		return 0;
	for (unsigned i = 0; i < rs->s.npools; i++)
		if (rs->img[i].nlost && !adapter_pool(rs, i))
			return 0;
	return 1;
}

/* The reasons for exit status 1, and a note on an incomplete history. */
static void assess(struct restore *rs)
{
	const struct state *s = &rs->s;
	uint64_t gaps = 0, last = s->cs.first_step + s->cs.steps - 1;

	if (rs->lost)
		problem(rs, "%" PRIu64 " KV chunk%s lost (zero-filled, listed per pool)%s", rs->lost,
			rs->lost == 1 ? "" : "s", lost_servable(rs) ? "; the engine's adapter "
			"serves none of them: the requests whose blocks they hold are recomputed "
			"from there" : "");
	if (s->cs.flags & WINDOW_KV_PARTIAL)
		problem(rs, "window %" PRIu64 " is flagged KV-partial: some chunks that changed by "
			"step %" PRIu64 " were left for a later window", s->c->id, last);
	for (size_t i = 0; i < s->nwin; i++)
		gaps += (s->win[i].s.flags & WINDOW_ROUTING_GAP) != 0;
	if (gaps)
		problem(rs, "%" PRIu64 " decode window%s flagged routing-gap: their routing is not "
			"whole", gaps, gaps == 1 ? " is" : "s are");
	if (s->rec->damage_count)
		problem(rs, "the log holds damage inside its committed part: %" PRIu64 " finding%s, "
			"%" PRIu64 " damaged window%s ('moeft verify' lists them)",
			s->rec->damage_count, s->rec->damage_count == 1 ? "" : "s",
			s->rec->damaged_windows, s->rec->damaged_windows == 1 ? "" : "s");
	if (s->bad)
		problem(rs, "%" PRIu64 " record%s up to window %" PRIu64 " could not be used "
			"(undecodable, or a KVREF of a chunk the KV store lacks)", s->bad,
			s->bad == 1 ? "" : "s", s->c->id);
	if (!s->kv && s->kvrefs)
		problem(rs, "the log references %" PRIu64 " KV chunk%s, but %s.kv does not exist",
			s->kvrefs, s->kvrefs == 1 ? "" : "s", rs->wal);
	if (s->missing_pools)
		problem(rs, "%u KV pool%s of epoch %" PRIu32 " live as of window %" PRIu64 " %s no "
			"pool in the KV store (its table entry damaged or reclaimed): not restored",
			s->missing_pools, s->missing_pools == 1 ? "" : "s", s->c->epoch, s->c->id,
			s->missing_pools == 1 ? "has" : "have");
}

static void summary(const struct restore *rs, double seconds)
{
	const struct state *s = &rs->s;
	uint64_t last = s->cs.first_step + s->cs.steps - 1;
	double mbs = seconds > 0 ? (double)rs->bytes / seconds / 1e6 : 0;
	char b[32], st[32];

	if (rs->json) {
		struct json j;

		json_init(&j, stdout);
		json_obj_begin(&j);
		json_kv_str(&j, "status", rs->nproblem ? "incomplete" : "ok");
		json_kv_str(&j, "out", rs->out);
		json_kv_u64(&j, "window", s->c->id);
		json_kv_u64(&j, "first_step", s->cs.first_step);
		json_kv_u64(&j, "last_step", last);
		json_kv_u64(&j, "resume_step", last + 1);
		json_kv_u64(&j, "pools", s->npools);
		json_kv_u64(&j, "bytes", rs->bytes);
		json_kv_u64(&j, "chunks", rs->chunks);
		json_kv_u64(&j, "lost_chunks", rs->lost);
		json_kv_u64(&j, "stored_chunks", rs->stored);
		json_kv_u64(&j, "stored_bytes", rs->stored_bytes);
		json_kv_u64(&j, "zero_chunks", rs->chunks - rs->stored - rs->lost);
		json_kv_u64(&j, "routing_records", rs->routing);
		json_kv_u64(&j, "routing_with_weights", rs->routing_weights);
		json_kv_u64(&j, "requests", rs->requests);
		json_kv_bool(&j, "history_complete", s->history_complete);
		json_kv_double(&j, "seconds", seconds);
		json_kv_double(&j, "mb_per_s", mbs);
		problems_json(&j, rs);
		json_obj_end(&j);
		return;
	}
	for (unsigned i = 0; i < rs->nproblem; i++)
		fprintf(stderr, "moeft restore: %s\n", rs->problem[i]);
	fprintf(stderr, "moeft restore: window %" PRIu64 " (steps %" PRIu64 "-%" PRIu64 "), resume "
		"at step %" PRIu64 ": %u KV pool%s of %s in %" PRIu64 " chunks: %s from the store in %"
		PRIu64 ", %" PRIu64 " never written (zeros), %" PRIu64 " lost; %" PRIu64 " routing "
		"records; %.3f s, %.0f MB/s -> %s\n", s->c->id, s->cs.first_step, last, last + 1,
		s->npools, s->npools == 1 ? "" : "s", cli_fmt_bytes(b, sizeof b, rs->bytes),
		rs->chunks, cli_fmt_bytes(st, sizeof st, rs->stored_bytes), rs->stored,
		rs->chunks - rs->stored - rs->lost, rs->lost, rs->routing, seconds, mbs, rs->out);
	if (s->req.w)
		fprintf(stderr, "moeft restore: %" PRIu64 " engine request%s as of step %" PRIu64
			" (window %" PRIu64 ") -> %s/%s\n", rs->requests, rs->requests == 1 ? "" : "s",
			s->req.s.first_step + s->req.s.steps - 1, s->req.w->id, rs->out, REQUESTS);
}

/* A log the preload will take over as blank (its process died before it
 * finished formatting it): nothing to restore. */
static int blank(const char *path)
{
	struct wal_error err;

	return wal_medium_state_path(path, &err) == WAL_MEDIUM_BLANK;
}

/* Whether the restored window's KV can be resumed from: nothing left for
 * later, nothing damaged or undecodable in the log, the store there, and
 * nothing lost but what an adapter leaves out. */
static int kv_whole(const struct restore *rs)
{
	const struct state *s = &rs->s;

	return lost_servable(rs) && !(s->cs.flags & WINDOW_KV_PARTIAL) &&
	       !s->rec->damage_count && !s->bad && (s->kv || !s->kvrefs) && !s->missing_pools;
}

static int run(struct restore *rs)
{
	char msg[512];
	double t0 = cli_now(), t;
	struct wal_error err;
	int ret;

	/* Its process has not ended: a restore would race it.  Held until
	 * the end (or the exec of CMD), so no writer starts meanwhile. */
	if ((ret = media_hold(rs->wal, &rs->hold, &err)) == 1)
		return cli_fail(rs->cmd, rs->json, EXIT_BAD, "%s: in use by another writer, whose "
				"process has not ended: nothing to restore from yet", rs->wal);
	if ((ret = state_load_at(&rs->s, rs->wal, rs->at_step, msg, sizeof msg)) < 0) {
		if (rs->cmdv && (ret == STATE_NOTHING || blank(rs->wal)))
			return RESTORE_NOTHING;
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s", msg);
	}
	rs->load_s = cli_now() - t0;
	if (!rs->s.history_complete)
		fprintf(stderr, "moeft restore: note: the history of epoch %" PRIu32 " is "
			"incomplete (its start was reclaimed, or a window is damaged): allocations "
			"may be missing\n", rs->s.c->epoch);
	if (rs->s.stale_pools)
		fprintf(stderr, "moeft restore: note: %u KV pool%s of the store left out: no "
			"allocation of epoch %" PRIu32 " holds %s as of window %" PRIu64 "\n",
			rs->s.stale_pools, rs->s.stale_pools == 1 ? "" : "s", rs->s.c->epoch,
			rs->s.stale_pools == 1 ? "it" : "them", rs->s.c->id);
	if ((ret = open_out(rs)) || (ret = retire(rs)))
		return ret;
	if (!(rs->img = calloc(rs->s.npools ? rs->s.npools : 1, sizeof *rs->img)))
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "out of memory");
	for (unsigned i = 0; i < rs->s.npools; i++)
		rs->total += rs->s.pool[i].info.d.size;
	if (rs->quiet || rs->total < PROGRESS_MIN || !isatty(STDERR_FILENO))
		rs->total = 0;
	t = cli_now();
	if ((ret = write_images(rs)))
		return ret;
	rs->images_s = cli_now() - t;
	if (rs->lost_named > LOST_LINES)
		fprintf(stderr, "moeft restore: and %u more lost chunks (manifest.json lists them)\n",
			rs->lost_named - LOST_LINES);
	if ((ret = write_routing(rs)) || (ret = write_requests(rs)))
		return ret;
	/* A plan only for a state CMD may resume from (bring_back refuses
	 * the rest): none names a state that is not whole. */
	if (rs->cmdv && kv_whole(rs) && (ret = write_plan(rs)))
		return ret;
	assess(rs);
	if ((ret = write_manifest(rs)))
		return ret;
	remove_stale(rs);
	if (fsync(rs->dir) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s: fsync: %s", rs->out,
				strerror(errno));
	if (!rs->quiet)
		summary(rs, cli_now() - t0);
	return rs->nproblem ? EXIT_BAD : EXIT_OK;
}

/* The absolute path of a log that may not exist yet (the preload wants one). */
static int absolute(const char *path, char *out, size_t len)
{
	char cwd[PATH_MAX];

	if (realpath(path, out))
		return 0;
	if (errno != ENOENT)
		return -1;
	if (path[0] == '/')
		return snprintf(out, len, "%s", path) < (int)len ? 0 : (errno = ENAMETOOLONG, -1);
	if (!getcwd(cwd, sizeof cwd))
		return -1;
	return snprintf(out, len, "%s/%s", cwd, path) < (int)len ? 0 : (errno = ENAMETOOLONG, -1);
}

/*
 * What the preload will make of the environment the command gets
 * (MOEFT_WAL, MOEFT_RESTORE as bring_back sets them, the rest as it is):
 * restore mode fails closed there, so refuse now what it would refuse,
 * before anything is written or started.
 */
static const char *cmd_wal, *cmd_plan;

static const char *cmd_env(const char *name)
{
	if (!strcmp(name, "MOEFT_WAL"))
		return cmd_wal;
	if (!strcmp(name, "MOEFT_RESTORE"))
		return cmd_plan;
	return getenv(name);
}

/* A file the preload will open as a writer must pass its checks (a link,
 * another user's, one others can write: wal/media.h); a missing one is
 * for the preload to make.  0, or -1 with the failure reported. */
static int trusted(struct restore *rs, const char *path)
{
	struct wal_error err;
	struct stat st;

	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (S_ISLNK(st.st_mode)) {
		cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s: a symbolic link; the preload would "
			 "refuse it", path);
		return -1;
	}
	if (media_trust(path, &st, &err) < 0) {
		cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s; the preload would refuse it", err.msg);
		return -1;
	}
	return 0;
}

static int preflight(struct restore *rs, const char *wal)
{
	char plan[PATH_MAX + 8], err[640], kvs[PATH_MAX + 4];
	struct moeft_config cfg;

	if (absolute(rs->out, plan, sizeof plan - 5) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s: %s", rs->out,
				strerror(errno));
	strcat(plan, "/" PLAN);
	if (kvs_path(wal, kvs, sizeof kvs) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--wal %s: path too long", wal);
	cmd_wal = wal;
	cmd_plan = plan;
	if (config_load(&cfg, cmd_env, err, sizeof err) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "the preload would refuse to restore "
				"with this environment: %s", err);
	if (cfg.disable)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "MOEFT_DISABLE=1 keeps the preload "
				"off, so %s could not take the restored state; unset it "
				"(--force-fresh starts it without restoring)", rs->cmdv[0]);
	return trusted(rs, wal) < 0 || trusted(rs, kvs) < 0 ? EXIT_USAGE : 0;
}

/* What the server's dead processes left in /dev/shm, by the lists they
 * kept beside their logs (leftovers.h): removed before CMD starts. */
static void clean_shm(const struct restore *rs)
{
	struct leftovers left = { 0 };
	uint64_t bytes = 0;
	char size[32];
	size_t n;

	if (!rs->logs_dir)
		return;
	leftovers_note_lists(&left, rs->logs_dir, "moeft restore");
	if ((n = leftovers_clean(&left, &bytes)))
		fprintf(stderr, "moeft restore: removed %zu file%s (%s) the server's processes "
			"left in /dev/shm\n", n, n == 1 ? "" : "s",
			cli_fmt_bytes(size, sizeof size, bytes));
}

/*
 * Online: start the command, in restore mode when there is something to
 * restore and it restored whole, fresh when the log has no decode window
 * yet or --force-fresh says so.  Returns only on failure.
 */
static int bring_back(struct restore *rs, const char *preload, int fresh /* 1: asked, 2: no log */)
{
	char wal[PATH_MAX], plan[PATH_MAX + 8], dir[PATH_MAX] = "";
	int ret = EXIT_OK;

	if (absolute(rs->wal, wal, sizeof wal) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--wal %s: %s", rs->wal,
				strerror(errno));
	if (!fresh && (ret = preflight(rs, wal)))
		return ret;
	if (!fresh) {
		ret = run(rs);
		if (ret == RESTORE_NOTHING) {
			fprintf(stderr, "moeft restore: %s has no committed decode window: nothing to "
				"restore, starting %s fresh\n", rs->wal, rs->cmdv[0]);
			fresh = 1;
		} else if (ret == EXIT_USAGE || !rs->s.rec) {
			return ret;	/* refused before the state was read */
		} else if (!kv_whole(rs)) {
			return cli_fail(rs->cmd, rs->json, EXIT_BAD, "the KV state of window %" PRIu64
					" is not whole (above); not starting %s on it (--force-fresh "
					"starts it without restoring)", rs->s.c->id, rs->cmdv[0]);
		}
	} else if (fresh == 1) {
		fprintf(stderr, "moeft restore: --force-fresh: starting %s without restoring\n",
			rs->cmdv[0]);
	}
	if (!fresh && !realpath(rs->out, dir))
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s: %s", rs->out, strerror(errno));
	snprintf(plan, sizeof plan, "%s/" PLAN, dir);
	/* The directory stays locked while CMD runs on its plan and images
	 * (the preload maps them): the lock's descriptor goes across exec. */
	if (!fresh && rs->dir >= 0 && fcntl(rs->dir, F_SETFD, 0) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "--out %s: %s", rs->out,
				strerror(errno));
	clean_shm(rs);
	launch_exec(rs->cmdv, preload, wal, fresh ? NULL : plan);
	return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "cannot start %s: %s", rs->cmdv[0],
			strerror(errno));
}

static void restore_free(struct restore *rs);
static int set_cut(const struct restore *proto, const struct logset *set, uint64_t *step);

/* Whether the log at path has a window a restore could take: a log
 * without one has no state of any step. */
static int has_steps(const char *path)
{
	const struct wal_window *win;
	struct rec_window_steps ws;
	struct wal_reader *r;
	struct wal_error err;
	size_t n;
	int has;

	if (wal_reader_open_path(path, &r, &err) < 0)
		return 1;	/* unknown: it may */
	win = wal_reader_windows(r, &n);
	has = state_pick(win, n, STATE_NEWEST, &ws) >= 0;
	wal_reader_close(r);
	return has;
}

/* OUT/set (plan.h): the names whose state the set restored, written whole
 * under a temporary name first; the earlier one is replaced. */
static int write_set(const struct restore *proto, const char *root, const struct logset *set,
		     const int *listed)
{
	char path[PATH_MAX + 8], tmp[PATH_MAX + 16];
	FILE *f;
	int ok;

	snprintf(path, sizeof path, "%s/" RESTORE_SET_NAME, root);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	if (!(f = fopen(tmp, "wx")) && !(errno == EEXIST && !unlink(tmp) && (f = fopen(tmp, "wx"))))
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "%s: %s", tmp, strerror(errno));
	fputs(RESTORE_SET_HEAD, f);
	for (size_t i = 0; i < set->n; i++)
		if (listed[i]) {
			const char *name = strrchr(set->paths[i], '/') + 1;

			fprintf(f, "%.*s\n", (int)(strlen(name) - 4), name);
		}
	ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
	ok = fclose(f) == 0 && ok;
	if (!ok || rename(tmp, path) < 0)
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "%s: %s", path, strerror(errno));
	return 0;
}

/*
 * --wal DIR of several logs, one per process of a server, -- CMD: each log
 * restored into OUT/NAME (OUT: DIR.restore unless --out says) as of the
 * set's cut, each whole or CMD is not started; then CMD with MOEFT_WAL the
 * directory and MOEFT_RESTORE naming OUT, where each of its processes
 * takes the state of its own log (preload/resume.h); a log with nothing to
 * restore leaves its process to start fresh.  Every output directory stays
 * locked, every log held, until CMD starts.
 */
static int bring_back_set(struct restore *proto, const struct logset *set, const char *preload,
			  int fresh)
{
	char dir[PATH_MAX], root[PATH_MAX], out[PATH_MAX], real[PATH_MAX];
	struct wal_error err;
	uint64_t cut;
	int fd, ret, *listed;

	if (absolute(proto->wal, dir, sizeof dir - 1) < 0)
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "--wal %s: %s", proto->wal,
				strerror(errno));
	if (fresh) {
		fprintf(stderr, "moeft restore: --force-fresh: starting %s without restoring\n",
			proto->cmdv[0]);
		clean_shm(proto);
		launch_exec(proto->cmdv, preload, strcat(dir, "/"), NULL);
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "cannot start %s: %s",
				proto->cmdv[0], strerror(errno));
	}
	if (snprintf(root, sizeof root, "%s", proto->out ? proto->out : dir) >= (int)sizeof root ||
	    (!proto->out && strlen(root) + sizeof ".restore" > sizeof root))
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "--out: path too long");
	if (!proto->out)
		strcat(root, ".restore");
	if ((fd = media_open_dir(root, 1, &err)) < 0)
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "--out %s", err.msg);
	close(fd);
	if ((ret = set_cut(proto, set, &cut)))
		return ret;
	if (!(listed = calloc(set->n ? set->n : 1, sizeof *listed)))
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "out of memory");
	for (size_t i = 0; i < set->n; i++) {
		struct restore rs = *proto;
		const char *name = strrchr(set->paths[i], '/') + 1;

		if (snprintf(out, sizeof out, "%s/%.*s", root, (int)(strlen(name) - 4), name) >=
		    (int)sizeof out)
			return cli_fail(rs.cmd, rs.json, EXIT_USAGE, "--out %s/%s: path too long", root,
					name);
		rs.wal = set->paths[i];
		rs.out = out;
		rs.at_step = cut;
		if ((ret = preflight(&rs, rs.wal)) == 0)
			ret = run(&rs);
		if (ret == RESTORE_NOTHING && cut != STATE_NEWEST && has_steps(rs.wal)) {
			/* Its state is of other steps than the cut's. */
			ret = cli_fail(rs.cmd, rs.json, EXIT_BAD, "%s has no state as of step %" PRIu64
				       ", the set's cut: not starting %s (--force-fresh starts it "
				       "without restoring)", rs.wal, cut, rs.cmdv[0]);
		} else if (ret == RESTORE_NOTHING) {
			fprintf(stderr, "moeft restore: %s: nothing to restore, its process starts "
				"fresh\n", rs.wal);
			ret = 0;
		} else if (ret == EXIT_USAGE || !rs.s.rec) {
			ret = ret ? ret : EXIT_USAGE;
		} else if (!kv_whole(&rs)) {
			ret = cli_fail(rs.cmd, rs.json, EXIT_BAD, "%s: the KV state of window %" PRIu64
				       " is not whole (above); not starting %s on it (--force-fresh "
				       "starts it without restoring)", rs.wal, rs.s.c->id,
				       rs.cmdv[0]);
		} else if (rs.dir >= 0 && fcntl(rs.dir, F_SETFD, 0) < 0) {
			ret = cli_fail(rs.cmd, rs.json, EXIT_USAGE, "--out %s: %s", out,
				       strerror(errno));
		} else {
			listed[i] = 1;
			rs.dir = rs.hold = -1;	/* kept until CMD starts (the lock beyond) */
			ret = 0;
		}
		restore_free(&rs);
		if (ret) {
			free(listed);
			return ret;
		}
	}
	ret = write_set(proto, root, set, listed);
	free(listed);
	if (ret)
		return ret;
	if (!realpath(root, real))
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "%s: %s", root, strerror(errno));
	fprintf(stderr, "moeft restore: %zu logs restored into %s; each process of %s takes the "
		"state of its own log, by name, and one of another name starts fresh\n", set->n,
		real, proto->cmdv[0]);
	clean_shm(proto);
	launch_exec(proto->cmdv, preload, strcat(dir, "/"), real);
	return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "cannot start %s: %s", proto->cmdv[0],
			strerror(errno));
}

/*
 * No --wal: CMD's own log in the preload's default directory, ROLE.DEVICE.wal
 * with ROLE the name CMD's process starts with (logname.h).  One found is
 * rs->wal.  With none, rs->wal is the directory and *fresh 2 (CMD starts
 * fresh and logs in it), but only when the directory holds no log at all or
 * --force-fresh says so: a CMD whose process renames itself (a wrapper, a
 * process title) finds none of its own, and must not start over a crashed
 * log it would then take for its own.  Several of CMD's (one per device)
 * are refused too.  0, or the exit status of the failure reported.
 */
static int own_log(struct restore *rs, char *wal, size_t len, int *fresh)
{
	char dir[PATH_MAX], role[64], theirs[64], msg[PATH_MAX + 128], *list = NULL;
	size_t i, found = 0, listed = 0;
	struct logset set;
	int ret = 0;

	logname_default_dir(dir, sizeof dir);
	snprintf(wal, len, "%s", dir);
	rs->wal = wal;
	logname_role_of(rs->cmdv[0], role, sizeof role);
	if (access(dir, F_OK) < 0)
		goto none;
	if (logset_open(&set, dir, msg, sizeof msg) < 0)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s", msg);
	for (i = 0; i < set.n; i++) {
		const char *name = strrchr(set.paths[i], '/') + 1;

		if (logname_role_of_file(name, theirs, sizeof theirs) == 0 && !strcmp(theirs, role) &&
		    found++ == 0)
			snprintf(wal, len, "%s", set.paths[i]);
	}
	/* The logs there, for a refusal to name. */
	if (found != 1 && set.n && (list = malloc(set.n * (NAME_MAX + 2) + 1))) {
		list[0] = '\0';
		for (i = 0; i < set.n && listed < 8; i++, listed++)
			strcat(strcat(list, " "), strrchr(set.paths[i], '/') + 1);
	}
	if (found > 1)
		ret = cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%zu logs of %s (one per device) in %s:"
			       "%s; name the one to restore with --wal", found, role, dir,
			       list ? list : "");
	else if (!found && set.n && *fresh != 1)
		ret = cli_fail(rs->cmd, rs->json, EXIT_USAGE, "no log of %s in %s, which holds%s%s: "
			       "name the one to restore with --wal (a command that renames its "
			       "process logs under its new name), or start %s fresh with "
			       "--force-fresh", role, dir, list ? list : " logs",
			       set.n > listed ? " ..." : "", rs->cmdv[0]);
	free(list);
	logset_free(&set);
	if (ret)
		return ret;
	if (found) {
		if (strlen(wal) + sizeof ".restore" > PATH_MAX)
			return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s: path too long", wal);
		fprintf(stderr, "moeft restore: restoring %s, the log of %s\n", wal, role);
		return 0;
	}
none:
	if (*fresh != 1)
		fprintf(stderr, "moeft restore: %s holds no log of %s: nothing to restore, "
			"starting %s fresh\n", dir, role, rs->cmdv[0]);
	/* The slash makes it a directory for CMD's preload, made or not. */
	if (snprintf(wal, len, "%s/", dir) >= (int)len)
		return cli_fail(rs->cmd, rs->json, EXIT_USAGE, "%s: path too long", dir);
	*fresh = *fresh ? *fresh : 2;
	return 0;
}

/*
 * --wal DIR offline: each log of the directory (logset.h) into OUT/NAME,
 * NAME its file name less ".wal", one summary each; the worst status.  A
 * log that cannot be restored does not keep the others from it.
 */
/*
 * The cut of a server's set of logs, when one of them is an engine
 * adapter's scheduler (its newest window an adapter's): the newest step
 * at which the scheduler committed its requests and every log of the set
 * can be restored (state_pick), the workers' KV of that very step; the
 * adapter numbers both sides' steps alike.  0 with *step STATE_NEWEST when
 * no log is a scheduler's (each log restores on its own), 0 with *step
 * the cut, or an exit status with the reason said.
 */
static int set_cut(const struct restore *proto, const struct logset *set, uint64_t *step)
{
	struct wal_reader **r = calloc(set->n ? set->n : 1, sizeof *r);
	const struct wal_window **win = calloc(set->n ? set->n : 1, sizeof *win);
	size_t *nwin = calloc(set->n ? set->n : 1, sizeof *nwin), i, k, sched = set->n;
	struct rec_window_steps ws;
	struct wal_error err;
	int ret = 0;

	*step = STATE_NEWEST;
	if (!r || !win || !nwin) {
		ret = cli_fail(proto->cmd, proto->json, EXIT_USAGE, "out of memory");
		goto out;
	}
	for (i = 0; i < set->n; i++) {
		if (wal_reader_open_path(set->paths[i], &r[i], &err) < 0) {
			ret = cli_fail(proto->cmd, proto->json, EXIT_USAGE, "%s", err.msg);
			goto out;
		}
		win[i] = wal_reader_windows(r[i], &nwin[i]);
		if (sched == set->n && state_pick(win[i], nwin[i], STATE_NEWEST, &ws) >= 0 &&
		    (ws.flags & WINDOW_REQUESTS))
			sched = i;
	}
	if (sched == set->n)
		goto out;
	/* The scheduler's windows, newest first: each a possible cut. */
	for (k = nwin[sched]; k > 0; k--) {
		uint64_t s;

		if (!rec_requests_window(&win[sched][k - 1], &ws))
			continue;
		s = ws.first_step + ws.steps - 1;
		/* A log with nothing to restore (no window with steps) is left
		 * to its own restore to say so. */
		for (i = 0; i < set->n; i++)
			if (state_pick(win[i], nwin[i], STATE_NEWEST, &ws) >= 0 &&
			    state_pick(win[i], nwin[i], s, &ws) < 0)
				break;
		if (i == set->n) {
			*step = s;
			goto out;
		}
	}
	ret = cli_fail(proto->cmd, proto->json, EXIT_BAD, "--wal %s: no step at which the "
		       "scheduler's requests (%s) and every other log's state were committed: the "
		       "server's processes cannot be restored together", proto->wal,
		       set->paths[sched]);
out:
	for (i = 0; r && i < set->n; i++)
		wal_reader_close(r[i]);
	free(r);
	free(win);
	free(nwin);
	return ret;
}

static int run_set(const struct restore *proto, const struct logset *set)
{
	char out[PATH_MAX];
	struct wal_error err;
	uint64_t cut;
	int fd, ret = EXIT_OK, r, *listed;

	if ((fd = media_open_dir(proto->out, 1, &err)) < 0)
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "--out %s", err.msg);
	close(fd);
	if ((ret = set_cut(proto, set, &cut)))
		return ret;
	if (!(listed = calloc(set->n ? set->n : 1, sizeof *listed)))
		return cli_fail(proto->cmd, proto->json, EXIT_USAGE, "out of memory");
	if (cut != STATE_NEWEST && !proto->quiet)
		fprintf(stderr, "moeft restore: the server's processes as of step %" PRIu64 ", the "
			"newest their logs all committed\n", cut);
	for (size_t i = 0; i < set->n; i++) {
		struct restore rs = *proto;
		const char *name = strrchr(set->paths[i], '/') + 1;

		if (snprintf(out, sizeof out, "%s/%.*s", proto->out, (int)(strlen(name) - 4),
			     name) >= (int)sizeof out) {
			r = cli_fail(rs.cmd, rs.json, EXIT_USAGE, "--out %s/%s: path too long",
				     proto->out, name);
		} else {
			rs.wal = set->paths[i];
			rs.out = out;
			rs.at_step = cut;
			r = run(&rs);
			listed[i] = r == EXIT_OK || r == EXIT_BAD;
			restore_free(&rs);
		}
		ret = r > ret ? r : ret;
	}
	/* The set file too: moeft resubmit --restored OUT reads it. */
	if ((r = write_set(proto, proto->out, set, listed)))
		ret = r;
	free(listed);
	return ret;
}

static void restore_free(struct restore *rs)
{
	for (unsigned i = 0; rs->img && i < rs->s.npools; i++)
		free(rs->img[i].lost);
	free(rs->img);
	free(rs->listed);
	if (rs->dir >= 0)
		close(rs->dir);
	if (rs->hold >= 0)
		close(rs->hold);
	state_free(&rs->s);
}

int restore_offline(const char *wal, const char *out, struct restore_stats *st)
{
	struct restore rs = { .cmd = &cmd_restore, .wal = wal, .out = out, .dir = -1, .hold = -1,
			      .at_step = STATE_NEWEST,
			      .lock = PTHREAD_MUTEX_INITIALIZER,
			      .quiet = 1 };
	double t0 = cli_now();
	int ret = run(&rs);

	*st = (struct restore_stats){ .bytes = rs.bytes, .chunks = rs.chunks, .lost = rs.lost,
				      .load_s = rs.load_s, .images_s = rs.images_s,
				      .total_s = cli_now() - t0 };
	restore_free(&rs);
	return ret;
}

static int restore(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wal", required_argument, NULL, 'w' },
		{ "out", required_argument, NULL, 'o' },
		{ "preload", required_argument, NULL, 'p' },
		{ "force-fresh", no_argument, NULL, 'f' },
		{ "images", no_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct restore rs = { .cmd = cmd, .dir = -1, .hold = -1, .at_step = STATE_NEWEST,
			      .lock = PTHREAD_MUTEX_INITIALIZER };
	char preload[PATH_MAX], out[PATH_MAX], wal[PATH_MAX], msg[PATH_MAX + 128];
	char logs_dir[PATH_MAX];
	struct wal_error err;
	const char *lib = NULL;
	struct logset set;
	struct stat st;
	int c, ret, own, fresh = 0;

	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'w': rs.wal = optarg; break;
		case 'o': rs.out = optarg; break;
		case 'p': lib = optarg; break;
		case 'f': fresh = 1; break;
		case 'i': rs.images = 1; break;
		case 'j': o.json = 1; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind < argc && optind > 0 && !strcmp(argv[optind - 1], "--"))
		rs.cmdv = &argv[optind];
	else if (optind < argc)
		cli_usage_error(&o, "unexpected argument '%s' (a command goes after \"--\")",
				argv[optind]);
	if (!rs.wal && !rs.cmdv)
		cli_usage_error(&o, "--wal PATH is required (or a command after \"--\", whose own "
				"log is then looked for)");
	else if (rs.wal)
		cli_path_opt(&o, "--wal", rs.wal, sizeof out - sizeof ".restore" + 1);
	if (rs.out)
		cli_path_opt(&o, "--out", rs.out, 0);
	else if (!rs.cmdv)
		cli_usage_error(&o, "--out DIR is required (or a command after \"--\")");
	if (!rs.cmdv && (lib || fresh || rs.images))
		cli_usage_error(&o, "--%s needs a command after \"--\"",
				lib ? "preload" : fresh ? "force-fresh" : "images");
	if (rs.cmdv && !lib) {
		if (launch_find_preload(preload, sizeof preload) < 0)
			cli_usage_error(&o, "--preload LIB is required: no libmoeft.so beside moeft");
		lib = preload;
	}
	if (rs.cmdv && lib && launch_check_preload(lib, msg, sizeof msg) < 0)
		cli_usage_error(&o, "--preload %s", msg);
	if ((ret = cli_parse_done(&o)))
		return ret;
	rs.json = o.json;
	own = !rs.wal;
	if (own && (ret = own_log(&rs, wal, sizeof wal, &fresh)))
		return ret;
	if (own)
		set = (struct logset){ 0 };	/* rs.wal is what to give CMD */
	else if (logset_open(&set, rs.wal, msg, sizeof msg) < 0)
		return cli_fail(cmd, rs.json, EXIT_USAGE, "--wal %s", msg);
	if (rs.cmdv && shmlist_dir(rs.wal, stat(rs.wal, &st) == 0 && S_ISDIR(st.st_mode), 0,
				   logs_dir, sizeof logs_dir, &err) == 0)
		rs.logs_dir = logs_dir;
	if (set.dir && !rs.cmdv) {
		ret = logset_need_one(&set, rs.wal, msg, sizeof msg) < 0 ?
		      cli_fail(cmd, rs.json, EXIT_USAGE, "--wal %s", msg) : run_set(&rs, &set);
		logset_free(&set);
		return ret;
	}
	if (set.dir && set.n > 1) {
		ret = bring_back_set(&rs, &set, lib, fresh);
		logset_free(&set);
		return ret;
	}
	/* A directory of one log is that log; of none, nothing to restore:
	 * CMD starts fresh, each of its processes making its log there. */
	if (set.dir && set.n) {
		snprintf(wal, sizeof wal, "%s", set.paths[0]);
		rs.wal = wal;
	} else if (set.dir) {
		fprintf(stderr, "moeft restore: %s holds no log: nothing to restore, starting %s "
			"fresh\n", rs.wal, rs.cmdv[0]);
		fresh = 2;
	}
	logset_free(&set);
	if (!(own && fresh) && stat(rs.wal, &st) < 0) {
		if (errno != ENOENT || !rs.cmdv)
			return cli_fail(cmd, rs.json, EXIT_USAGE, "--wal %s: %s", rs.wal,
					strerror(errno));
		/* The process died before it made its log: nothing to restore. */
		fprintf(stderr, "moeft restore: %s does not exist: nothing to restore, starting %s "
			"fresh\n", rs.wal, rs.cmdv[0]);
		fresh = 2;
	}
	if (rs.cmdv && !rs.out) {
		snprintf(out, sizeof out, "%s.restore", rs.wal);	/* fits: cli_path_opt */
		rs.out = out;
	}

	ret = rs.cmdv ? bring_back(&rs, lib, fresh) : run(&rs);
	restore_free(&rs);
	return ret;
}

const struct cli_command cmd_restore = {
	.name = "restore",
	.summary = "write the state of the last committed decode window into a directory",
	.usage =
	"Usage: moeft restore --wal PATH --out DIR [--json]\n"
	"       moeft restore [--wal PATH] [--out DIR] [--preload LIB] [--force-fresh]\n"
	"                     [--images] [--json] -- CMD [ARGS...]\n"
	"\n"
	"Read the log at PATH and its KV store (PATH.kv) and write the state of the\n"
	"last committed decode window into DIR (created when missing, but not its\n"
	"parents): one image per KV pool (kv-pool-N.bin), the routing of the decode\n"
	"windows (routing.bin) and manifest.json, which says what they are (README,\n"
	"\"Restore output\").  DIR must be empty or hold an earlier restore's output,\n"
	"which is replaced; a moeft log or KV store there is never written over.\n"
	"No GPU is needed.\n"
	"\n"
	"With a command after \"--\", the restore is online: the state is written\n"
	"(into PATH.restore unless --out says where), then CMD replaces moeft under\n"
	"the preload, on the same log, in restore mode: its KV pools get their\n"
	"bytes before its first decode step, matched to its allocations by call\n"
	"site, size and ordinal.  A device pool's bytes are copied straight from\n"
	"the KV store, each chunk checked again as it is read: DIR gets its chunk\n"
	"map (kv-pool-N.map), not an image; an engine adapter's host pools, and\n"
	"every pool with --images, get images.  Only the preload, once it has\n"
	"taken the plan, sets MOEFT_RESTORE_MANIFEST (manifest.json) for CMD's\n"
	"recovery hook (resume_step): a CMD without it is never told to resume.\n"
	"A log without a committed decode window starts CMD fresh.  CMD is not\n"
	"started when the restore would fail: a KV state that is not whole (lost\n"
	"chunks, no KV store, damage in the log), a log a live writer holds, a\n"
	"--preload that is no moeft preload library, or an environment the\n"
	"preload would refuse (MOEFT_DISABLE=1, a bad MOEFT_* value).  Before CMD\n"
	"starts, the shared memory files (Python's psm_* and sem.mp-*, torch_*)\n"
	"that the logs' processes created, listed beside their logs, are removed\n"
	"from /dev/shm when their process is gone and no live process uses them.\n"
	"\n"
	"  -w, --wal PATH   the log file or device-DAX node, or a directory of logs,\n"
	"                   one per process of a server: each into DIR/NAME as of\n"
	"                   one engine step when one is an engine's scheduler;\n"
	"                   online, each process of CMD takes its own; without it,\n"
	"                   online: CMD's own log in the preload's directory\n"
	"                   (/dev/shm/moeft-<user>/NAME.DEVICE.wal, NAME CMD's file name)\n"
	"  -o, --out DIR    the directory to write\n"
	"  -p, --preload LIB  libmoeft.so for CMD (default: the one beside moeft)\n"
	"  -f, --force-fresh  start CMD on the log without restoring anything\n"
	"  -i, --images     online: an image of every pool, none read from the KV\n"
	"                   store (whose slots a restored server's second write of\n"
	"                   a chunk reuses: a block copied again from the store\n"
	"                   later than that is refused, and recomputed)\n"
	"  -j, --json       print the summary as one JSON object on stdout instead of\n"
	"                   a line on stderr\n"
	"  -h, --help       show this help\n"
	"\n"
	"Exit status: 0 restored whole; 1 restored, but KV chunks were lost (their\n"
	"bytes are zeros; each is named) or the log is damaged or its windows are\n"
	"flagged incomplete (the manifest's \"problems\" say which); 2 usage error,\n"
	"an unreadable log or KV store, a KV store of another log, no committed\n"
	"decode window, or an error writing DIR; 1 too when a live writer holds the\n"
	"log.  Online, moeft becomes CMD, whose status it is; moeft's own are those\n"
	"above (1: not started, the state is not whole or the log is held; 2: not\n"
	"started, the preload or the environment would not restore), and restore\n"
	"mode stops a CMD that cannot take the plan (another layout, a log it\n"
	"cannot open, a copy that fails) with status 3.\n",
	.run = restore,
};

/*
 * kvstore.c - the KV store: layout, writer and reader.  See kvstore.h and
 * FORMAT.md, "KV store".
 *
 * The file is a header page, a pool table, then one region per pool, each
 * mapped on its own (media.c, MEDIA_PARTS): adding a pool never moves a
 * mapping, so kvs_put needs no lock against kvs_pool.  Every chunk has two
 * slots; kvs_put writes the one that does not hold the chunk's newest copy
 * of an earlier window, and publishes it with one aligned 8-byte store of
 * its window word, so a crash at any instruction leaves each slot either
 * as it was, empty, or complete.  A pool is published the same way, by the
 * pools word, after its region and table entry are durable.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "crc32c.h"
#include "diag.h"
#include "kvformat.h"
#include "media.h"

#define HDR_CRC_OFF (KVS_HDR_SIZE - 4)
#define ENTRY_CRC_OFF (KVS_ENTRY_SIZE - 4)
#define SLOT_CRC_OFF (KVS_SLOT_SIZE - 4)

/* ---- Layout ----------------------------------------------------------- */

void kvs_hdr_encode(uint8_t out[KVS_HDR_SIZE], const struct kvs_hdr *h)
{
	memset(out, 0, KVS_HDR_SIZE);
	memcpy(out, KVS_MAGIC, sizeof KVS_MAGIC);
	put32(out + 8, h->version);
	put32(out + 12, KVS_MAX_POOLS);
	put64(out + 16, h->log_id);
	put32(out + HDR_CRC_OFF, crc32c(0, out, HDR_CRC_OFF));
}

int kvs_hdr_decode(const uint8_t in[KVS_HDR_SIZE], struct kvs_hdr *h)
{
	if (memcmp(in, KVS_MAGIC, sizeof KVS_MAGIC) != 0)
		return WAL_ENOTLOG;
	if (crc32c(0, in, HDR_CRC_OFF) != get32(in + HDR_CRC_OFF))
		return WAL_ECORRUPT;
	h->version = get32(in + 8);
	h->log_id = get64(in + 16);
	if (h->version != KVS_VERSION)
		return WAL_EVERSION;
	return get32(in + 12) == KVS_MAX_POOLS ? 0 : WAL_ECORRUPT;
}

static uint32_t pools_check(uint32_t n, uint32_t id)
{
	uint8_t b[4];

	put32(b, n);
	return crc32c(id, b, sizeof b);
}

uint64_t kvs_pools_encode(uint32_t n, uint32_t id)
{
	return (uint64_t)pools_check(n, id) << 32 | n;
}

int kvs_pools_decode(uint64_t word, uint32_t id, uint32_t *n)
{
	uint32_t v = (uint32_t)word;

	if (word >> 32 != pools_check(v, id) || v > KVS_MAX_POOLS)
		return 0;
	*n = v;
	return 1;
}

int kvs_geometry(const struct kvs_pool_desc *d, uint64_t off, struct kvs_geom *g)
{
	uint64_t cb = d->chunk_bytes, hdrs, data, end;

	if (cb < KVS_MIN_CHUNK || cb > KVS_MAX_CHUNK || (cb & (cb - 1)) || !d->size ||
	    off % KVS_REGION_ALIGN)
		return -1;
	/* Then nchunks * 2 * cb, below 2 * (size + cb), cannot overflow. */
	if (d->size > INT64_MAX / 2 - KVS_MAX_CHUNK)
		return -1;
	g->nchunks = d->size / cb + (d->size % cb != 0);
	hdrs = g->nchunks * 2 * KVS_SLOT_SIZE;
	g->data_off = (hdrs + KVS_DATA_ALIGN - 1) & ~(uint64_t)(KVS_DATA_ALIGN - 1);
	data = g->nchunks * 2 * cb;
	if (__builtin_add_overflow(off, g->data_off, &end) ||
	    __builtin_add_overflow(end, data, &end) || end > INT64_MAX - KVS_REGION_ALIGN)
		return -1;
	g->off = off;
	g->len = end - off;
	return 0;
}

uint64_t kvs_next_region(const struct kvs_geom *g)
{
	return (g->off + g->len + KVS_REGION_ALIGN - 1) & ~(KVS_REGION_ALIGN - 1);
}

void kvs_entry_encode(uint8_t out[KVS_ENTRY_SIZE], const struct kvs_pool_desc *d,
		      uint32_t pool_no, const struct kvs_geom *g, uint32_t id)
{
	memset(out, 0, KVS_ENTRY_SIZE);
	put64(out, d->fingerprint);
	put64(out + 8, d->size);
	put64(out + 16, d->chunk_bytes);
	put32(out + 24, d->ordinal);
	put32(out + 28, pool_no);
	put64(out + 32, g->nchunks);
	put64(out + 40, g->off);
	put32(out + ENTRY_CRC_OFF, crc32c(id, out, ENTRY_CRC_OFF));
}

int kvs_entry_decode(const uint8_t in[KVS_ENTRY_SIZE], uint32_t pool_no, uint32_t id,
		     struct kvs_pool_desc *d, uint64_t *nchunks, uint64_t *off)
{
	if (crc32c(id, in, ENTRY_CRC_OFF) != get32(in + ENTRY_CRC_OFF) ||
	    get32(in + 28) != pool_no)
		return 0;
	*d = (struct kvs_pool_desc){ .fingerprint = get64(in), .size = get64(in + 8),
				     .chunk_bytes = get64(in + 16), .ordinal = get32(in + 24) };
	*nchunks = get64(in + 32);
	*off = get64(in + 40);
	return 1;
}

void kvs_slot_encode(uint8_t out[KVS_SLOT_SIZE], const struct kvs_slot *s, uint32_t id)
{
	put64(out, (s->window + 1) | KVS_SLOT_FULL);
	put64(out + 8, s->chunk);
	put32(out + 16, s->len);
	put32(out + 20, s->crc);
	put32(out + 24, s->pool);
	put32(out + SLOT_CRC_OFF, crc32c(id, out, SLOT_CRC_OFF));
}

int kvs_slot_decode(const uint8_t in[KVS_SLOT_SIZE], struct kvs_slot *s, uint32_t id)
{
	uint64_t word = get64(in);

	if (!word)
		return 0;
	if (!(word & KVS_SLOT_FULL) || word == KVS_SLOT_FULL ||
	    crc32c(id, in, SLOT_CRC_OFF) != get32(in + SLOT_CRC_OFF))
		return -1;
	*s = (struct kvs_slot){ .window = (word & ~KVS_SLOT_FULL) - 1, .chunk = get64(in + 8),
				.len = get32(in + 16), .crc = get32(in + 20), .pool = get32(in + 24) };
	return 1;
}

/* ---- Pools, as both sides hold them ----------------------------------- */

struct kvs_part {
	struct kvs_pool_desc d;
	struct kvs_geom g;
	uint8_t *region;         /* slot headers, then data at g.data_off */
};

enum slot_state { SLOT_EMPTY, SLOT_OK, SLOT_BAD };

static uint64_t chunk_len(const struct kvs_part *p, uint64_t chunk)
{
	uint64_t left = p->d.size - chunk * p->d.chunk_bytes;

	return left < p->d.chunk_bytes ? left : p->d.chunk_bytes;
}

static uint8_t *slot_hdr(const struct kvs_part *p, uint64_t chunk, unsigned k)
{
	return p->region + (2 * chunk + k) * KVS_SLOT_SIZE;
}

static uint64_t slot_data_off(const struct kvs_part *p, uint64_t chunk, unsigned k)
{
	return p->g.data_off + (2 * chunk + k) * p->d.chunk_bytes;
}

/* Slot k of a chunk: empty, or a header that verifies and names this very
 * pool, chunk and a length the chunk can have, or bad. */
static int read_slot(const struct kvs_part *p, uint32_t id, uint32_t pool_no, uint64_t chunk,
		     unsigned k, struct kvs_slot *sl)
{
	int r = kvs_slot_decode(slot_hdr(p, chunk, k), sl, id);

	if (r <= 0)
		return r ? SLOT_BAD : SLOT_EMPTY;
	return sl->pool == pool_no && sl->chunk == chunk && sl->len &&
	       sl->len <= chunk_len(p, chunk) ? SLOT_OK : SLOT_BAD;
}

/* Put "path: " before err's message. */
static int name_path(struct wal_error *err, int code, const char *path)
{
	char msg[sizeof err->msg];

	if (err) {
		snprintf(msg, sizeof msg, "%s", err->msg);
		wal_fail(err, code, "%s: %s", path, msg);
	}
	return code;
}

/*
 * Decode and check the first n entries of a pool table (meta: the header
 * page and table) of a file of file_size bytes.  The file is untrusted:
 * each entry must verify and describe a region exactly where the writer
 * puts it, right after the previous one, and inside the file.
 */
static int load_pools(const uint8_t *meta, uint32_t n, uint32_t id, uint64_t file_size,
		      struct kvs_part *p, struct wal_error *err)
{
	uint64_t off = KVS_REGION_ALIGN, nchunks, at;

	for (uint32_t i = 0; i < n; i++) {
		if (!kvs_entry_decode(meta + KVS_TABLE_OFF + i * KVS_ENTRY_SIZE, i, id, &p[i].d,
				      &nchunks, &at))
			return wal_fail(err, WAL_ECORRUPT, "pool %u: table entry fails its CRC", i);
		if (at != off || kvs_geometry(&p[i].d, at, &p[i].g) < 0 || p[i].g.nchunks != nchunks)
			return wal_fail(err, WAL_ECORRUPT, "pool %u: %llu bytes in %llu chunks "
					"of %llu at offset %llu is not a region this store can hold",
					i, (unsigned long long)p[i].d.size,
					(unsigned long long)nchunks,
					(unsigned long long)p[i].d.chunk_bytes, (unsigned long long)at);
		if (p[i].g.len > file_size || at > file_size - p[i].g.len)
			return wal_fail(err, WAL_ECORRUPT, "pool %u: region [%llu, %llu) runs "
					"past the end of the file (%llu bytes): truncated", i,
					(unsigned long long)at, (unsigned long long)(at + p[i].g.len),
					(unsigned long long)file_size);
		off = kvs_next_region(&p[i].g);
	}
	return 0;
}

/* ---- Writer ----------------------------------------------------------- */

struct kvs {
	pthread_mutex_t lock;    /* serialises kvs_pool */
	struct media m;          /* m.base: the header page and the pool table */
	char *path;
	uint32_t id;             /* log_id_crc of the log */
	_Atomic uint32_t npools; /* pools whose region kvs_put may use */
	struct kvs_part pool[KVS_MAX_POOLS];
};

/* One aligned 8-byte store, made durable: a reader sees the old value or
 * the new one, never a mix. */
static void store_word(const struct kvs *s, uint8_t *p, uint64_t v)
{
	uint8_t b[8];
	uint64_t x;

	put64(b, v);
	memcpy(&x, b, sizeof x);
	__atomic_store_n((uint64_t *)(void *)p, x, __ATOMIC_RELEASE);
	media_persist(&s->m, p, sizeof x);
}

/*
 * Make the store empty and bound to log_id.  The regions go first; the
 * magic is written last, so a crash part-way leaves a file that is no
 * store, and the next open formats it again.
 */
static int format(struct kvs *s, const char *path, uint64_t log_id, struct wal_error *err)
{
	struct kvs_hdr h = { .version = KVS_VERSION, .log_id = log_id };
	uint8_t buf[KVS_HDR_SIZE];
	int ret = media_cut(&s->m, path, KVS_META_SIZE, err);

	if (ret < 0)
		return ret;
	memset(s->m.base, 0, KVS_META_SIZE);
	kvs_hdr_encode(buf, &h);
	memcpy(s->m.base + sizeof KVS_MAGIC, buf + sizeof KVS_MAGIC, KVS_HDR_SIZE - sizeof KVS_MAGIC);
	put64(s->m.base + KVS_POOLS_OFF, kvs_pools_encode(0, s->id));
	media_persist(&s->m, s->m.base, KVS_META_SIZE);
	memcpy(s->m.base, buf, sizeof KVS_MAGIC);
	media_persist(&s->m, s->m.base, sizeof KVS_MAGIC);
	return 0;
}

struct kvs_new {
	struct kvs *s;
	uint64_t log_id;
};

/* A new store is formatted before it appears at its path (media.h). */
static int format_new(struct media *m, void *arg, struct wal_error *err)
{
	struct kvs_new *n = arg;

	(void)m;
	return format(n->s, n->s->path, n->log_id, err);
}

/* Take the store over if it is this log's; anything else is formatted: the
 * store of another log must never be used. */
static int adopt(struct kvs *s, const char *path, uint64_t log_id, uint32_t *npools,
		 struct wal_error *err)
{
	struct kvs_hdr h;
	char why[80];
	int ret = kvs_hdr_decode(s->m.base, &h);

	if (!ret && h.log_id == log_id) {
		if (kvs_pools_decode(get64(s->m.base + KVS_POOLS_OFF), s->id, npools))
			return 0;
		return wal_fail(err, WAL_ECORRUPT, "%s: the pool count fails its check; refusing "
				"to guess (remove the file to start over)", path);
	}
	if (!s->m.created) {
		if (!ret)
			snprintf(why, sizeof why, "the KV store of log %016llx",
				 (unsigned long long)h.log_id);
		else if (ret == WAL_EVERSION)
			snprintf(why, sizeof why, "a KV store of version %u", h.version);
		else
			snprintf(why, sizeof why, "%s", ret == WAL_ENOTLOG ? "not a KV store" :
				 "a KV store whose header fails its CRC");
		/* Another log's store is expected after the log was made anew;
		 * anything else is worth a warning. */
		wal_logf(ret ? WAL_LOG_WARN : WAL_LOG_INFO, "%s: %s; formatting it for log %016llx",
			 path, why, (unsigned long long)log_id);
	}
	*npools = 0;
	return format(s, path, log_id, err);
}

static int map_pools(struct kvs *s, const char *path, uint32_t n, struct wal_error *err)
{
	struct stat st;
	int ret;

	if (fstat(s->m.fd, &st) < 0)
		return wal_fail(err, WAL_EIO, "%s: fstat: %s", path, strerror(errno));
	if ((ret = load_pools(s->m.base, n, s->id, (uint64_t)st.st_size, s->pool, err)) < 0)
		return name_path(err, ret, path);
	for (uint32_t i = 0; i < n; i++)
		if ((ret = media_map(&s->m, path, s->pool[i].g.off, s->pool[i].g.len, 0,
				     &s->pool[i].region, err)) < 0)
			return ret;
	atomic_store_explicit(&s->npools, n, memory_order_release);
	return 0;
}

/*
 * Erase, durably, every slot of a window >= first: those windows never
 * committed, and the log hands their ids out again.  A slot whose header
 * fails its CRC is left for the reader to report: its window is unknown.
 */
static void erase_uncommitted(struct kvs *s, const char *path, uint64_t first)
{
	uint64_t erased = 0;
	struct kvs_slot sl;

	for (uint32_t i = 0; i < s->npools; i++) {
		const struct kvs_part *p = &s->pool[i];

		for (uint64_t c = 0; c < p->g.nchunks; c++)
			for (unsigned k = 0; k < 2; k++)
				if (read_slot(p, s->id, i, c, k, &sl) == SLOT_OK && sl.window >= first) {
					store_word(s, slot_hdr(p, c, k), 0);
					erased++;
				}
	}
	if (erased)
		wal_logf(WAL_LOG_INFO, "%s: erased %llu slots of windows >= %llu, never committed",
			 path, (unsigned long long)erased, (unsigned long long)first);
}

int kvs_path(const char *wal_path, char *out, size_t len)
{
	int n = snprintf(out, len, "%s.kv", wal_path);

	if (n >= 0 && (size_t)n < len)
		return 0;
	if (len)
		out[0] = '\0';
	return -1;
}

int kvs_open(const char *path, uint64_t log_id, int numa_node, uint64_t first_uncommitted,
	     struct kvs **out, struct wal_error *err)
{
	struct kvs *s;
	uint32_t n = 0;
	int ret;

	*out = NULL;
	if (!path || !*path || !log_id)
		return wal_fail(err, WAL_EINVAL, "KV store: no path or no log id given");
	if (!(s = calloc(1, sizeof *s)) || !(s->path = strdup(path))) {
		free(s);
		return wal_fail(err, WAL_ENOMEM, "out of memory");
	}
	pthread_mutex_init(&s->lock, NULL);
	s->id = log_id_crc(log_id);
	ret = media_open_init(&s->m, path, MEDIA_PARTS, KVS_META_SIZE, numa_node, WAL_OPEN_CREATE,
			      format_new, &(struct kvs_new){ s, log_id }, err);
	if (!ret)
		ret = adopt(s, path, log_id, &n, err);
	if (!ret)
		ret = map_pools(s, path, n, err);
	if (ret < 0) {
		kvs_close(s);
		return ret;
	}
	erase_uncommitted(s, path, first_uncommitted);
	*out = s;
	return 0;
}

void kvs_close(struct kvs *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < KVS_MAX_POOLS; i++)
		if (s->pool[i].region)
			media_unmap(s->pool[i].region, s->pool[i].g.len);
	media_close(&s->m);
	pthread_mutex_destroy(&s->lock);
	free(s->path);
	free(s);
}

static int same_pool(const struct kvs_pool_desc *a, const struct kvs_pool_desc *b)
{
	return alloc_ident_eq(kvs_pool_ident(a), kvs_pool_ident(b)) &&
	       a->chunk_bytes == b->chunk_bytes;
}

/*
 * Pool n: its region first (zeroed, reserved, the file's new size
 * durable), then its table entry, then the pools word: the one store at
 * which the pool comes to exist.  A crash before it leaves the file longer
 * than its pools say; the next region is cut back to zeros anyway.
 */
static int add_pool(struct kvs *s, uint32_t n, const struct kvs_pool_desc *d)
{
	struct kvs_part *p = s->pool + n;
	uint8_t *entry;
	struct wal_error err;
	int ret;

	if (n == KVS_MAX_POOLS)
		return WAL_EFULL;
	entry = s->m.base + KVS_TABLE_OFF + n * KVS_ENTRY_SIZE;
	if (kvs_geometry(d, n ? kvs_next_region(&s->pool[n - 1].g) : KVS_REGION_ALIGN, &p->g) < 0)
		return WAL_EINVAL;
	if ((ret = media_map(&s->m, s->path, p->g.off, p->g.len, 1, &p->region, &err)) < 0) {
		wal_logf(WAL_LOG_WARN, "%s", err.msg);
		return ret;
	}
	p->d = (struct kvs_pool_desc){ .fingerprint = d->fingerprint, .size = d->size,
				       .chunk_bytes = d->chunk_bytes, .ordinal = d->ordinal };
	kvs_entry_encode(entry, &p->d, n, &p->g, s->id);
	media_persist(&s->m, entry, KVS_ENTRY_SIZE);
	store_word(s, s->m.base + KVS_POOLS_OFF, kvs_pools_encode(n + 1, s->id));
	atomic_store_explicit(&s->npools, n + 1, memory_order_release);
	return 0;
}

int kvs_pool(struct kvs *s, const struct kvs_pool_desc *d, uint32_t *pool_no)
{
	uint32_t i, n;
	int ret;

	if (!s || !d || !pool_no)
		return WAL_EINVAL;
	pthread_mutex_lock(&s->lock);
	n = atomic_load_explicit(&s->npools, memory_order_relaxed);
	for (i = 0; i < n && !same_pool(&s->pool[i].d, d); i++)
		;
	ret = i < n ? 0 : add_pool(s, n, d);
	pthread_mutex_unlock(&s->lock);
	if (!ret)
		*pool_no = i;
	return ret;
}

/*
 * The slot to write for window w: one already of w or of a later window
 * (a rewrite within the open window; later ones never committed), else an
 * empty or bad one, else the older of two earlier windows.  Never the slot
 * with the chunk's newest copy of an earlier window: that is the copy the
 * last committed window may refer to.
 */
static unsigned pick_slot(const struct kvs *s, const struct kvs_part *p, uint32_t pool_no,
			  uint64_t chunk, uint64_t w)
{
	struct kvs_slot sl[2];
	int st[2];

	for (unsigned k = 0; k < 2; k++)
		if ((st[k] = read_slot(p, s->id, pool_no, chunk, k, &sl[k])) == SLOT_OK &&
		    sl[k].window >= w)
			return k;
	if (st[0] != SLOT_OK || st[1] != SLOT_OK)
		return st[0] == SLOT_OK;
	return sl[1].window < sl[0].window;
}

int kvs_put(struct kvs *s, uint32_t pool_no, uint64_t chunk, const void *data, uint32_t len,
	    uint64_t window, uint64_t *store_off, uint32_t *crc)
{
	struct kvs_slot sl = { .window = window, .chunk = chunk, .len = len, .pool = pool_no };
	const struct kvs_part *p;
	uint8_t hdr[KVS_SLOT_SIZE], *h, *dst;
	unsigned k;

	if (!s || !data || window > KVS_MAX_WINDOW ||
	    pool_no >= atomic_load_explicit(&s->npools, memory_order_acquire))
		return WAL_EINVAL;
	p = &s->pool[pool_no];
	if (chunk >= p->g.nchunks || !len || len > chunk_len(p, chunk))
		return WAL_EINVAL;
	k = pick_slot(s, p, pool_no, chunk, window);
	h = slot_hdr(p, chunk, k);
	dst = p->region + slot_data_off(p, chunk, k);
	/* Empty before its data changes: a crash from here on leaves it empty
	 * until the window word is stored again, last. */
	if (get64(h))
		store_word(s, h, 0);
	sl.crc = crc32c_copy(0, dst, data, len);
	media_persist(&s->m, dst, len);
	kvs_slot_encode(hdr, &sl, s->id);
	memcpy(h + 8, hdr + 8, KVS_SLOT_SIZE - 8);
	media_persist(&s->m, h + 8, KVS_SLOT_SIZE - 8);
	store_word(s, h, get64(hdr));
	if (store_off)
		*store_off = p->g.off + slot_data_off(p, chunk, k);
	if (crc)
		*crc = sl.crc;
	return 0;
}

/* ---- Reader ----------------------------------------------------------- */

struct kvs_reader {
	struct media m;          /* set when opened by path */
	uint32_t id, npools;
	struct kvs_part pool[KVS_MAX_POOLS];
};

int kvs_reader_open_buf(const void *buf, size_t len, uint64_t expect_log_id,
			struct kvs_reader **out, struct wal_error *err)
{
	const uint8_t *img = buf;
	struct kvs_reader *r;
	struct kvs_hdr h;
	int ret;

	*out = NULL;
	if (!img || len < KVS_HDR_SIZE)
		return wal_fail(err, WAL_ENOTLOG, "%zu bytes, too short for a KV store", len);
	switch ((ret = kvs_hdr_decode(img, &h))) {
	case 0:
		break;
	case WAL_ENOTLOG:
		return wal_fail(err, ret, "not a moeft KV store (no magic)");
	case WAL_EVERSION:
		return wal_fail(err, ret, "KV store version %u; this build reads version %u",
				h.version, KVS_VERSION);
	default:
		return wal_fail(err, ret, "the KV store header fails its CRC");
	}
	if (expect_log_id && h.log_id != expect_log_id)
		return wal_fail(err, WAL_ENOTLOG, "the KV store of log %016llx, not of log %016llx",
				(unsigned long long)h.log_id, (unsigned long long)expect_log_id);
	if (len < KVS_META_SIZE)
		return wal_fail(err, WAL_ECORRUPT, "truncated: %zu bytes, the pool table ends at %u",
				len, KVS_META_SIZE);
	if (!(r = calloc(1, sizeof *r)))
		return wal_fail(err, WAL_ENOMEM, "out of memory");
	r->m.fd = -1;
	r->id = log_id_crc(h.log_id);
	if (!kvs_pools_decode(get64(img + KVS_POOLS_OFF), r->id, &r->npools))
		ret = wal_fail(err, WAL_ECORRUPT, "the pool count fails its check");
	else
		ret = load_pools(img, r->npools, r->id, len, r->pool, err);
	if (ret < 0) {
		free(r);
		return ret;
	}
	for (uint32_t i = 0; i < r->npools; i++)
		r->pool[i].region = (uint8_t *)img + r->pool[i].g.off;
	*out = r;
	return 0;
}

int kvs_reader_open(const char *path, uint64_t expect_log_id, struct kvs_reader **out,
		    struct wal_error *err)
{
	struct media m;
	int ret;

	*out = NULL;
	if (!path)
		return wal_fail(err, WAL_EINVAL, "KV store: no path given");
	if ((ret = media_open(&m, path, MEDIA_READ, 0, -1, 0, err)) < 0)
		return ret == WAL_ENOTLOG ? wal_fail(err, ret, "%s: empty file, not a KV store", path)
					  : ret;
	if (m.kind == WAL_MEDIA_DEVDAX)
		ret = wal_fail(err, WAL_EINVAL, "%s: a device-DAX node never holds a KV store", path);
	else
		ret = kvs_reader_open_buf(m.base, m.size, expect_log_id, out, err);
	if (ret < 0) {
		if (m.kind != WAL_MEDIA_DEVDAX)
			name_path(err, ret, path);
		media_close(&m);
		return ret;
	}
	(*out)->m = m;
	return 0;
}

void kvs_reader_close(struct kvs_reader *r)
{
	if (!r)
		return;
	if (r->m.base)
		media_close(&r->m);
	free(r);
}

unsigned kvs_reader_pools(const struct kvs_reader *r)
{
	return r->npools;
}

int kvs_reader_pool(const struct kvs_reader *r, uint32_t pool_no, struct kvs_pool_info *out)
{
	if (pool_no >= r->npools)
		return WAL_EINVAL;
	*out = (struct kvs_pool_info){ .d = r->pool[pool_no].d, .nchunks = r->pool[pool_no].g.nchunks };
	return 0;
}

/*
 * The newest slot of a window <= upto decides.  Damage is never papered
 * over with the older copy, which would restore stale bytes as if they
 * were current: a bad header (its window unknown, so it may be the newest)
 * or bad data in the deciding slot make the chunk DAMAGED.
 */
int kvs_reader_chunk(const struct kvs_reader *r, uint32_t pool_no, uint64_t chunk,
		     uint64_t upto, const uint8_t **data, uint32_t *len, uint64_t *window,
		     uint32_t *crc)
{
	const struct kvs_part *p;
	struct kvs_slot sl[2];
	const uint8_t *d;
	int best = -1;

	if (!r || pool_no >= r->npools || chunk >= r->pool[pool_no].g.nchunks)
		return WAL_EINVAL;
	p = &r->pool[pool_no];
	for (unsigned k = 0; k < 2; k++) {
		int st = read_slot(p, r->id, pool_no, chunk, k, &sl[k]);

		if (st == SLOT_BAD)
			return KVS_CHUNK_DAMAGED;
		if (st == SLOT_OK && sl[k].window <= upto &&
		    (best < 0 || sl[k].window > sl[best].window))
			best = (int)k;
	}
	if (best < 0)
		return KVS_CHUNK_NONE;
	d = p->region + slot_data_off(p, chunk, (unsigned)best);
	if (crc32c(0, d, sl[best].len) != sl[best].crc)
		return KVS_CHUNK_DAMAGED;
	*data = d;
	*len = sl[best].len;
	*window = sl[best].window;
	*crc = sl[best].crc;
	return KVS_CHUNK_OK;
}

/*
 * kvstore.c - the KV store: layout, writer and reader.  See kvstore.h and
 * FORMAT.md, "KV store".
 *
 * The file is a header page, a pool table, then one region per pool, each
 * mapped on its own (media.c, MEDIA_PARTS): adding a pool never moves a
 * mapping, and the pools live in pages that never move either, so kvs_put
 * needs no lock against kvs_pool.  Every chunk has two slots; kvs_put
 * writes the one that does not hold the chunk's newest copy of an earlier
 * window, and publishes it with one aligned 8-byte store of its window
 * word, so a crash at any instruction leaves each slot either as it was,
 * empty, or complete.  A pool is published the same way, by the word of
 * its table entry, after its region and the rest of the entry are
 * durable, and dropped by zeroing that word before its region goes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
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
	put32(out + 12, h->table);
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
	h->table = get32(in + 12);
	h->log_id = get64(in + 16);
	if (h->version != KVS_VERSION)
		return WAL_EVERSION;
	return h->table >= 1 && h->table <= KVS_MAX_POOLS ? 0 : WAL_ECORRUPT;
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

/* The first region boundary at or past end. */
static uint64_t region_up(uint64_t end)
{
	return (end + KVS_REGION_ALIGN - 1) & ~(KVS_REGION_ALIGN - 1);
}

uint64_t kvs_next_region(const struct kvs_geom *g)
{
	return region_up(g->off + g->len);
}

void kvs_entry_encode(uint8_t out[KVS_ENTRY_SIZE], const struct kvs_pool_desc *d,
		      uint32_t pool_no, const struct kvs_geom *g, uint32_t id)
{
	memset(out, 0, KVS_ENTRY_SIZE);
	put64(out, KVS_ENTRY_LIVE);
	put64(out + 8, d->fingerprint);
	put64(out + 16, d->size);
	put64(out + 24, d->chunk_bytes);
	put32(out + 32, d->ordinal);
	put32(out + 36, pool_no);
	put64(out + 40, g->nchunks);
	put64(out + 48, g->off);
	put32(out + ENTRY_CRC_OFF, crc32c(id, out, ENTRY_CRC_OFF));
}

int kvs_entry_decode(const uint8_t in[KVS_ENTRY_SIZE], uint32_t pool_no, uint32_t id,
		     struct kvs_pool_desc *d, uint64_t *nchunks, uint64_t *off)
{
	uint64_t word = get64(in);

	if (!word)
		return 0;
	if (word != KVS_ENTRY_LIVE || crc32c(id, in, ENTRY_CRC_OFF) != get32(in + ENTRY_CRC_OFF) ||
	    get32(in + 36) != pool_no)
		return -1;
	*d = (struct kvs_pool_desc){ .fingerprint = get64(in + 8), .size = get64(in + 16),
				     .chunk_bytes = get64(in + 24), .ordinal = get32(in + 32) };
	*nchunks = get64(in + 40);
	*off = get64(in + 48);
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

enum part_state {
	PART_FREE,    /* no pool: the table entry is free */
	PART_LIVE,    /* in the table; a writer that did not ask for it drops it */
	PART_HELD     /* asked for by this writer (kvs_pool): kvs_reclaim keeps it */
};

struct kvs_part {
	struct kvs_pool_desc d;
	struct kvs_geom g;
	uint8_t *region;         /* slot headers, then data at g.data_off */
	atomic_int state;        /* enum part_state, stored last (release) */
};

/* The parts by pool number, in pages of PAGE_PARTS that never move (a
 * page is made with its first pool), so a lookup takes no lock while a
 * pool is added beside it. */
#define PAGE_PARTS 64u
#define PAGES ((KVS_MAX_POOLS + PAGE_PARTS - 1) / PAGE_PARTS)

struct parts {
	_Atomic uint32_t n;                    /* pool numbers in use are below it */
	struct kvs_part *_Atomic page[PAGES];
};

/* Pool no, or NULL when no pool has that number. */
static struct kvs_part *part(const struct parts *t, uint32_t no)
{
	struct kvs_part *pg;

	if (no >= atomic_load_explicit(&t->n, memory_order_acquire) ||
	    !(pg = atomic_load_explicit(&t->page[no / PAGE_PARTS], memory_order_acquire)) ||
	    atomic_load_explicit(&pg[no % PAGE_PARTS].state, memory_order_acquire) == PART_FREE)
		return NULL;
	return pg + no % PAGE_PARTS;
}

/* Where pool no goes, its page made when missing (NULL: out of memory);
 * the caller is the only one adding. */
static struct kvs_part *part_slot(struct parts *t, uint32_t no)
{
	struct kvs_part *pg = atomic_load_explicit(&t->page[no / PAGE_PARTS], memory_order_relaxed);

	if (!pg) {
		if (!(pg = calloc(PAGE_PARTS, sizeof *pg)))
			return NULL;
		atomic_store_explicit(&t->page[no / PAGE_PARTS], pg, memory_order_release);
	}
	return pg + no % PAGE_PARTS;
}

/* Pool no, filled in at p, is there from now on. */
static void publish(struct parts *t, uint32_t no, struct kvs_part *p, int state)
{
	atomic_store_explicit(&p->state, state, memory_order_release);
	if (no >= atomic_load_explicit(&t->n, memory_order_relaxed))
		atomic_store_explicit(&t->n, no + 1, memory_order_release);
}

static void parts_free(struct parts *t)
{
	for (unsigned i = 0; i < PAGES; i++)
		free(atomic_load_explicit(&t->page[i], memory_order_relaxed));
}

/* A region in use. */
struct span {
	uint64_t off, end;
	uint32_t no;
};

static int by_offset(const void *x, const void *y)
{
	const struct span *a = x, *b = y;

	return (a->off > b->off) - (a->off < b->off);
}

/* The regions of the pools in use, by offset: *ns of them in a new array,
 * or NULL when out of memory. */
static struct span *spans(const struct parts *t, size_t *ns)
{
	uint32_t n = atomic_load_explicit(&t->n, memory_order_acquire);
	struct span *sp = malloc((n ? n : 1) * sizeof *sp);
	const struct kvs_part *p;

	*ns = 0;
	if (!sp)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		if ((p = part(t, i)))
			sp[(*ns)++] = (struct span){ p->g.off, p->g.off + p->g.len, i };
	if (*ns)
		qsort(sp, *ns, sizeof *sp, by_offset);
	return sp;
}

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

static uint8_t *entry_at(const uint8_t *meta, uint32_t no)
{
	return (uint8_t *)meta + KVS_TABLE_OFF + (uint64_t)no * KVS_ENTRY_SIZE;
}

/*
 * Decode and check the pool table (meta: the header page and `table`
 * entries) of a file of file_size bytes into t, each pool in use PART_LIVE.
 * The file is untrusted: every entry in use must verify and describe a
 * region the writer could have placed: on a region boundary past the
 * table, inside the file, overlapping no other.  A free entry's other
 * bytes mean nothing (what a crashed addition or a reclaim left).
 */
static int load_pools(const uint8_t *meta, uint32_t table, uint32_t id, uint64_t file_size,
		      struct parts *t, struct wal_error *err)
{
	struct kvs_pool_desc d;
	struct kvs_part *p;
	struct span *sp;
	uint64_t nchunks, at;
	size_t ns;
	int got, r = 0;

	for (uint32_t i = 0; i < table; i++) {
		if (!(got = kvs_entry_decode(entry_at(meta, i), i, id, &d, &nchunks, &at)))
			continue;
		if (got < 0)
			return wal_fail(err, WAL_ECORRUPT, "pool %u: table entry fails its check", i);
		if (!(p = part_slot(t, i)))
			return wal_fail(err, WAL_ENOMEM, "out of memory");
		p->d = d;
		if (at < KVS_META_SIZE || kvs_geometry(&d, at, &p->g) < 0 || p->g.nchunks != nchunks)
			return wal_fail(err, WAL_ECORRUPT, "pool %u: %llu bytes in %llu chunks "
					"of %llu at offset %llu is not a region this store can hold",
					i, (unsigned long long)d.size, (unsigned long long)nchunks,
					(unsigned long long)d.chunk_bytes, (unsigned long long)at);
		if (p->g.len > file_size || at > file_size - p->g.len)
			return wal_fail(err, WAL_ECORRUPT, "pool %u: region [%llu, %llu) runs "
					"past the end of the file (%llu bytes): truncated", i,
					(unsigned long long)at, (unsigned long long)(at + p->g.len),
					(unsigned long long)file_size);
		publish(t, i, p, PART_LIVE);
	}
	if (!(sp = spans(t, &ns)))
		return wal_fail(err, WAL_ENOMEM, "out of memory");
	for (size_t k = 1; k < ns && !r; k++)
		if (sp[k].off < sp[k - 1].end)
			r = wal_fail(err, WAL_ECORRUPT, "pools %u and %u: their regions overlap "
				     "at offset %llu", sp[k - 1].no, sp[k].no,
				     (unsigned long long)sp[k].off);
	free(sp);
	return r < 0 ? r : 0;
}

/* ---- Writer ----------------------------------------------------------- */

struct kvs {
	pthread_mutex_t lock;    /* serialises kvs_pool and kvs_reclaim */
	struct media m;          /* m.base: the header page and the pool table */
	char *path;
	uint32_t id;             /* log_id_crc of the log */
	uint32_t table;          /* pool table entries */
	struct parts parts;
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
 * Make the store empty and bound to log_id.  The file is cut to its header
 * page and grown back, so the table and every region go as holes, with no
 * page touched; the magic is written last, so a crash part-way leaves a
 * file that is no store, and the next open formats it again.
 */
static int format(struct kvs *s, const char *path, uint64_t log_id, struct wal_error *err)
{
	struct kvs_hdr h = { .version = KVS_VERSION, .table = KVS_MAX_POOLS, .log_id = log_id };
	uint8_t buf[KVS_HDR_SIZE];
	int ret = media_cut(&s->m, path, KVS_TABLE_OFF, err);

	if (!ret)
		ret = media_cut(&s->m, path, KVS_META_SIZE, err);
	if (!ret && fdatasync(s->m.fd) < 0)
		ret = wal_fail(err, WAL_EIO, "%s: fdatasync: %s", path, strerror(errno));
	if (ret < 0)
		return ret;
	memset(s->m.base, 0, KVS_TABLE_OFF);
	kvs_hdr_encode(buf, &h);
	memcpy(s->m.base + sizeof KVS_MAGIC, buf + sizeof KVS_MAGIC, KVS_HDR_SIZE - sizeof KVS_MAGIC);
	media_persist(&s->m, s->m.base, KVS_TABLE_OFF);
	memcpy(s->m.base, buf, sizeof KVS_MAGIC);
	media_persist(&s->m, s->m.base, sizeof KVS_MAGIC);
	s->table = h.table;
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
static int adopt(struct kvs *s, const char *path, uint64_t log_id, struct wal_error *err)
{
	struct kvs_hdr h;
	char why[80];
	int ret = kvs_hdr_decode(s->m.base, &h);

	if (!ret && h.log_id == log_id) {
		s->table = h.table;
		return 0;
	}
	if (!s->m.created) {
		if (!ret)
			snprintf(why, sizeof why, "the KV store of log %016llx",
				 (unsigned long long)h.log_id);
		else if (ret == WAL_EVERSION)
			snprintf(why, sizeof why, "a KV store of version %u", h.version);
		else
			snprintf(why, sizeof why, "%s", ret == WAL_ENOTLOG ? "not a KV store" :
				 "a KV store whose header fails its check");
		/* Another log's store is expected after the log was made anew;
		 * anything else is worth a warning. */
		wal_logf(ret ? WAL_LOG_WARN : WAL_LOG_INFO, "%s: %s; formatting it for log %016llx",
			 path, why, (unsigned long long)log_id);
	}
	return format(s, path, log_id, err);
}

/* The file ends with the last region in use, or the table: what lay past
 * it was reclaimed, or a crashed addition's. */
static int trim(struct kvs *s, struct wal_error *err)
{
	uint64_t end = KVS_META_SIZE;
	const struct kvs_part *p;
	struct stat st;

	for (uint32_t i = 0; i < atomic_load_explicit(&s->parts.n, memory_order_relaxed); i++)
		if ((p = part(&s->parts, i)) && p->g.off + p->g.len > end)
			end = p->g.off + p->g.len;
	if (fstat(s->m.fd, &st) < 0)
		return wal_fail(err, WAL_EIO, "%s: fstat: %s", s->path, strerror(errno));
	return (uint64_t)st.st_size > end ? media_cut(&s->m, s->path, end, err) : 0;
}

static int map_pools(struct kvs *s, const char *path, struct wal_error *err)
{
	struct kvs_part *p;
	struct stat st;
	int ret;

	if (fstat(s->m.fd, &st) < 0)
		return wal_fail(err, WAL_EIO, "%s: fstat: %s", path, strerror(errno));
	if ((ret = load_pools(s->m.base, s->table, s->id, (uint64_t)st.st_size, &s->parts, err)) < 0)
		return name_path(err, ret, path);
	for (uint32_t i = 0; i < atomic_load_explicit(&s->parts.n, memory_order_relaxed); i++)
		if ((p = part(&s->parts, i)) &&
		    (ret = media_map(&s->m, path, p->g.off, p->g.len, 0, &p->region, err)) < 0)
			return ret;
	return trim(s, err);
}

/*
 * Erase, durably, every slot of a window >= first: those windows never
 * committed, and the log hands their ids out again.  A slot whose header
 * fails its CRC is left for the reader to report: its window is unknown.
 */
static void erase_uncommitted(struct kvs *s, const char *path, uint64_t first)
{
	uint64_t erased = 0;
	const struct kvs_part *p;
	struct kvs_slot sl;

	for (uint32_t i = 0; i < atomic_load_explicit(&s->parts.n, memory_order_relaxed); i++) {
		if (!(p = part(&s->parts, i)))
			continue;
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
		ret = adopt(s, path, log_id, err);
	if (!ret)
		ret = map_pools(s, path, err);
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
	struct kvs_part *p;

	if (!s)
		return;
	for (uint32_t i = 0; i < atomic_load_explicit(&s->parts.n, memory_order_relaxed); i++)
		if ((p = part(&s->parts, i)) && p->region)
			media_unmap(p->region, p->g.len);
	parts_free(&s->parts);
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

/* Where a region of len bytes goes: the first gap between the regions in
 * use that holds it, else past the last one (*at_end). */
static int place(const struct kvs *s, uint64_t len, uint64_t *at, int *at_end)
{
	size_t ns, i;
	struct span *sp = spans(&s->parts, &ns);

	if (!sp)
		return WAL_ENOMEM;
	*at = KVS_META_SIZE;
	for (i = 0; i < ns && sp[i].off < *at + len; i++)
		*at = region_up(sp[i].end);
	*at_end = i == ns;
	free(sp);
	return 0;
}

#define TABLE_PAGE 4096u

/*
 * Pool no, a free entry: its region first (past the last region, the file
 * cut there and grown over it, zeros; in a gap, its blocks reserved and
 * the slot headers an earlier region left there zeroed; durable either
 * way), then its table entry but the word, made durable, then the word:
 * the one store at which the pool comes to exist.  A crash before it
 * leaves a free entry and bytes in no region in use.
 */
static int add_pool(struct kvs *s, uint32_t no, const struct kvs_pool_desc *d)
{
	uint8_t buf[KVS_ENTRY_SIZE], *entry = entry_at(s->m.base, no), *region = NULL;
	uint64_t page = (uint64_t)(entry - s->m.base) & ~(uint64_t)(TABLE_PAGE - 1), at;
	struct wal_error err;
	struct kvs_part *p;
	struct kvs_geom g;
	int ret, at_end;

	if (kvs_geometry(d, KVS_META_SIZE, &g) < 0)
		return WAL_EINVAL;
	if ((ret = place(s, g.len, &at, &at_end)) < 0)
		return ret;
	if (kvs_geometry(d, at, &g) < 0)
		return WAL_EINVAL;
	if (!(p = part_slot(&s->parts, no)))
		return WAL_ENOMEM;
	/* The entry's page of the table may be a hole: its first store must
	 * not find the filesystem full (SIGBUS). */
	ret = media_reserve(&s->m, s->path, page, TABLE_PAGE, &err);
	if (!ret)
		ret = media_map(&s->m, s->path, g.off, g.len, at_end, &region, &err);
	if (!ret && !at_end)
		ret = media_reserve(&s->m, s->path, g.off, g.len, &err);
	if (ret < 0) {
		if (region)
			media_unmap(region, g.len);
		wal_logf(WAL_LOG_WARN, "%s", err.msg);
		return ret;
	}
	if (!at_end) {
		memset(region, 0, g.data_off);
		media_persist(&s->m, region, g.data_off);
	}
	p->d = (struct kvs_pool_desc){ .fingerprint = d->fingerprint, .size = d->size,
				       .chunk_bytes = d->chunk_bytes, .ordinal = d->ordinal };
	p->g = g;
	p->region = region;
	kvs_entry_encode(buf, &p->d, no, &g, s->id);
	memcpy(entry + 8, buf + 8, KVS_ENTRY_SIZE - 8);
	media_persist(&s->m, entry + 8, KVS_ENTRY_SIZE - 8);
	store_word(s, entry, get64(buf));
	publish(&s->parts, no, p, PART_HELD);
	return 0;
}

int kvs_pool(struct kvs *s, const struct kvs_pool_desc *d, uint32_t *pool_no)
{
	uint32_t i, n, no = UINT32_MAX;
	struct kvs_part *p = NULL;
	int ret = 0;

	if (!s || !d || !pool_no)
		return WAL_EINVAL;
	pthread_mutex_lock(&s->lock);
	n = atomic_load_explicit(&s->parts.n, memory_order_relaxed);
	for (i = 0; i < n; i++) {
		if ((p = part(&s->parts, i)) && same_pool(&p->d, d))
			break;
		if (!p && no == UINT32_MAX)
			no = i;		/* the lowest free entry */
	}
	if (i < n) {
		atomic_store_explicit(&p->state, PART_HELD, memory_order_relaxed);
		no = i;
	} else {
		if (no == UINT32_MAX)
			no = n;
		ret = no < s->table ? add_pool(s, no, d) : WAL_EFULL;
	}
	pthread_mutex_unlock(&s->lock);
	if (!ret)
		*pool_no = no;
	return ret;
}

unsigned kvs_reclaim(struct kvs *s)
{
	struct wal_error err;
	struct kvs_part *p;
	uint64_t bytes = 0;
	unsigned dropped = 0;
	int said = 0;

	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < atomic_load_explicit(&s->parts.n, memory_order_relaxed); i++) {
		if (!(p = part(&s->parts, i)) ||
		    atomic_load_explicit(&p->state, memory_order_relaxed) != PART_LIVE)
			continue;
		/* The entry goes first: a crash after it leaves bytes in no
		 * region in use, never a pool without its region. */
		store_word(s, entry_at(s->m.base, i), 0);
		atomic_store_explicit(&p->state, PART_FREE, memory_order_release);
		media_unmap(p->region, p->g.len);
		p->region = NULL;
		/* Where holes cannot be punched the blocks stay, until a region
		 * is placed there again or the file is cut. */
		if (media_release(&s->m, s->path, p->g.off, p->g.len, &err) < 0 && !said++)
			wal_logf(WAL_LOG_INFO, "%s", err.msg);
		dropped++;
		bytes += p->d.size;
	}
	if (dropped && trim(s, &err) < 0)
		wal_logf(WAL_LOG_WARN, "%s", err.msg);
	pthread_mutex_unlock(&s->lock);
	if (dropped)
		wal_logf(WAL_LOG_INFO, "%s: %u KV pool%s of earlier processes reclaimed (%llu bytes "
			 "of KV): no restore can take %s any more", s->path, dropped,
			 dropped == 1 ? "" : "s", (unsigned long long)bytes,
			 dropped == 1 ? "it" : "them");
	return dropped;
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

	if (!s || !data || window > KVS_MAX_WINDOW || !(p = part(&s->parts, pool_no)))
		return WAL_EINVAL;
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

int kvs_unput(struct kvs *s, uint32_t pool_no, uint64_t chunk, uint64_t window)
{
	const struct kvs_part *p;
	struct kvs_slot sl;

	if (!s || !(p = part(&s->parts, pool_no)) || chunk >= p->g.nchunks)
		return WAL_EINVAL;
	for (unsigned k = 0; k < 2; k++)
		if (read_slot(p, s->id, pool_no, chunk, k, &sl) == SLOT_OK && sl.window == window)
			store_word(s, slot_hdr(p, chunk, k), 0);
	return 0;
}

/* ---- Reader ----------------------------------------------------------- */

struct kvs_reader {
	struct media m;          /* set when opened by path */
	const uint8_t *img;      /* the store's bytes */
	size_t len;
	uint32_t id;
	struct parts parts;
};

int kvs_reader_open_buf(const void *buf, size_t len, uint64_t expect_log_id,
			struct kvs_reader **out, struct wal_error *err)
{
	const uint8_t *img = buf;
	struct kvs_reader *r;
	struct kvs_part *p;
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
		return wal_fail(err, ret, "the KV store header fails its check");
	}
	if (expect_log_id && h.log_id != expect_log_id)
		return wal_fail(err, WAL_ENOTLOG, "the KV store of log %016llx, not of log %016llx",
				(unsigned long long)h.log_id, (unsigned long long)expect_log_id);
	if (len < KVS_META_SIZE)
		return wal_fail(err, WAL_ECORRUPT, "truncated: %zu bytes, the pool table ends at %llu",
				len, (unsigned long long)KVS_META_SIZE);
	if (!(r = calloc(1, sizeof *r)))
		return wal_fail(err, WAL_ENOMEM, "out of memory");
	r->m.fd = -1;
	r->img = img;
	r->len = len;
	r->id = log_id_crc(h.log_id);
	if ((ret = load_pools(img, h.table, r->id, len, &r->parts, err)) < 0) {
		parts_free(&r->parts);
		free(r);
		return ret;
	}
	for (uint32_t i = 0; i < atomic_load_explicit(&r->parts.n, memory_order_relaxed); i++)
		if ((p = part(&r->parts, i)))
			p->region = (uint8_t *)img + p->g.off;
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
	parts_free(&r->parts);
	free(r);
}

uint64_t kvs_reader_size(const struct kvs_reader *r)
{
	return r->len;
}

uint64_t kvs_reader_offset(const struct kvs_reader *r, const uint8_t *data)
{
	return (uint64_t)(data - r->img);
}

int kvs_reader_header(const struct kvs_reader *r, uint32_t pool_no, uint64_t chunk,
		      const uint8_t *data, uint64_t *hdr_off, uint64_t *window)
{
	const struct kvs_part *p;
	struct kvs_slot sl;

	if (!r || !(p = part(&r->parts, pool_no)) || chunk >= p->g.nchunks)
		return WAL_EINVAL;
	for (unsigned k = 0; k < 2; k++)
		if (data == p->region + slot_data_off(p, chunk, k) &&
		    read_slot(p, r->id, pool_no, chunk, k, &sl) == SLOT_OK) {
			*hdr_off = (uint64_t)(slot_hdr(p, chunk, k) - r->img);
			*window = sl.window;
			return 0;
		}
	return WAL_EINVAL;
}

unsigned kvs_reader_pools(const struct kvs_reader *r)
{
	return atomic_load_explicit(&r->parts.n, memory_order_relaxed);
}

int kvs_reader_pool(const struct kvs_reader *r, uint32_t pool_no, struct kvs_pool_info *out)
{
	const struct kvs_part *p = part(&r->parts, pool_no);

	if (!p)
		return WAL_EINVAL;
	*out = (struct kvs_pool_info){ .d = p->d, .nchunks = p->g.nchunks, .off = p->g.off };
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

	if (!r || !(p = part(&r->parts, pool_no)) || chunk >= p->g.nchunks)
		return WAL_EINVAL;
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

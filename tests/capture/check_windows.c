/*
 * check_windows.c - does a log, with its KV store, hold what a serve run's
 * truth file says?
 * check_windows TRUTH WAL eager|graph WINDOW [skips] [partial=N]
 *
 * The run was made with MOEFT_WINDOW=WINDOW; its KV store is WAL ".kv".
 * "skips": the run skipped boundaries (the summary says how many), so a
 * window may span several times WINDOW steps, and the windows may end
 * before the last boundary the steps allowed.  "partial=N": exactly N
 * decode windows are flagged KV-partial (and nothing else), and the pool
 * as of them is not compared (a window given up while its pass was
 * queued, or one that changed more than staging held without back-
 * pressure); when the last is one, nor is the store's pool at the end.
 * Checked (the first difference is reported, exit 1):
 *
 * Windows.  The decode windows (WINDOW extra bytes with steps != 0; the
 * others hold allocation events, whose records are not looked at) are
 * whole (flags 0; but partial=N), follow one another from step 0, WINDOW
 * steps each, and
 * there are (steps - 1) / WINDOW of them: a boundary is enqueued when the
 * next step starts, so the last, partial window is never committed.
 *
 * Routing.  At step T, serve's group g (sequence i is in group i % 2) has
 * one row per active sequence of its own, ascending.  For every committed
 * step, layer and group with rows, exactly one ROUTING record of that step
 * and layer is the group's launch: in eager mode its rows are the real
 * ones; in graph mode they are the group's whole batch (all its sequences),
 * real rows first, and the padding after them is not compared.  The
 * record carries the rows' gating weights too (float32, vLLM's rule names
 * them), equal bit for bit to the truth's.  Both
 * groups may route alike, so a record goes to the first group it fits
 * whose launch is not taken yet.  A record's step must be one of its own
 * window's.
 *
 * KV.  The pool as of the last decode window (the chunks the store holds
 * up to that window, never-written ones as zeros, pools in ordinal order)
 * must have the CRC the truth gives after that window's last step, unless
 * that window is KV-partial.  A
 * KVREF whose window is still its chunk's newest copy must carry the CRC
 * of the bytes the store holds.  And as of every decode window, the pool
 * its KVREFs and those before them describe (their CRCs combined, zeros
 * where none) must have the truth's CRC (but for KV-partial ones): a window that left out a chunk
 * that changed would restore stale bytes.
 *
 * Exit status 0 when everything matches, 1 on the first mismatch, 2 on bad
 * usage or unreadable input.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "format.h"
#include "kvstore.h"
#include "record.h"
#include "wal.h"

#define NGROUPS 2

struct truth {
	unsigned layers, topk, seqs, steps;
	size_t *row0;	/* step T's rows are row0[T] .. row0[T + 1] - 1 */
	unsigned *seq;	/* sequence of each row, step after step */
	/* Per step, per layer, per row: topk ids and their gating weights'
	 * bits; step T's start at row0[T] * layers * topk. */
	int *ids;
	uint32_t *weights;
	uint32_t *kv;	/* per step: the pool's CRC after it */
};

static void __attribute__((noreturn, format(printf, 2, 3))) die(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("check_windows: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return p;
	*cap = need * 2;
	if (!(p = realloc(p, *cap * size)))
		die(2, "out of memory");
	return p;
}

/* One whole line, however long, into *buf: 1, or 0 at the end. */
static int read_line(FILE *f, char **buf, size_t *cap)
{
	size_t len = 0;

	for (;;) {
		*buf = grow(*buf, cap, len + 4096, 1);
		if (!fgets(*buf + len, (int)(*cap - len), f))
			return len > 0;
		len += strlen(*buf + len);
		if (len && (*buf)[len - 1] == '\n')
			return 1;
	}
}

static unsigned field(const char *line, const char *key)
{
	const char *p = strstr(line, key);

	return p ? (unsigned)strtoul(p + strlen(key), NULL, 10) : 0;
}

/* The keys of a step come in a fixed order: step, rows, layer 0 .. L - 1,
 * weights 0 .. L - 1, kv, then lines not needed here.  seen: how many of
 * them the current step has had. */
static void read_truth(const char *path, struct truth *t)
{
	size_t nrows = 0, rows_cap = 0, step_cap = 0, ids_cap = 0, nids = 0, cap = 0, n, i;
	size_t w_cap = 0, nw = 0;
	unsigned step = 0, seen = 0, lineno = 1;
	char *line = NULL, *p, *end;
	FILE *f = fopen(path, "r");

	if (!f || !read_line(f, &line, &cap) || strncmp(line, "moeft-serve-truth 1 ", 20) != 0)
		die(2, "%s: not a serve truth file", path);
	t->layers = field(line, " layers=");
	t->topk = field(line, " topk=");
	t->seqs = field(line, " seqs=");
	t->steps = field(line, " steps=");
	if (!t->layers || !t->topk || !t->seqs || !t->steps)
		die(2, "%s: header lacks layers, topk, seqs or steps", path);
	if (!(t->kv = calloc(t->steps, sizeof *t->kv)))
		die(2, "out of memory");
	while (read_line(f, &line, &cap)) {
		lineno++;
		if (strncmp(line, "step ", 5) == 0) {
			if (step == t->steps || (step && seen < 2 * t->layers + 2) ||
			    strtoul(line + 5, NULL, 10) != step)
				break;
			t->row0 = grow(t->row0, &step_cap, step + 2, sizeof *t->row0);
			t->row0[step++] = nrows;
			seen = 0;
		} else if (strncmp(line, "rows", 4) == 0) {
			if (!step || seen != 0)
				break;
			for (p = line + 4;; p = end) {
				unsigned long v = strtoul(p, &end, 10);

				if (end == p || v >= t->seqs ||
				    (nrows > t->row0[step - 1] && v <= t->seq[nrows - 1]))
					break;
				t->seq = grow(t->seq, &rows_cap, nrows + 1, sizeof *t->seq);
				t->seq[nrows++] = (unsigned)v;
			}
			if (*p != '\n' && *p)
				break;
			seen++;
		} else if (strncmp(line, "layer ", 6) == 0) {
			if (!step || seen < 1 || seen > t->layers ||
			    strtoul(line + 6, &p, 10) != seen - 1)
				break;
			n = (nrows - t->row0[step - 1]) * t->topk;
			t->ids = grow(t->ids, &ids_cap, nids + n, sizeof *t->ids);
			for (i = 0; i < n; i++, p = end + (*end == ',')) {
				long id = strtol(p, &end, 10);

				if (end == p)
					break;
				t->ids[nids++] = (int)id;
			}
			if (i < n || (*p != '\n' && *p))
				break;
			seen++;
		} else if (strncmp(line, "weights ", 8) == 0) {
			if (!step || seen < t->layers + 1 || seen > 2 * t->layers ||
			    strtoul(line + 8, &p, 10) != seen - 1 - t->layers)
				break;
			n = (nrows - t->row0[step - 1]) * t->topk;
			t->weights = grow(t->weights, &w_cap, nw + n, sizeof *t->weights);
			/* " W,W W,W ...": a separator, then 8 hex digits */
			for (i = 0; i < n && (*p == ' ' || *p == ','); i++, p = end) {
				unsigned long w;

				if (strspn(++p, "0123456789abcdef") < 8)
					break;
				w = strtoul(p, &end, 16);
				if (end != p + 8)
					break;
				t->weights[nw++] = (uint32_t)w;
			}
			if (i < n || (*p != '\n' && *p))
				break;
			seen++;
		} else if (strncmp(line, "kv ", 3) == 0) {
			if (!step || seen != 2 * t->layers + 1)
				break;
			t->kv[step - 1] = (uint32_t)strtoul(line + 3, &end, 16);
			if (end != line + 11)
				break;
			seen++;
		}
	}
	if (!feof(f) || step < t->steps || seen < 2 * t->layers + 2)
		die(2, "%s:%u: malformed or cut short (at step %u of %u)", path, lineno, step,
		    t->steps);
	t->row0[step] = nrows;
	free(line);
	fclose(f);
}

/* Rows of group g's launches at step T, 0 when it has no rows then: its
 * real rows in eager mode, its whole batch (all its sequences) in graph
 * mode. */
static unsigned launch_rows(const struct truth *t, uint64_t T, unsigned g, int graph)
{
	unsigned real = 0;
	size_t i;

	for (i = t->row0[T]; i < t->row0[T + 1]; i++)
		real += t->seq[i] % NGROUPS == g;
	return real && graph ? t->seqs / NGROUPS + (g < t->seqs % NGROUPS) : real;
}

/* Does r hold group g's launch of its layer at its step, of `rows` rows,
 * ids and gating weights (float32, bit for bit)?  Only the real rows,
 * which come first, are compared. */
static int fits(const struct truth *t, const struct rec_routing *r, unsigned g, unsigned rows)
{
	size_t first = t->row0[r->step], n = t->row0[r->step + 1] - first, i, at;
	const int *ids = t->ids + (first * t->layers + r->layer * n) * t->topk;
	const uint32_t *w = t->weights + (first * t->layers + r->layer * n) * t->topk;
	unsigned row = 0, j;

	if (r->k != t->topk || r->tokens != rows || (r->flags & ROUTING_W_MASK) != ROUTING_W_F32)
		return 0;
	for (i = 0; i < n; i++) {
		if (t->seq[first + i] % NGROUPS != g)
			continue;
		for (j = 0; j < t->topk; j++) {
			at = (size_t)row * t->topk + j;
			if (rec_routing_id(r, at) != (uint32_t)ids[i * t->topk + j] ||
			    get32(r->weights + 4 * at) != w[i * t->topk + j])
				return 0;
		}
		row++;
	}
	return 1;
}

/* Give r to the first group whose launch it is and that is not taken yet
 * (taken: per step, layer and group). */
static void place_routing(const struct truth *t, const struct rec_routing *r,
			  const struct wal_record *rec, int graph, uint8_t *taken)
{
	uint8_t *slot = taken + (r->step * t->layers + r->layer) * NGROUPS;
	unsigned g, rows[NGROUPS];
	int dup = -1;

	for (g = 0; g < NGROUPS; g++) {
		rows[g] = launch_rows(t, r->step, g, graph);
		if (!rows[g] || !fits(t, r, g, rows[g]))
			continue;
		if (!slot[g]) {
			slot[g] = 1;
			return;
		}
		dup = (int)g;
	}
	if (dup >= 0)
		die(1, "step %llu layer %u group %d: a second routing record (LSN %llu)",
		    (unsigned long long)r->step, r->layer, dup, (unsigned long long)rec->lsn);
	die(1, "step %llu layer %u: routing record (LSN %llu, %u rows, k %u) is neither "
	    "group's launch (%u and %u rows, k %u)", (unsigned long long)r->step, r->layer,
	    (unsigned long long)rec->lsn, r->tokens, r->k, rows[0], rows[1], t->topk);
}

struct pool {
	uint32_t no;
	struct kvs_pool_info info;
	uint32_t *crc, *len;	/* per chunk, as the KVREFs so far say (len 0: none) */
};

static int by_ordinal(const void *a, const void *b)
{
	const struct pool *x = a, *y = b;

	return (x->info.d.ordinal > y->info.d.ordinal) - (x->info.d.ordinal < y->info.d.ordinal);
}

/* The store's pools in ordinal order, which is serve's layer order. */
static struct pool *read_pools(const struct kvs_reader *kr, unsigned layers, unsigned *count)
{
	unsigned n = kvs_reader_pools(kr), i;
	struct pool *p = calloc(n ? n : 1, sizeof *p);

	if (!p)
		die(2, "out of memory");
	if (n != 1 && n != layers)
		die(1, "the KV store has %u pools, want 1 or %u (one per layer)", n, layers);
	for (i = 0; i < n; i++) {
		const struct kvs_pool_desc *d = &p[i].info.d;

		p[i].no = i;
		if (kvs_reader_pool(kr, i, &p[i].info) < 0)
			die(1, "pool %u: unreadable", i);
		if (!d->chunk_bytes || p[i].info.nchunks != (d->size - 1) / d->chunk_bytes + 1)
			die(1, "pool %u: %llu chunks of %llu bytes for %llu bytes", i,
			    (unsigned long long)p[i].info.nchunks,
			    (unsigned long long)d->chunk_bytes, (unsigned long long)d->size);
		if (d->fingerprint != p[0].info.d.fingerprint)
			die(1, "pool %u: fingerprint %016llx, pool 0 has %016llx: not one call site",
			    i, (unsigned long long)d->fingerprint,
			    (unsigned long long)p[0].info.d.fingerprint);
	}
	qsort(p, n, sizeof *p, by_ordinal);
	for (i = 0; i < n; i++)
		if (!(p[i].crc = calloc(p[i].info.nchunks, sizeof *p[i].crc)) ||
		    !(p[i].len = calloc(p[i].info.nchunks, sizeof *p[i].len)))
			die(2, "out of memory");
	for (i = 1; i < n; i++)
		if (p[i].info.d.ordinal == p[i - 1].info.d.ordinal)
			die(1, "pools %u and %u share ordinal %u", p[i - 1].no, p[i].no,
			    p[i].info.d.ordinal);
	*count = n;
	return p;
}

static uint64_t chunk_bytes(const struct pool *p, uint64_t c)
{
	uint64_t left = p->info.d.size - c * p->info.d.chunk_bytes;

	return left < p->info.d.chunk_bytes ? left : p->info.d.chunk_bytes;
}

/* CRC-32C of the pools' bytes as of window upto, one after the other. */
static uint32_t pool_crc(const struct kvs_reader *kr, const struct pool *p, unsigned n,
			 uint64_t upto)
{
	uint32_t crc = 0, len, ccrc;
	const uint8_t *data;
	uint64_t c, window, want;
	unsigned i;

	for (i = 0; i < n; i++)
		for (c = 0; c < p[i].info.nchunks; c++) {
			want = chunk_bytes(&p[i], c);
			switch (kvs_reader_chunk(kr, p[i].no, c, upto, &data, &len, &window, &ccrc)) {
			case KVS_CHUNK_OK:
				if (len != want)
					die(1, "pool %u chunk %llu: %u bytes in the store, want %llu",
					    p[i].no, (unsigned long long)c, len,
					    (unsigned long long)want);
				crc = crc32c(crc, data, len);
				break;
			case KVS_CHUNK_NONE:
				crc = crc32c_zeros(crc, want);
				break;
			case KVS_CHUNK_DAMAGED:
				die(1, "pool %u chunk %llu: damaged in the KV store", p[i].no,
				    (unsigned long long)c);
			default:
				die(1, "pool %u chunk %llu: the KV store cannot say", p[i].no,
				    (unsigned long long)c);
			}
		}
	return crc;
}

/* The pools' CRC as the KVREFs recorded so far describe them. */
static uint32_t kvref_crc(const struct pool *p, unsigned n)
{
	uint32_t crc = 0;
	uint64_t c, len;
	unsigned i;

	for (i = 0; i < n; i++)
		for (c = 0; c < p[i].info.nchunks; c++) {
			len = chunk_bytes(&p[i], c);
			crc = p[i].len[c] ? crc32c_combine(crc, p[i].crc[c], len)
					 : crc32c_zeros(crc, len);
		}
	return crc;
}

/* A KVREF must carry the CRC of the bytes the store holds for its chunk
 * when its window is the chunk's newest up to window upto.  1 when it was
 * checked. */
static int check_kvref(const struct kvs_reader *kr, struct pool *p, unsigned npools,
		       const struct wal_record *rec, uint64_t upto)
{
	struct rec_kvref k;
	const uint8_t *data;
	uint64_t window;
	uint32_t len, crc;
	unsigned i;

	if (rec_kvref_decode(rec->payload, rec->len, &k) < 0)
		die(1, "window %llu: KVREF record LSN %llu undecodable",
		    (unsigned long long)rec->window, (unsigned long long)rec->lsn);
	for (i = 0; i < npools && p[i].no != k.pool; i++)
		;
	if (i == npools || k.block >= p[i].info.nchunks)
		die(1, "pool %u chunk %llu: KVREF (window %llu) of a chunk not in the KV store",
		    k.pool, (unsigned long long)k.block, (unsigned long long)rec->window);
	if (k.bytes != chunk_bytes(&p[i], k.block))
		die(1, "pool %u chunk %llu: KVREF (window %llu) of %u bytes, the chunk has %llu",
		    k.pool, (unsigned long long)k.block, (unsigned long long)rec->window, k.bytes,
		    (unsigned long long)chunk_bytes(&p[i], k.block));
	p[i].crc[k.block] = k.crc;
	p[i].len[k.block] = k.bytes;
	if (kvs_reader_chunk(kr, k.pool, k.block, upto, &data, &len, &window, &crc) !=
	    KVS_CHUNK_OK || window != rec->window)
		return 0;
	if ((crc = crc32c(0, data, len)) != k.crc)
		die(1, "pool %u chunk %llu: KVREF of window %llu says CRC %08x, the store holds "
		    "%08x", k.pool, (unsigned long long)k.block, (unsigned long long)rec->window,
		    (unsigned)k.crc, (unsigned)crc);
	return 1;
}

/* Once all of window w's records are read: the pools its KVREFs and those
 * before them describe are the truth's after its last step. */
static void check_kv_as_of(const struct truth *t, const struct wal_window *w,
			   const struct rec_window_steps *ws, const struct pool *p, unsigned n)
{
	uint64_t last = ws->first_step + ws->steps - 1;
	uint32_t crc;

	if (!ws->steps || last >= t->steps || ws->flags == WINDOW_KV_PARTIAL)
		return;
	if ((crc = kvref_crc(p, n)) != t->kv[last])
		die(1, "window %llu (steps %llu-%llu): its KVREFs and earlier ones make a pool "
		    "with CRC %08x, the truth's after step %llu is %08x: a chunk that changed "
		    "was left out", (unsigned long long)w->id, (unsigned long long)ws->first_step,
		    (unsigned long long)last, (unsigned)crc, (unsigned long long)last,
		    (unsigned)t->kv[last]);
}

int main(int argc, char **argv)
{
	struct truth t = { 0 };
	struct wal_reader *rd;
	struct kvs_reader *kr;
	struct wal_error err;
	struct wal_record rec;
	struct wal_iter it;
	struct rec_routing r;
	const struct wal_window *win;
	struct rec_window_steps *ws;
	struct pool *pools;
	unsigned long window;
	unsigned npools, L, g;
	uint64_t next = 0, upto = 0, T, routing = 0, kvrefs = 0;
	size_t nwin, ndecode = 0, i, wi, exits = 0;
	uint8_t *taken;
	uint32_t crc;
	char *end, kvpath[PATH_MAX];
	int graph, skips = 0, a, bad = 0;
	unsigned long partial = 0, partials = 0;
	int last_partial = 0;

	for (a = 5; a < argc; a++)
		if (strcmp(argv[a], "skips") == 0)
			skips = 1;
		else if (strncmp(argv[a], "partial=", 8) != 0 ||
			 (partial = strtoul(argv[a] + 8, &end, 10), *end || argv[a][8] == 0))
			bad = 1;
	if (argc < 5 || bad || (strcmp(argv[3], "eager") && strcmp(argv[3], "graph")) ||
	    (window = strtoul(argv[4], &end, 10)) == 0 || *end || window > UINT32_MAX) {
		fputs("usage: check_windows TRUTH WAL eager|graph WINDOW [skips] [partial=N]\n",
		      stderr);
		return 2;
	}
	graph = strcmp(argv[3], "graph") == 0;
	read_truth(argv[1], &t);
	if (wal_reader_open_path(argv[2], &rd, &err) < 0)
		die(2, "%s: %s", argv[2], err.msg);

	/* The decode windows: contiguous from step 0, WINDOW steps each; the
	 * last window the EXIT record of serve's clean end, alone. */
	win = wal_reader_windows(rd, &nwin);
	if (!(ws = calloc(nwin ? nwin : 1, sizeof *ws)))
		die(2, "out of memory");
	if (!nwin || win[nwin - 1].extra_len || win[nwin - 1].records != 2)
		die(1, "the log does not end with a window of its writer's EXIT record alone");
	for (i = 0; i < nwin; i++) {
		if (win[i].state != WAL_WINDOW_INTACT)
			die(1, "window %llu: damaged", (unsigned long long)win[i].id);
		if (i == nwin - 1)
			break;
		if (rec_window_steps_decode(win[i].extra, win[i].extra_len, &ws[i]) < 0)
			die(1, "window %llu: its %u extra bytes are not a window's steps",
			    (unsigned long long)win[i].id, win[i].extra_len);
		if (!ws[i].steps)
			continue;
		partials += ws[i].flags == WINDOW_KV_PARTIAL;
		if (ws[i].flags && ws[i].flags != WINDOW_KV_PARTIAL)
			die(1, "window %llu (steps %llu-%llu): flags %#x, want 0 (or KV-partial alone)",
			    (unsigned long long)win[i].id, (unsigned long long)ws[i].first_step,
			    (unsigned long long)(ws[i].first_step + ws[i].steps - 1),
			    (unsigned)ws[i].flags);
		if (ws[i].first_step != next || ws[i].steps % window ||
		    (!skips && ws[i].steps != window))
			die(1, "window %llu: steps %llu-%llu, want %llu-%llu",
			    (unsigned long long)win[i].id, (unsigned long long)ws[i].first_step,
			    (unsigned long long)(ws[i].first_step + ws[i].steps - 1),
			    (unsigned long long)next, (unsigned long long)(next + window - 1));
		next += ws[i].steps;
		upto = win[i].id;
		last_partial = ws[i].flags == WINDOW_KV_PARTIAL;
		ndecode++;
	}
	if (!ndecode)
		die(1, "no committed window");
	if (partials != partial)
		die(1, "%lu decode windows flagged KV-partial, want %lu", partials, partial);
	if (skips ? next > (t.steps - 1) / window * window : ndecode != (t.steps - 1) / window)
		die(1, "%zu decode windows, want %lu (%u steps, %lu a window)", ndecode,
		    (t.steps - 1) / window, t.steps, window);

	if (kvs_path(argv[2], kvpath, sizeof kvpath) < 0)
		die(2, "%s: path too long", argv[2]);
	if (kvs_reader_open(kvpath, wal_reader_recovery(rd)->log_id, &kr, &err) < 0)
		die(2, "%s: %s", kvpath, err.msg);
	pools = read_pools(kr, t.layers, &npools);

	/* Every record of a decode window, in log order. */
	if (!(taken = calloc(next * t.layers, NGROUPS)))
		die(2, "out of memory");
	wal_iter_init(&it, rd);
	for (wi = 0; wal_iter_next(&it, &rec);) {
		for (; wi < nwin && win[wi].id != rec.window; wi++)
			check_kv_as_of(&t, &win[wi], &ws[wi], pools, npools);
		if (wi == nwin)
			die(1, "record LSN %llu: window %llu is not a committed one",
			    (unsigned long long)rec.lsn, (unsigned long long)rec.window);
		if (rec.type != WAL_REC_WINDOW && (rec.type == WAL_REC_EXIT) != (wi == nwin - 1))
			die(1, "record LSN %llu (%s) in window %llu: the EXIT record belongs in "
			    "the last window, alone", (unsigned long long)rec.lsn,
			    wal_rec_type_name(rec.type), (unsigned long long)rec.window);
		exits += rec.type == WAL_REC_EXIT;
		if (!ws[wi].steps)
			continue;
		if (rec.type == WAL_REC_KVREF) {
			kvrefs += check_kvref(kr, pools, npools, &rec, upto);
			continue;
		}
		if (rec.type != WAL_REC_ROUTING)
			continue;
		routing++;
		if (rec_routing_decode(rec.payload, rec.len, &r) < 0)
			die(1, "window %llu: ROUTING record LSN %llu undecodable",
			    (unsigned long long)rec.window, (unsigned long long)rec.lsn);
		if (r.step < ws[wi].first_step || r.step - ws[wi].first_step >= ws[wi].steps)
			die(1, "step %llu layer %u: routing record (LSN %llu) in window %llu of "
			    "steps %llu-%llu", (unsigned long long)r.step, r.layer,
			    (unsigned long long)rec.lsn, (unsigned long long)rec.window,
			    (unsigned long long)ws[wi].first_step,
			    (unsigned long long)(ws[wi].first_step + ws[wi].steps - 1));
		if (r.layer >= t.layers)
			die(1, "step %llu layer %u: routing record (LSN %llu) of a layer serve has "
			    "not (layers=%u)", (unsigned long long)r.step, r.layer,
			    (unsigned long long)rec.lsn, t.layers);
		place_routing(&t, &r, &rec, graph, taken);
	}
	for (; wi < nwin; wi++)
		check_kv_as_of(&t, &win[wi], &ws[wi], pools, npools);
	if (exits != 1)
		die(1, "%zu EXIT records, want 1", exits);
	for (T = 0; T < next; T++)
		for (L = 0; L < t.layers; L++)
			for (g = 0; g < NGROUPS; g++)
				if (!taken[(T * t.layers + L) * NGROUPS + g] &&
				    launch_rows(&t, T, g, graph))
					die(1, "step %llu layer %u group %u: no routing record",
					    (unsigned long long)T, L, g);

	crc = pool_crc(kr, pools, npools, upto);
	if (!last_partial && crc != t.kv[next - 1])
		die(1, "pool CRC %08x as of window %llu (step %llu), truth says %08x",
		    (unsigned)crc, (unsigned long long)upto, (unsigned long long)(next - 1),
		    (unsigned)t.kv[next - 1]);
	if (last_partial)
		printf("check_windows: %zu windows, steps 0-%llu, %llu routing records, %llu KV "
		       "chunks, the last KV-partial (its pool not compared)\n", ndecode,
		       (unsigned long long)(next - 1), (unsigned long long)routing,
		       (unsigned long long)kvrefs);
	else
		printf("check_windows: %zu windows, steps 0-%llu, %llu routing records, %llu KV "
		       "chunks, pool CRC %08x == truth at step %llu\n", ndecode,
		       (unsigned long long)(next - 1), (unsigned long long)routing,
		       (unsigned long long)kvrefs, (unsigned)crc, (unsigned long long)(next - 1));
	kvs_reader_close(kr);
	wal_reader_close(rd);
	free(taken);
	for (i = 0; i < npools; i++) {
		free(pools[i].crc);
		free(pools[i].len);
	}
	free(pools);
	free(ws);
	free(t.row0);
	free(t.seq);
	free(t.ids);
	free(t.weights);
	free(t.kv);
	return 0;
}

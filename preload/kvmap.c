/*
 * kvmap.c - a pool's chunk map (kvmap.h): its writer and its parser.
 *
 * The map is written by moeft restore and read by restore mode, where it
 * is an input from outside the process: the header and every entry are
 * checked by the same two functions on both sides, so the rules are
 * written down once.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "diag.h"
#include "format.h"
#include "kvmap.h"

#define MAGIC "moeftmap"
#define VERSION 1u
#define HDR_CRC 56u

/* The header's fields, as a rule of the format: 0, or -1 with err set. */
static int header_ok(const struct kvmap *m, char *err, size_t errlen)
{
	uint64_t cb = m->chunk_bytes;

	if (!m->size)
		return fail_msg(err, errlen, "a pool of 0 bytes");
	if (!kvmap_chunk_ok(cb))
		return fail_msg(err, errlen, "chunk size %llu is not a power of two from 4096 to %u",
			    (unsigned long long)cb, KVMAP_CHUNK_MAX);
	if (m->nchunks != kvmap_chunks(m->size, cb))
		return fail_msg(err, errlen, "%llu chunks for %llu bytes in chunks of %llu",
			    (unsigned long long)m->nchunks, (unsigned long long)m->size,
			    (unsigned long long)cb);
	return 0;
}

/* Entry c, as a rule of the format: 0, or -1 with err set. */
static int entry_ok(const struct kvmap *m, uint64_t c, const struct kvmap_entry *e,
		    uint64_t store_bytes, char *err, size_t errlen)
{
	if (!e->len) {
		if (e->off || e->crc || e->hdr || e->window)
			return fail_msg(err, errlen, "chunk %llu: zeros with an offset, a CRC or a window",
				    (unsigned long long)c);
		return 0;
	}
	if (e->len > kvmap_chunk_len(m, c))
		return fail_msg(err, errlen, "chunk %llu: %u bytes, more than the chunk's %llu",
			    (unsigned long long)c, e->len, (unsigned long long)kvmap_chunk_len(m, c));
	if (e->off > store_bytes || e->len > store_bytes - e->off)
		return fail_msg(err, errlen, "chunk %llu: bytes %llu-%llu past the KV store's end (%llu)",
			    (unsigned long long)c, (unsigned long long)e->off,
			    (unsigned long long)(e->off + e->len - 1), (unsigned long long)store_bytes);
	if (e->hdr > store_bytes || store_bytes - e->hdr < 8)
		return fail_msg(err, errlen, "chunk %llu: its header at %llu past the KV store's end "
			    "(%llu)", (unsigned long long)c, (unsigned long long)e->hdr,
			    (unsigned long long)store_bytes);
	if (e->window > m->window)
		return fail_msg(err, errlen, "chunk %llu: a copy of window %llu, after the map's %llu",
			    (unsigned long long)c, (unsigned long long)e->window,
			    (unsigned long long)m->window);
	return 0;
}

static void encode_entry(uint8_t out[KVMAP_ENTRY], const struct kvmap_entry *e)
{
	put64(out, e->off);
	put32(out + 8, e->len);
	put32(out + 12, e->crc);
	put64(out + 16, e->hdr);
	put64(out + 24, e->window);
}

int kvmap_write(FILE *f, const struct kvmap *m, uint64_t store_bytes, char *err, size_t errlen)
{
	uint8_t h[KVMAP_HDR] = MAGIC, buf[256 * KVMAP_ENTRY], tail[4];
	uint32_t crc = 0;
	uint64_t c;
	size_t n = 0;

	if (header_ok(m, err, errlen) < 0)
		return -1;
	put32(h + 8, VERSION);
	put32(h + 12, m->pool);
	put64(h + 16, m->log_id);
	put64(h + 24, m->window);
	put64(h + 32, m->size);
	put64(h + 40, m->chunk_bytes);
	put64(h + 48, m->nchunks);
	put32(h + HDR_CRC, crc32c(0, h, HDR_CRC));
	fwrite(h, 1, sizeof h, f);
	for (c = 0; c < m->nchunks; c++) {
		if (entry_ok(m, c, &m->e[c], store_bytes, err, errlen) < 0)
			return -1;
		encode_entry(buf + n, &m->e[c]);
		if ((n += KVMAP_ENTRY) == sizeof buf || c + 1 == m->nchunks) {
			crc = crc32c(crc, buf, n);
			fwrite(buf, 1, n, f);
			n = 0;
		}
	}
	put32(tail, crc);
	fwrite(tail, 1, sizeof tail, f);
	return 0;
}

int kvmap_parse(const uint8_t *buf, size_t len, uint64_t store_bytes, struct kvmap *m,
		char *err, size_t errlen)
{
	const uint8_t *p;
	uint64_t c;

	memset(m, 0, sizeof *m);
	if (len < KVMAP_HDR || memcmp(buf, MAGIC, 8))
		return fail_msg(err, errlen, "not a chunk map");
	if (get32(buf + HDR_CRC) != crc32c(0, buf, HDR_CRC) || get32(buf + HDR_CRC + 4))
		return fail_msg(err, errlen, "its header fails its CRC-32C");
	if (get32(buf + 8) != VERSION)
		return fail_msg(err, errlen, "version %u, not %u", get32(buf + 8), VERSION);
	*m = (struct kvmap){ .pool = get32(buf + 12), .log_id = get64(buf + 16),
			     .window = get64(buf + 24), .size = get64(buf + 32),
			     .chunk_bytes = get64(buf + 40), .nchunks = get64(buf + 48) };
	if (header_ok(m, err, errlen) < 0) {
		memset(m, 0, sizeof *m);
		return -1;
	}
	if (len != kvmap_file_bytes(m->size, m->chunk_bytes)) {
		fail_msg(err, errlen, "%zu bytes, not the %llu of a map of %llu chunks", len,
		     (unsigned long long)kvmap_file_bytes(m->size, m->chunk_bytes),
		     (unsigned long long)m->nchunks);
		memset(m, 0, sizeof *m);
		return -1;
	}
	p = buf + KVMAP_HDR;
	if (get32(p + m->nchunks * KVMAP_ENTRY) != crc32c(0, p, m->nchunks * KVMAP_ENTRY)) {
		memset(m, 0, sizeof *m);
		return fail_msg(err, errlen, "its entries fail their CRC-32C");
	}
	if (!(m->e = malloc(m->nchunks * sizeof *m->e))) {
		memset(m, 0, sizeof *m);
		return fail_msg(err, errlen, "out of memory");
	}
	for (c = 0; c < m->nchunks; c++, p += KVMAP_ENTRY) {
		m->e[c] = (struct kvmap_entry){ get64(p), get32(p + 8), get32(p + 12), get64(p + 16),
						get64(p + 24) };
		if (entry_ok(m, c, &m->e[c], store_bytes, err, errlen) < 0) {
			kvmap_free(m);
			return -1;
		}
	}
	return 0;
}

void kvmap_free(struct kvmap *m)
{
	free(m->e);
	memset(m, 0, sizeof *m);
}

/*
 * reqindex.c - the restore index of an engine's requests (reqindex.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "format.h"
#include "reqindex.h"

static size_t padded(uint32_t len)
{
	return ((size_t)len + 3) & ~(size_t)3;
}

static int by_id(const void *a, const void *b)
{
	const struct rec_request *x = a, *y = b;
	int d = memcmp(x->id, y->id, x->id_len < y->id_len ? x->id_len : y->id_len);

	return d ? d : (int)x->id_len - (int)y->id_len;
}

/* Whether two of reqs[n] share an id (reqs is sorted by it on return). */
static int ids_repeat(struct rec_request *reqs, size_t n)
{
	size_t i;

	qsort(reqs, n, sizeof *reqs, by_id);
	for (i = 1; i < n; i++)
		if (!by_id(&reqs[i - 1], &reqs[i]))
			return 1;
	return 0;
}

int reqindex_indexable(const uint8_t *const payloads[], const uint32_t lens[], size_t n)
{
	struct rec_request *check;
	size_t i;
	int ok = n <= REQINDEX_MAX_REQUESTS;

	if (!ok)
		return 0;
	if (!(check = malloc((n ? n : 1) * sizeof *check)))
		return -1;
	for (i = 0; i < n && ok; i++)
		ok = rec_request_decode(payloads[i], lens[i], &check[i]) == 0;
	ok = ok && !ids_repeat(check, n);
	free(check);
	return ok;
}

size_t reqindex_format(uint8_t *out, size_t cap, const struct reqindex *x,
		       const uint8_t *const payloads[], const uint32_t lens[], size_t n)
{
	size_t need = REQINDEX_HDR_SIZE + 4, at, i;

	if (x->first_step > x->last_step || reqindex_indexable(payloads, lens, n) != 1)
		return 0;
	for (i = 0; i < n; i++)
		need += 4 + padded(lens[i]);
	if (!out)
		return need;
	if (cap < need)
		return 0;
	memset(out, 0, need);
	memcpy(out, REQINDEX_MAGIC, 8);
	put64(out + 8, x->log_id);
	put64(out + 16, x->window);
	put64(out + 24, x->first_step);
	put64(out + 32, x->last_step);
	put32(out + 40, (uint32_t)n);
	for (at = REQINDEX_HDR_SIZE, i = 0; i < n; i++) {
		put32(out + at, lens[i]);
		memcpy(out + at + 4, payloads[i], lens[i]);
		at += 4 + padded(lens[i]);
	}
	put32(out + at, crc32c(0, out, at));
	return need;
}

__attribute__((format(printf, 4, 5)))
static int bad(struct reqindex *x, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	reqindex_free(x);
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

int reqindex_parse(const uint8_t *buf, size_t len, struct reqindex *x, char *err,
		   size_t errlen)
{
	size_t at = REQINDEX_HDR_SIZE, i;
	uint32_t n, plen;

	memset(x, 0, sizeof *x);
	if (len < REQINDEX_HDR_SIZE + 4 || memcmp(buf, REQINDEX_MAGIC, 8))
		return bad(x, err, errlen, "not a moeft request index");
	if (get32(buf + len - 4) != crc32c(0, buf, len - 4))
		return bad(x, err, errlen, "its CRC does not match: damaged or cut short");
	x->log_id = get64(buf + 8);
	x->window = get64(buf + 16);
	x->first_step = get64(buf + 24);
	x->last_step = get64(buf + 32);
	n = get32(buf + 40);
	/* Each request takes 8 bytes and a REQUEST header at least. */
	if (get32(buf + 44) || n > REQINDEX_MAX_REQUESTS || x->first_step > x->last_step ||
	    n > (len - REQINDEX_HDR_SIZE - 4) / (8 + REQUEST_HDR_SIZE))
		return bad(x, err, errlen, "a header out of bounds");
	if (!(x->reqs = calloc(n ? n : 1, sizeof *x->reqs)))
		return bad(x, err, errlen, "out of memory");
	for (i = 0; i < n; i++) {
		if (len - 4 - at < 4 || (plen = get32(buf + at), len - 4 - at - 4 < padded(plen)))
			return bad(x, err, errlen, "request %zu runs past the end", i);
		if (rec_request_decode(buf + at + 4, plen, &x->reqs[i]) < 0)
			return bad(x, err, errlen, "request %zu is no request", i);
		for (size_t p = plen; p < padded(plen); p++)
			if (buf[at + 4 + p])
				return bad(x, err, errlen, "request %zu: padding that is not zero", i);
		at += 4 + padded(plen);
	}
	if (at != len - 4)
		return bad(x, err, errlen, "bytes after the last request");
	x->n = n;
	if (ids_repeat(x->reqs, n))
		return bad(x, err, errlen, "two requests share an id");
	return 0;
}

void reqindex_free(struct reqindex *x)
{
	free(x->reqs);
	x->reqs = NULL;
	x->n = 0;
}

size_t reqindex_match(const struct reqindex *x, const uint32_t *tokens, size_t n,
		      const struct rec_request **req)
{
	size_t best = 0, i, k, cap;

	*req = NULL;
	for (i = 0; i < x->n; i++) {
		const struct rec_request *r = &x->reqs[i];

		cap = r->ncomputed < n - (n > 0) ? r->ncomputed : n - (n > 0);
		for (k = 0; k < cap && rec_request_token(r, k) == tokens[k]; k++)
			;
		k -= k % r->block_tokens;
		if (k > best) {
			best = k;
			*req = r;
		}
	}
	return best;
}

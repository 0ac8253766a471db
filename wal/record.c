/*
 * record.c - encode and decode the payloads of the record types.
 */
#include <string.h>

#include "format.h"
#include "record.h"
#include "wal.h"

void rec_epoch_encode(uint8_t out[EPOCH_PAYLOAD_SIZE], const struct rec_epoch *e)
{
	put32(out, e->prev_epoch);
	put32(out + 4, e->pid);
	put64(out + 8, e->prev_commit_lsn);
	put64(out + 16, e->start_ns);
}

int rec_epoch_decode(const uint8_t *p, size_t len, struct rec_epoch *e)
{
	if (len != EPOCH_PAYLOAD_SIZE)
		return -1;
	e->prev_epoch = get32(p);
	e->pid = get32(p + 4);
	e->prev_commit_lsn = get64(p + 8);
	e->start_ns = get64(p + 16);
	return 0;
}

void rec_routing_encode(uint8_t out[ROUTING_HDR_SIZE], const struct rec_routing *r)
{
	put64(out, r->step);
	put32(out + 8, r->layer);
	put32(out + 12, r->tokens);
	put16(out + 16, r->k);
	out[18] = r->id_bytes;
	out[19] = r->flags;
	put32(out + 20, r->experts);
}

int rec_routing_decode(const uint8_t *p, size_t len, struct rec_routing *r)
{
	uint64_t n;

	if (len < ROUTING_HDR_SIZE)
		return -1;
	r->step = get64(p);
	r->layer = get32(p + 8);
	r->tokens = get32(p + 12);
	r->k = get16(p + 16);
	r->id_bytes = p[18];
	r->flags = p[19];
	r->experts = get32(p + 20);
	r->ids = p + ROUTING_HDR_SIZE;
	if ((r->id_bytes != 1 && r->id_bytes != 2 && r->id_bytes != 4) ||
	    (r->flags & ~ROUTING_W_MASK))
		return -1;
	/* 64-bit product: tokens and k are both untrusted (< 2^48). */
	n = (uint64_t)r->tokens * r->k;
	if (n * (r->id_bytes + rec_routing_weight_bytes(r)) != len - ROUTING_HDR_SIZE)
		return -1;
	r->weights = r->flags & ROUTING_W_MASK ? r->ids + n * r->id_bytes : NULL;
	return 0;
}

unsigned rec_routing_weight_bytes(const struct rec_routing *r)
{
	static const unsigned bytes[] = {
		[ROUTING_W_NONE] = 0, [ROUTING_W_F32] = 4, [ROUTING_W_BF16] = 2, [ROUTING_W_F16] = 2
	};

	return bytes[r->flags & ROUTING_W_MASK];
}

/* IEEE binary16 to binary32, subnormals, infinities and NaNs included. */
static float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;

	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | man << 13;
	} else if (exp) {
		bits = sign | (exp + 112) << 23 | man << 13;
	} else {
		/* zero or subnormal: man x 2^-24, exact in a float */
		f = (float)man * 0x1p-24f;
		return sign ? -f : f;
	}
	memcpy(&f, &bits, sizeof f);
	return f;
}

float rec_routing_weight(const struct rec_routing *r, size_t i)
{
	uint32_t bits;
	float f;

	switch (r->flags & ROUTING_W_MASK) {
	case ROUTING_W_F32:
		bits = get32(r->weights + 4 * i);
		break;
	case ROUTING_W_BF16:
		bits = (uint32_t)get16(r->weights + 2 * i) << 16;
		break;
	case ROUTING_W_F16:
		return half_to_float(get16(r->weights + 2 * i));
	default:
		bits = 0x7fc00000u;	/* no weights: NaN, never a weight's look */
		break;
	}
	memcpy(&f, &bits, sizeof f);
	return f;
}

uint32_t rec_routing_id(const struct rec_routing *r, size_t i)
{
	const uint8_t *p = r->ids + i * r->id_bytes;

	switch (r->id_bytes) {
	case 1: return p[0];
	case 2: return get16(p);
	default: return get32(p);
	}
}

void rec_kvref_encode(uint8_t out[KVREF_PAYLOAD_SIZE], const struct rec_kvref *k)
{
	put32(out, k->pool);
	put32(out + 4, k->bytes);
	put64(out + 8, k->block);
	put64(out + 16, k->store_off);
	put64(out + 24, k->step);
	put32(out + 32, k->crc);
	put32(out + 36, k->flags);
}

int rec_kvref_decode(const uint8_t *p, size_t len, struct rec_kvref *k)
{
	if (len != KVREF_PAYLOAD_SIZE)
		return -1;
	k->pool = get32(p);
	k->bytes = get32(p + 4);
	k->block = get64(p + 8);
	k->store_off = get64(p + 16);
	k->step = get64(p + 24);
	k->crc = get32(p + 32);
	k->flags = get32(p + 36);
	return 0;
}

void rec_alloc_encode(uint8_t out[ALLOC_PAYLOAD_SIZE], const struct rec_alloc *a)
{
	put64(out, a->alloc_id);
	put64(out + 8, a->base);
	put64(out + 16, a->size);
	put64(out + 24, a->fingerprint);
	put32(out + 32, a->ordinal);
	put16(out + 36, a->api);
	put16(out + 38, a->role);
}

int rec_alloc_decode(const uint8_t *p, size_t len, struct rec_alloc *a)
{
	if (len != ALLOC_PAYLOAD_SIZE)
		return -1;
	a->alloc_id = get64(p);
	a->base = get64(p + 8);
	a->size = get64(p + 16);
	a->fingerprint = get64(p + 24);
	a->ordinal = get32(p + 32);
	a->api = get16(p + 36);
	a->role = get16(p + 38);
	return 0;
}

void rec_free_encode(uint8_t out[FREE_PAYLOAD_SIZE], const struct rec_free *f)
{
	put64(out, f->alloc_id);
	put64(out + 8, f->base);
}

int rec_free_decode(const uint8_t *p, size_t len, struct rec_free *f)
{
	if (len != FREE_PAYLOAD_SIZE)
		return -1;
	f->alloc_id = get64(p);
	f->base = get64(p + 8);
	return 0;
}

/* Async-signal-safe: no allocation, no locks, no library calls. */
size_t rec_crash_encode(uint8_t *out, size_t cap, const struct rec_crash *c)
{
	uint32_t n = c->nframes < CRASH_MAX_FRAMES ? c->nframes : CRASH_MAX_FRAMES;

	if (cap < CRASH_HDR_SIZE)
		return 0;
	if (n > (cap - CRASH_HDR_SIZE) / 8)
		n = (uint32_t)((cap - CRASH_HDR_SIZE) / 8);
	put32(out, (uint32_t)c->signo);
	put32(out + 4, (uint32_t)c->code);
	put64(out + 8, c->addr);
	put32(out + 16, c->pid);
	put32(out + 20, n);
	for (uint32_t i = 0; i < n; i++)
		put64(out + CRASH_HDR_SIZE + 8 * i, c->frames[i]);
	return CRASH_HDR_SIZE + 8 * (size_t)n;
}

int rec_crash_decode(const uint8_t *p, size_t len, struct rec_crash *c)
{
	if (len < CRASH_HDR_SIZE)
		return -1;
	c->signo = (int32_t)get32(p);
	c->code = (int32_t)get32(p + 4);
	c->addr = get64(p + 8);
	c->pid = get32(p + 16);
	c->nframes = get32(p + 20);
	if (c->nframes > CRASH_MAX_FRAMES || len != CRASH_HDR_SIZE + 8 * (size_t)c->nframes)
		return -1;
	for (uint32_t i = 0; i < c->nframes; i++)
		c->frames[i] = get64(p + CRASH_HDR_SIZE + 8 * i);
	return 0;
}

void rec_exit_encode(uint8_t out[EXIT_PAYLOAD_SIZE], const struct rec_exit *e)
{
	put32(out, e->pid);
}

int rec_exit_decode(const uint8_t *p, size_t len, struct rec_exit *e)
{
	if (len != EXIT_PAYLOAD_SIZE)
		return -1;
	e->pid = get32(p);
	return 0;
}

/* The id's bytes padded to whole u32 words. */
static size_t request_id_span(const struct rec_request *r)
{
	return ((size_t)r->id_len + 3) & ~(size_t)3;
}

/* Whether len bytes at p are printable ASCII. */
static int printable(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] < 0x20 || p[i] > 0x7e)
			return 0;
	return 1;
}

/* The bounds of rec_request's fields, whoever says them. */
static int request_ok(const struct rec_request *r)
{
	unsigned g;

	if (r->ntokens < 1 || r->ntokens > REQUEST_MAX_TOKENS || r->nprompt > r->ntokens ||
	    r->ncomputed > r->ntokens || r->block_tokens < 1 ||
	    r->block_tokens > REQUEST_MAX_BLOCK_TOKENS || r->id_len < 1 || r->ngroups < 1 ||
	    r->ngroups > REQUEST_MAX_GROUPS || (r->flags & ~REQUEST_FINISHED) ||
	    r->params_len > REQUEST_MAX_PARAMS || !printable(r->id, r->id_len) ||
	    (r->params_len && !printable(r->params, r->params_len)))
		return 0;
	for (g = 0; g < r->ngroups; g++)
		if (r->nblocks[g] > REQUEST_MAX_TOKENS ||
		    (uint64_t)r->nblocks[g] * r->block_tokens < r->ncomputed)
			return 0;
	return 1;
}

size_t rec_request_size(const struct rec_request *r)
{
	uint64_t n;
	unsigned g;

	if (!request_ok(r))
		return 0;
	n = REQUEST_HDR_SIZE + request_id_span(r) + 4u * r->ngroups + 4u * (uint64_t)r->ntokens +
	    r->params_len;
	for (g = 0; g < r->ngroups; g++)
		n += 4u * (uint64_t)r->nblocks[g];
	return (size_t)n;
}

size_t rec_request_encode(uint8_t *out, size_t cap, const struct rec_request *r,
			  const uint32_t *tokens, const uint32_t *const blocks[])
{
	size_t n = rec_request_size(r), at, i;
	unsigned g;

	if (!n || cap < n)
		return 0;
	memset(out, 0, REQUEST_HDR_SIZE + request_id_span(r));
	put64(out, r->step);
	put32(out + 8, r->ntokens);
	put32(out + 12, r->nprompt);
	put32(out + 16, r->ncomputed);
	put32(out + 20, r->block_tokens);
	out[24] = r->id_len;
	out[25] = r->ngroups;
	out[26] = r->flags;
	put32(out + 28, r->params_len);
	memcpy(out + REQUEST_HDR_SIZE, r->id, r->id_len);
	at = REQUEST_HDR_SIZE + request_id_span(r);
	for (g = 0; g < r->ngroups; g++, at += 4)
		put32(out + at, r->nblocks[g]);
	for (i = 0; i < r->ntokens; i++, at += 4)
		put32(out + at, tokens[i]);
	for (g = 0; g < r->ngroups; g++)
		for (i = 0; i < r->nblocks[g]; i++, at += 4)
			put32(out + at, blocks[g][i]);
	if (r->params_len)
		memcpy(out + at, r->params, r->params_len);
	return n;
}

int rec_request_decode(const uint8_t *p, size_t len, struct rec_request *r)
{
	size_t at, i;
	unsigned g;

	if (len < REQUEST_HDR_SIZE)
		return -1;
	memset(r, 0, sizeof *r);
	r->step = get64(p);
	r->ntokens = get32(p + 8);
	r->nprompt = get32(p + 12);
	r->ncomputed = get32(p + 16);
	r->block_tokens = get32(p + 20);
	r->id_len = p[24];
	r->ngroups = p[25];
	r->flags = p[26];
	r->params_len = get32(p + 28);
	if (p[27] || r->ngroups > REQUEST_MAX_GROUPS || r->params_len > REQUEST_MAX_PARAMS)
		return -1;
	at = REQUEST_HDR_SIZE + request_id_span(r);
	if (len < at + 4u * r->ngroups)
		return -1;
	for (i = REQUEST_HDR_SIZE + r->id_len; i < at; i++)
		if (p[i])
			return -1;	/* the id's padding is zeros */
	r->id = p + REQUEST_HDR_SIZE;
	for (g = 0; g < r->ngroups; g++, at += 4)
		r->nblocks[g] = get32(p + at);
	if (len - at < r->params_len)
		return -1;
	r->params = p + len - r->params_len;	/* its bytes: rec_request_size */
	if (rec_request_size(r) != len)
		return -1;
	r->tokens = p + at;
	at += 4u * (size_t)r->ntokens;
	for (g = 0; g < r->ngroups; g++) {
		r->blocks[g] = p + at;
		at += 4u * (size_t)r->nblocks[g];
	}
	return 0;
}

uint32_t rec_request_token(const struct rec_request *r, size_t i)
{
	return get32(r->tokens + 4 * i);
}

uint32_t rec_request_block(const struct rec_request *r, unsigned group, size_t i)
{
	return get32(r->blocks[group] + 4 * i);
}

void rec_window_steps_encode(uint8_t out[WINDOW_STEPS_SIZE], const struct rec_window_steps *s)
{
	put64(out, s->first_step);
	put32(out + 8, s->steps);
	put32(out + 12, s->tokens);
	put32(out + 16, s->flags);
	put32(out + 20, s->kv_chunks);
}

/* An intact window whose extra bytes are steps, at least one, numbered
 * without overflow. */
static int stepped_window(const struct wal_window *w, struct rec_window_steps *s)
{
	return w->state == WAL_WINDOW_INTACT &&
	       rec_window_steps_decode(w->extra, w->extra_len, s) == 0 && s->steps &&
	       s->first_step <= UINT64_MAX - s->steps;
}

int rec_decode_window(const struct wal_window *w, struct rec_window_steps *s)
{
	return stepped_window(w, s) && !(s->flags & WINDOW_REQUESTS);
}

int rec_requests_window(const struct wal_window *w, struct rec_window_steps *s)
{
	return stepped_window(w, s) && (s->flags & WINDOW_REQUESTS);
}

int rec_window_steps_decode(const uint8_t *p, size_t len, struct rec_window_steps *s)
{
	if (len != WINDOW_STEPS_SIZE)
		return -1;
	s->first_step = get64(p);
	s->steps = get32(p + 8);
	s->tokens = get32(p + 12);
	s->flags = get32(p + 16);
	s->kv_chunks = get32(p + 20);
	return 0;
}

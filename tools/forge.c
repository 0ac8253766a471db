/*
 * forge.c - logs and KV stores of a known state (see forge.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forge.h"
#include "record.h"

static void failed(struct forge *f, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Keep the first failure only: the later ones follow from it. */
static void failed(struct forge *f, int status, const char *fmt, ...)
{
	va_list ap;

	if (f->status)
		return;
	f->status = status ? status : WAL_EINVAL;
	va_start(ap, fmt);
	vsnprintf(f->msg, sizeof f->msg, fmt, ap);
	va_end(ap);
}

int forge_open(struct forge *f)
{
	struct wal_options opt;
	struct wal_error err = { 0 };
	struct wal_stats st;
	char kp[sizeof f->path + 3];    /* always fits */
	int ret;

	f->status = 0;
	f->msg[0] = '\0';
	wal_options_init(&opt);
	opt.size = f->log_size;
	opt.flags = WAL_OPEN_CREATE;
	if ((ret = wal_open(f->path, &opt, &f->w, &err)) < 0) {
		failed(f, ret, "wal_open: %s", err.msg);
		return ret;
	}
	wal_stats(f->w, &st);
	kvs_path(f->path, kp, sizeof kp);
	if ((ret = kvs_open(kp, st.log_id, -1, st.open_window, &f->kv, &err)) < 0) {
		failed(f, ret, "kvs_open: %s", err.msg);
		wal_close(f->w);
		f->w = NULL;
	}
	return ret;
}

int forge_close(struct forge *f)
{
	kvs_close(f->kv);
	wal_close(f->w);
	f->kv = NULL;
	f->w = NULL;
	return f->status;
}

uint64_t forge_open_window(const struct forge *f)
{
	struct wal_stats st;

	if (f->status)
		return 0;
	wal_stats(f->w, &st);
	return st.open_window;
}

static void append(struct forge *f, unsigned type, const void *p, uint32_t len)
{
	int64_t ret;

	if (!f->status && (ret = wal_append(f->w, type, p, len)) < 0)
		failed(f, (int)ret, "wal_append of a %s record: %s", wal_rec_type_name(type),
		       wal_strerror((int)ret));
}

uint64_t forge_commit(struct forge *f, uint64_t first_step, uint32_t steps, uint32_t flags)
{
	struct rec_window_steps ws = { .first_step = first_step, .steps = steps, .flags = flags };
	uint8_t extra[WINDOW_STEPS_SIZE];
	struct wal_commit_info ci;
	int ret;

	if (f->status)
		return 0;
	rec_window_steps_encode(extra, &ws);
	if ((ret = wal_commit(f->w, extra, sizeof extra, &ci)) < 0) {
		failed(f, ret, "wal_commit: %s", wal_strerror(ret));
		return 0;
	}
	return ci.window;
}

void forge_request(struct forge *f, const char *id, uint64_t step, uint32_t ntokens,
		   uint32_t ncomputed)
{
	struct rec_request r = { .step = step, .ntokens = ntokens, .nprompt = ntokens / 2,
				 .ncomputed = ncomputed, .block_tokens = 4,
				 .id_len = (uint8_t)strlen(id), .ngroups = 1,
				 .id = (const uint8_t *)id, .nblocks = { (ncomputed + 3) / 4 } };
	uint32_t *tokens = malloc(((size_t)ntokens + r.nblocks[0] + 1) * sizeof *tokens);
	const uint32_t *blocks[1];
	uint8_t *p;
	size_t len = rec_request_size(&r);

	if (f->status)
		goto out;
	if (!tokens || !len || !(p = malloc(len))) {
		failed(f, WAL_ENOMEM, "forge_request %s: out of memory or out of bounds", id);
		goto out;
	}
	for (uint32_t i = 0; i < ntokens; i++)
		tokens[i] = i + 1;
	for (uint32_t i = 0; i < r.nblocks[0]; i++)
		tokens[ntokens + i] = 100 + i;
	blocks[0] = tokens + ntokens;
	rec_request_encode(p, len, &r, tokens, blocks);
	append(f, WAL_REC_REQUEST, p, (uint32_t)len);
	free(p);
out:
	free(tokens);
}

uint64_t forge_alloc(struct forge *f, uint64_t id, uint64_t size, uint32_t ordinal, int role)
{
	struct rec_alloc a = { .alloc_id = id, .base = 0x1000 * id, .size = size,
			       .fingerprint = f->fingerprint, .ordinal = ordinal,
			       .api = ALLOC_API_CUDA_MALLOC, .role = (uint16_t)role };
	uint8_t p[ALLOC_PAYLOAD_SIZE];

	rec_alloc_encode(p, &a);
	append(f, WAL_REC_ALLOC, p, sizeof p);
	return forge_commit(f, 0, 0, 0);
}

void forge_free(struct forge *f, uint64_t id)
{
	struct rec_free fr = { .alloc_id = id, .base = 0x1000 * id };
	uint8_t p[FREE_PAYLOAD_SIZE];

	rec_free_encode(p, &fr);
	append(f, WAL_REC_FREE, p, sizeof p);
	forge_commit(f, 0, 0, 0);
}

uint32_t forge_pool(struct forge *f, uint64_t size, uint32_t ordinal)
{
	struct kvs_pool_desc d = { .fingerprint = f->fingerprint, .size = size,
				   .chunk_bytes = f->chunk_bytes, .ordinal = ordinal };
	uint32_t no = 0;
	int ret;

	if (!f->status && (ret = kvs_pool(f->kv, &d, &no)) < 0)
		failed(f, ret, "kvs_pool of %llu bytes: %s", (unsigned long long)size,
		       wal_strerror(ret));
	return f->status ? 0 : no;
}

void forge_kvref(struct forge *f, uint32_t no, uint64_t chunk, uint32_t len, uint64_t off,
		 uint32_t crc)
{
	struct rec_kvref k = { .pool = no, .bytes = len, .block = chunk, .store_off = off,
			       .crc = crc };
	uint8_t p[KVREF_PAYLOAD_SIZE];

	rec_kvref_encode(p, &k);
	append(f, WAL_REC_KVREF, p, sizeof p);
}

void forge_put(struct forge *f, uint32_t no, uint64_t chunk, const void *data, uint32_t len)
{
	uint64_t off;
	uint32_t crc;
	int ret;

	if (f->status)
		return;
	if ((ret = kvs_put(f->kv, no, chunk, data, len, forge_open_window(f), &off, &crc)) < 0) {
		failed(f, ret, "kvs_put of pool %u chunk %llu: %s", (unsigned)no,
		       (unsigned long long)chunk, wal_strerror(ret));
		return;
	}
	forge_kvref(f, no, chunk, len, off, crc);
}

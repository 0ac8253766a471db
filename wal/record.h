/*
 * record.h - payload layouts of the record types the preload writes.
 *
 * Each type has a fixed little-endian layout (documented in FORMAT.md) and
 * an encoder/decoder pair.  Decoders take untrusted bytes: they check the
 * length and the internal consistency and return 0, or -1 when the payload
 * cannot be what its type says.
 */
#ifndef MOEFT_RECORD_H
#define MOEFT_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "ident.h"

#define EPOCH_PAYLOAD_SIZE 24u
struct rec_epoch {
	uint32_t prev_epoch;
	uint32_t pid;
	uint64_t prev_commit_lsn;
	uint64_t start_ns;
};

/* Top-k expert ids of one layer at one decode step: tokens x k ids, and
 * the router's gating weights beside them where the rule could see them. */
#define ROUTING_HDR_SIZE 24u
struct rec_routing {
	uint64_t step;
	uint32_t layer;
	uint32_t tokens;
	uint16_t k;
	uint8_t id_bytes;       /* 1, 2 or 4 */
	uint8_t flags;          /* bits 0-1: enum routing_weights; others 0 */
	uint32_t experts;       /* experts in the layer (ids are < experts) */
	const uint8_t *ids;     /* tokens * k * id_bytes bytes, little-endian */
	const uint8_t *weights; /* tokens * k weights after the ids, or NULL */
};

/* The weights' type, as the router wrote them; NONE: the rule that saw the
 * launch names no weights (the record has ids only). */
enum routing_weights {
	ROUTING_W_NONE = 0, ROUTING_W_F32 = 1, ROUTING_W_BF16 = 2, ROUTING_W_F16 = 3
};
#define ROUTING_W_MASK 3u

/* A KV block written in a window, and where its bytes sit in the KV store. */
#define KVREF_PAYLOAD_SIZE 40u
struct rec_kvref {
	uint32_t pool;          /* allocation id of the KV pool */
	uint32_t bytes;         /* block size */
	uint64_t block;         /* block index within the pool */
	uint64_t store_off;     /* byte offset of the copy in the KV store */
	uint64_t step;          /* step that last wrote it */
	uint32_t crc;           /* CRC-32C of the block's bytes */
	uint32_t flags;
};

/* The call that made an allocation, and what it holds: the values of
 * rec_alloc.api and .role (they are logged, so they never change). */
enum alloc_api {
	ALLOC_API_CUDA_MALLOC = 1,
	ALLOC_API_CUDA_MALLOC_ASYNC = 2,
	ALLOC_API_CUDA_MALLOC_FROM_POOL_ASYNC = 3,
	ALLOC_API_CUDA_MALLOC_MANAGED = 4,
	ALLOC_API_CUDA_MALLOC_PITCH = 5,   /* also cudaMalloc3D */
	ALLOC_API_CU_MEM_ALLOC = 6,
	ALLOC_API_CU_MEM_ALLOC_ASYNC = 7,
	ALLOC_API_CU_MEM_ALLOC_FROM_POOL_ASYNC = 8,
	ALLOC_API_CU_MEM_ALLOC_MANAGED = 9,
	ALLOC_API_CU_MEM_ALLOC_PITCH = 10,
	ALLOC_API_VMM = 11,                /* cuMemCreate + cuMemMap */
	ALLOC_API_ADAPTER = 12,            /* host memory an engine adapter
					      registered (moeft_kv_pool) */
	ALLOC_API_COUNT
};

/* What the preload has learned an allocation holds. */
enum alloc_role {
	ALLOC_ROLE_OTHER = 0,
	ALLOC_ROLE_KV_POOL = 1,    /* a KV-write rule points into it */
	ALLOC_ROLE_WEIGHTS = 2,
	ALLOC_ROLE_WORKSPACE = 3,
	ALLOC_ROLE_COUNT
};

/* A device allocation, matched across processes by fingerprint. */
#define ALLOC_PAYLOAD_SIZE 40u
struct rec_alloc {
	uint64_t alloc_id;
	uint64_t base;
	uint64_t size;
	uint64_t fingerprint;   /* hash of the call site */
	uint32_t ordinal;       /* lowest not held by a live allocation of equal
				   fingerprint and size */
	uint16_t api;           /* enum alloc_api */
	uint16_t role;          /* enum alloc_role */
};

static inline struct alloc_ident rec_alloc_ident(const struct rec_alloc *a)
{
	return (struct alloc_ident){ a->fingerprint, a->size, a->ordinal };
}

#define FREE_PAYLOAD_SIZE 16u
struct rec_free {
	uint64_t alloc_id;
	uint64_t base;
};

#define CRASH_HDR_SIZE 24u
#define CRASH_MAX_FRAMES 64u
struct rec_crash {
	int32_t signo;
	int32_t code;
	uint64_t addr;
	uint32_t pid;
	uint32_t nframes;
	uint64_t frames[CRASH_MAX_FRAMES];
};

/* A writer's clean end (wal_end): the process that exited. */
#define EXIT_PAYLOAD_SIZE 4u
struct rec_exit {
	uint32_t pid;
};

/*
 * An engine request as of a step: its id (printable ASCII, as engines make
 * them), its token ids (the prompt, then
 * what it generated), how many of them have KV in its blocks, and its KV
 * block ids in order, per KV cache group (a model with one kind of
 * attention has one group).  Every count is bounded so that a record fits
 * in a ring (REQUEST_MAX_*); each group's blocks hold the computed tokens.
 * Last, what the engine needs to send it again (its sampling parameters),
 * printable ASCII the log does not interpret.
 */
#define REQUEST_HDR_SIZE 32u
#define REQUEST_MAX_ID 255u
#define REQUEST_MAX_GROUPS 8u
#define REQUEST_MAX_TOKENS (1u << 22)
#define REQUEST_MAX_BLOCK_TOKENS (1u << 16)
#define REQUEST_MAX_PARAMS 4096u
#define REQUEST_FINISHED 1u     /* flags: the engine finished it at step */

struct rec_request {
	uint64_t step;
	uint32_t ntokens;        /* 1 to REQUEST_MAX_TOKENS */
	uint32_t nprompt;        /* <= ntokens */
	uint32_t ncomputed;      /* <= ntokens */
	uint32_t block_tokens;   /* tokens per block, 1 to REQUEST_MAX_BLOCK_TOKENS */
	uint8_t id_len;          /* 1 to REQUEST_MAX_ID bytes */
	uint8_t ngroups;         /* 1 to REQUEST_MAX_GROUPS */
	uint8_t flags;           /* REQUEST_FINISHED */
	const uint8_t *id;
	uint32_t nblocks[REQUEST_MAX_GROUPS];
	const uint8_t *tokens;   /* ntokens little-endian u32 (rec_request_token) */
	const uint8_t *blocks[REQUEST_MAX_GROUPS]; /* nblocks[g] u32 each */
	uint32_t params_len;     /* 0 to REQUEST_MAX_PARAMS */
	const uint8_t *params;   /* params_len bytes of printable ASCII */
};

/* Caller bytes of a WINDOW record: the decode steps the window covers.
 * steps == 0: not a decode window (allocation events). */
#define WINDOW_STEPS_SIZE 24u
struct rec_window_steps {
	uint64_t first_step;
	uint32_t steps;
	uint32_t tokens;        /* rows the window's steps decoded */
	uint32_t flags;         /* enum window_flag */
	uint32_t kv_chunks;     /* KVREF records in the window */
};

/* What a decode window lacks; 0: it is whole. */
enum window_flag {
	WINDOW_ROUTING_GAP = 1u << 0, /* routing was dropped (ring full, unplaced) */
	WINDOW_KV_PARTIAL = 1u << 1,  /* changed KV chunks were left for a later
					 window (staging full, store error) */
	WINDOW_REQUESTS = 1u << 2     /* an engine adapter's window: the REQUEST
					 records of every request running at
					 its last step (and in a writer's
					 first window its EPOCH record) */
};

void rec_epoch_encode(uint8_t out[EPOCH_PAYLOAD_SIZE], const struct rec_epoch *e);
int rec_epoch_decode(const uint8_t *p, size_t len, struct rec_epoch *e);

/* Encodes the header only; the ids follow it in the payload. */
void rec_routing_encode(uint8_t out[ROUTING_HDR_SIZE], const struct rec_routing *r);
int rec_routing_decode(const uint8_t *p, size_t len, struct rec_routing *r);
uint32_t rec_routing_id(const struct rec_routing *r, size_t i);
/* Bytes of one weight of the record: 4, 2, or 0 without weights. */
unsigned rec_routing_weight_bytes(const struct rec_routing *r);
/* Weight i (i < tokens * k) of a record with weights, as a float. */
float rec_routing_weight(const struct rec_routing *r, size_t i);

void rec_kvref_encode(uint8_t out[KVREF_PAYLOAD_SIZE], const struct rec_kvref *k);
int rec_kvref_decode(const uint8_t *p, size_t len, struct rec_kvref *k);

void rec_alloc_encode(uint8_t out[ALLOC_PAYLOAD_SIZE], const struct rec_alloc *a);
int rec_alloc_decode(const uint8_t *p, size_t len, struct rec_alloc *a);

void rec_free_encode(uint8_t out[FREE_PAYLOAD_SIZE], const struct rec_free *f);
int rec_free_decode(const uint8_t *p, size_t len, struct rec_free *f);

/* Returns the encoded length: CRASH_HDR_SIZE + 8 * nframes. */
size_t rec_crash_encode(uint8_t *out, size_t cap, const struct rec_crash *c);
int rec_crash_decode(const uint8_t *p, size_t len, struct rec_crash *c);

void rec_exit_encode(uint8_t out[EXIT_PAYLOAD_SIZE], const struct rec_exit *e);
int rec_exit_decode(const uint8_t *p, size_t len, struct rec_exit *e);

/* The encoded length of r (its counts), or 0 when r breaks a bound. */
size_t rec_request_size(const struct rec_request *r);
/* Encode r, its id r->id, its tokens tokens[r->ntokens] and its blocks
 * blocks[g][r->nblocks[g]] (r's tokens and blocks pointers are the
 * decoder's, unused here) into out: the length, or 0 when r breaks a
 * bound or out has fewer than rec_request_size bytes. */
size_t rec_request_encode(uint8_t *out, size_t cap, const struct rec_request *r,
			  const uint32_t *tokens, const uint32_t *const blocks[]);
/* 0 with r's pointers into p, or -1: a length that disagrees with the
 * counts, a bound broken, unknown flags, a group whose blocks cannot hold
 * the computed tokens. */
int rec_request_decode(const uint8_t *p, size_t len, struct rec_request *r);
uint32_t rec_request_token(const struct rec_request *r, size_t i);
uint32_t rec_request_block(const struct rec_request *r, unsigned group, size_t i);

void rec_window_steps_encode(uint8_t out[WINDOW_STEPS_SIZE], const struct rec_window_steps *s);
int rec_window_steps_decode(const uint8_t *p, size_t len, struct rec_window_steps *s);

/* Whether w is a decode window: intact, its extra bytes are a window's
 * steps, at least one, numbered without overflow, not an adapter's.  1
 * with *s filled, or 0 (a window of allocation events, a crash handler's,
 * an adapter's, a damaged one). */
struct wal_window;
int rec_decode_window(const struct wal_window *w, struct rec_window_steps *s);
/* The same for an engine adapter's window (WINDOW_REQUESTS). */
int rec_requests_window(const struct wal_window *w, struct rec_window_steps *s);

#endif

/*
 * forge.h - a log and its KV store written through the writers' own API,
 * as the preload would leave them: allocations, KV pools, chunk copies
 * with their KVREF records, decode windows.  The restore tests and
 * 'moeft bench restore' need logs of a known state without a GPU.
 *
 * The first failure sticks: later calls do nothing (those returning a
 * value return 0), and forge_close() returns it with f->msg naming the
 * call, so a forging sequence is checked once, at its end.
 */
#ifndef MOEFT_FORGE_H
#define MOEFT_FORGE_H

#include <stdint.h>

#include "kvstore.h"
#include "wal.h"

struct forge {
	char path[512];         /* the log; its store is path + ".kv" */
	uint64_t log_size;      /* bytes of a new log (wal_options.size) */
	uint64_t fingerprint;   /* call site of every allocation and pool */
	uint64_t chunk_bytes;   /* chunk size of every pool */
	struct wal *w;
	struct kvs *kv;
	int status;             /* the first failure (a wal_status); 0: none */
	char msg[384];
};

/* Open the log at f->path (created when missing) and its store, as a new
 * writer epoch; f->status is reset first.  0 or a wal_status. */
int forge_open(struct forge *f);
/* Close both (an open window stays uncommitted, as after a crash);
 * f->status. */
int forge_close(struct forge *f);

/* The id the next commit will get: the window kvs_put copies belong to. */
uint64_t forge_open_window(const struct forge *f);

/* Commit what was appended: a decode window of `steps` steps from
 * first_step (flags: enum window_flag) when steps > 0.  Its id. */
uint64_t forge_commit(struct forge *f, uint64_t first_step, uint32_t steps, uint32_t flags);

/* A REQUEST record in the open window: request id as of step, ntokens
 * tokens (1, 2, ...; the first half the prompt), ncomputed of them in
 * blocks of 4 tokens (ids 100, 101, ...), one group.  Commit the window
 * with WINDOW_REQUESTS to make it an adapter's. */
void forge_request(struct forge *f, const char *id, uint64_t step, uint32_t ntokens,
		   uint32_t ncomputed);

/* An ALLOC record of allocation id (base 0x1000 * id, cudaMalloc) in a
 * window of its own, as the preload logs one.  That window's id. */
uint64_t forge_alloc(struct forge *f, uint64_t id, uint64_t size, uint32_t ordinal, int role);
/* A FREE record of allocation id, in a window of its own. */
void forge_free(struct forge *f, uint64_t id);

/* The store's pool of an allocation of (size, ordinal): its number. */
uint32_t forge_pool(struct forge *f, uint64_t size, uint32_t ordinal);

/* A KVREF record in the open window, saying what the caller wants. */
void forge_kvref(struct forge *f, uint32_t no, uint64_t chunk, uint32_t len, uint64_t off,
		 uint32_t crc);
/* len bytes of chunk `chunk` of pool no into the store for the open
 * window, and the KVREF record that refers to them. */
void forge_put(struct forge *f, uint32_t no, uint64_t chunk, const void *data, uint32_t len);

#endif

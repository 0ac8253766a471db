/*
 * reqindex.h - the restore index of an engine's requests: the file
 * `moeft restore` writes beside the plan with the requests of the window
 * it restores, and the question restore mode asks of it for the engine's
 * connector: of a token sequence, how many leading tokens does a restored
 * request hold the KV of, and in which blocks.  Writer and parser live
 * here together (as plan.h); no CUDA, so tools link it.
 *
 * The file, little-endian:
 *
 *	"MOEFTRQ1"                          8 bytes
 *	log id, window, first step, last step    u64 each
 *	requests                            u32, then 4 zero bytes
 *	per request: length u32, then a REQUEST payload of that length
 *	    (wal/FORMAT.md), then zeros to a multiple of 4 bytes
 *	CRC-32C of all the bytes before it  u32
 *
 * Nothing after the CRC.  Every payload decodes, no two share an id,
 * first step <= last step, at most REQINDEX_MAX_REQUESTS requests.  The
 * window is the log's adapter window the requests are of, the plan's
 * window too: restore mode takes an index only with its plan's log id,
 * window and last step.
 */
#ifndef MOEFT_REQINDEX_H
#define MOEFT_REQINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "record.h"

#define REQINDEX_NAME "requests"         /* in moeft restore's directory */
#define REQINDEX_MAGIC "MOEFTRQ1"
#define REQINDEX_HDR_SIZE 48u
#define REQINDEX_MAX_REQUESTS (1u << 20)

struct reqindex {
	uint64_t log_id, window, first_step, last_step;
	size_t n;
	struct rec_request *reqs;       /* n, pointing into the parsed bytes */
};

/* Whether n REQUEST payloads can be indexed: each decodes, no two share
 * an id, at most REQINDEX_MAX_REQUESTS.  1, 0, or -1 out of memory. */
int reqindex_indexable(const uint8_t *const payloads[], const uint32_t lens[], size_t n);

/*
 * The file of x's header and the n REQUEST payloads (payloads[i], lens[i]
 * bytes each; x's reqs are not read) into out: its length, or 0 when a
 * payload does not decode, two share an id, the steps are out of order, n
 * is too large, or cap (out may be NULL with cap 0 to ask) is short of it.
 */
size_t reqindex_format(uint8_t *out, size_t cap, const struct reqindex *x,
		       const uint8_t *const payloads[], const uint32_t lens[], size_t n);

/* Parse len bytes into x, whose requests point into buf (keep it): 0, or
 * -1 with err saying what is wrong and x empty. */
int reqindex_parse(const uint8_t *buf, size_t len, struct reqindex *x, char *err,
		   size_t errlen);
void reqindex_free(struct reqindex *x);

/*
 * Of tokens[n], the leading tokens whose KV a request of x holds: the
 * longest common prefix with a request's token ids, no more than its
 * computed tokens nor n - 1 (the engine computes at least the last token
 * itself), rounded down to whole blocks.  Returns that count, with *req
 * the request (the first of equals); 0 and *req NULL when none holds a
 * whole block of it.
 */
size_t reqindex_match(const struct reqindex *x, const uint32_t *tokens, size_t n,
		      const struct rec_request **req);

#endif

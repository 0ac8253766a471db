/*
 * fuzz_reqindex.c - libFuzzer target: parse any bytes as a request index
 * (preload/reqindex.h), as restore mode reads the file.
 *
 * A mutation almost never keeps the file's CRC right, which would stop
 * the parser at its first check: the target parses the input as it is,
 * then again with its last 4 bytes made the CRC of the rest, so that
 * every later check is reached.
 *
 * ASan and UBSan watch the parser; the target checks that a refusal says
 * why and leaves nothing, and that what is accepted holds what the format
 * promises: requests within the bounds, no two of one id, and each one's
 * own tokens matched by the index to a whole number of its blocks, no
 * more than it computed.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "format.h"
#include "reqindex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t tokens[REQUEST_MAX_TOKENS];

static void check(const uint8_t *data, size_t size)
{
	const struct rec_request *hit;
	struct reqindex x;
	char err[200] = "";
	size_t i, k, got;

	if (reqindex_parse(data, size, &x, err, sizeof err) < 0) {
		if (!err[0] || x.reqs || x.n)
			abort();
		return;
	}
	if (x.n > REQINDEX_MAX_REQUESTS || x.first_step > x.last_step)
		abort();
	for (i = 0; i < x.n; i++) {
		const struct rec_request *r = &x.reqs[i];

		if (i && r->id_len == x.reqs[i - 1].id_len &&
		    !memcmp(r->id, x.reqs[i - 1].id, r->id_len))
			abort();
		for (k = 0; k < r->ntokens; k++)
			tokens[k] = rec_request_token(r, k);
		got = reqindex_match(&x, tokens, r->ntokens, &hit);
		if (got >= r->ntokens || (got && (!hit || got % hit->block_tokens ||
						  got > hit->ncomputed)))
			abort();
	}
	reqindex_free(&x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *fixed;

	check(data, size);
	if (size < 4 || !(fixed = malloc(size)))
		return 0;
	memcpy(fixed, data, size);
	put32(fixed + size - 4, crc32c(0, fixed, size - 4));
	check(fixed, size);
	free(fixed);
	return 0;
}

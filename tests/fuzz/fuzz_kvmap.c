/*
 * fuzz_kvmap.c - libFuzzer target: parse any bytes as a pool's chunk map
 * (preload/kvmap.h), against a store of 1 GiB.
 *
 * ASan and UBSan watch the parser; the target checks that a refusal
 * says why and leaves no entries, and that what is accepted is written
 * back by the writer byte for byte (the format has one spelling).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STORE (UINT64_C(1) << 30)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvmap m;
	char err[200] = "";
	uint8_t *back;
	FILE *f;

	if (kvmap_parse(data, size, STORE, &m, err, sizeof err) < 0) {
		if (!err[0] || m.e || m.nchunks)
			abort();
		return 0;
	}
	if (!(back = malloc(size + 1)) || !(f = fmemopen(back, size + 1, "w")))
		abort();
	setvbuf(f, NULL, _IONBF, 0);
	if (kvmap_write(f, &m, STORE, err, sizeof err) < 0 || (size_t)ftell(f) != size ||
	    memcmp(back, data, size) != 0)
		abort();
	fclose(f);
	free(back);
	kvmap_free(&m);
	return 0;
}

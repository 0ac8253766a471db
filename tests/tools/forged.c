/*
 * forged.c - a log and its KV store for the CLI's tests, made with the
 * writers' own API (tools/forge.h): one KV pool of two 4 KiB chunks, both
 * written in one committed decode window of 4 steps, with the routing of
 * one token to experts 1 and 2 of 4 (so that there is a heatmap to draw).
 *
 * Usage: forged PATH      (the store is PATH.kv)
 * Exit status 0, or 1 with the failing call on stderr.
 */
#include <stdio.h>
#include <string.h>

#include "forge.h"
#include "record.h"

#define CHUNK 4096u

int main(int argc, char **argv)
{
	static uint8_t data[CHUNK];
	struct rec_routing r = { .step = 0, .tokens = 1, .k = 2, .id_bytes = 1, .experts = 4 };
	uint8_t route[ROUTING_HDR_SIZE + 2] = { [ROUTING_HDR_SIZE] = 1, 2 };
	struct forge f = { .log_size = 1u << 20, .fingerprint = 0x5eed, .chunk_bytes = CHUNK };
	uint32_t no;

	if (argc != 2 || strlen(argv[1]) >= sizeof f.path) {
		fprintf(stderr, "usage: forged PATH\n");
		return 1;
	}
	strcpy(f.path, argv[1]);
	memset(data, 0xa5, sizeof data);
	forge_open(&f);
	forge_alloc(&f, 1, 2 * CHUNK, 0, ALLOC_ROLE_OTHER);
	no = forge_pool(&f, 2 * CHUNK, 0);
	forge_alloc(&f, 1, 2 * CHUNK, 0, ALLOC_ROLE_KV_POOL);
	forge_put(&f, no, 0, data, CHUNK);
	forge_put(&f, no, 1, data, CHUNK);
	rec_routing_encode(route, &r);
	if (f.w && wal_append(f.w, WAL_REC_ROUTING, route, sizeof route) < 0) {
		fprintf(stderr, "forged: cannot append the routing\n");
		return 1;
	}
	forge_commit(&f, 0, 4, 0);
	if (forge_close(&f) < 0) {
		fprintf(stderr, "forged: %s\n", f.msg);
		return 1;
	}
	return 0;
}

/*
 * fuzz_shmlist.c - libFuzzer target for the lists of shared-memory files
 * found beside the logs (wal/shmlist.h): a list's bytes, and its file name
 * from the first line, must never crash the reader, and every name it
 * gives must pass the check it claims.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shmlist.h"

static void check(void *arg, const char *name)
{
	(void)arg;
	if (!shmlist_transient(name) || strchr(name, '/'))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1), name[96];
	struct shmlist_owner o;
	size_t n;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	shmlist_each(buf, size, check, NULL);
	n = size < sizeof name - 1 ? size : sizeof name - 1;
	memcpy(name, data, n);
	name[n] = '\0';
	if (shmlist_parse_name(name, &o) == 0 && (o.pid <= 0 || o.pgid <= 0))
		abort();
	free(buf);
	return 0;
}

/*
 * dump_tables.c - the kernels of a cubin, fatbin or library as devcode.c
 * reads them, one line each: mangled name, architecture and table in a
 * corpus file's form (ORDINAL:OFFSET:SIZE ..., '-' for none), so that
 * check.sh can compare them with what cuobjdump read from the wheels.
 *
 * Usage: dump_tables FILE
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "devcode.h"

static int print_kernel(const struct devcode_kernel *k, void *arg)
{
	(void)arg;
	printf("%s\tsm_%u\t", k->name, k->sm);
	for (unsigned i = 0; i < k->nparams; i++)
		printf("%s%u:%u:%u", i ? " " : "", i, k->offsets[i], k->sizes[i]);
	printf("%s\n", k->nparams ? "" : "-");
	return 0;
}

int main(int argc, char **argv)
{
	struct devcode_file f;
	char why[400];
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: dump_tables FILE\n");
		return 2;
	}
	if ((fd = open(argv[1], O_RDONLY)) < 0) {
		perror(argv[1]);
		return 2;
	}
	if (devcode_read(fd, print_kernel, NULL, &f, why, sizeof why)) {
		fprintf(stderr, "%s: %s\n", argv[1], why);
		return 1;
	}
	close(fd);
	return 0;
}

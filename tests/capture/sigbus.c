/*
 * sigbus.c - an application's own SIGBUS under the preload: it must reach
 * the application's handler or disposition as if moeft were not there.
 *
 * Usage: sigbus FILE default|handler
 * Starts the preload (a CUDA call), maps FILE (made here, one page),
 * truncates it and reads the page: SIGBUS outside moeft's mappings.  With
 * "handler" its own handler, installed first, says so and exits 42.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>

static void own(int sig)
{
	static const char line[] = "sigbus: own handler\n";

	(void)sig;
	(void)!write(STDERR_FILENO, line, sizeof line - 1);
	_exit(42);
}

int main(int argc, char **argv)
{
	volatile const char *page;
	void *dev;
	int fd;

	if (argc != 3 || (strcmp(argv[2], "default") && strcmp(argv[2], "handler"))) {
		fprintf(stderr, "usage: sigbus FILE default|handler\n");
		return 2;
	}
	if (!strcmp(argv[2], "handler"))
		signal(SIGBUS, own);
	if (cudaMalloc(&dev, 4096) != cudaSuccess) {
		fprintf(stderr, "sigbus: cudaMalloc failed\n");
		return 1;
	}
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, 4096) < 0) {
		perror(argv[1]);
		return 1;
	}
	page = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	if (page == MAP_FAILED || ftruncate(fd, 0) < 0) {
		perror(argv[1]);
		return 1;
	}
	return page[0]; /* SIGBUS */
}

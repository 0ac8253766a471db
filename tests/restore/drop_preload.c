/*
 * drop_preload.c - a wrapper that runs its command without LD_PRELOAD, as
 * `env -u LD_PRELOAD` does, built with the tests (so that the sanitizer
 * build's preload can load into it, which a system binary cannot).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: drop_preload CMD [ARGS...]\n");
		return 2;
	}
	unsetenv("LD_PRELOAD");
	execvp(argv[1], argv + 1);
	perror(argv[1]);
	return 127;
}

/*
 * privcall.c - loads privuser.so as Python loads an extension module
 * (dlopen, RTLD_LOCAL: its private runtime stays out of the global scope)
 * and calls it; linked to no runtime of its own.
 *
 * Usage: privcall PRIVUSER.so   (exit status: the CUDA error, 0 for none)
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	int (*run)(void);
	void *h;
	int rc;

	if (argc != 2 || !(h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "privcall: %s\n", argc == 2 ? dlerror() : "usage: privcall SO");
		return 100;
	}
	*(void **)&run = dlsym(h, "privuser_alloc");
	if (!run) {
		fprintf(stderr, "privcall: %s\n", dlerror());
		return 100;
	}
	rc = run();
	printf("privcall: %d\n", rc);
	return rc;
}

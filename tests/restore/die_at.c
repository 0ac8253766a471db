/*
 * die_at.c - an LD_PRELOAD library that kills the process in the middle of
 * its renames: the DIE_AT_RENAME-th call to renameat is carried out, then
 * the process ends at once (_exit 9), as a kill -9 would leave it.  For
 * the restore directory's consistency test (dir.sh).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
	static int calls;
	int (*real)(int, const char *, int, const char *);
	const char *at = getenv("DIE_AT_RENAME");
	void *p = dlsym(RTLD_NEXT, "renameat");
	int r;

	if (!p)
		_exit(8);
	*(void **)&real = p;
	r = real(olddirfd, oldpath, newdirfd, newpath);
	if (at && __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST) == atoi(at))
		_exit(9);
	return r;
}

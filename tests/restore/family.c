/*
 * family.c - a server's processes as moeft run finds them after a crash,
 * for run.sh: one child stays in the process group and maps a shared
 * memory file in /dev/shm as Python's multiprocessing names them
 * (psm_*); another leaves the group (setsid), as a daemonising helper
 * would.  Then all three wait to be killed.
 *
 * Usage: family PIDS   (PIDS gets "GROUP_CHILD ESCAPED_CHILD SHM_NAME",
 *                      once the file's pages are written)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#define SIZE (1 << 20)

static void die(const char *what)
{
	perror(what);
	exit(2);
}

int main(int argc, char **argv)
{
	char shm[64], path[96], tmp[4096];
	pid_t group, escaped;
	int fd, ready[2];
	FILE *f;
	char c;

	if (argc != 2 || strlen(argv[1]) + 8 > sizeof tmp) {
		fprintf(stderr, "usage: family PIDS\n");
		return 2;
	}
	snprintf(shm, sizeof shm, "psm_moeft_family_%d", (int)getpid());
	snprintf(path, sizeof path, "/dev/shm/%s", shm);
	if ((fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
		die(path);
	if (ftruncate(fd, SIZE) < 0 || pipe(ready) < 0)
		die("ftruncate");
	if ((group = fork()) == 0) {
		char *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

		if (p == MAP_FAILED)
			die("mmap");
		memset(p, 1, SIZE);	/* pages the kill would leave behind */
		close(fd);
		if (write(ready[1], "r", 1) != 1)
			die("write");
		for (;;)
			pause();
	}
	close(fd);
	close(ready[1]);
	if (group < 0 || read(ready[0], &c, 1) != 1)
		die("the grouped child");
	if ((escaped = fork()) == 0) {
		setsid();
		for (;;)
			pause();
	}
	if (group < 0 || escaped < 0)
		die("fork");
	snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
	if (!(f = fopen(tmp, "w")) || fprintf(f, "%d %d %s\n", (int)group, (int)escaped, shm) < 0 ||
	    fclose(f) != 0 || rename(tmp, argv[1]) < 0)
		die(argv[1]);
	for (;;)
		pause();
}

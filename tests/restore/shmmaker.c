/*
 * shmmaker.c - a process that makes shared memory as a Python server's
 * processes do (shm_open and sem_open, O_CREAT | O_EXCL), for shm.sh.
 *
 * Usage: shmmaker TAG READY ACTION...
 *   shm NAME      shm_open("/NAME"), 64 KiB of pages written, closed
 *   sem NAME      sem_open("/NAME"), closed (its file is sem.NAME)
 *   gone NAME     shm_open("/NAME"), then shm_unlink
 *   open NAME     shm_open("/NAME") without O_EXCL: not this process's
 *   churn N       N times: shm_open a torch_ name, then shm_unlink it
 *   child NAME    a child that keeps NAME (made above) mapped and outlives
 *                 this process (setsid), as an orphaned worker would
 *   handoff NAME  a child makes NAME, then ends with _exit (as Python's
 *                 forked workers do), leaving it to this process
 *   hold NAME     a thread keeps NAME (made by anyone) mapped
 *   threads X     once ready, the main thread ends (pthread_exit) and the
 *                 other threads run on: the process is a zombie that runs
 * NAMEs get "-TAG" appended.  Then READY gets the pids (this one, and the
 * child's or 0) and the process waits to be killed; with READY "-" it
 * exits 0 instead.
 */
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define SIZE (64 << 10)

static void die(const char *what, const char *name)
{
	fprintf(stderr, "shmmaker: %s %s: ", what, name);
	perror(NULL);
	exit(2);
}

static void make(const char *name, int flags)
{
	int fd = shm_open(name, O_RDWR | flags, 0600);
	char *p;

	if (fd < 0)
		die("shm_open", name);
	if (ftruncate(fd, SIZE) < 0 ||
	    (p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		die("map", name);
	memset(p, 1, SIZE);
	munmap(p, SIZE);
	close(fd);
}

/* A child in a session of its own, keeping name mapped: its pid. */
static pid_t keeper(const char *name)
{
	int fd = shm_open(name, O_RDWR, 0);
	pid_t pid;

	if (fd < 0)
		die("shm_open", name);
	if ((pid = fork()) == 0) {
		setsid();
		if (mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED)
			_exit(2);
		close(fd);
		for (;;)
			pause();
	}
	close(fd);
	return pid;
}

static void *holder(void *arg)
{
	for (;;)
		pause();
	return arg;
}

/* A thread that waits with name mapped. */
static void hold(const char *name)
{
	int fd = shm_open(name, O_RDWR, 0);
	pthread_t t;

	if (fd < 0)
		die("shm_open", name);
	if (mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED)
		die("mmap", name);
	close(fd);
	if (pthread_create(&t, NULL, holder, NULL) != 0)
		die("pthread_create", name);
}

int main(int argc, char **argv)
{
	char name[128], tmp[4096];
	pid_t child = 0, worker;
	int threads = 0;
	sem_t *s;
	FILE *f;

	if (argc < 3 || (argc - 3) % 2 || strlen(argv[2]) + 8 > sizeof tmp) {
		fprintf(stderr, "usage: shmmaker TAG READY ACTION...\n");
		return 2;
	}
	for (int i = 3; i < argc; i += 2) {
		const char *act = argv[i];

		snprintf(name, sizeof name, "/%s-%s", argv[i + 1], argv[1]);
		if (!strcmp(act, "shm")) {
			make(name, O_CREAT | O_EXCL);
		} else if (!strcmp(act, "open")) {
			make(name, O_CREAT);
		} else if (!strcmp(act, "gone")) {
			make(name, O_CREAT | O_EXCL);
			if (shm_unlink(name) < 0)
				die("shm_unlink", name);
		} else if (!strcmp(act, "sem")) {
			if ((s = sem_open(name, O_CREAT | O_EXCL, 0600, 1)) == SEM_FAILED)
				die("sem_open", name);
			sem_close(s);
		} else if (!strcmp(act, "churn")) {
			for (long n = atol(argv[i + 1]), k = 0; k < n; k++) {
				snprintf(name, sizeof name, "/torch_%d_churn_%ld", (int)getpid(), k);
				make(name, O_CREAT | O_EXCL);
				if (shm_unlink(name) < 0)
					die("shm_unlink", name);
			}
		} else if (!strcmp(act, "child")) {
			child = keeper(name);
		} else if (!strcmp(act, "handoff")) {
			if ((worker = fork()) == 0) {
				make(name, O_CREAT | O_EXCL);
				_exit(0);
			}
			if (worker < 0 || waitpid(worker, NULL, 0) != worker)
				die("fork", name);
		} else if (!strcmp(act, "hold")) {
			hold(name);
		} else if (!strcmp(act, "threads")) {
			threads = 1;
		} else {
			fprintf(stderr, "shmmaker: unknown action %s\n", act);
			return 2;
		}
	}
	if (!strcmp(argv[2], "-"))
		return 0;
	snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
	if (!(f = fopen(tmp, "w")) || fprintf(f, "%d %d\n", (int)getpid(), (int)child) < 0 ||
	    fclose(f) != 0 || rename(tmp, argv[2]) < 0)
		die("write", argv[2]);
	if (threads)
		pthread_exit(NULL);
	for (;;)
		pause();
}

/*
 * test_media.c - media.c: create/reopen, sizes, the writer lock (in-process,
 * forked and killed writers), read mode, the MAP_SYNC fallback, non-DAX
 * character devices, reservation failures, NUMA parsing and binding,
 * persistence, files mapped in parts, and cleanup on every error path.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include <numa.h>
#include <numaif.h>

#include "diag.h"
#include "media.h"
#include "testutil.h"

#define MiB (1ull << 20)

static char logged[8][320];
static int nlogged;

static void capture_log(int level, const char *msg)
{
	if (level == WAL_LOG_INFO && nlogged < 8)
		snprintf(logged[nlogged++], sizeof logged[0], "%s", msg);
}

static void capture_start(void)
{
	nlogged = 0;
	wal_set_log(capture_log, WAL_LOG_INFO);
}

static void capture_stop(void)
{
	wal_set_log(NULL, WAL_LOG_WARN);
}

static int exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static int has(const char *msg, const char *needle)
{
	return strstr(msg, needle) != NULL;
}

static int logged_has(const char *needle)
{
	int i;

	for (i = 0; i < nlogged; i++)
		if (has(logged[i], needle))
			return 1;
	return 0;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Protection of the mapping holding addr, as /proc/self/maps writes it. */
static void map_perms(const void *addr, char perms[5])
{
	FILE *f = fopen("/proc/self/maps", "re");
	unsigned long lo, hi, a = (unsigned long)(uintptr_t)addr;
	char line[512], p[5];

	strcpy(perms, "none");
	if (!f)
		return;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, p) == 3 && a >= lo && a < hi) {
			memcpy(perms, p, 5);
			break;
		}
	fclose(f);
}

static int dir_statfs(const char *path, struct statfs *sf)
{
	char dir[256];
	char *slash;

	snprintf(dir, sizeof dir, "%s", path);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	return statfs(slash && dir[0] ? dir : "/", sf);
}

static void test_create_reopen(void)
{
	struct wal_error err = { 0 };
	struct media m;
	struct stat st;
	char path[256], perms[5];

	test_path(path, sizeof path, "create");
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_WRITE, MiB, -1,
					 WAL_OPEN_CREATE, &err), 0);
	CU_ASSERT_EQUAL(m.kind, WAL_MEDIA_SHM);
	CU_ASSERT_EQUAL(m.flush, 0);
	CU_ASSERT_EQUAL(m.created, 1);
	CU_ASSERT_EQUAL(m.size, MiB);
	CU_ASSERT_EQUAL(m.numa_node, -1);
	CU_ASSERT_PTR_NOT_NULL(m.base);
	CU_ASSERT(fcntl(m.fd, F_GETFD) & FD_CLOEXEC);
	map_perms(m.base, perms);
	CU_ASSERT_STRING_EQUAL(perms, "rw-s");
	CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
	CU_ASSERT_EQUAL(st.st_size, (off_t)MiB);
	CU_ASSERT((uint64_t)st.st_blocks * 512 >= MiB); /* reserved, not sparse */

	memcpy(m.base + 4096, "hello", 6);
	m.base[MiB - 1] = 0x5a;
	media_persist(&m, m.base, m.size);
	media_close(&m);
	CU_ASSERT_PTR_NULL(m.base);
	CU_ASSERT_EQUAL(m.fd, -1);

	/* Reopen: the size argument is ignored for a non-empty file. */
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_WRITE, 4 * MiB, -1,
					 WAL_OPEN_CREATE, &err), 0);
	CU_ASSERT_EQUAL(m.created, 0);
	CU_ASSERT_EQUAL(m.size, MiB);
	CU_ASSERT_STRING_EQUAL((char *)m.base + 4096, "hello");
	CU_ASSERT_EQUAL(m.base[MiB - 1], 0x5a);
	media_close(&m);
	unlink(path);
}

static void test_bad_sizes(void)
{
	static const uint64_t bad[] = { 0, 1000, 64 * 1024 + 1, 60 * 1024, 64 * 1024 + 512 };
	struct wal_error err = { 0 };
	struct media m;
	char path[256];
	size_t i;

	test_path(path, sizeof path, "size");
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_WRITE, bad[i], -1,
					   WAL_OPEN_CREATE, &err), WAL_EINVAL);
		CU_ASSERT_EQUAL(err.code, WAL_EINVAL);
		CU_ASSERT(has(err.msg, path));
		CU_ASSERT(has(err.msg, "multiple of 4096"));
		CU_ASSERT_FALSE(exists(path));
		CU_ASSERT_PTR_NULL(m.base);
		CU_ASSERT_EQUAL(m.fd, -1);
	}
	/* The smallest legal size. */
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_WRITE, 64 * 1024, -1,
					 WAL_OPEN_CREATE, &err), 0);
	CU_ASSERT_EQUAL(m.size, 64 * 1024);
	media_close(&m);
	unlink(path);
}

static void test_missing(void)
{
	struct wal_error err = { 0 };
	struct media m;
	char path[256], nodir[300];

	test_path(path, sizeof path, "missing");
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_WRITE, MiB, -1, 0, &err), WAL_EIO);
	CU_ASSERT(has(err.msg, path));
	CU_ASSERT(has(err.msg, "No such file or directory"));
	CU_ASSERT_FALSE(exists(path));

	/* Read mode never creates, whatever the flags say. */
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_READ, MiB, -1, WAL_OPEN_CREATE, &err),
			WAL_EIO);
	CU_ASSERT(has(err.msg, "No such file or directory"));
	CU_ASSERT_FALSE(exists(path));

	snprintf(nodir, sizeof nodir, "%s.no-such-dir/log.wal", path);
	CU_ASSERT_EQUAL(media_open(&m, nodir, MEDIA_WRITE, MiB, -1, WAL_OPEN_CREATE, &err),
			WAL_EIO);
	CU_ASSERT(has(err.msg, nodir));
	CU_ASSERT(has(err.msg, "No such file or directory"));
}

static void test_bad_mode_and_type(void)
{
	struct wal_error err = { 0 };
	struct media m;
	char path[256];

	test_path(path, sizeof path, "mode");
	CU_ASSERT_EQUAL(media_open(&m, path, 7, MiB, -1, WAL_OPEN_CREATE, &err), WAL_EINVAL);
	CU_ASSERT_FALSE(exists(path));

	CU_ASSERT_EQUAL(media_open(&m, "/dev/shm", MEDIA_WRITE, MiB, -1, 0, &err), WAL_EINVAL);
	CU_ASSERT(has(err.msg, "/dev/shm: not a regular file"));

	/* A FIFO is refused before open() could block on it. */
	CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_READ, 0, -1, 0, &err), WAL_EINVAL);
	CU_ASSERT(has(err.msg, path));
	unlink(path);
}

static int all_zero(const uint8_t *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* MEDIA_PARTS: the first part at open, later parts mapped or grown. */
static void test_parts(void)
{
	struct wal_error err = { 0 };
	uint8_t *a, *b, junk[100];
	struct media m;
	struct stat st;
	char path[256];
	int fd;

	test_path(path, sizeof path, "parts");
	CU_ASSERT_EQUAL(media_open(&m, "/dev/zero", MEDIA_PARTS, 8192, -1, WAL_OPEN_CREATE, &err),
			WAL_EINVAL);
	CU_ASSERT(has(err.msg, "/dev/zero: not a regular file"));
	CU_ASSERT(has(err.msg, "not a device-DAX node"));

	/* A stub shorter than the first part is emptied and grown. */
	memset(junk, 0x5a, sizeof junk);
	CU_ASSERT_EQUAL_FATAL(test_spew(path, junk, sizeof junk), 0);
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_PARTS, 8192, -1, 0, &err), 0);
	CU_ASSERT_EQUAL(m.created, 1);
	CU_ASSERT_EQUAL(m.size, 8192);
	CU_ASSERT(all_zero(m.base, 8192));
	CU_ASSERT_EQUAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_size, 8192);

	/* A new part at 2 MiB: zeros, writable, the file ends with it. */
	CU_ASSERT_EQUAL(media_map(&m, path, 2 * MiB, 65536, 1, &a, &err), 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT(all_zero(a, 65536));
	CU_ASSERT_EQUAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_size, (off_t)(2 * MiB + 65536));
	CU_ASSERT((uint64_t)st.st_blocks * 512 >= 65536 + 8192); /* reserved */
	memset(a, 0xa5, 65536);
	media_persist(&m, a, 65536);

	/* Junk past the file's parts goes when the next part grows over it. */
	fd = open(path, O_WRONLY | O_CLOEXEC);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(pwrite(fd, junk, sizeof junk, (off_t)(2 * MiB + 65536 + 8000)),
			(ssize_t)sizeof junk);
	close(fd);
	CU_ASSERT_EQUAL(media_map(&m, path, 2 * MiB + 65536, 3 * 4096, 1, &b, &err), 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	CU_ASSERT(all_zero(b, 3 * 4096));
	CU_ASSERT_EQUAL(a[65535], 0xa5); /* the part before is untouched */
	munmap(b, 3 * 4096);
	munmap(a, 65536);

	/* An existing part maps as it was; bad ranges are refused. */
	CU_ASSERT_EQUAL(media_map(&m, path, 2 * MiB, 65536, 0, &a, &err), 0);
	CU_ASSERT(a && a[0] == 0xa5 && a[65535] == 0xa5);
	munmap(a, 65536);
	CU_ASSERT_EQUAL(media_map(&m, path, 2 * MiB + 1, 4096, 0, &a, &err), WAL_EINVAL);
	CU_ASSERT_PTR_NULL(a);
	CU_ASSERT_EQUAL(media_map(&m, path, 2 * MiB, 0, 0, &a, &err), WAL_EINVAL);
	CU_ASSERT_EQUAL(media_map(&m, path, 2 * MiB, UINT64_MAX - MiB, 1, &a, &err), WAL_EINVAL);
	media_close(&m);

	/* Reopened: only the first part is mapped; the rest stays. */
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_PARTS, 8192, -1, 0, &err), 0);
	CU_ASSERT_EQUAL(m.created, 0);
	CU_ASSERT_EQUAL(m.size, 8192);
	CU_ASSERT_EQUAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_size, (off_t)(2 * MiB + 65536 + 3 * 4096));
	CU_ASSERT_EQUAL(media_cut(&m, path, 8192, &err), 0);
	CU_ASSERT_EQUAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_size, 8192);
	media_close(&m);
	unlink(path);
}

static void test_empty_file(void)
{
	struct wal_error err = { 0 };
	struct media m;
	struct stat st;
	char path[256], want[300];
	int fd;

	test_path(path, sizeof path, "empty");
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	CU_ASSERT_FATAL(fd >= 0);
	close(fd);

	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_READ, 0, -1, 0, &err), WAL_ENOTLOG);
	snprintf(want, sizeof want, "%s: empty file, not a moeft log", path);
	CU_ASSERT_STRING_EQUAL(err.msg, want);

	/* A bad size fails but leaves a file it did not create in place. */
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_WRITE, 1000, -1, 0, &err), WAL_EINVAL);
	CU_ASSERT_TRUE(exists(path));

	/* An empty file counts as created and is grown, even without CREATE. */
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_WRITE, 128 * 1024, -1, 0, &err), 0);
	CU_ASSERT_EQUAL(m.created, 1);
	CU_ASSERT_EQUAL(m.size, 128 * 1024);
	CU_ASSERT_EQUAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_size, 128 * 1024);
	media_close(&m);
	unlink(path);
}

static void test_writer_lock_same_process(void)
{
	struct wal_error err = { 0 };
	struct media a, b;
	char path[256];

	test_path(path, sizeof path, "lock");
	CU_ASSERT_EQUAL_FATAL(media_open(&a, path, MEDIA_WRITE, MiB, -1,
					 WAL_OPEN_CREATE, &err), 0);
	CU_ASSERT_EQUAL(media_open(&b, path, MEDIA_WRITE, MiB, -1, WAL_OPEN_CREATE, &err),
			WAL_EBUSY);
	CU_ASSERT(has(err.msg, path));
	CU_ASSERT(has(err.msg, "in use by another writer"));
	CU_ASSERT_PTR_NULL(b.base);
	CU_ASSERT_EQUAL(b.fd, -1);
	CU_ASSERT_TRUE(exists(path)); /* the loser must not remove it */
	a.base[0] = 1;

	media_close(&a);
	CU_ASSERT_EQUAL_FATAL(media_open(&b, path, MEDIA_WRITE, MiB, -1, 0, &err), 0);
	CU_ASSERT_EQUAL(b.base[0], 1);
	media_close(&b);
	unlink(path);
}

static void test_writer_lock_child(void)
{
	struct wal_error err = { 0 };
	struct media a, c;
	char path[256];
	pid_t pid;
	int status;

	test_path(path, sizeof path, "lockchild");
	CU_ASSERT_EQUAL_FATAL(media_open(&a, path, MEDIA_WRITE, MiB, -1,
					 WAL_OPEN_CREATE, &err), 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		int rc = media_open(&c, path, MEDIA_WRITE, MiB, -1, 0, &err);

		_exit(rc == WAL_EBUSY && strstr(err.msg, "in use by another writer") ? 0 : 1);
	}
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	media_close(&a);
	unlink(path);
}

static void test_writer_killed(void)
{
	struct wal_error err = { 0 };
	struct media m;
	char path[256];
	int fds[2], rc = -100, status;
	pid_t pid;

	test_path(path, sizeof path, "killed");
	CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		rc = media_open(&m, path, MEDIA_WRITE, MiB, -1, WAL_OPEN_CREATE, &err);
		if (write(fds[1], &rc, sizeof rc) != sizeof rc)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	CU_ASSERT_EQUAL(read(fds[0], &rc, sizeof rc), (ssize_t)sizeof rc);
	close(fds[0]);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_WRITE, MiB, -1, 0, &err), WAL_EBUSY);

	kill(pid, SIGKILL);
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_WRITE, MiB, -1, 0, &err), 0);
	CU_ASSERT_EQUAL(m.created, 0);
	media_close(&m);
	unlink(path);
}

static void test_reader(void)
{
	struct wal_error err = { 0 };
	struct media w, r;
	char path[256], perms[5];

	test_path(path, sizeof path, "reader");
	CU_ASSERT_EQUAL_FATAL(media_open(&w, path, MEDIA_WRITE, MiB, -1,
					 WAL_OPEN_CREATE, &err), 0);
	memcpy(w.base, "moeft", 6);

	/* No lock in read mode: it opens beside the writer. */
	CU_ASSERT_EQUAL_FATAL(media_open(&r, path, MEDIA_READ, 0, -1, 0, &err), 0);
	CU_ASSERT_EQUAL(r.kind, WAL_MEDIA_SHM);
	CU_ASSERT_EQUAL(r.flush, 0);
	CU_ASSERT_EQUAL(r.created, 0);
	CU_ASSERT_EQUAL(r.size, MiB);
	CU_ASSERT_STRING_EQUAL((char *)r.base, "moeft");
	CU_ASSERT_EQUAL(fcntl(r.fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	map_perms(r.base, perms);
	CU_ASSERT_STRING_EQUAL(perms, "r--s");

	/* Shared: the writer's later stores show through. */
	w.base[100] = 7;
	CU_ASSERT_EQUAL(r.base[100], 7);
	media_close(&r);
	media_close(&w);
	unlink(path);
}

static void test_non_tmpfs(void)
{
	static const char *dirs[] = { "/var/tmp", "/tmp" };
	struct wal_error err = { 0 };
	struct statfs sf;
	struct media m, r;
	struct stat st;
	const char *dir = NULL;
	char path[256];
	size_t i;

	for (i = 0; i < sizeof dirs / sizeof dirs[0] && !dir; i++)
		if (statfs(dirs[i], &sf) == 0 && sf.f_type != TMPFS_MAGIC &&
		    sf.f_type != RAMFS_MAGIC && access(dirs[i], W_OK) == 0)
			dir = dirs[i];
	if (!dir) {
		printf("[skipped: no writable non-tmpfs directory] ");
		return;
	}
	snprintf(path, sizeof path, "%s/moeft-test-%ld-nontmpfs.wal", dir, (long)getpid());
	unlink(path);

	capture_start();
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_WRITE, MiB, -1,
					 WAL_OPEN_CREATE, &err), 0);
	CU_ASSERT_EQUAL(m.created, 1);
	CU_ASSERT_EQUAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
	CU_ASSERT_EQUAL(st.st_size, (off_t)MiB);
	if (m.kind == WAL_MEDIA_DAXFILE) {
		CU_ASSERT_EQUAL(m.flush, 1);
		CU_ASSERT_EQUAL(nlogged, 0);
	} else {
		CU_ASSERT_EQUAL(m.kind, WAL_MEDIA_SHM);
		CU_ASSERT_EQUAL(m.flush, 0);
		CU_ASSERT_EQUAL(nlogged, 1);
		CU_ASSERT(has(logged[0], path));
		CU_ASSERT(logged_has(": not on a DAX filesystem (MAP_SYNC: "));
		CU_ASSERT(logged_has("durable against process death, not power loss"));
	}
	m.base[0] = 42;
	media_persist(&m, m.base, 1);

	/* A reader never tries MAP_SYNC, so it logs nothing. */
	nlogged = 0;
	CU_ASSERT_EQUAL_FATAL(media_open(&r, path, MEDIA_READ, 0, -1, 0, &err), 0);
	CU_ASSERT_EQUAL(r.kind, WAL_MEDIA_SHM);
	CU_ASSERT_EQUAL(r.base[0], 42);
	CU_ASSERT_EQUAL(nlogged, 0);
	capture_stop();
	media_close(&r);
	media_close(&m);
	unlink(path);
}

static void test_chardev_not_dax(void)
{
	struct wal_error err = { 0 };
	struct media m;
	struct stat st;
	char sysfs[64];

	CU_ASSERT_EQUAL_FATAL(stat("/dev/zero", &st), 0);
	snprintf(sysfs, sizeof sysfs, "/sys/dev/char/%u:%u/size",
		 major(st.st_rdev), minor(st.st_rdev));
	CU_ASSERT_STRING_EQUAL(sysfs, "/sys/dev/char/1:5/size");
	CU_ASSERT_EQUAL(media_open(&m, "/dev/zero", MEDIA_WRITE, MiB, -1, WAL_OPEN_CREATE,
				   &err), WAL_EIO);
	CU_ASSERT(has(err.msg, "/dev/zero"));
	CU_ASSERT(has(err.msg, sysfs));
	CU_ASSERT_PTR_NULL(m.base);
	CU_ASSERT_EQUAL(m.fd, -1);
	CU_ASSERT_EQUAL(media_open(&m, "/dev/zero", MEDIA_READ, 0, -1, 0, &err), WAL_EIO);
	CU_ASSERT(has(err.msg, sysfs));
}

static void test_reserve_fails(void)
{
	struct wal_error err = { 0 };
	struct statfs sf;
	struct media m;
	char path[256];
	uint64_t size;

	test_path(path, sizeof path, "absurd");
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_WRITE, 1ull << 50, -1, WAL_OPEN_CREATE,
				   &err), WAL_EIO);
	CU_ASSERT(has(err.msg, path));
	CU_ASSERT_FALSE(exists(path));

	/* Larger than the whole tmpfs: posix_fallocate refuses at once, so
	 * this is the "tmpfs full" path without filling anything. */
	CU_ASSERT_EQUAL_FATAL(dir_statfs(path, &sf), 0);
	if (sf.f_type != TMPFS_MAGIC || sf.f_blocks == 0) {
		printf("[skipped: test dir is not a size-limited tmpfs] ");
		return;
	}
	size = ((uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize + (1ull << 30)) & ~4095ull;
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_WRITE, size, -1, WAL_OPEN_CREATE, &err),
			WAL_EIO);
	CU_ASSERT(has(err.msg, path));
	CU_ASSERT(has(err.msg, "cannot reserve"));
	CU_ASSERT(has(err.msg, "No space left on device"));
	CU_ASSERT_FALSE(exists(path));
}

static void test_numa_parse(void)
{
	static const char *bad[] = { "abc", "", "-1", "+0", " 0", "1x", "0x1", "99999999999" };
	struct wal_error err = { 0 };
	char text[32];
	size_t i;
	int max;

	if (numa_available() < 0) {
		printf("[skipped: no NUMA] ");
		return;
	}
	max = numa_max_node();
	CU_ASSERT_EQUAL(media_parse_numa_node("0", "MOEFT_NUMA_NODE", &err), 0);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err.msg[0] = '\0';
		CU_ASSERT_EQUAL(media_parse_numa_node(bad[i], "MOEFT_NUMA_NODE", &err),
				WAL_EINVAL);
		CU_ASSERT(has(err.msg, "MOEFT_NUMA_NODE: '"));
		CU_ASSERT(has(err.msg, "is not a node number"));
	}
	CU_ASSERT_EQUAL(media_parse_numa_node(NULL, "MOEFT_NUMA_NODE", &err), WAL_EINVAL);

	snprintf(text, sizeof text, "%d", max + 1);
	CU_ASSERT_EQUAL(media_parse_numa_node(text, "MOEFT_NUMA_NODE", &err), WAL_ENUMA);
	CU_ASSERT_EQUAL(err.code, WAL_ENUMA);
	CU_ASSERT(has(err.msg, "MOEFT_NUMA_NODE: "));
	CU_ASSERT(has(err.msg, "does not exist"));

	CU_ASSERT_EQUAL(media_numa_node_cpuless(0), 0);
	CU_ASSERT_EQUAL(media_numa_node_cpuless(max + 1), -1);
	CU_ASSERT_EQUAL(media_numa_node_cpuless(-1), -1);
}

static void test_numa_open(void)
{
	struct wal_error err = { 0 };
	unsigned long mask[16] = { 0 };
	struct media m;
	char path[256];
	int policy = -1, max;

	if (numa_available() < 0) {
		printf("[skipped: no NUMA] ");
		return;
	}
	max = numa_max_node();
	test_path(path, sizeof path, "numa");
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_WRITE, MiB, max + 1, WAL_OPEN_CREATE,
				   &err), WAL_ENUMA);
	CU_ASSERT(has(err.msg, path));
	CU_ASSERT(has(err.msg, "does not exist (this machine has nodes 0-"));
	CU_ASSERT_FALSE(exists(path));

	capture_start();
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_WRITE, MiB, 0, WAL_OPEN_CREATE,
					 &err), 0);
	capture_stop();
	CU_ASSERT_EQUAL(m.numa_node, 0);
	CU_ASSERT(logged_has("bound to NUMA node 0; node 0 has CPUs"));
	CU_ASSERT_EQUAL(get_mempolicy(&policy, mask, sizeof mask * 8, m.base,
				      MPOL_F_ADDR), 0);
	CU_ASSERT_EQUAL(policy, MPOL_BIND);
	CU_ASSERT_EQUAL(mask[0] & 1, 1);
	m.base[0] = 1;
	CU_ASSERT_EQUAL(get_mempolicy(&policy, NULL, 0, m.base, MPOL_F_NODE | MPOL_F_ADDR), 0);
	CU_ASSERT_EQUAL(policy, 0); /* the node the page is on */
	media_close(&m);
	unlink(path);
}

static void test_persist(void)
{
	struct wal_error err = { 0 };
	struct media m, fake = { .flush = 1 };
	char path[256], buf[300];

	test_path(path, sizeof path, "persist");
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_WRITE, MiB, -1,
					 WAL_OPEN_CREATE, &err), 0);
	memset(m.base, 0xab, 4096);
	m.flush = 1; /* clwb on ordinary memory is legal, just not needed */
	media_persist(&m, m.base, m.size);
	media_persist(&m, m.base + 3, 100);
	media_persist(&m, m.base + 63, 2);
	media_persist(&m, m.base, 0);
	media_persist(&m, m.base + m.size - 1, 1);
	m.flush = 0;
	media_persist(&m, m.base, m.size);
	CU_ASSERT_EQUAL(m.base[4095], 0xab);
	media_close(&m);
	unlink(path);

	memset(buf, 1, sizeof buf);
	media_persist(&fake, buf + 1, sizeof buf - 1);
	CU_ASSERT_EQUAL(buf[sizeof buf - 1], 1);
}

static void test_close_zeroed(void)
{
	struct media z;
	int fd0 = fcntl(0, F_GETFD);

	memset(&z, 0, sizeof z);
	media_close(&z);
	media_close(&z);
	CU_ASSERT_EQUAL(z.fd, -1);
	CU_ASSERT_PTR_NULL(z.base);
	CU_ASSERT_EQUAL(fcntl(0, F_GETFD), fd0); /* fd 0 was not closed */
}

/* ---- A new file appears only whole (media_open_init) ------------------ */

static int init_seen;

/* Notes whether the file is visible at its path (arg) while made. */
static int init_probe(struct media *m, void *arg, struct wal_error *err)
{
	(void)err;
	init_seen = exists(arg);
	memcpy(m->base, "formatted", 10);
	return 0;
}

static int init_refuses(struct media *m, void *arg, struct wal_error *err)
{
	(void)m;
	(void)arg;
	return wal_fail(err, WAL_EINVAL, "init refused");
}

static void test_create_unseen(void)
{
	struct wal_error err = { 0 };
	struct media m;
	struct stat st;
	char path[256], head[10];
	int fd;

	test_path(path, sizeof path, "unseen");
	init_seen = -1;
	CU_ASSERT_EQUAL_FATAL(media_open_init(&m, path, MEDIA_WRITE, MiB, -1, WAL_OPEN_CREATE,
					      init_probe, path, &err), 0);
	CU_ASSERT_EQUAL(init_seen, 0);
	CU_ASSERT_EQUAL(m.created, 1);
	media_close(&m);
	CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_mode & 07777, 0600);
	CU_ASSERT_EQUAL(st.st_size, (off_t)MiB);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	CU_ASSERT_EQUAL(read(fd, head, sizeof head), (ssize_t)sizeof head);
	CU_ASSERT_STRING_EQUAL(head, "formatted");
	close(fd);

	/* An existing file is not made again. */
	init_seen = -1;
	CU_ASSERT_EQUAL_FATAL(media_open_init(&m, path, MEDIA_WRITE, MiB, -1, WAL_OPEN_CREATE,
					      init_probe, path, &err), 0);
	CU_ASSERT_EQUAL(init_seen, -1);
	CU_ASSERT_EQUAL(m.created, 0);
	media_close(&m);
	unlink(path);

	/* A failed init leaves nothing at the path. */
	CU_ASSERT_EQUAL(media_open_init(&m, path, MEDIA_PARTS, 8192, -1, WAL_OPEN_CREATE,
					init_refuses, NULL, &err), WAL_EINVAL);
	CU_ASSERT_STRING_EQUAL(err.msg, "init refused");
	CU_ASSERT_FALSE(exists(path));
}

/* The child's init: says it started (a byte on gate[0]), waits for
 * gate[1] to close, writes "loser". */
static int gate[2][2];

static int init_gated(struct media *m, void *arg, struct wal_error *err)
{
	char c = 0;

	(void)arg;
	(void)err;
	if (write(gate[0][1], &c, 1) != 1 || read(gate[1][0], &c, 1) < 0)
		return WAL_EIO;
	memcpy(m->base, "loser", 6);
	return 0;
}

/* A child that creates path with init_gated and exits with what it got:
 * 0 created, 1 opened another's file with "winner" in it, 2 busy, 3 else. */
static pid_t gated_child(const char *path)
{
	struct wal_error err = { 0 };
	struct media m;
	pid_t pid;
	int rc;

	CU_ASSERT_FATAL(pipe(gate[0]) == 0 && pipe(gate[1]) == 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	close(gate[pid ? 0 : 1][1]);
	close(gate[pid ? 1 : 0][0]);
	if (pid)
		return pid;
	rc = media_open_init(&m, path, MEDIA_WRITE, MiB, -1, WAL_OPEN_CREATE, init_gated, NULL,
			     &err);
	if (rc == WAL_EBUSY && has(err.msg, "in use by another writer"))
		_exit(2);
	if (rc < 0)
		_exit(3);
	_exit(m.created ? 0 : !memcmp(m.base, "winner", 7) ? 1 : 3);
}

static int gated_status(pid_t pid)
{
	int status;

	close(gate[1][1]); /* lets the child's init go on */
	close(gate[0][0]);
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

/* A writer killed while it makes the file leaves none. */
static void test_create_killed(void)
{
	char path[256], c;
	pid_t pid;

	test_path(path, sizeof path, "create-killed");
	pid = gated_child(path);
	CU_ASSERT_EQUAL(read(gate[0][0], &c, 1), 1);
	kill(pid, SIGKILL);
	CU_ASSERT_EQUAL(gated_status(pid), -SIGKILL);
	CU_ASSERT_FALSE(exists(path));
}

/* Two writers make the same file at once: the one that links it first
 * wins; the other drops its own and opens the winner's, or is told it is
 * busy while the winner holds it. */
static void race(int keep)
{
	struct wal_error err = { 0 };
	struct media m;
	char path[256], c;
	pid_t pid;

	test_path(path, sizeof path, keep ? "race-busy" : "race-open");
	pid = gated_child(path);
	CU_ASSERT_EQUAL(read(gate[0][0], &c, 1), 1);
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_WRITE, MiB, -1, WAL_OPEN_CREATE,
					 &err), 0);
	CU_ASSERT_EQUAL(m.created, 1);
	memcpy(m.base, "winner", 7);
	if (!keep)
		media_close(&m);
	CU_ASSERT_EQUAL(gated_status(pid), keep ? 2 : 1);
	if (keep)
		media_close(&m);
	unlink(path);
}

static void test_create_race_open(void)
{
	race(0);
}

static void test_create_race_busy(void)
{
	race(1);
}

/* ---- What another user may pre-create at a predictable path ------------ */

static void expect_unsafe(const char *path, const char *why)
{
	static const int modes[] = { MEDIA_WRITE, MEDIA_PARTS };
	struct wal_error err = { 0 };
	struct media m;
	char want[512];

	snprintf(want, sizeof want, "%s: %s", path, why);
	for (unsigned i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(media_open(&m, path, modes[i], MiB, -1, WAL_OPEN_CREATE, &err),
				WAL_EUNSAFE);
		CU_ASSERT_STRING_EQUAL(err.msg, want);
		CU_ASSERT_PTR_NULL(m.base);
	}
}

/* A file at path holding "theirs", then given mode and owner. */
static void plant(const char *path, mode_t mode, uid_t uid)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, "theirs", 6), 6);
	CU_ASSERT_EQUAL(fchmod(fd, mode), 0);
	CU_ASSERT_EQUAL(fchown(fd, uid, (gid_t)-1), 0);
	close(fd);
}

/* The file still holds "theirs" and nothing else. */
static int untouched(const char *path)
{
	size_t len;
	char *p = test_slurp(path, &len);
	int same = p && len == 6 && !memcmp(p, "theirs", 6);

	free(p);
	return same;
}

static void test_hostile_files(void)
{
	char path[256], other[256], why[160];

	test_path(path, sizeof path, "hostile");
	test_path(other, sizeof other, "hostile-target");

	plant(path, 0666, geteuid());
	expect_unsafe(path, "writable by group or others (mode 0666); refusing to use it: "
		      "others could read or change it");
	CU_ASSERT(untouched(path));
	CU_ASSERT_EQUAL(chmod(path, 0620), 0);
	expect_unsafe(path, "writable by group or others (mode 0620); refusing to use it: "
		      "others could read or change it");
	unlink(path);

	/* As root, a file of nobody's is exactly the attack: refused too. */
	if (geteuid() == 0) {
		plant(path, 0600, 65534);
		snprintf(why, sizeof why, "owned by uid 65534, not by this user (uid 0); "
			 "refusing to use it: its owner could read or change it");
		expect_unsafe(path, why);
		CU_ASSERT(untouched(path));
		unlink(path);
	}

	/* A link to another file is not followed; nor is one to nothing,
	 * where a new file would be made. */
	plant(other, 0600, geteuid());
	CU_ASSERT_EQUAL_FATAL(symlink(other, path), 0);
	expect_unsafe(path, "a symbolic link; refusing to follow it");
	CU_ASSERT(untouched(other));
	unlink(other);
	expect_unsafe(path, "a symbolic link; refusing to follow it");
	CU_ASSERT_FALSE(exists(other));
	unlink(path);
}

/* A file cut under its mapping: media_fault finds the mapping and puts
 * zero pages there; an address of no medium is left alone. */
static void test_fault(void)
{
	struct wal_error err = { 0 };
	struct media m;
	char path[256], local = 0;
	const char *got;
	uint8_t *base;

	test_path(path, sizeof path, "fault");
	CU_ASSERT_EQUAL_FATAL(media_open(&m, path, MEDIA_WRITE, MiB, -1, WAL_OPEN_CREATE,
					 &err), 0);
	m.base[5000] = 7;
	CU_ASSERT_EQUAL_FATAL(truncate(path, 0), 0);
	CU_ASSERT_PTR_NULL(media_fault(&local));
	CU_ASSERT_PTR_NULL(media_fault(m.base + m.size));
	got = media_fault(m.base + 5000);
	CU_ASSERT_PTR_NOT_NULL_FATAL(got);
	CU_ASSERT_STRING_EQUAL(got, path);
	CU_ASSERT_EQUAL(m.base[5000], 0); /* no SIGBUS: a zero page */
	m.base[m.size - 1] = 1;
	base = m.base;
	media_close(&m);
	CU_ASSERT_PTR_NULL(media_fault(base)); /* unmapped: forgotten */
	unlink(path);
}

/* Every failure above, once more, counting descriptors around them. */
static void test_no_fd_leaks(void)
{
	struct wal_error err = { 0 };
	struct media a, m;
	char path[256], empty[256];
	int before, fd;

	test_path(path, sizeof path, "leaks");
	test_path(empty, sizeof empty, "leaks-empty");
	fd = open(empty, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	CU_ASSERT_FATAL(fd >= 0);
	close(fd);

	before = count_fds();
	CU_ASSERT(media_open(&m, path, MEDIA_WRITE, 1000, -1, WAL_OPEN_CREATE, &err) < 0);
	CU_ASSERT(media_open(&m, path, MEDIA_WRITE, MiB, -1, 0, &err) < 0);
	CU_ASSERT(media_open(&m, path, MEDIA_WRITE, 1ull << 50, -1, WAL_OPEN_CREATE, &err) < 0);
	CU_ASSERT(media_open(&m, path, MEDIA_WRITE, MiB, 1 << 20, WAL_OPEN_CREATE, &err) < 0);
	CU_ASSERT(media_open(&m, "/dev/zero", MEDIA_WRITE, MiB, -1, 0, &err) < 0);
	CU_ASSERT(media_open(&m, empty, MEDIA_READ, 0, -1, 0, &err) < 0);
	CU_ASSERT(media_open(&m, empty, MEDIA_WRITE, 1000, -1, 0, &err) < 0);
	CU_ASSERT_EQUAL_FATAL(media_open(&a, path, MEDIA_WRITE, MiB, -1,
					 WAL_OPEN_CREATE, &err), 0);
	CU_ASSERT_EQUAL(media_open(&m, path, MEDIA_WRITE, MiB, -1, 0, &err), WAL_EBUSY);
	media_close(&a);
	CU_ASSERT_EQUAL(count_fds(), before);
	unlink(path);
	unlink(empty);
}

static CU_TestInfo media_tests[] = {
	{ "create and reopen", test_create_reopen },
	{ "bad sizes", test_bad_sizes },
	{ "missing file or directory", test_missing },
	{ "bad mode, directory, fifo", test_bad_mode_and_type },
	{ "empty file", test_empty_file },
	{ "file mapped in parts", test_parts },
	{ "writer lock, same process", test_writer_lock_same_process },
	{ "writer lock, forked child", test_writer_lock_child },
	{ "writer lock released on SIGKILL", test_writer_killed },
	{ "read mode beside a writer", test_reader },
	{ "non-tmpfs file: MAP_SYNC fallback", test_non_tmpfs },
	{ "character device that is not DAX", test_chardev_not_dax },
	{ "reservation failures leave nothing", test_reserve_fails },
	{ "NUMA node parsing", test_numa_parse },
	{ "NUMA binding", test_numa_open },
	{ "persist", test_persist },
	{ "close on a zeroed struct", test_close_zeroed },
	{ "no fd leaks on errors", test_no_fd_leaks },
	{ "a new file is unseen until made", test_create_unseen },
	{ "a writer killed while making the file leaves none", test_create_killed },
	{ "creation race: the loser opens the winner's", test_create_race_open },
	{ "creation race: the loser is busy", test_create_race_busy },
	{ "hostile files: mode, owner, links", test_hostile_files },
	{ "a fault in a cut file's mapping", test_fault },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ .pName = "media", .pTests = media_tests },
	CU_SUITE_INFO_NULL
};

int main(void)
{
	return cu_run(suites);
}

/*
 * bench.c - moeft bench wal: the log's speed against memcpy; the helpers
 * the targets share (bench.h); and the dispatch of 'moeft bench launch'
 * (bench_launch.c) and 'moeft bench restore' (bench_restore.c).
 *
 * memcpy of the same bytes is the bound on any write path into memory, so
 * each figure comes with its memcpy twin from the same process and its
 * ratio.  The log is a 256 MiB shared-memory ring that wraps many times
 * during the run: appends pay for reclaim as they would in steady state.
 *
 * Method: every throughput figure is the best of REPEATS runs, each
 * seconds/REPEATS long, the log and memcpy runs interleaved.  Writers
 * commit after every COMMIT_RECORDS records or COMMIT_BYTES of payload,
 * whichever comes first (1 MiB records: every record).  The memcpy
 * baseline copies the same payload sizes from the same source into a
 * ring-sized buffer, cycling through it as the log does.  Commit latency
 * is timed around wal_commit() of LAT_SAMPLES windows of LAT_RECORDS 4 KiB
 * records, one run.  The recovery scan is wal_reader_open_buf() over an
 * in-memory image of a nearly full log of 4 KiB records, and, as after a
 * crash, wal_reader_open_path() on the log file from a fresh process,
 * against memcpy from a fresh mapping of the file in another.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "bench.h"
#include "cli.h"
#include "crc32c.h"
#include "json.h"

#define LOG_SIZE (UINT64_C(256) << 20)
#define REPEATS 3
#define COMMIT_RECORDS 64u
#define COMMIT_BYTES (1u << 20)
#define THREADS 4
#define LAT_RECORDS 16u
#define LAT_SAMPLES 4000u
#define MAX_RECORD (1u << 20)

static const uint32_t sizes[] = { 64, 4096, 65536, 1u << 20 };
#define NSIZES (sizeof sizes / sizeof sizes[0])
static const uint32_t thread_sizes[] = { 64, 4096 };
#define NTHREAD_SIZES (sizeof thread_sizes / sizeof thread_sizes[0])

struct bench {
	struct wal *w;
	const char *path;
	double run_s;			/* length of one run */
	uint8_t *src;			/* MAX_RECORD bytes of payload */
	uint8_t *dst;			/* memcpy destination, as large as the ring */
	size_t dst_len;
	struct wal_stats st;		/* as opened */
};

struct results {
	int peers;				/* --peers: peer figures below */
	struct peer_results pmemlog;
	double wal_rps[NSIZES], memcpy_rps[NSIZES]; /* records per second */
	double thread_rps[NTHREAD_SIZES];
	double p50_us, p99_us;
	uint64_t scan_bytes;
	double scan_bps, scan_memcpy_bps;	/* bytes per second */
	double file_scan_bps, file_memcpy_bps;	/* the file's, from fresh processes */
	double crc_bps;				/* CRC-32C of the scanned bytes */
};

void bench_keep_min(double *best, double v)
{
	if (*best == 0 || v < *best)
		*best = v;
}

static uint32_t per_commit(uint32_t size)
{
	uint32_t n = COMMIT_BYTES / size;

	return n < 1 ? 1 : n > COMMIT_RECORDS ? COMMIT_RECORDS : n;
}

/* One batch: per_commit(size) appends, then a commit.  0 or a status. */
static int batch(struct wal *w, const uint8_t *src, uint32_t size)
{
	for (uint32_t i = per_commit(size); i > 0; i--) {
		int64_t ret = wal_append(w, WAL_REC_USER, src, size);

		if (ret < 0)
			return (int)ret;
	}
	return wal_commit(w, NULL, 0, NULL);
}

static int run_wal(struct bench *b, uint32_t size, double *rps)
{
	double t0 = cli_now(), t;
	uint64_t n = 0;
	int ret;

	do {
		if ((ret = batch(b->w, b->src, size)) < 0)
			return ret;
		n += per_commit(size);
	} while ((t = cli_now() - t0) < b->run_s);
	*rps = (double)n / t;
	return 0;
}

static void run_memcpy(struct bench *b, uint32_t size, double *rps)
{
	double t0 = cli_now(), t;
	uint64_t n = 0;
	size_t off = 0;

	do {
		for (uint32_t i = per_commit(size); i > 0; i--) {
			if (off + size > b->dst_len)
				off = 0;
			memcpy(b->dst + off, b->src, size);
			bench_keep(b->dst + off);
			off += size;
		}
		n += per_commit(size);
	} while ((t = cli_now() - t0) < b->run_s);
	*rps = (double)n / t;
}

struct worker {
	struct bench *b;
	uint32_t size;
	uint64_t records;
	int status;
};

static void *work(void *arg)
{
	struct worker *k = arg;
	double t0 = cli_now();

	do {
		if ((k->status = batch(k->b->w, k->b->src, k->size)) < 0)
			break;
		k->records += per_commit(k->size);
	} while (cli_now() - t0 < k->b->run_s);
	return NULL;
}

/* THREADS writers on one log, each committing after its own batches;
 * starting a thread takes microseconds, a run a tenth of a second. */
static int run_threads(struct bench *b, uint32_t size, double *rps)
{
	struct worker k[THREADS];
	pthread_t tid[THREADS];
	double t0 = cli_now();
	uint64_t n = 0;
	int started, ret = 0;

	for (started = 0; started < THREADS; started++) {
		k[started] = (struct worker){ .b = b, .size = size };
		if (pthread_create(&tid[started], NULL, work, &k[started]) != 0) {
			ret = WAL_ENOMEM;
			break;
		}
	}
	for (int i = 0; i < started; i++) {
		pthread_join(tid[i], NULL);
		n += k[i].records;
		if (k[i].status < 0)
			ret = k[i].status;
	}
	*rps = (double)n / (cli_now() - t0);
	return ret;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int run_latency(struct bench *b, struct results *res)
{
	double *lat = malloc(LAT_SAMPLES * sizeof *lat);
	int ret = 0;

	if (!lat)
		return WAL_ENOMEM;
	for (uint32_t i = 0; i < LAT_SAMPLES && ret == 0; i++) {
		double t;

		for (uint32_t r = 0; r < LAT_RECORDS && ret == 0; r++) {
			int64_t a = wal_append(b->w, WAL_REC_USER, b->src, 4096);

			ret = a < 0 ? (int)a : 0;
		}
		t = cli_now();
		if (ret == 0)
			ret = wal_commit(b->w, NULL, 0, NULL);
		lat[i] = (cli_now() - t) * 1e6;
	}
	qsort(lat, LAT_SAMPLES, sizeof *lat, cmp_double);
	res->p50_us = lat[LAT_SAMPLES / 2];
	res->p99_us = lat[LAT_SAMPLES * 99 / 100];
	free(lat);
	return ret;
}

static int open_log(struct bench *b, unsigned flags, struct wal_error *err)
{
	struct wal_options opt;
	int ret;

	wal_options_init(&opt);
	opt.size = LOG_SIZE;
	opt.numa_node = cli_env.numa_node;
	opt.flags = flags;
	if ((ret = wal_open(b->path, &opt, &b->w, err)) == 0)
		wal_stats(b->w, &b->st);
	return ret;
}

/* Read the whole log file into memory. */
static uint8_t *read_image(const char *path, size_t len)
{
	uint8_t *img = malloc(len);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;

	while (img && fd >= 0 && got < len) {
		ssize_t n = read(fd, img + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (fd >= 0)
		close(fd);
	if (got < len) {
		free(img);
		return NULL;
	}
	return img;
}

/* In a child, so that nothing of the log is mapped yet: the seconds that
 * scanning the log file takes (memcpy 0), or that copying its first
 * `bytes` from a fresh mapping into a buffer already faulted in takes
 * (memcpy 1); a negative value when the child failed. */
static double fresh_process(const char *path, uint64_t bytes, size_t len, int copy)
{
	int fd[2], status;
	double dt = -1;
	pid_t pid;

	if (pipe(fd) < 0)
		return -1;
	if ((pid = fork()) == 0) {
		struct wal_reader *rd;
		struct wal_error err;
		uint8_t *dst = NULL;
		void *src = MAP_FAILED;
		double t = -1;
		int f;

		close(fd[0]);
		if (!copy) {
			t = cli_now();
			if (wal_reader_open_path(path, &rd, &err) == 0) {
				t = cli_now() - t;
				wal_reader_close(rd);
			} else {
				t = -1;
			}
		} else if ((dst = malloc(bytes)) && (f = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
			memset(dst, 1, bytes);
			if ((src = mmap(NULL, len, PROT_READ, MAP_SHARED, f, 0)) != MAP_FAILED) {
				t = cli_now();
				memcpy(dst, src, bytes);
				bench_keep(dst);
				t = cli_now() - t;
			}
			close(f);
		}
		_exit(write(fd[1], &t, sizeof t) == sizeof t ? 0 : 1);
	}
	close(fd[1]);
	if (pid > 0 && read(fd[0], &dt, sizeof dt) != sizeof dt)
		dt = -1;
	close(fd[0]);
	if (pid > 0)
		waitpid(pid, &status, 0);
	return dt;
}

/* The scan of the log file and memcpy of its bytes, each from a fresh
 * process, best of REPEATS. */
static void run_file_scan(const struct bench *b, struct results *res)
{
	for (int r = 0; r < REPEATS; r++) {
		double scan = fresh_process(b->path, res->scan_bytes, b->st.size, 0);
		double copy = fresh_process(b->path, res->scan_bytes, b->st.size, 1);

		if (scan > 0 && (double)res->scan_bytes / scan > res->file_scan_bps)
			res->file_scan_bps = (double)res->scan_bytes / scan;
		if (copy > 0 && (double)res->scan_bytes / copy > res->file_memcpy_bps)
			res->file_memcpy_bps = (double)res->scan_bytes / copy;
	}
}

static volatile uint32_t crc_sink;

/* Reformat, fill the ring without wrapping, then scan an image of it, and
 * checksum the scanned bytes. */
static int run_scan(struct bench *b, struct results *res, struct wal_error *err)
{
	uint8_t *img;
	size_t len;
	int ret;

	wal_close(b->w);
	b->w = NULL;
	if ((ret = open_log(b, WAL_OPEN_FORMAT, err)) < 0)
		return ret;
	for (;;) {
		struct wal_stats st;

		wal_stats(b->w, &st);
		if (st.used + 2 * COMMIT_BYTES > st.capacity)
			break;
		if ((ret = batch(b->w, b->src, 4096)) < 0)
			return ret;
	}
	len = b->st.size;
	if (!(img = read_image(b->path, len))) {
		snprintf(err->msg, sizeof err->msg, "%s: cannot read the log back", b->path);
		return WAL_EIO;
	}
	for (int r = 0; r < REPEATS && ret == 0; r++) {
		struct wal_reader *rd;
		double t = cli_now(), dt, bps;

		if ((ret = wal_reader_open_buf(img, len, &rd, err)) < 0)
			break;
		dt = cli_now() - t;
		res->scan_bytes = wal_reader_recovery(rd)->bytes;
		wal_reader_close(rd);
		bps = (double)res->scan_bytes / dt;
		if (bps > res->scan_bps)
			res->scan_bps = bps;
		t = cli_now();
		memcpy(b->dst, img, res->scan_bytes < b->dst_len ? res->scan_bytes : b->dst_len);
		bench_keep(b->dst);
		bps = (double)res->scan_bytes / (cli_now() - t);
		if (bps > res->scan_memcpy_bps)
			res->scan_memcpy_bps = bps;
		/* The checksum every record and KV chunk pays, on the same bytes. */
		t = cli_now();
		crc_sink = crc32c(0, img, res->scan_bytes);
		bps = (double)res->scan_bytes / (cli_now() - t);
		if (bps > res->crc_bps)
			res->crc_bps = bps;
	}
	free(img);
	if (ret == 0)
		run_file_scan(b, res);
	return ret;
}

/* Let the ring wrap once, so every page is mapped before timing. */
static int warm_up(struct bench *b)
{
	uint64_t done = 0;
	int ret = 0;

	memset(b->dst, 0, b->dst_len);
	for (; done < b->st.capacity && ret == 0; done += MAX_RECORD)
		ret = batch(b->w, b->src, MAX_RECORD);
	return ret;
}

static int run_all(struct bench *b, struct results *res, struct wal_error *err)
{
	int ret;

	if ((ret = warm_up(b)) < 0)
		return ret;
	for (size_t s = 0; s < NSIZES; s++)
		for (int r = 0; r < REPEATS; r++) {
			double wal, mem;

			if ((ret = run_wal(b, sizes[s], &wal)) < 0)
				return ret;
			run_memcpy(b, sizes[s], &mem);
			if (wal > res->wal_rps[s])
				res->wal_rps[s] = wal;
			if (mem > res->memcpy_rps[s])
				res->memcpy_rps[s] = mem;
		}
	for (size_t s = 0; s < NTHREAD_SIZES; s++)
		for (int r = 0; r < REPEATS; r++) {
			double rps;

			if ((ret = run_threads(b, thread_sizes[s], &rps)) < 0)
				return ret;
			if (rps > res->thread_rps[s])
				res->thread_rps[s] = rps;
		}
	if ((ret = run_latency(b, res)) < 0)
		return ret;
	return run_scan(b, res, err);
}

/* The peers, once moeft's log is given back: a pool of the log's size at
 * pool, beside it. */
static int run_peers(const struct bench *b, const char *pool, struct results *res, char *err,
		     size_t errlen)
{
	struct peer_run r = {
		.path = pool, .size = b->st.size, .memory = b->st.media == WAL_MEDIA_SHM,
		.run_s = b->run_s, .repeats = REPEATS, .src = b->src, .sizes = sizes,
		.nsizes = NSIZES, .per_commit = per_commit,
	};

	_Static_assert(NSIZES <= PEER_SIZES_MAX, "peer_results holds every size");
	return bench_pmemlog(&r, &res->pmemlog, err, errlen);
}

/* ---- output ---------------------------------------------------------- */

void bench_machine_json(struct json *j, const char *cpu)
{
	json_key(j, "machine");
	json_obj_begin(j);
	json_kv_str(j, "cpu", cpu);
	json_kv_i64(j, "nproc", sysconf(_SC_NPROCESSORS_ONLN));
	json_obj_end(j);
}

void bench_cpu_model(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];

	snprintf(buf, len, "unknown");
	while (f && fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');

		if (colon && (!strncmp(line, "model name", 10) || !strncmp(line, "Model", 5))) {
			colon += 1 + strspn(colon + 1, " \t");
			colon[strcspn(colon, "\n")] = '\0';
			snprintf(buf, len, "%s", colon);
			break;
		}
	}
	if (f)
		fclose(f);
}

static double mbps(double rps, uint32_t size)
{
	return rps * size / 1e6;
}

static void print_text(const struct bench *b, const struct results *res, const char *cpu)
{
	char s1[32], s2[32];

	printf("moeft bench wal: %s (%s, %s), best of %d runs of %.2f s\n", b->path,
	       wal_media_name(b->st.media), cli_fmt_bytes(s1, sizeof s1, b->st.size), REPEATS,
	       b->run_s);
	printf("machine: %s, %ld CPUs\n\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
	printf("append + commit (every %u records or %s), one thread\n", COMMIT_RECORDS,
	       cli_fmt_bytes(s1, sizeof s1, COMMIT_BYTES));
	printf("  %-8s %12s %14s %7s %14s\n", "record", "log MB/s", "memcpy MB/s", "ratio",
	       "records/s");
	for (size_t s = 0; s < NSIZES; s++)
		printf("  %-8s %12.0f %14.0f %7.3f %14.0f\n",
		       cli_fmt_bytes(s1, sizeof s1, sizes[s]),
		       mbps(res->wal_rps[s], sizes[s]), mbps(res->memcpy_rps[s], sizes[s]),
		       res->wal_rps[s] / res->memcpy_rps[s], res->wal_rps[s]);
	printf("\n%d threads appending: %s records %.0f records/s, %s records %.0f records/s\n",
	       THREADS, cli_fmt_bytes(s1, sizeof s1, thread_sizes[0]), res->thread_rps[0],
	       cli_fmt_bytes(s2, sizeof s2, thread_sizes[1]), res->thread_rps[1]);
	printf("commit latency (%u x 4 KiB per window, %u samples): p50 %.2f us, p99 %.2f us\n",
	       LAT_RECORDS, LAT_SAMPLES, res->p50_us, res->p99_us);
	printf("recovery scan of %s (4 KiB records): %.0f MB/s, memcpy %.0f MB/s, ratio %.3f\n",
	       cli_fmt_bytes(s1, sizeof s1, res->scan_bytes), res->scan_bps / 1e6,
	       res->scan_memcpy_bps / 1e6, res->scan_bps / res->scan_memcpy_bps);
	printf("CRC-32C of the same bytes: %.2f GB/s, ratio to memcpy %.3f\n", res->crc_bps / 1e9,
	       res->crc_bps / res->scan_memcpy_bps);
	printf("recovery scan of the log file, a fresh process: %.0f MB/s, memcpy from a fresh "
	       "mapping %.0f MB/s, ratio %.3f\n", res->file_scan_bps / 1e6,
	       res->file_memcpy_bps / 1e6, res->file_scan_bps / res->file_memcpy_bps);
	if (!res->peers)
		return;
	printf("\npeer: %s, on the same medium (ratio: moeft's figure over the peer's)\n",
	       res->pmemlog.how);
	printf("  %-8s %14s %14s %7s\n", "record", "moeft rec/s", "pmemlog rec/s", "ratio");
	for (size_t s = 0; s < NSIZES; s++)
		printf("  %-8s %14.0f %14.0f %7.3f\n", cli_fmt_bytes(s1, sizeof s1, sizes[s]),
		       res->wal_rps[s], res->pmemlog.append_rps[s],
		       res->wal_rps[s] / res->pmemlog.append_rps[s]);
	printf("  walk of a full log of 4 KiB records, in memory: moeft's scan (of an image of "
	       "its log) %.0f MB/s, pmemlog_walk (of its pool) %.0f MB/s, ratio %.3f\n", res->scan_bps / 1e6, res->pmemlog.walk_bps / 1e6,
	       res->scan_bps / res->pmemlog.walk_bps);
}

static void print_json(const struct bench *b, const struct results *res, const char *cpu)
{
	struct json j;

	json_init(&j, stdout);
	json_obj_begin(&j);
	json_kv_str(&j, "status", "ok");
	bench_machine_json(&j, cpu);
	json_key(&j, "log");
	json_obj_begin(&j);
	json_kv_str(&j, "path", b->path);
	json_kv_str(&j, "medium", wal_media_name(b->st.media));
	json_kv_u64(&j, "size", b->st.size);
	json_kv_u64(&j, "capacity", b->st.capacity);
	json_obj_end(&j);
	json_kv_u64(&j, "repeats", REPEATS);
	json_kv_double(&j, "seconds_per_run", b->run_s);
	json_kv_u64(&j, "commit_every_records", COMMIT_RECORDS);
	json_kv_u64(&j, "commit_every_bytes", COMMIT_BYTES);
	json_key(&j, "append");
	json_arr_begin(&j);
	for (size_t s = 0; s < NSIZES; s++) {
		json_obj_begin(&j);
		json_kv_u64(&j, "record_bytes", sizes[s]);
		json_kv_double(&j, "mb_per_s", mbps(res->wal_rps[s], sizes[s]));
		json_kv_double(&j, "memcpy_mb_per_s", mbps(res->memcpy_rps[s], sizes[s]));
		json_kv_double(&j, "memcpy_ratio", res->wal_rps[s] / res->memcpy_rps[s]);
		json_kv_double(&j, "records_per_s", res->wal_rps[s]);
		json_obj_end(&j);
	}
	json_arr_end(&j);
	json_kv_double(&j, "append_large_memcpy_ratio", res->wal_rps[2] / res->memcpy_rps[2]);
	json_kv_double(&j, "append_small_records_per_s", res->wal_rps[0]);
	json_key(&j, "threads4");
	json_arr_begin(&j);
	for (size_t s = 0; s < NTHREAD_SIZES; s++) {
		json_obj_begin(&j);
		json_kv_u64(&j, "record_bytes", thread_sizes[s]);
		json_kv_double(&j, "records_per_s", res->thread_rps[s]);
		json_obj_end(&j);
	}
	json_arr_end(&j);
	json_kv_double(&j, "threads4_records_per_s", res->thread_rps[0]);
	json_kv_u64(&j, "commit_samples", LAT_SAMPLES);
	json_kv_double(&j, "commit_p50_us", res->p50_us);
	json_kv_double(&j, "commit_p99_us", res->p99_us);
	json_kv_u64(&j, "scan_bytes", res->scan_bytes);
	json_kv_double(&j, "scan_mb_per_s", res->scan_bps / 1e6);
	json_kv_double(&j, "scan_memcpy_mb_per_s", res->scan_memcpy_bps / 1e6);
	json_kv_double(&j, "scan_memcpy_ratio", res->scan_bps / res->scan_memcpy_bps);
	json_kv_double(&j, "scan_file_mb_per_s", res->file_scan_bps / 1e6);
	json_kv_double(&j, "scan_file_memcpy_mb_per_s", res->file_memcpy_bps / 1e6);
	json_kv_double(&j, "scan_file_memcpy_ratio", res->file_scan_bps / res->file_memcpy_bps);
	json_kv_double(&j, "crc32c_gb_per_s", res->crc_bps / 1e9);
	json_kv_double(&j, "crc32c_memcpy_ratio", res->crc_bps / res->scan_memcpy_bps);
	if (res->peers) {
		json_key(&j, "peers");
		json_arr_begin(&j);
		json_obj_begin(&j);
		json_kv_str(&j, "name", "libpmemlog");
		json_kv_str(&j, "how", res->pmemlog.how);
		json_key(&j, "append");
		json_arr_begin(&j);
		for (size_t s = 0; s < NSIZES; s++) {
			json_obj_begin(&j);
			json_kv_u64(&j, "record_bytes", sizes[s]);
			json_kv_double(&j, "records_per_s", res->pmemlog.append_rps[s]);
			json_kv_double(&j, "moeft_ratio",
				       res->wal_rps[s] / res->pmemlog.append_rps[s]);
			json_obj_end(&j);
		}
		json_arr_end(&j);
		json_key(&j, "walk");
		json_obj_begin(&j);
		json_kv_u64(&j, "bytes", res->pmemlog.walk_bytes);
		json_kv_double(&j, "mb_per_s", res->pmemlog.walk_bps / 1e6);
		json_kv_double(&j, "moeft_ratio", res->scan_bps / res->pmemlog.walk_bps);
		json_obj_end(&j);
		json_obj_end(&j);
		json_arr_end(&j);
	}
	json_obj_end(&j);
}

/* The log holds nothing but this run's benchmark records: give its memory
 * back.  A file made here is removed, an empty one given is emptied again;
 * a device-DAX node keeps the log. */
static void give_back(const char *path, int made)
{
	struct stat st;

	if (made)
		unlink(path);
	else if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
		truncate(path, 0);
}

/* The target: the first argument that is neither an option nor the
 * value of one (of any target: options may come before it); NULL when
 * there is none.  'launch' and 'restore' parse their own options. */
static const char *target(int argc, char **argv)
{
	static const char *const valued[] = {
		"-w", "--wal", "-s", "--seconds",			/* wal */
		"-n", "--launches", "-S", "--steps", "-p", "--preload",	/* launch */
		"-f", "--fixture", "-b", "--bench", "--serve",
		"-m", "--pool-mib", "-k", "--chunk-kib",		/* restore */
	};

	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		size_t v = 0;

		if (argv[i][0] != '-')
			return argv[i];
		while (v < sizeof valued / sizeof valued[0] && strcmp(argv[i], valued[v]))
			v++;
		i += v < sizeof valued / sizeof valued[0];
	}
	return NULL;
}

static int bench(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wal", required_argument, NULL, 'w' },
		{ "seconds", required_argument, NULL, 's' },
		{ "peers", no_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct bench b = { 0 };
	struct results res = { 0 };
	struct wal_error err = { 0 };
	struct stat st;
	char path[4096], pool[4096 + sizeof PEER_POOL_SUFFIX], msg[512], cpu[128];
	const char *t;
	double seconds = 0.5;
	int c, ret, fd, made = 0;

	if ((t = target(argc, argv)) && !strcmp(t, "launch"))
		return bench_launch(cmd, argc, argv);
	if (t && !strcmp(t, "restore"))
		return bench_restore(cmd, argc, argv);
	if (t && !strcmp(t, "window"))
		return bench_window(cmd, argc, argv);
	cli_default_path(path, sizeof path, "bench");
	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'w':
			if (cli_path_opt(&o, "--wal", optarg, sizeof path) == 0)
				strcpy(path, optarg);
			break;
		case 's': cli_parse_double(&o, "--seconds", optarg, 0.01, 60, &seconds); break;
		case 'P': res.peers = 1; break;
		case 'j': o.json = 1; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind == argc)
		cli_usage_error(&o, "missing what to measure: 'wal', 'launch', 'restore' or "
				"'window'");
	else if (strcmp(argv[optind], "wal"))
		cli_usage_error(&o, "unknown benchmark '%s' (there are: wal, launch, restore, "
				"window)",
				argv[optind]);
	else if (optind + 1 < argc)
		cli_usage_error(&o, "unexpected argument '%s'", argv[optind + 1]);
	if ((ret = cli_parse_done(&o)))
		return ret;

	b.path = path;
	b.run_s = seconds / REPEATS;
	if (cli_fresh_path(path, msg, sizeof msg) < 0)
		return cli_fail(cmd, o.json, EXIT_USAGE, "--wal %s", msg);
	/* Refused before anything runs: libpmemlog would refuse it after. */
	if (res.peers && stat(path, &st) == 0 && S_ISCHR(st.st_mode))
		return cli_fail(cmd, o.json, EXIT_USAGE, "--peers: %s is a device; the peer's pool "
				"is a file beside the log: give --wal a file", path);
	if (res.peers && snprintf(pool, sizeof pool, "%s" PEER_POOL_SUFFIX, path) >= (int)sizeof pool)
		return cli_fail(cmd, o.json, EXIT_USAGE, "--peers: %s" PEER_POOL_SUFFIX ": path too "
				"long", path);
	if (res.peers && lstat(pool, &st) == 0)
		return cli_fail(cmd, o.json, EXIT_USAGE, "--peers: %s exists; libpmemlog's pool goes "
				"there, and nothing is written over (remove it, or give --wal another "
				"path)", pool);
	/* Made here, exclusively, so that removing it afterwards removes
	 * nothing but this run's log. */
	if (stat(path, &st) < 0) {
		if ((fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
			return cli_fail(cmd, o.json, EXIT_USAGE, "--wal %s: cannot create it: %s",
					path, strerror(errno));
		close(fd);
		made = 1;
	}
	if ((ret = open_log(&b, WAL_OPEN_CREATE, &err)) < 0) {
		give_back(path, made);
		return cli_fail(cmd, o.json, EXIT_USAGE, "%s", err.msg);
	}
	if (res.peers && bench_pmemlog_load(b.st.media == WAL_MEDIA_SHM, msg, sizeof msg) < 0) {
		wal_close(b.w);
		give_back(path, made);
		return cli_fail(cmd, o.json, EXIT_USAGE, "--peers: %s", msg);
	}
	b.dst_len = b.st.capacity;
	b.src = malloc(MAX_RECORD);
	b.dst = malloc(b.dst_len);
	if (!b.src || !b.dst) {
		ret = WAL_ENOMEM;
	} else {
		for (uint32_t i = 0; i < MAX_RECORD; i++)
			b.src[i] = (uint8_t)(i * 2654435761u >> 24);
		ret = run_all(&b, &res, &err);
	}
	wal_close(b.w);
	give_back(path, made);
	if (ret == 0 && res.peers && run_peers(&b, pool, &res, msg, sizeof msg) < 0) {
		free(b.src);
		free(b.dst);
		return cli_fail(cmd, o.json, EXIT_USAGE, "--peers: %s", msg);
	}
	free(b.src);
	free(b.dst);
	if (ret < 0)
		return cli_fail(cmd, o.json, EXIT_USAGE, "%s",
				err.msg[0] ? err.msg : wal_strerror(ret));
	bench_cpu_model(cpu, sizeof cpu);
	if (o.json)
		print_json(&b, &res, cpu);
	else
		print_text(&b, &res, cpu);
	return EXIT_OK;
}

const struct cli_command cmd_bench = {
	.name = "bench",
	.summary = "measure the log and restore against memcpy, the interposer's cost per launch, "
		   "a window's bytes",
	.usage =
	"Usage: moeft bench wal [--wal PATH] [--seconds S] [--peers] [--json]\n"
	"       moeft bench launch --fixture DIR --bench PROG --serve PROG\n"
	"                          [--preload LIB] [--launches N] [--steps N] [--json]\n"
	"       moeft bench restore [--pool-mib N] [--chunk-kib K]\n"
	"                           [--fixture DIR --serve PROG [--preload LIB]] [--json]\n"
	"       moeft bench window --fixture DIR --serve PROG [--preload LIB]\n"
	"                          [--pool-mib N] [--windows N] [--window W] [--json]\n"
	"\n"
	"wal:\n"
	"Measure, on a fresh 256 MiB log that wraps many times: append+commit\n"
	"throughput for 64 B, 4 KiB, 64 KiB and 1 MiB records against memcpy of\n"
	"the same bytes (commits every 64 records or 1 MiB), 4 threads appending,\n"
	"commit latency (p50/p99), the recovery scan and CRC-32C of the scanned\n"
	"bytes against memcpy.  Each figure is the best of 3 runs.  The log is\n"
	"removed afterwards.\n"
	"\n"
	"  -w, --wal PATH     the log (default /dev/shm/moeft-USER-bench.wal): a new\n"
	"                     file, an empty one (emptied again afterwards) or a\n"
	"                     device-DAX node without a log; never an existing log\n"
	"  -s, --seconds S    time per measurement, 0.01 to 60 (default 0.5)\n"
	"  -P, --peers        the same on PMDK's libpmemlog too (PATH.pmemlog)\n"
	"  -j, --json         print one JSON object instead of a table\n"
	"  -h, --help         show this help\n"
	"\n"
	"launch:\n"
	"Measure what libmoeft.so costs on the CPU fixture, without and with\n"
	"LD_PRELOAD in the same run, alternating: ns per\n"
	"cudaLaunchKernel of a kernel no rule owns and of one a rule owns (best\n"
	"of 5 runs of PROG of --bench), the wall time of the serving program in\n"
	"eager and in graph mode (best of 3), and, when valgrind is on PATH, the\n"
	"instructions libmoeft.so adds to a no-rule launch (callgrind).  Every\n"
	"piece is named: in moeft's source tree, tests/bench/launch.sh runs this\n"
	"with a build's (tests/fixture, tests/bench/launch_bench, tests/serve/serve).\n"
	"\n"
	"  -f, --fixture DIR  the CPU fixture: libcudart.so.13, libcuda.so.1 (every\n"
	"                     run's LD_LIBRARY_PATH)\n"
	"  -b, --bench PROG   the launch micro-benchmark (tests/bench/launch_bench.c:\n"
	"                     --launches N --repeats R [--callgrind], prints\n"
	"                     norule_ns=X rule_ns=Y)\n"
	"      --serve PROG   the serving program (demo/serve.c: --mode=eager|graph\n"
	"                     --steps=N)\n"
	"  -p, --preload LIB  libmoeft.so to measure (default: the one beside moeft)\n"
	"  -n, --launches N   launches per run, 1000 to 100000000 (default 100000;\n"
	"                     callgrind counts at most 20000)\n"
	"  -S, --steps N      decode steps of a serving run (default 512)\n"
	"  -j, --json         print one JSON object instead of a table\n"
	"\n"
	"restore:\n"
	"Forge under /dev/shm a log and KV store as a crash leaves them (4 pools,\n"
	"16 committed windows, an uncommitted one), then time 'moeft restore --wal\n"
	"W --out D' in-process against memcpy of the same bytes, and its parts\n"
	"(state_load, the images; best of 5; the images checked against the\n"
	"forged bytes).  With --fixture and --serve (as for launch), also online:\n"
	"the serving program's log restored by 'moeft restore -- serve', the\n"
	"preload's copy from the KV store against memcpy of the live bytes.\n"
	"\n"
	"  -m, --pool-mib N   KV pool bytes in all, in MiB, 1 to 65536 (default 256)\n"
	"  -k, --chunk-kib K  chunk size in KiB, a power of two, 4 to 1048576\n"
	"                     (default 64, the preload's)\n"
	"  -j, --json         print one JSON object instead of a table\n"
	"\n"
	"window:\n"
	"What a window costs in bytes on the fixture: --serve decodes --windows\n"
	"windows into a KV pool of --pool-mib MiB, without and with the preload.\n"
	"Per window: KV bytes written, bytes the snapshot read (goal <= 2 per byte\n"
	"written) and staged, pinned staging (goal <= 4), ring overflows (goal 0).\n"
	"--fixture, --serve (--kv-pool-mib), --preload: as for launch.\n"
	"\n"
	"  -m, --pool-mib N   the KV pool, 8 to 16384 MiB (default 1024)\n"
	"  -n, --windows N    decode windows, 2 to 4096 (default 8)\n"
	"  -w, --window W     steps per window, MOEFT_WINDOW (default 16)\n"
	"  -j, --json         print one JSON object instead of a table\n"
	"\n"
	"Exit status: 0 done, 2 usage or I/O error, or a missing piece.\n",
	.run = bench,
};

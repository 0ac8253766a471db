/*
 * bench_restore.c - moeft bench restore: the offline restore of a log and
 * its KV store against memcpy of the same bytes.
 *
 * The fixture is what the preload leaves after a crash, forged with the
 * writers (forge.h) in a fresh directory under /dev/shm that is removed
 * afterwards: POOLS KV pools of equal size, --pool-mib MiB in all, in
 * chunks of --chunk-kib KiB, each an allocation logged first as such and
 * then again as a KV pool; WINDOWS decode windows of STEPS steps, each
 * copying its share of the chunks (pool after pool) into the store with
 * their KVREF records, so that every chunk has a committed copy.  The last
 * window also rewrites every REWRITE-th chunk of the earlier ones (their
 * newest copy is then in the other slot), and a window that never commits
 * (the crash) puts newer copies of another REWRITE-th of them, which the
 * restore must pass over.
 *
 * Method: restore_offline() (restore.h), the code 'moeft restore --wal W
 * --out D' runs, into a directory that does not exist yet, REPEATS times;
 * the output is removed between runs, untimed.  memcpy copies as many
 * bytes between two buffers touched beforehand, alternating with the
 * restores.  Every figure is the best of its REPEATS, the parts of the
 * restore each on its own.  The bytes are the images' (the pools' size).
 * Once timed, the images of the last run are compared with what was
 * forged, so that a fast restore of the wrong bytes cannot pass.
 *
 * Online, with --fixture and --serve (fxrun.h): the serving program on
 * the CPU fixture decodes ONLINE_STEPS steps into a KV pool of --pool-mib
 * MiB under the preload, and its log stands in for a crashed server's;
 * then 'moeft restore --wal W -- serve' restarts it, and the preload's
 * line says what the copy into the (fixture's) device moved: the bytes of
 * live chunks read from the KV store (live_bytes), the bytes copied
 * (copied_bytes; live chunks and the short runs of zeros between them),
 * the zeros set, and the copy's time, against memcpy of the live bytes in
 * this process (best of REPEATS).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/statvfs.h>

#include "bench.h"
#include "forge.h"
#include "fxrun.h"
#include "json.h"
#include "record.h"
#include "restore.h"

#define POOLS 4u
#define WINDOWS 16u
#define STEPS 16u               /* MOEFT_WINDOW's default */
#define REWRITE 8u
#define REPEATS 5
#define FINGERPRINT UINT64_C(0x6b76706f6f6c)
#define BASE "/dev/shm/moeft-bench-restore-XXXXXX"

struct fixture {
	char dir[sizeof BASE], out[sizeof BASE + 8];
	struct forge f;
	uint64_t pool_bytes;            /* of each pool */
	uint64_t per_pool;              /* chunks of each pool */
	uint64_t chunks;                /* of all pools */
	uint32_t no[POOLS];             /* the store's pool numbers */
	uint8_t *buf;                   /* one chunk */
};

struct figures {
	double restore_s, memcpy_s, load_s, images_s;   /* best of REPEATS */
	struct restore_stats last;
	/* online (fxrun.h): the preload's restore line, and memcpy of live */
	int online;
	uint64_t pool_bytes, restored, copied, zeroed, live;
	double restore_online_s, copy_s, live_memcpy_s;	/* all, the data, memcpy */
};

/* The online run: 4 layers, hidden 256, 8 sequences decoding, one pool. */
#define ONLINE_STEPS "--steps=144"

/* ---- the fixture ----------------------------------------------------------- */

static uint64_t chunk_len(const struct fixture *x, uint64_t c)
{
	uint64_t left = x->pool_bytes - c * x->f.chunk_bytes;

	return left < x->f.chunk_bytes ? left : x->f.chunk_bytes;
}

/* The bytes of copy `version` of chunk g (over all pools) into x->buf:
 * distinct for every chunk and copy, so that a restore taking the wrong
 * copy is seen. */
static void fill(struct fixture *x, uint64_t g, unsigned version)
{
	uint64_t v = (g << 2 | version) * UINT64_C(0x9e3779b97f4a7c15) + 1;

	for (uint64_t i = 0; i + 8 <= x->f.chunk_bytes; i += 8) {
		v ^= v << 13;
		v ^= v >> 7;
		v ^= v << 17;
		memcpy(x->buf + i, &v, 8);
	}
}

static void put(struct fixture *x, uint64_t g, unsigned version)
{
	uint64_t c = g % x->per_pool;

	fill(x, g, version);
	forge_put(&x->f, x->no[g / x->per_pool], c, x->buf, (uint32_t)chunk_len(x, c));
}

/* Whether the last window rewrote chunk g: version 1 of it is current. */
static int rewritten(const struct fixture *x, uint64_t g)
{
	return g % REWRITE == 0 && g < x->chunks * (WINDOWS - 1) / WINDOWS;
}

/* Bytes the files take at most: the log, the store's committed copies,
 * the rewrites and the crash's copies, and the images. */
static uint64_t room(const struct fixture *x)
{
	uint64_t bytes = POOLS * x->pool_bytes;

	return x->f.log_size + bytes + 2 * (bytes / REWRITE + x->f.chunk_bytes) + bytes;
}

static int make_fixture(struct fixture *x)
{
	struct forge *f = &x->f;

	if (forge_open(f) < 0)
		return -1;
	for (uint32_t i = 0; i < POOLS; i++) {
		forge_alloc(f, i + 1, x->pool_bytes, i, ALLOC_ROLE_OTHER);
		x->no[i] = forge_pool(f, x->pool_bytes, i);
		forge_alloc(f, i + 1, x->pool_bytes, i, ALLOC_ROLE_KV_POOL);
	}
	for (uint64_t w = 0; w < WINDOWS; w++) {
		for (uint64_t g = x->chunks * w / WINDOWS; g < x->chunks * (w + 1) / WINDOWS; g++)
			put(x, g, 0);
		for (uint64_t g = 0; w == WINDOWS - 1 && g < x->chunks; g++)
			if (rewritten(x, g))
				put(x, g, 1);
		forge_commit(f, w * STEPS, STEPS, 0);
	}
	for (uint64_t g = REWRITE / 2; g < x->chunks; g += REWRITE)
		put(x, g, 2);
	return forge_close(f) < 0 ? -1 : 0;
}

/* Every image holds the committed copy of each of its chunks. */
static int check_images(struct fixture *x, char *msg, size_t len)
{
	uint8_t *img = malloc(x->f.chunk_bytes);
	char name[32], path[sizeof x->out + sizeof name];
	int ret = 0;

	for (uint32_t i = 0; img && i < POOLS && !ret; i++) {
		int fd;

		snprintf(name, sizeof name, "kv-pool-%" PRIu32 ".bin", x->no[i]);
		snprintf(path, sizeof path, "%s/%s", x->out, name);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			snprintf(msg, len, "the restore wrote no %s: %s", name, strerror(errno));
			ret = -1;
		}
		for (uint64_t c = 0; !ret && c < x->per_pool; c++) {
			uint64_t g = i * x->per_pool + c, n = chunk_len(x, c);

			fill(x, g, rewritten(x, g) ? 1 : 0);
			if (pread(fd, img, n, (off_t)(c * x->f.chunk_bytes)) != (ssize_t)n ||
			    memcmp(img, x->buf, n)) {
				snprintf(msg, len, "the restored %s: chunk %" PRIu64 " is not the "
					 "committed copy forged", name, c);
				ret = -1;
			}
		}
		if (fd >= 0)
			close(fd);
	}
	if (!img) {
		snprintf(msg, len, "out of memory");
		ret = -1;
	}
	free(img);
	return ret;
}

/* ---- measuring -------------------------------------------------------------- */

static int run(struct fixture *x, struct figures *fg, char *msg, size_t len)
{
	uint64_t bytes = POOLS * x->pool_bytes;
	uint8_t *src = malloc(bytes), *dst = malloc(bytes);
	int ret = 0;

	if (!src || !dst) {
		snprintf(msg, len, "out of memory for memcpy's %" PRIu64 " bytes", bytes);
		ret = -1;
	} else {
		memset(src, 0x5a, bytes);
		memset(dst, 0, bytes);
	}
	for (int r = 0; r < REPEATS && !ret; r++) {
		struct restore_stats st;
		double t;

		cli_rm_tree(x->out);
		if ((ret = restore_offline(x->f.path, x->out, &st)) != EXIT_OK) {
			snprintf(msg, len, "the restore %s (status %d)", ret == EXIT_BAD ?
				 "is not whole" : "failed", ret);
			ret = -1;
			break;
		}
		if (st.bytes != bytes || st.lost) {
			snprintf(msg, len, "the restore wrote %" PRIu64 " bytes, %" PRIu64 " chunks "
				 "lost; %" PRIu64 " bytes were forged", st.bytes, st.lost, bytes);
			ret = -1;
			break;
		}
		bench_keep_min(&fg->restore_s, st.total_s);
		bench_keep_min(&fg->load_s, st.load_s);
		bench_keep_min(&fg->images_s, st.images_s);
		fg->last = st;
		t = cli_now();
		memcpy(dst, src, bytes);
		bench_keep(dst);
		bench_keep_min(&fg->memcpy_s, cli_now() - t);
	}
	free(src);
	free(dst);
	return ret ? ret : check_images(x, msg, len);
}

/* ---- online: the preload's copy from the KV store --------------------------- */

/* The preload's line in c->err: 0, or -1 with c->msg set. */
static int read_copy_line(struct fxrun *c, struct figures *fg)
{
	static const char key[] = " bytes of KV restored in ";
	char buf[16384], *p, *q;
	FILE *fp = fopen(c->err, "r");
	size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;

	if (fp)
		fclose(fp);
	buf[n] = '\0';
	if ((p = strstr(buf, key)))
		for (q = p; q > buf && q[-1] >= '0' && q[-1] <= '9'; q--)
			;
	if (!p || sscanf(q, "%" SCNu64 " bytes of KV restored in %lf s (%*f GB/s): %" SCNu64
			 " bytes of data copied in %lf s (%*f GB/s), %" SCNu64 " bytes of zeros "
			 "set; %" SCNu64 " bytes read from the KV store", &fg->restored,
			 &fg->restore_online_s, &fg->copied, &fg->copy_s, &fg->zeroed,
			 &fg->live) != 6) {
		snprintf(c->msg, sizeof c->msg, "the restored run said no restore line: '%.400s'",
			 buf);
		return -1;
	}
	return 0;
}

static int online(struct fxrun *c, struct figures *fg, uint64_t mib, char *msg, size_t len)
{
	char exe[PATH_MAX], pool[32], journal[PATH_MAX + 16], out[PATH_MAX + 16];
	const char *lib = c->preload ? c->preload : c->lib;
	char *serve[] = { c->serve, "--mode=eager", "--kv-layout=one", "--layers=4",
			  "--hidden=256", "--seqs=8", ONLINE_STEPS, pool, journal, NULL };
	char *restore[] = { exe, "restore", "--wal", c->wal, "--out", out, "--preload",
			    (char *)lib, "--", c->serve, "--mode=eager", "--kv-layout=one",
			    "--layers=4", "--hidden=256", "--seqs=8", ONLINE_STEPS, pool,
			    journal, NULL };
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	uint8_t *src = NULL, *dst = NULL;
	double wall, t;
	int ret = -1;

	snprintf(pool, sizeof pool, "--kv-pool-mib=%" PRIu64, mib);
	snprintf(journal, sizeof journal, "--journal=%s/journal", c->dir);
	snprintf(out, sizeof out, "%s/out", c->dir);
	if (n <= 0) {
		snprintf(msg, len, "/proc/self/exe: %s", strerror(errno));
		return -1;
	}
	exe[n] = '\0';
	if (fxrun_run(c, serve, FXRUN_PRELOAD | FXRUN_KEEP_LOG, NULL, 0, &wall) < 0 ||
	    fxrun_run(c, restore, FXRUN_KEEP_ERR, NULL, 0, &wall) < 0 || read_copy_line(c, fg) < 0) {
		snprintf(msg, len, "%.900s", c->msg);
		return -1;
	}
	fg->online = 1;
	fg->pool_bytes = mib << 20;
	if (fg->live && (!(src = malloc(fg->live)) || !(dst = malloc(fg->live)))) {
		snprintf(msg, len, "out of memory for memcpy's %" PRIu64 " bytes", fg->live);
		goto out;
	}
	if (fg->live) {
		memset(src, 0x5a, fg->live);
		memset(dst, 0, fg->live);
	}
	for (int r = 0; r < REPEATS; r++) {
		t = cli_now();
		if (fg->live)
			memcpy(dst, src, fg->live);
		bench_keep(dst);
		bench_keep_min(&fg->live_memcpy_s, cli_now() - t);
	}
	ret = 0;
out:
	free(src);
	free(dst);
	return ret;
}

/* ---- output -------------------------------------------------------------------- */

static double gbps(uint64_t bytes, double s)
{
	return (double)bytes / s / 1e9;
}

static double per_live(const struct figures *fg)
{
	return fg->live ? (double)fg->copied / (double)fg->live : 0;
}

static double online_ratio(const struct figures *fg)
{
	return fg->copy_s > 0 ? fg->live_memcpy_s / fg->copy_s : 0;
}

static void print_text(const struct fixture *x, const struct figures *fg, const char *cpu)
{
	uint64_t bytes = fg->last.bytes;
	char b1[32], b2[32];

	printf("moeft bench restore: %s in %u KV pools of %s chunks (%" PRIu64 " chunks, %u "
	       "decode windows), in /dev/shm, best of %d\n", cli_fmt_bytes(b1, sizeof b1, bytes),
	       POOLS, cli_fmt_bytes(b2, sizeof b2, x->f.chunk_bytes), x->chunks, WINDOWS, REPEATS);
	printf("machine: %s, %ld CPUs\n\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
	printf("  %-44s %10s %10s\n", "", "seconds", "GB/s");
	printf("  %-44s %10.4f %10.2f\n", "restore (moeft restore --wal W --out D)",
	       fg->restore_s, gbps(bytes, fg->restore_s));
	printf("  %-44s %10.4f %10.2f\n", "memcpy of the same bytes", fg->memcpy_s,
	       gbps(bytes, fg->memcpy_s));
	printf("  %-44s %10.4f\n", "state_load: log read and checked", fg->load_s);
	printf("  %-44s %10.4f %10.2f\n", "images: chunks checked, written, synced",
	       fg->images_s, gbps(bytes, fg->images_s));
	printf("\nratio, restore GB/s / memcpy GB/s: %.3f\n", fg->memcpy_s / fg->restore_s);
	if (!fg->online)
		return;
	printf("\nonline (moeft restore -- serve on the CPU fixture, a pool of %s):\n",
	       cli_fmt_bytes(b1, sizeof b1, fg->pool_bytes));
	printf("  %-44s %14" PRIu64 "\n", "live bytes read from the KV store", fg->live);
	printf("  %-44s %14" PRIu64 "\n", "bytes copied into the device", fg->copied);
	printf("  %-44s %14" PRIu64 "\n", "bytes of zeros set on the device", fg->zeroed);
	printf("  %-44s %14.3f\n", "copied per live byte", per_live(fg));
	printf("  %-44s %14.4f s\n", "the copy, zeros set included", fg->restore_online_s);
	printf("  %-44s %14.4f s, %.2f GB/s of live bytes\n", "the data's copy", fg->copy_s,
	       gbps(fg->live, fg->copy_s));
	printf("  %-44s %14.4f s\n", "memcpy of the live bytes", fg->live_memcpy_s);
	printf("ratio, memcpy of the live bytes / the data's copy: %.3f\n", online_ratio(fg));
}

static void print_json(const struct fixture *x, const struct figures *fg, const char *cpu)
{
	uint64_t bytes = fg->last.bytes;
	struct json j;

	json_init(&j, stdout);
	json_obj_begin(&j);
	json_kv_str(&j, "status", "ok");
	bench_machine_json(&j, cpu);
	json_kv_u64(&j, "bytes", bytes);
	json_kv_u64(&j, "pools", POOLS);
	json_kv_u64(&j, "chunk_bytes", x->f.chunk_bytes);
	json_kv_u64(&j, "chunks", x->chunks);
	json_kv_u64(&j, "windows", WINDOWS);
	json_kv_u64(&j, "repeats", REPEATS);
	json_kv_double(&j, "restore_s", fg->restore_s);
	json_kv_double(&j, "restore_gb_per_s", gbps(bytes, fg->restore_s));
	json_kv_double(&j, "memcpy_s", fg->memcpy_s);
	json_kv_double(&j, "memcpy_gb_per_s", gbps(bytes, fg->memcpy_s));
	json_kv_double(&j, "memcpy_ratio", fg->memcpy_s / fg->restore_s);
	json_kv_double(&j, "load_s", fg->load_s);
	json_kv_double(&j, "images_s", fg->images_s);
	json_kv_double(&j, "images_gb_per_s", gbps(bytes, fg->images_s));
	if (fg->online) {
		json_key(&j, "online");
		json_obj_begin(&j);
		json_kv_u64(&j, "pool_bytes", fg->pool_bytes);
		json_kv_u64(&j, "restored_bytes", fg->restored);
		json_kv_u64(&j, "live_bytes", fg->live);
		json_kv_u64(&j, "copied_bytes", fg->copied);
		json_kv_u64(&j, "zeroed_bytes", fg->zeroed);
		json_kv_double(&j, "copied_per_live", per_live(fg));
		json_kv_double(&j, "restore_s", fg->restore_online_s);
		json_kv_double(&j, "copy_s", fg->copy_s);
		json_kv_double(&j, "live_memcpy_s", fg->live_memcpy_s);
		json_kv_double(&j, "memcpy_ratio", online_ratio(fg));
		json_obj_end(&j);
	}
	json_obj_end(&j);
}

int bench_restore(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pool-mib", required_argument, NULL, 'm' },
		{ "chunk-kib", required_argument, NULL, 'k' },
		FXRUN_OPTIONS,
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct fixture *x;
	struct figures fg = { 0 };
	struct fxrun fx = { 0 };
	const char *serve = NULL;
	uint64_t mib = 256, kib = 64;
	char msg[1024], cpu[128], b1[32], b2[32];
	struct statvfs vfs;
	int c, ret;

	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		if (fxrun_option(&fx, c, optarg, &serve))
			continue;
		switch (c) {
		case 'm': cli_parse_u64(&o, "--pool-mib", optarg, 1, 65536, &mib); break;
		case 'k':
			if (cli_parse_u64(&o, "--chunk-kib", optarg, 4, 1u << 20, &kib) == 0 &&
			    (kib & (kib - 1)))
				cli_usage_error(&o, "--chunk-kib: %s is not a power of two", optarg);
			break;
		case 'j': o.json = 1; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind == argc || strcmp(argv[optind], "restore"))
		cli_usage_error(&o, "missing what to measure: 'restore'");
	else if (optind + 1 < argc)
		cli_usage_error(&o, "unexpected argument '%s'", argv[optind + 1]);
	/* Online needs the fixture and the serving program, both or none. */
	if (fx.fixture || serve || fx.preload)
		fxrun_pieces(&o, &fx, serve);
	if ((ret = cli_parse_done(&o)))
		return ret;

	if (!(x = calloc(1, sizeof *x)) || !(x->buf = malloc(kib << 10))) {
		free(x);
		return cli_fail(cmd, o.json, EXIT_USAGE, "out of memory");
	}
	x->pool_bytes = (mib << 20) / POOLS;
	x->f.chunk_bytes = kib << 10;
	x->per_pool = (x->pool_bytes + x->f.chunk_bytes - 1) / x->f.chunk_bytes;
	x->chunks = POOLS * x->per_pool;
	x->f.fingerprint = FINGERPRINT;
	/* room for every record without reclaiming: a KVREF takes 96 ring
	 * bytes, a WINDOW or ALLOC less than 128 */
	x->f.log_size = ((x->chunks * 5 / 4 + 2 * POOLS + WINDOWS) * 128 + (2u << 20)) &
			~(uint64_t)((1u << 20) - 1);
	strcpy(x->dir, BASE);
	/* The store's pages are mapped: running out of room would be SIGBUS. */
	if (statvfs("/dev/shm", &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < room(x)) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "/dev/shm: %s free, the fixture and its "
			       "restore need %s", cli_fmt_bytes(b1, sizeof b1,
			       (uint64_t)vfs.f_bavail * vfs.f_frsize),
			       cli_fmt_bytes(b2, sizeof b2, room(x)));
		goto out;
	}
	if (!mkdtemp(x->dir)) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "%s: %s", BASE, strerror(errno));
		goto out;
	}
	snprintf(x->f.path, sizeof x->f.path, "%s/bench.wal", x->dir);
	snprintf(x->out, sizeof x->out, "%s/out", x->dir);
	if (make_fixture(x) < 0)
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "forging the fixture: %s", x->f.msg);
	else if (run(x, &fg, msg, sizeof msg) < 0)
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "%s", msg);
	cli_rm_tree(x->dir);
	if (!ret && serve && (fxrun_setup(&fx, "restore", NULL) < 0 ||
			      online(&fx, &fg, mib, msg, sizeof msg) < 0))
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "online: %s", fx.dir[0] ? msg : fx.msg);
	fxrun_done(&fx);
	if (ret)
		goto out;
	bench_cpu_model(cpu, sizeof cpu);
	if (o.json)
		print_json(x, &fg, cpu);
	else
		print_text(x, &fg, cpu);
out:
	free(x->buf);
	free(x);
	return ret;
}

/*
 * kvtool.c - what check.sh needs besides moeft itself, computed without
 * tools/state.c so that the checks do not share its mistakes:
 *
 *   kvtool crc FILE...          CRC-32C of the files one after the other
 *   kvtool routing WAL          ROUTING records in the log's intact windows
 *   kvtool flip WAL data|header damage the KV store (WAL.kv) under the first
 *                               KVREF of the last decode window: one byte
 *                               of the slot's data, or of its header (the
 *                               data CRC field); prints "POOL CHUNK"
 *   kvtool fresh WAL            a new log with nothing committed
 *
 * Exit status 0, 1 when there is nothing to damage, 2 on bad usage or I/O
 * errors.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "kvformat.h"
#include "record.h"
#include "wal.h"

static void __attribute__((noreturn, format(printf, 2, 3))) die(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("kvtool: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

static struct wal_reader *open_log(const char *path)
{
	struct wal_error err = { 0 };
	struct wal_reader *r;

	if (wal_reader_open_path(path, &r, &err) < 0)
		die(2, "%s", err.msg);
	return r;
}

static int crc(int argc, char **argv)
{
	static uint8_t buf[1 << 16];
	uint32_t c = 0;
	size_t n;

	for (int i = 0; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");

		if (!f)
			die(2, "%s: cannot open", argv[i]);
		while ((n = fread(buf, 1, sizeof buf, f)) > 0)
			c = crc32c(c, buf, n);
		if (ferror(f))
			die(2, "%s: read error", argv[i]);
		fclose(f);
	}
	printf("%08x\n", (unsigned)c);
	return 0;
}

static int routing(const char *path)
{
	struct wal_reader *r = open_log(path);
	struct wal_record rec;
	struct wal_iter it;
	unsigned long long n = 0;

	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec))
		n += rec.type == WAL_REC_ROUTING;
	printf("%llu\n", n);
	wal_reader_close(r);
	return 0;
}

/* The first KVREF of the last intact window with decode steps. */
static int last_kvref(const char *path, struct rec_kvref *k, uint64_t *log_id)
{
	struct wal_reader *r = open_log(path);
	const struct wal_window *win;
	struct rec_window_steps ws;
	struct wal_record rec;
	struct wal_iter it;
	size_t n, i;
	int found = 0;

	win = wal_reader_windows(r, &n);
	for (i = n; i > 0; i--)
		if (win[i - 1].state == WAL_WINDOW_INTACT &&
		    rec_window_steps_decode(win[i - 1].extra, win[i - 1].extra_len, &ws) == 0 &&
		    ws.steps)
			break;
	wal_iter_init(&it, r);
	while (i && !found && wal_iter_next(&it, &rec))
		found = rec.window == win[i - 1].id && rec.type == WAL_REC_KVREF &&
			rec_kvref_decode(rec.payload, rec.len, k) == 0;
	*log_id = wal_reader_recovery(r)->log_id;
	wal_reader_close(r);
	return found;
}

/* Where chunk k->block's slot headers lie: in its pool's region, wherever
 * the pool table says it is (FORMAT.md, "KV store"). */
static uint64_t header_off(const char *kvpath, const struct rec_kvref *k, uint64_t log_id)
{
	struct wal_error err = { 0 };
	struct kvs_reader *r;
	struct kvs_pool_info pi;
	struct kvs_geom g = { 0 };
	uint64_t slot;

	if (kvs_reader_open(kvpath, log_id, &r, &err) < 0)
		die(2, "%s", err.msg);
	if (kvs_reader_pool(r, k->pool, &pi) < 0 || kvs_geometry(&pi.d, pi.off, &g) < 0)
		die(2, "%s: pool %u unreadable", kvpath, (unsigned)k->pool);
	kvs_reader_close(r);
	slot = (k->store_off - g.off - g.data_off) / pi.d.chunk_bytes;
	if (k->store_off < g.off + g.data_off || slot / 2 != k->block)
		die(2, "%s: store offset %llu is not a slot of pool %u chunk %llu", kvpath,
		    (unsigned long long)k->store_off, (unsigned)k->pool,
		    (unsigned long long)k->block);
	return g.off + slot * KVS_SLOT_SIZE;
}

static int flip(const char *path, const char *what)
{
	struct rec_kvref k;
	uint64_t log_id, off;
	char kvpath[PATH_MAX];
	uint8_t b;
	int fd;

	if (kvs_path(path, kvpath, sizeof kvpath) < 0)
		die(2, "%s: path too long", path);
	if (!last_kvref(path, &k, &log_id))
		die(1, "%s: the last decode window has no KVREF", path);
	if (!strcmp(what, "data"))
		off = k.store_off + k.bytes / 2;
	else
		off = header_off(kvpath, &k, log_id) + 20; /* the data CRC */
	if ((fd = open(kvpath, O_RDWR)) < 0 || pread(fd, &b, 1, (off_t)off) != 1)
		die(2, "%s: cannot read offset %llu", kvpath, (unsigned long long)off);
	b ^= 0x5a;
	if (pwrite(fd, &b, 1, (off_t)off) != 1)
		die(2, "%s: cannot write offset %llu", kvpath, (unsigned long long)off);
	close(fd);
	printf("%u %llu\n", (unsigned)k.pool, (unsigned long long)k.block);
	return 0;
}

static int fresh(const char *path)
{
	struct wal_options opt;
	struct wal_error err = { 0 };
	struct wal *w;

	wal_options_init(&opt);
	opt.size = 1 << 20;
	opt.flags = WAL_OPEN_CREATE;
	if (wal_open(path, &opt, &w, &err) < 0)
		die(2, "%s", err.msg);
	wal_close(w);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "crc"))
		return crc(argc - 2, argv + 2);
	if (argc == 3 && !strcmp(argv[1], "routing"))
		return routing(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "flip") &&
	    (!strcmp(argv[3], "data") || !strcmp(argv[3], "header")))
		return flip(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "fresh"))
		return fresh(argv[2]);
	fputs("usage: kvtool crc FILE... | routing WAL | flip WAL data|header | fresh WAL\n", stderr);
	return 2;
}

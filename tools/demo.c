/*
 * demo.c - moeft demo: a serving process writes its log, is killed, and the
 * log is recovered.
 *
 * A forked child plays an MoE inference server: it formats a log, records
 * its device allocations, then for every decode step the top-k routing of
 * each layer and the KV blocks that filled up, committing a window every
 * WINDOW_STEPS steps and telling the parent each window id it saw commit.
 * Unless --no-crash, it SIGKILLs itself halfway through a window.  The
 * parent then recovers the log and checks that exactly the windows the
 * child saw commit are there, intact, and nothing else.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include "cli.h"
#include "crc32c.h"
#include "hist.h"
#include "json.h"
#include "record.h"
#include "report.h"

/* The simulated model and server. */
#define LAYERS 16u
#define EXPERTS 64u
#define TOP_K 8u
#define BATCH 32u		/* sequences, one token each per decode step */
#define WINDOW_STEPS 16u
#define ZIPF_MIN 0.7		/* skew of expert popularity: Zipf exponent */
#define ZIPF_MAX 1.2		/* of a layer, drawn from [ZIPF_MIN, ZIPF_MAX) */
#define BLOCK_TOKENS 16u
#define KV_HEADS 8u
#define HEAD_DIM 128u
#define BLOCK_BYTES (BLOCK_TOKENS * KV_HEADS * HEAD_DIM * 2u)	/* fp16 */
#define POOL_BLOCKS 512u	/* per layer and per K or V */
#define SEQ_BLOCKS (POOL_BLOCKS / BATCH) /* ring of blocks per sequence slot */
#define KV_POOL_ID 1u
#define SEED UINT64_C(0x6d6f656674646d6f)

/* At about 380 KiB per window, this many fit the log without wrapping, so
 * no window is reclaimed and all of them must be recovered. */
#define LOG_SIZE (UINT64_C(64) << 20)
#define MAX_WINDOWS 128u
#define DEFAULT_WINDOWS 64u


/* Child to parent, through a pipe. */
enum { MSG_OPENED = 1, MSG_COMMITTED = 2 };
struct msg {
	uint32_t what;
	uint32_t media;		/* MSG_OPENED: enum wal_media */
	uint64_t window;	/* MSG_COMMITTED: the window id */
};

struct server {
	struct wal *w;
	int fd;			/* pipe to the parent */
	uint64_t rng;
	uint32_t expert_at_rank[LAYERS][EXPERTS]; /* popularity order */
	double cdf[LAYERS][EXPERTS]; /* of the popularity ranks */
	uint32_t prompt[BATCH];	/* tokens of each sequence before step 0 */
	uint32_t pattern_crc;	/* CRC of the fixed part of a fake KV block */
};

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * UINT64_C(0x2545f4914f6cdd1d);
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	while (*s)
		h = (h ^ (uint8_t)*s++) * UINT64_C(0x100000001b3);
	return h;
}

/* The child cannot go on: say why and exit with `code`. */
static void die(int code, const char *what, int status)
{
	fprintf(stderr, "moeft demo: serving process: %s: %s\n", what, wal_strerror(status));
	_exit(code);
}

static void tell_parent(struct server *s, uint32_t what, uint32_t media, uint64_t window)
{
	struct msg m = { .what = what, .media = media, .window = window };
	ssize_t n;

	while ((n = write(s->fd, &m, sizeof m)) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof m)
		_exit(EXIT_BAD);
}

static void append(struct server *s, unsigned type, const void *p, uint32_t len)
{
	int64_t ret = wal_append(s->w, type, p, len);

	if (ret < 0)
		die(EXIT_BAD, "wal_append", (int)ret);
}

static void setup(struct server *s)
{
	uint8_t pattern[BLOCK_BYTES - 32];

	s->rng = SEED;
	for (unsigned l = 0; l < LAYERS; l++) {
		double u = (double)(xorshift(&s->rng) % 1000) / 1000;
		double zipf = ZIPF_MIN + (ZIPF_MAX - ZIPF_MIN) * u;
		double sum = 0;

		for (unsigned r = 0; r < EXPERTS; r++)
			s->cdf[l][r] = sum += 1.0 / pow(r + 1, zipf);
		for (unsigned e = 0; e < EXPERTS; e++)
			s->expert_at_rank[l][e] = e;
		for (unsigned e = EXPERTS - 1; e > 0; e--) {
			unsigned r = (unsigned)(xorshift(&s->rng) % (e + 1));
			uint32_t t = s->expert_at_rank[l][e];

			s->expert_at_rank[l][e] = s->expert_at_rank[l][r];
			s->expert_at_rank[l][r] = t;
		}
	}
	for (unsigned i = 0; i < BATCH; i++)
		s->prompt[i] = 64 + (uint32_t)(xorshift(&s->rng) % 448);
	for (size_t i = 0; i < sizeof pattern; i++)
		pattern[i] = (uint8_t)xorshift(&s->rng);
	s->pattern_crc = crc32c(0, pattern, sizeof pattern);
}

/* Weights, KV pool and workspace, as a server allocates them at start. */
static void log_allocations(struct server *s)
{
	uint64_t expert_bytes = (uint64_t)EXPERTS * 3 * 2048 * 1408 * 2;
	uint64_t base = UINT64_C(0x7f3a00000000), id = KV_POOL_ID;
	uint8_t buf[ALLOC_PAYLOAD_SIZE];
	struct rec_alloc a;

	for (unsigned i = 0; i < LAYERS + 3; i++) {
		a = (struct rec_alloc){ .alloc_id = id++, .base = base, .api = ALLOC_API_CUDA_MALLOC };
		if (i == 0) {
			a.size = (uint64_t)LAYERS * 2 * POOL_BLOCKS * BLOCK_BYTES;
			a.fingerprint = fnv1a("kv_cache.py:allocate_kv_pool");
			a.role = ALLOC_ROLE_KV_POOL;
		} else if (i <= LAYERS) {
			a.size = expert_bytes;
			a.fingerprint = fnv1a("fused_moe.py:create_expert_weights");
			a.ordinal = i - 1;	/* live allocations of that call site */
			a.role = ALLOC_ROLE_WEIGHTS;
		} else if (i == LAYERS + 1) {
			a.size = UINT64_C(1600) << 20;
			a.fingerprint = fnv1a("model_loader.py:load_dense_weights");
			a.role = ALLOC_ROLE_WEIGHTS;
		} else {
			a.size = UINT64_C(256) << 20;
			a.fingerprint = fnv1a("worker.py:profile_workspace");
			a.role = ALLOC_ROLE_WORKSPACE;
		}
		base += (a.size + (UINT64_C(2) << 20) - 1) & ~((UINT64_C(2) << 20) - 1);
		rec_alloc_encode(buf, &a);
		append(s, WAL_REC_ALLOC, buf, sizeof buf);
	}
}

/* k distinct experts for one token: Zipf-skewed ranks, then the layer's
 * popularity order. */
static void route_token(struct server *s, unsigned layer, uint8_t *out)
{
	uint32_t taken[TOP_K];

	for (unsigned i = 0; i < TOP_K; i++) {
		uint32_t e = EXPERTS;

		for (int tries = 0; tries < 64 && e == EXPERTS; tries++) {
			double u = (double)(xorshift(&s->rng) >> 11) / 9007199254740992.0 *
				   s->cdf[layer][EXPERTS - 1];
			unsigned lo = 0, hi = EXPERTS - 1;

			while (lo < hi) {
				unsigned mid = (lo + hi) / 2;

				if (s->cdf[layer][mid] > u)
					hi = mid;
				else
					lo = mid + 1;
			}
			e = s->expert_at_rank[layer][lo];
			for (unsigned j = 0; j < i; j++)
				if (taken[j] == e)
					e = EXPERTS;
		}
		for (unsigned r = 0; e == EXPERTS; r++) { /* unlucky: most popular unused */
			e = s->expert_at_rank[layer][r];
			for (unsigned j = 0; j < i; j++)
				if (taken[j] == e)
					e = EXPERTS;
		}
		taken[i] = e;
		out[4 * i] = (uint8_t)e;
		out[4 * i + 1] = (uint8_t)(e >> 8);
		out[4 * i + 2] = (uint8_t)(e >> 16);
		out[4 * i + 3] = (uint8_t)(e >> 24);
	}
}

/* A sequence's KV block is full: its K and V of every layer go to the KV
 * store, one KVREF each. */
static void log_full_block(struct server *s, unsigned seq, uint64_t pos, uint64_t step)
{
	uint64_t slot = seq * SEQ_BLOCKS + pos / BLOCK_TOKENS % SEQ_BLOCKS;
	uint8_t buf[KVREF_PAYLOAD_SIZE];

	for (unsigned i = 0; i < LAYERS * 2; i++) {
		uint64_t block = i * POOL_BLOCKS + slot;
		/* the fake block ends with what identifies its content */
		uint64_t tag[4] = { KV_POOL_ID, block, step, seq };
		struct rec_kvref k = { .pool = KV_POOL_ID, .bytes = BLOCK_BYTES, .block = block,
				       .store_off = block * BLOCK_BYTES, .step = step,
				       .crc = crc32c(s->pattern_crc, tag, sizeof tag) };

		rec_kvref_encode(buf, &k);
		append(s, WAL_REC_KVREF, buf, sizeof buf);
	}
}

static void decode_step(struct server *s, uint64_t step)
{
	uint8_t buf[ROUTING_HDR_SIZE + BATCH * TOP_K * 4];
	struct rec_routing r = { .step = step, .tokens = BATCH, .k = TOP_K, .id_bytes = 4,
				 .experts = EXPERTS };

	for (unsigned l = 0; l < LAYERS; l++) {
		r.layer = l;
		rec_routing_encode(buf, &r);
		for (unsigned t = 0; t < BATCH; t++)
			route_token(s, l, buf + ROUTING_HDR_SIZE + t * TOP_K * 4);
		append(s, WAL_REC_ROUTING, buf, sizeof buf);
	}
	for (unsigned q = 0; q < BATCH; q++) {
		uint64_t pos = s->prompt[q] + step; /* of the token decoded now */

		if (pos % BLOCK_TOKENS == BLOCK_TOKENS - 1)
			log_full_block(s, q, pos, step);
	}
}

/* The child: never returns. */
static void serve(int fd, const char *path, unsigned flags, uint32_t windows, int64_t crash_window)
{
	struct server s = { .fd = fd };
	struct wal_options opt;
	struct wal_error err = { 0 };
	struct wal_stats st;
	int ret;

	wal_options_init(&opt);
	opt.size = LOG_SIZE;
	opt.numa_node = cli_env.numa_node;
	opt.flags = flags;
	if ((ret = wal_open(path, &opt, &s.w, &err)) < 0) {
		fprintf(stderr, "moeft demo: %s\n", err.msg);
		_exit(EXIT_USAGE);
	}
	wal_stats(s.w, &st);
	tell_parent(&s, MSG_OPENED, (uint32_t)st.media, 0);
	setup(&s);
	log_allocations(&s);
	for (uint32_t win = 0; win < windows; win++) {
		struct rec_window_steps ws = { .first_step = (uint64_t)win * WINDOW_STEPS,
					       .steps = WINDOW_STEPS,
					       .tokens = WINDOW_STEPS * BATCH };
		uint8_t extra[WINDOW_STEPS_SIZE];
		struct wal_commit_info ci;

		for (unsigned t = 0; t < WINDOW_STEPS; t++) {
			if (win == crash_window && t == WINDOW_STEPS / 2)
				raise(SIGKILL);
			decode_step(&s, ws.first_step + t);
		}
		rec_window_steps_encode(extra, &ws);
		if ((ret = wal_commit(s.w, extra, sizeof extra, &ci)) < 0)
			die(EXIT_BAD, "wal_commit", ret);
		tell_parent(&s, MSG_COMMITTED, 0, ci.window);
	}
	wal_close(s.w);
	_exit(EXIT_OK);
}

/* ---- the parent ------------------------------------------------------ */

struct outcome {
	pid_t pid;
	int status;		/* from waitpid */
	int media;		/* 0: the child never opened the log */
	uint64_t commits;	/* windows the child saw commit */
	int in_order;		/* and their ids were 0, 1, 2, ... */
	int64_t crash_window;	/* -1: --no-crash */
	double scan_ms;		/* recovery time */
	char check[256];	/* why the recovered log is wrong, "" if right */
};

/* Read the child's messages until it is gone, then reap it. */
static void collect(int fd, struct outcome *o)
{
	struct msg m;
	ssize_t n;

	o->in_order = 1;
	for (;;) {
		n = read(fd, &m, sizeof m);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof m)
			break; /* EOF: the child has exited (a message is never split) */
		if (m.what == MSG_OPENED)
			o->media = (int)m.media;
		else if (m.what == MSG_COMMITTED && m.window == o->commits++)
			continue;
		else
			o->in_order = 0;
	}
	while (waitpid(o->pid, &o->status, 0) < 0 && errno == EINTR)
		;
}

static int ended_as_planned(const struct outcome *o)
{
	if (o->crash_window >= 0)
		return WIFSIGNALED(o->status) && WTERMSIG(o->status) == SIGKILL;
	return WIFEXITED(o->status) && WEXITSTATUS(o->status) == 0;
}

static void describe_end(const struct outcome *o, char *buf, size_t len)
{
	if (WIFSIGNALED(o->status) && o->crash_window >= 0 && WTERMSIG(o->status) == SIGKILL)
		snprintf(buf, len, "pid %d killed with SIGKILL during window %" PRId64
			 " (after %" PRIu64 " commits)", (int)o->pid, o->crash_window, o->commits);
	else if (WIFSIGNALED(o->status))
		snprintf(buf, len, "pid %d killed by signal %d (%s) after %" PRIu64 " commits",
			 (int)o->pid, WTERMSIG(o->status), strsignal(WTERMSIG(o->status)),
			 o->commits);
	else
		snprintf(buf, len, "pid %d exited with status %d after %" PRIu64 " commits",
			 (int)o->pid, WEXITSTATUS(o->status), o->commits);
}

/* The recovered log must hold exactly windows 0 .. commits-1, intact. */
static void check(const struct report *rp, struct outcome *o)
{
	if (!o->in_order)
		snprintf(o->check, sizeof o->check, "the writer reported commits out of order");
	else if (report_damaged(rp))
		snprintf(o->check, sizeof o->check, "recovery found damage: %s",
			 rp->rec->damage[0].reason);
	else if (rp->nwin != o->commits || (rp->nwin && rp->win[0].id != 0))
		snprintf(o->check, sizeof o->check, "recovered %zu windows, but the writer saw %"
			 PRIu64 " commits", rp->nwin, o->commits);
	for (size_t i = 0; !o->check[0] && i < rp->nwin; i++)
		if (rp->win[i].id != i || rp->win[i].state != WAL_WINDOW_INTACT)
			snprintf(o->check, sizeof o->check, "recovered window #%zu is window %"
				 PRIu64 " (%s), not window %zu", i, rp->win[i].id,
				 rp->win[i].state == WAL_WINDOW_INTACT ? "intact" : "damaged", i);
}

/* Steps covered by committed windows, from their WINDOW records. */
static int steps_of(const struct wal_window *w, uint64_t *first, uint64_t *last)
{
	struct rec_window_steps s;

	if (!rec_decode_window(w, &s))
		return -1;
	*first = s.first_step;
	*last = s.first_step + s.steps - 1;
	return 0;
}

static int count_experts(const struct report *rp, struct hist *h)
{
	struct wal_iter it;
	struct wal_record rec;

	wal_iter_init(&it, rp->r);
	while (wal_iter_next(&it, &rec))
		if (hist_add(h, &rec) < 0)
			return -1;
	return 0;
}

#define SHOWN_LAYERS 3u
#define SHOWN_EXPERTS 5u

static const uint32_t shown_layer[SHOWN_LAYERS] = { 0, LAYERS / 2, LAYERS - 1 };

static void print_text(const char *path, const struct outcome *o, const struct report *rp,
		       const struct hist *h)
{
	const struct wal_recovery *rec = rp->rec;
	uint64_t first = 0, last = 0, f2;
	char b1[32], end[160];

	printf("moeft demo: an MoE server logs routing and KV blocks, is killed, and recovers\n");
	cli_row(stdout, "log", "%s (%s, %s)", path,
		o->media ? wal_media_name(o->media) : "not opened",
		cli_fmt_bytes(b1, sizeof b1, rec->size));
	cli_row(stdout, "model", "%u layers x %u experts, top-%u, batch of %u, %u steps per window",
		LAYERS, EXPERTS, TOP_K, BATCH, WINDOW_STEPS);
	describe_end(o, end, sizeof end);
	cli_row(stdout, "writer", "%s", end);
	if (rp->nwin && steps_of(&rp->win[0], &first, &f2) == 0 &&
	    steps_of(&rp->win[rp->nwin - 1], &f2, &last) == 0)
		cli_row(stdout, "committed", "%zu window%s, %" PRIu64 "-%" PRIu64 " (steps %"
			PRIu64 "-%" PRIu64 "): %" PRIu64 " records, %s", rp->nwin,
			rp->nwin == 1 ? "" : "s", rp->win[0].id, rp->win[rp->nwin - 1].id, first,
			last, rec->records, cli_fmt_bytes(b1, sizeof b1, rec->bytes));
	else
		cli_row(stdout, "committed", "no window");
	if (rec->tail_records)
		cli_row(stdout, "dropped", "uncommitted tail of %" PRIu64 " records, %s (%s)",
			rec->tail_records, cli_fmt_bytes(b1, sizeof b1, rec->tail_bytes),
			rec->tail_stop);
	else
		cli_row(stdout, "dropped", "nothing: no uncommitted records");
	cli_row(stdout, "verified", "%s: %" PRIu64 " of %zu windows intact (recovery took %.1f ms)",
		report_damaged(rp) ? "DAMAGED" : "OK", rec->intact_windows, rp->nwin, o->scan_ms);
	for (unsigned i = 0; i < SHOWN_LAYERS; i++) {
		uint32_t top[SHOWN_EXPERTS];
		unsigned n = hist_top(h, shown_layer[i], top, SHOWN_EXPERTS);

		if (!n)
			continue;
		printf("%-11slayer %-2" PRIu32 "  ", i ? "" : "experts", shown_layer[i]);
		for (unsigned e = 0; e < n; e++)
			printf(" e%-2" PRIu32 " %4.1f%%", top[e],
			       100 * hist_share(h, shown_layer[i], top[e]));
		printf("%s\n", i ? "" : "  (top 5, share of tokens)");
	}
	if (o->check[0])
		cli_row(stdout, "error", "%s", o->check);
	else if (rp->nwin)
		cli_row(stdout, "recovered", "last committed window %" PRIu64 ", step %" PRIu64
			": all %" PRIu64 " commits the writer saw, nothing else",
			rp->win[rp->nwin - 1].id, last, o->commits);
	else
		cli_row(stdout, "recovered", "an empty log: the writer saw no commit");
	printf("\nNext: moeft verify --wal %s\n      moeft inspect --wal %s --records\n",
	       path, path);
}

static void print_json(const char *path, const struct outcome *o, const struct report *rp,
		       const struct hist *h)
{
	uint64_t first = 0, last = 0, f2;
	struct json j;
	char key[16];

	json_init(&j, stdout);
	json_obj_begin(&j);
	json_kv_str(&j, "status", o->check[0] ? "failed" : "ok");
	if (o->check[0])
		json_kv_str(&j, "error", o->check);
	json_kv_str(&j, "path", path);
	json_kv_str(&j, "medium", o->media ? wal_media_name(o->media) : NULL);
	json_key(&j, "model");
	json_obj_begin(&j);
	json_kv_u64(&j, "layers", LAYERS);
	json_kv_u64(&j, "experts", EXPERTS);
	json_kv_u64(&j, "top_k", TOP_K);
	json_kv_u64(&j, "batch", BATCH);
	json_kv_u64(&j, "window_steps", WINDOW_STEPS);
	json_obj_end(&j);
	json_key(&j, "writer");
	json_obj_begin(&j);
	json_kv_i64(&j, "pid", o->pid);
	json_kv_str(&j, "ended", WIFSIGNALED(o->status) ? "killed" : "exited");
	if (WIFSIGNALED(o->status))
		json_kv_i64(&j, "signal", WTERMSIG(o->status));
	else
		json_kv_i64(&j, "exit_code", WEXITSTATUS(o->status));
	if (o->crash_window >= 0)
		json_kv_i64(&j, "crash_window", o->crash_window);
	json_kv_u64(&j, "commits", o->commits);
	json_obj_end(&j);
	json_kv_str(&j, "verification", report_damaged(rp) ? "damaged" : "intact");
	json_kv_double(&j, "recovery_ms", o->scan_ms);
	if (rp->nwin && steps_of(&rp->win[0], &first, &f2) == 0 &&
	    steps_of(&rp->win[rp->nwin - 1], &f2, &last) == 0) {
		json_key(&j, "recovered");
		json_obj_begin(&j);
		json_kv_u64(&j, "window", rp->win[rp->nwin - 1].id);
		json_kv_u64(&j, "first_step", first);
		json_kv_u64(&j, "step", last);
		json_obj_end(&j);
	}
	json_key(&j, "experts_top");
	json_obj_begin(&j);
	for (unsigned i = 0; i < SHOWN_LAYERS; i++) {
		uint32_t top[SHOWN_EXPERTS];
		unsigned n = hist_top(h, shown_layer[i], top, SHOWN_EXPERTS);

		snprintf(key, sizeof key, "%" PRIu32, shown_layer[i]);
		json_key(&j, key);
		json_arr_begin(&j);
		for (unsigned e = 0; e < n; e++) {
			json_obj_begin(&j);
			json_kv_u64(&j, "expert", top[e]);
			json_kv_double(&j, "share", hist_share(h, shown_layer[i], top[e]));
			json_obj_end(&j);
		}
		json_arr_end(&j);
	}
	json_obj_end(&j);
	json_key(&j, "log");
	json_obj_begin(&j);
	report_json(rp, &j);
	json_obj_end(&j);
	json_obj_end(&j);
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static int demo(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wal", required_argument, NULL, 'w' },
		{ "windows", required_argument, NULL, 'n' },
		{ "no-crash", no_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts opt = { .cmd = cmd };
	struct outcome o = { .crash_window = -1 };
	struct report rp;
	struct hist h;
	struct wal_error err = { 0 };
	struct timespec t0;
	char path[4096], msg[512];
	uint64_t windows = DEFAULT_WINDOWS;
	unsigned flags;
	int c, ret, no_crash = 0, fds[2];

	cli_default_path(path, sizeof path, "demo");
	while ((c = cli_getopt(&opt, argc, argv, opts)) != -1) {
		switch (c) {
		case 'w':
			if (strlen(optarg) >= sizeof path || !*optarg)
				cli_usage_error(&opt, "--wal: path is empty or too long");
			else
				strcpy(path, optarg);
			break;
		case 'n':
			cli_parse_u64(&opt, "--windows", optarg, 1, MAX_WINDOWS, &windows);
			break;
		case 'c': no_crash = 1; break;
		case 'j': opt.json = 1; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind < argc)
		cli_usage_error(&opt, "unexpected argument '%s'", argv[optind]);
	if ((ret = cli_parse_done(&opt)))
		return ret;
	if (!no_crash)
		o.crash_window = (int64_t)(windows * 2 / 3);

	if (cli_prepare_fresh_log(path, &flags, msg, sizeof msg) < 0)
		return cli_fail(cmd, opt.json, EXIT_USAGE, "%s", msg);
	if (pipe(fds) < 0)
		return cli_fail(cmd, opt.json, EXIT_USAGE, "pipe: %s", strerror(errno));
	fflush(NULL);
	o.pid = fork();
	if (o.pid < 0)
		return cli_fail(cmd, opt.json, EXIT_USAGE, "fork: %s", strerror(errno));
	if (o.pid == 0) {
		close(fds[0]);
		serve(fds[1], path, flags, (uint32_t)windows, o.crash_window);
	}
	close(fds[1]);
	collect(fds[0], &o);
	close(fds[0]);
	if (!o.media && WIFEXITED(o.status) && WEXITSTATUS(o.status) == EXIT_USAGE)
		return cli_fail(cmd, opt.json, EXIT_USAGE, "the serving process could not open %s "
				"(its message is above)", path);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if ((ret = report_load(&rp, path, &err)) < 0)
		return cli_fail(cmd, opt.json, EXIT_BAD, "recovery failed: %s", err.msg);
	o.scan_ms = ms_since(&t0);
	hist_init(&h);
	if (count_experts(&rp, &h) < 0) {
		ret = cli_fail(cmd, opt.json, EXIT_USAGE, "out of memory");
	} else {
		if (!ended_as_planned(&o)) {
			char end[160];

			describe_end(&o, end, sizeof end);
			snprintf(o.check, sizeof o.check, "the writer did not end as planned: %s",
				 end);
		} else {
			check(&rp, &o);
		}
		if (opt.json)
			print_json(path, &o, &rp, &h);
		else
			print_text(path, &o, &rp, &h);
		ret = o.check[0] ? EXIT_BAD : EXIT_OK;
	}
	hist_free(&h);
	report_free(&rp);
	return ret;
}

const struct cli_command cmd_demo = {
	.name = "demo",
	.summary = "simulate an MoE server killed mid-window; recover and check its log",
	.usage =
	"Usage: moeft demo [--wal PATH] [--windows N] [--no-crash] [--json]\n"
	"\n"
	"Format a fresh 64 MiB log and fork a simulated serving process (16 layers,\n"
	"64 experts, top-8 routing, 32 sequences, a window every 16 decode steps)\n"
	"that logs its allocations, the routing of every layer and step and its\n"
	"filled KV blocks.  Unless --no-crash, it SIGKILLs itself halfway through\n"
	"window N*2/3.  The log is then recovered and checked: it must hold exactly\n"
	"the windows the writer saw commit, all intact.\n"
	"\n"
	"  -w, --wal PATH     the log (default /dev/shm/moeft-USER-demo.wal); an\n"
	"                     existing file must be empty or a moeft log\n"
	"  -n, --windows N    windows to commit, 1 to 128 (default 64)\n"
	"  -c, --no-crash     let the writer finish and exit normally\n"
	"  -j, --json         print one JSON object instead of text\n"
	"  -h, --help         show this help\n"
	"\n"
	"Exit status: 0 the recovered log is exactly what was committed, 1 it is\n"
	"not (or the writer failed), 2 usage or I/O error.\n",
	.run = demo,
};

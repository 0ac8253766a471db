/*
 * inspect.c - moeft inspect: what a log holds, read-only.
 *
 * A first pass over the committed records gathers the epochs, the expert
 * histograms and the payloads that do not decode; the record list
 * (--records) is a second pass, so the summary comes first in text and
 * JSON alike.  Payloads are untrusted: each is decoded by its codec and
 * shown as "undecodable" when it cannot be what its type says.
 *
 * Expert usage (the histograms, --heatmap) counts the routing of decode
 * windows only: a window without steps holds allocation events, or is
 * one a crash handler closed early, with a part of a window's routing.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "heatmap.h"
#include "hist.h"
#include "json.h"
#include "logset.h"
#include "record.h"
#include "report.h"

#define TOP_EXPERTS 8

/* A run of committed records of one writer epoch. */
struct epoch_run {
	uint32_t epoch;
	uint64_t first_lsn, records;
	int have_start;		/* its EPOCH record is still in the log */
	struct rec_epoch start;
};

struct scan {
	struct epoch_run *run;
	size_t nrun;
	struct hist hist;		/* routing of the decode windows */
	struct heatmap_span span;	/* the decode windows */
	uint64_t undecodable;
};

/* The committed window of `rec`, found by walking `*wi` forward. */
static const struct wal_window *window_of(const struct report *rp, size_t *wi,
					  const struct wal_record *rec)
{
	while (*wi < rp->nwin && rp->win[*wi].id < rec->window)
		(*wi)++;
	return *wi < rp->nwin && rp->win[*wi].id == rec->window ? &rp->win[*wi] : NULL;
}

static void describe_window(const struct wal_window *w, char *buf, size_t len)
{
	struct rec_window_steps s;
	char b[32], t[32];
	int n;

	n = snprintf(buf, len, "commits %" PRIu32 " records, %s, at %s", w->records,
		     cli_fmt_bytes(b, sizeof b, w->bytes), cli_fmt_time(t, sizeof t, w->commit_ns));
	if (n < 0 || (size_t)n >= len || !w->extra_len)
		return;
	if (rec_decode_window(w, &s))
		snprintf(buf + n, len - (size_t)n, "; steps %" PRIu64 "-%" PRIu64 " (%" PRIu32
			 " tokens)", s.first_step, s.first_step + s.steps - 1, s.tokens);
	else if (rec_requests_window(w, &s))
		snprintf(buf + n, len - (size_t)n, "; the engine's requests as of step %" PRIu64
			 " (steps %" PRIu64 "-%" PRIu64 ")", s.first_step + s.steps - 1,
			 s.first_step, s.first_step + s.steps - 1);
	else
		snprintf(buf + n, len - (size_t)n, "; %" PRIu32 " caller bytes", w->extra_len);
}

/* A record's description: a request's is the longest. */
#define DESCRIBE_MAX 512

/* The decoder vouched for the id: printable ASCII; at most 64 bytes shown. */
static void describe_request(const struct rec_request *q, char *buf, size_t len)
{
	size_t blocks = 0;
	unsigned g;

	for (g = 0; g < q->ngroups; g++)
		blocks += q->nblocks[g];
	snprintf(buf, len, "request %.*s%s at step %" PRIu64 ": %" PRIu32 " tokens (prompt %"
		 PRIu32 ", computed %" PRIu32 "), %zu blocks of %" PRIu32 " tokens in %u "
		 "group%s%s", q->id_len > 64 ? 64 : (int)q->id_len, (const char *)q->id,
		 q->id_len > 64 ? "..." : "", q->step, q->ntokens, q->nprompt, q->ncomputed,
		 blocks, q->block_tokens, q->ngroups, q->ngroups == 1 ? "" : "s",
		 q->flags & REQUEST_FINISHED ? ", finished" : "");
}

/* The names of enum routing_weights, as JSON and text show them. */
static const char *const weights_names[] = {
	[ROUTING_W_NONE] = "", [ROUTING_W_F32] = "f32", [ROUTING_W_BF16] = "bf16",
	[ROUTING_W_F16] = "f16",
};

/* A short description of a record's payload.  0, or -1 (and
 * "undecodable") when the payload cannot be what its type says. */
static int describe(const struct wal_record *rec, const struct wal_window *w, char *buf, size_t len)
{
	union {
		struct rec_epoch e;
		struct rec_routing r;
		struct rec_kvref k;
		struct rec_alloc a;
		struct rec_free f;
		struct rec_crash c;
		struct rec_request q;
	} u;
	char b[32];
	int ok = 0;

	buf[0] = '\0';
	switch (rec->type) {
	case WAL_REC_EPOCH:
		if ((ok = rec_epoch_decode(rec->payload, rec->len, &u.e) == 0))
			snprintf(buf, len, "pid %" PRIu32 ", started %s, follows epoch %" PRIu32
				 " (last commit LSN %" PRIu64 ")", u.e.pid,
				 cli_fmt_time(b, sizeof b, u.e.start_ns), u.e.prev_epoch,
				 u.e.prev_commit_lsn);
		break;
	case WAL_REC_WINDOW:
		if ((ok = w != NULL))
			describe_window(w, buf, len);
		break;
	case WAL_REC_ROUTING:
		if ((ok = rec_routing_decode(rec->payload, rec->len, &u.r) == 0))
			snprintf(buf, len, "step %" PRIu64 " layer %" PRIu32 ": %" PRIu32
				 " tokens, top-%u of %" PRIu32 " experts, %s%s", u.r.step,
				 u.r.layer, u.r.tokens, u.r.k, u.r.experts,
				 u.r.weights ? "gating weights " : "no gating weights",
				 weights_names[u.r.flags & ROUTING_W_MASK]);
		break;
	case WAL_REC_KVREF:
		if ((ok = rec_kvref_decode(rec->payload, rec->len, &u.k) == 0))
			snprintf(buf, len, "pool %" PRIu32 " block %" PRIu64 ", %s at store "
				 "offset %" PRIu64 ", step %" PRIu64 ", crc 0x%08" PRIx32, u.k.pool, u.k.block,
				 cli_fmt_bytes(b, sizeof b, u.k.bytes), u.k.store_off, u.k.step,
				 u.k.crc);
		break;
	case WAL_REC_ALLOC:
		if ((ok = rec_alloc_decode(rec->payload, rec->len, &u.a) == 0))
			snprintf(buf, len, "#%" PRIu64 ": %s at 0x%" PRIx64 ", fingerprint 0x%016"
				 PRIx64 " #%" PRIu32 ", api %u, role %u", u.a.alloc_id,
				 cli_fmt_bytes(b, sizeof b, u.a.size), u.a.base, u.a.fingerprint,
				 u.a.ordinal, u.a.api, u.a.role);
		break;
	case WAL_REC_FREE:
		if ((ok = rec_free_decode(rec->payload, rec->len, &u.f) == 0))
			snprintf(buf, len, "#%" PRIu64 " at 0x%" PRIx64, u.f.alloc_id, u.f.base);
		break;
	case WAL_REC_CRASH:
		if ((ok = rec_crash_decode(rec->payload, rec->len, &u.c) == 0))
			snprintf(buf, len, "signal %" PRId32 " (code %" PRId32 ") at 0x%" PRIx64
				 " in pid %" PRIu32 ", %" PRIu32 " frames", u.c.signo, u.c.code,
				 u.c.addr, u.c.pid, u.c.nframes);
		break;
	case WAL_REC_REQUEST:
		if ((ok = rec_request_decode(rec->payload, rec->len, &u.q) == 0))
			describe_request(&u.q, buf, len);
		break;
	default:
		return 0; /* no codec: nothing to say beyond the length */
	}
	if (!ok)
		snprintf(buf, len, "undecodable");
	return ok ? 0 : -1;
}

static int add_to_run(struct scan *s, const struct wal_record *rec)
{
	struct epoch_run *r = s->nrun ? &s->run[s->nrun - 1] : NULL;

	if (!r || r->epoch != rec->epoch) {
		if (!(r = realloc(s->run, (s->nrun + 1) * sizeof *r)))
			return -1;
		s->run = r;
		r = &s->run[s->nrun++];
		memset(r, 0, sizeof *r);
		r->epoch = rec->epoch;
		r->first_lsn = rec->lsn;
	}
	r->records++;
	if (rec->type == WAL_REC_EPOCH && rec_epoch_decode(rec->payload, rec->len, &r->start) == 0)
		r->have_start = 1;
	return 0;
}

static void add_to_span(struct heatmap_span *sp, const struct wal_window *w,
			const struct rec_window_steps *st)
{
	if (!sp->windows++)
		sp->first_window = w->id;
	sp->last_window = w->id;
	sp->tokens += st->tokens;
	sp->gaps += (st->flags & WINDOW_ROUTING_GAP) != 0;
}

static int scan(const struct report *rp, struct scan *s)
{
	struct wal_iter it;
	struct wal_record rec;
	struct rec_window_steps st;
	size_t wi = 0;
	char buf[DESCRIBE_MAX];

	memset(s, 0, sizeof *s);
	hist_init(&s->hist);
	wal_iter_init(&it, rp->r);
	while (wal_iter_next(&it, &rec)) {
		const struct wal_window *w = window_of(rp, &wi, &rec);
		int decode = w && rec_decode_window(w, &st);

		if (describe(&rec, w, buf, sizeof buf) < 0)
			s->undecodable++;
		if (decode && rec.type == WAL_REC_WINDOW)
			add_to_span(&s->span, w, &st);
		if (add_to_run(s, &rec) < 0 || (decode && hist_add(&s->hist, &rec) < 0))
			return -1;
	}
	return 0;
}

static void scan_free(struct scan *s)
{
	free(s->run);
	hist_free(&s->hist);
}

/* Key of a type slot of wal_recovery.rec_count, unique per slot. */
static const char *type_key(unsigned t, char *buf, size_t len)
{
	const char *name = wal_rec_type_name(t);

	if (t == 0)
		return "other";
	if (!strcmp(name, "unknown")) {
		snprintf(buf, len, "type%u", t);
		return buf;
	}
	return name;
}

/* ---- text ------------------------------------------------------------- */

static void header_text(const struct report *rp)
{
	const struct wal_recovery *rec = rp->rec;
	char b1[32], b2[32];

	cli_row(stdout, "log", "%s", rp->path);
	cli_row(stdout, "format", "version %" PRIu32 ", log id 0x%016" PRIx64 ", %s medium, "
		"ring of %s at offset %" PRIu64, rec->version, rec->log_id,
		cli_fmt_bytes(b1, sizeof b1, rec->size),
		cli_fmt_bytes(b2, sizeof b2, rec->capacity), rec->data_off);
	cli_row(stdout, "checkpoint", "generation %" PRIu64 ": tail at ring position %" PRIu64
		" (LSN %" PRIu64 ", window %" PRIu64 ")", rec->ckpt_gen, rec->tail_pos,
		rec->tail_lsn, rec->tail_window);
	cli_row(stdout, "epoch", "%" PRIu32 " (the latest writer's)", rec->epoch);
}

static void epochs_text(const struct scan *s)
{
	char t[32];

	for (size_t i = 0; i < s->nrun; i++) {
		const struct epoch_run *r = &s->run[i];
		const char *label = i ? "" : "epochs";

		if (r->have_start)
			cli_row(stdout, label, "%" PRIu32 ": pid %" PRIu32 ", started %s; %" PRIu64
				" records from LSN %" PRIu64, r->epoch, r->start.pid,
				cli_fmt_time(t, sizeof t, r->start.start_ns), r->records,
				r->first_lsn);
		else
			cli_row(stdout, label, "%" PRIu32 ": %" PRIu64 " records from LSN %" PRIu64
				" (its EPOCH record was reclaimed)", r->epoch, r->records,
				r->first_lsn);
	}
}

static void types_text(const struct wal_recovery *rec)
{
	char b[32], k[16];

	cli_row(stdout, "types", "%-10s %10s %12s", "type", "records", "ring bytes");
	for (unsigned t = 1; t <= 16; t++) {
		unsigned slot = t % 16; /* "other" (slot 0) last */

		if (rec->rec_count[slot])
			cli_row(stdout, "", "%-10s %10" PRIu64 " %12s", type_key(slot, k, sizeof k),
				rec->rec_count[slot],
				cli_fmt_bytes(b, sizeof b, rec->rec_bytes[slot]));
	}
}

static void experts_text(const struct hist *h)
{
	uint32_t top[TOP_EXPERTS];

	cli_row(stdout, "experts", "top %u of %" PRIu32 " by tokens routed in decode windows, "
		"per layer:", TOP_EXPERTS, h->experts);
	for (uint32_t l = 0; l < h->nlayers; l++) {
		unsigned n = hist_top(h, l, top, TOP_EXPERTS);

		if (!n)
			continue;
		printf("%-11sL%-4" PRIu32, "", l);
		for (unsigned i = 0; i < n; i++)
			printf(" e%-3" PRIu32 "%5.1f%%", top[i], 100 * hist_share(h, l, top[i]));
		putchar('\n');
	}
	if (h->ignored)
		cli_row(stdout, "", "(%" PRIu64 " ids beyond %u layers or %u experts ignored)",
			h->ignored, HIST_MAX_LAYERS, HIST_MAX_EXPERTS);
}

static void records_text(const struct report *rp)
{
	struct wal_iter it;
	struct wal_record rec;
	size_t wi = 0;
	char buf[DESCRIBE_MAX];

	printf("\n%12s %8s %6s %-8s %8s %12s  %s\n", "LSN", "window", "index", "type",
	       "length", "offset", "payload");
	wal_iter_init(&it, rp->r);
	while (wal_iter_next(&it, &rec)) {
		describe(&rec, window_of(rp, &wi, &rec), buf, sizeof buf);
		printf("%12" PRIu64 " %8" PRIu64 " %6" PRIu32 " %-8s %8" PRIu32 " %12" PRIu64
		       "  %s\n", rec.lsn, rec.window, rec.index, wal_rec_type_name(rec.type),
		       rec.len, rec.offset, buf);
	}
}

static void inspect_text(const struct report *rp, const struct scan *s, int records,
			 const char *heatmap)
{
	char t1[32], t2[32];

	header_text(rp);
	report_text(rp, stdout);
	if (rp->nwin)
		cli_row(stdout, "committed", "%s to %s",
			cli_fmt_time(t1, sizeof t1, rp->win[0].commit_ns),
			cli_fmt_time(t2, sizeof t2, rp->win[rp->nwin - 1].commit_ns));
	epochs_text(s);
	if (rp->rec->records)
		types_text(rp->rec);
	if (s->undecodable)
		cli_row(stdout, "payloads", "%" PRIu64 " undecodable: not what their type says",
			s->undecodable);
	if (s->hist.nlayers)
		experts_text(&s->hist);
	if (heatmap)
		cli_row(stdout, "heatmap", "%s: %" PRIu32 " layers x %" PRIu32 " experts", heatmap,
			s->hist.nlayers, s->hist.experts);
	if (records)
		records_text(rp);
}

/* ---- JSON ------------------------------------------------------------- */

static void epochs_json(const struct scan *s, struct json *j)
{
	json_key(j, "epochs");
	json_arr_begin(j);
	for (size_t i = 0; i < s->nrun; i++) {
		const struct epoch_run *r = &s->run[i];

		json_obj_begin(j);
		json_kv_u64(j, "epoch", r->epoch);
		json_kv_u64(j, "first_lsn", r->first_lsn);
		json_kv_u64(j, "records", r->records);
		if (r->have_start) {
			json_kv_u64(j, "prev_epoch", r->start.prev_epoch);
			json_kv_u64(j, "prev_commit_lsn", r->start.prev_commit_lsn);
			json_kv_u64(j, "pid", r->start.pid);
			json_kv_u64(j, "start_ns", r->start.start_ns);
		}
		json_obj_end(j);
	}
	json_arr_end(j);
}

static void types_json(const struct wal_recovery *rec, struct json *j)
{
	char k[16];

	json_key(j, "types");
	json_obj_begin(j);
	for (unsigned t = 0; t < 16; t++) {
		if (!rec->rec_count[t])
			continue;
		json_key(j, type_key(t, k, sizeof k));
		json_obj_begin(j);
		json_kv_u64(j, "count", rec->rec_count[t]);
		json_kv_u64(j, "bytes", rec->rec_bytes[t]);
		json_obj_end(j);
	}
	json_obj_end(j);
}

static void experts_json(const struct hist *h, struct json *j)
{
	char key[16];

	json_key(j, "experts");
	json_obj_begin(j);
	for (uint32_t l = 0; l < h->nlayers; l++) {
		const struct hist_layer *hl = &h->layer[l];

		if (!hl->total)
			continue;
		snprintf(key, sizeof key, "%" PRIu32, l);
		json_key(j, key);
		json_arr_begin(j);
		for (uint32_t e = 0; e < h->experts; e++)
			json_u64(j, e < hl->n ? hl->count[e] : 0);
		json_arr_end(j);
	}
	json_obj_end(j);
	json_kv_u64(j, "experts_ignored", h->ignored);
}

/* A ROUTING record in full: its ids, and its gating weights or null where
 * the rule that saw the launch names none. */
static void routing_json(const struct wal_record *rec, struct json *j)
{
	struct rec_routing r;
	size_t i, n;

	if (rec_routing_decode(rec->payload, rec->len, &r) < 0)
		return;
	n = (size_t)r.tokens * r.k;
	json_key(j, "routing");
	json_obj_begin(j);
	json_kv_u64(j, "step", r.step);
	json_kv_u64(j, "layer", r.layer);
	json_kv_u64(j, "tokens", r.tokens);
	json_kv_u64(j, "k", r.k);
	json_kv_u64(j, "experts", r.experts);
	json_key(j, "ids");
	json_arr_begin(j);
	for (i = 0; i < n; i++)
		json_u64(j, rec_routing_id(&r, i));
	json_arr_end(j);
	json_kv_str(j, "weights_dtype", r.weights ? weights_names[r.flags & ROUTING_W_MASK] : NULL);
	json_key(j, "weights");
	if (r.weights) {
		json_arr_begin(j);
		for (i = 0; i < n; i++)
			json_float(j, rec_routing_weight(&r, i));
		json_arr_end(j);
	} else {
		json_str(j, NULL);
	}
	json_obj_end(j);
}

static void records_json(const struct report *rp, struct json *j)
{
	struct wal_iter it;
	struct wal_record rec;
	size_t wi = 0;
	char buf[DESCRIBE_MAX];

	json_key(j, "record_list");
	json_arr_begin(j);
	wal_iter_init(&it, rp->r);
	while (wal_iter_next(&it, &rec)) {
		describe(&rec, window_of(rp, &wi, &rec), buf, sizeof buf);
		json_obj_begin(j);
		json_kv_u64(j, "lsn", rec.lsn);
		json_kv_u64(j, "window", rec.window);
		json_kv_u64(j, "index", rec.index);
		json_kv_str(j, "type", wal_rec_type_name(rec.type));
		json_kv_u64(j, "type_id", rec.type);
		json_kv_u64(j, "length", rec.len);
		json_kv_u64(j, "offset", rec.offset);
		json_kv_str(j, "summary", buf);
		if (rec.type == WAL_REC_ROUTING)
			routing_json(&rec, j);
		json_obj_end(j);
	}
	json_arr_end(j);
}

static void inspect_json(const struct report *rp, const struct scan *s, int records,
			 const char *heatmap, struct json *j)
{
	const struct wal_recovery *rec = rp->rec;
	char id[24];

	json_obj_begin(j);
	report_json(rp, j);
	json_kv_u64(j, "version", rec->version);
	snprintf(id, sizeof id, "0x%016" PRIx64, rec->log_id);
	json_kv_str(j, "log_id", id);
	json_kv_u64(j, "size", rec->size);
	json_kv_u64(j, "capacity", rec->capacity);
	json_kv_u64(j, "data_offset", rec->data_off);
	json_key(j, "checkpoint");
	json_obj_begin(j);
	json_kv_u64(j, "generation", rec->ckpt_gen);
	json_kv_u64(j, "tail_pos", rec->tail_pos);
	json_kv_u64(j, "tail_lsn", rec->tail_lsn);
	json_kv_u64(j, "tail_window", rec->tail_window);
	json_obj_end(j);
	epochs_json(s, j);
	types_json(rec, j);
	json_kv_u64(j, "undecodable", s->undecodable);
	experts_json(&s->hist, j);
	if (heatmap)
		json_kv_str(j, "heatmap", heatmap);
	if (records)
		records_json(rp, j);
	json_obj_end(j);
}

/* --heatmap FILE: EXIT_OK, or the exit status of the failure reported. */
static int write_heatmap(const struct cli_command *cmd, int json, const struct report *rp,
			 struct scan *s, const char *file)
{
	char msg[512];

	if (!s->hist.total)
		return cli_fail(cmd, json, EXIT_BAD, "%s: no routing in committed decode windows: "
				"nothing to draw, %s not written", rp->path, file);
	s->span.log = rp->path;
	s->span.log_id = rp->rec->log_id;
	if (heatmap_write(file, &s->hist, &s->span, msg, sizeof msg) < 0)
		return cli_fail(cmd, json, EXIT_USAGE, "%s", msg);
	return EXIT_OK;
}

/*
 * One log: its text, or its JSON object into j.  Damage is shown, not an
 * exit status: only a log that cannot be recovered at all fails, said on
 * stderr (in a directory's JSON as the log's own report_failed_json object).
 * Returns the log's exit status.
 */
static int inspect_one(const struct cli_command *cmd, const char *path, int records,
		       const char *heatmap, int in_set, struct json *j)
{
	struct wal_error err = { 0 };
	struct report rp;
	struct scan s;
	int ret;

	if ((ret = report_load(&rp, path, &err)) < 0) {
		if (!in_set || !j)
			return cli_fail(cmd, j != NULL, report_load_exit(ret), "%s", err.msg);
		fprintf(stderr, "moeft %s: %s\n", cmd->name, err.msg);
		report_failed_json(j, path, ret, err.msg);
		return report_load_exit(ret);
	}
	if (scan(&rp, &s) < 0)
		ret = cli_fail(cmd, j != NULL, EXIT_USAGE, "out of memory");
	else
		ret = heatmap ? write_heatmap(cmd, j != NULL, &rp, &s, heatmap) : EXIT_OK;
	if (ret == EXIT_OK && j)
		inspect_json(&rp, &s, records, heatmap, j);
	else if (ret == EXIT_OK)
		inspect_text(&rp, &s, records, heatmap);
	scan_free(&s);
	report_free(&rp);
	return ret;
}

static int inspect(const struct cli_command *cmd, int argc, char **argv)
{
	enum { OPT_HEATMAP = 256 }; /* no short form */
	static const struct option opts[] = {
		{ "wal", required_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "records", no_argument, NULL, 'r' },
		{ "heatmap", required_argument, NULL, OPT_HEATMAP },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	const char *path = NULL, *heatmap = NULL;
	struct logset set;
	struct stat log;
	struct json j;
	char msg[PATH_MAX + 128];
	int c, r, ret, records = 0;
	size_t i;

	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'w': path = optarg; break;
		case 'j': o.json = 1; break;
		case 'r': records = 1; break;
		case OPT_HEATMAP: heatmap = optarg; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind < argc)
		cli_usage_error(&o, "unexpected argument '%s'", argv[optind]);
	if (!path)
		cli_usage_error(&o, "--wal PATH is required");
	else
		cli_path_opt(&o, "--wal", path, 0);
	if ((ret = cli_parse_done(&o)))
		return ret;
	if (heatmap && heatmap_check_path(heatmap, stat(path, &log) == 0 ? &log : NULL, msg,
					  sizeof msg) < 0)
		return cli_fail(cmd, o.json, EXIT_USAGE, "%s", msg);
	if (logset_open(&set, path, msg, sizeof msg) < 0)
		return cli_fail(cmd, o.json, EXIT_USAGE, "%s", msg);
	if (logset_need_one(&set, path, msg, sizeof msg) < 0) {
		logset_free(&set);
		return cli_fail(cmd, o.json, EXIT_USAGE, "%s", msg);
	}
	if (set.dir && heatmap) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "--heatmap draws one log; %s is a "
			       "directory of %zu", path, set.n);
		logset_free(&set);
		return ret;
	}
	if (o.json) {
		json_init(&j, stdout);
		if (set.dir) {
			json_obj_begin(&j);
			json_kv_str(&j, "dir", path);
			json_key(&j, "logs");
			json_arr_begin(&j);
		}
	}
	for (i = 0; i < set.n; i++) {
		if (set.dir && !o.json)
			printf("%s", i ? "\n" : "");
		r = inspect_one(cmd, set.paths[i], records, heatmap, set.dir, o.json ? &j : NULL);
		ret = r > ret ? r : ret;
	}
	if (o.json && set.dir) {
		json_arr_end(&j);
		json_obj_end(&j);
	}
	logset_free(&set);
	return ret;
}

const struct cli_command cmd_inspect = {
	.name = "inspect",
	.summary = "show what a log holds: epochs, windows, record types, expert usage",
	.usage =
	"Usage: moeft inspect --wal PATH [--json] [--records] [--heatmap FILE]\n"
	"\n"
	"Recover the log at PATH read-only and show its superblock, checkpoint,\n"
	"writer epochs, committed windows, records per type, the dropped\n"
	"uncommitted tail, any damage, and per layer the experts most used in\n"
	"the decode windows.  A directory (MOEFT_WAL naming one: a log per\n"
	"process) has each of its logs (*.wal) shown.\n"
	"\n"
	"  -w, --wal PATH       the log file or device-DAX node, or a directory of logs\n"
	"  -j, --json           print one JSON object instead of text\n"
	"  -r, --records        also list every committed record with a decoded summary\n"
	"      --heatmap FILE   also draw expert usage as an SVG picture: a cell per\n"
	"                       layer and expert, coloured by the expert's share of\n"
	"                       the layer's routed token-slots in the decode windows\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 (also when damage is shown), 1 a moeft log too damaged to\n"
	"recover (no superblock or checkpoint copy), or --heatmap and no routing\n"
	"to draw, 2 usage or I/O error (also FILE not writable), or not a moeft\n"
	"log; for a directory, the worst of its logs'.\n",
	.run = inspect,
};

/*
 * resubmit.c - moeft resubmit: send the requests a restored server had
 * unfinished again, each as its prompt plus the tokens it had generated,
 * with what is left of its budget (the request migration Dynamo does);
 * the server's connector then finds their KV in the restored state and
 * computes only what it must.
 *
 * The requests come from the request indexes `moeft restore --wal DIR --
 * CMD` wrote (OUT/NAME/requests of each log its set file lists); the
 * server is spoken to over its OpenAI-compatible HTTP API with libcurl,
 * and its JSON read with jansson.  Each request is sent on its own thread
 * (at most RESUBMIT_THREADS at a time), so the server batches them as it
 * did before the crash.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cli.h"
#include "http.h"
#include "json.h"
#include "plan.h"
#include "reqindex.h"

#define RESUBMIT_THREADS 64

/* One request to send again, and what became of it. */
struct job {
	const struct rec_request *r;
	uint32_t generated;             /* tokens it had generated: kept */
	int done;                       /* its budget was spent: nothing to send */
	json_t *tokens_after;           /* generated since: an array, or NULL */
	long long cached;               /* the server's cached_tokens */
	char finish[32];
	char error[256];                /* "" when it completed */
};

struct resubmit {
	const char *server, *model;
	struct job *jobs;
	size_t njobs;
	atomic_size_t next;
	struct reqindex *idx;           /* one per log with an index */
	uint8_t **idx_bytes;
	size_t nidx;
};

/* The first model the server lists at /v1/models, into out. */
static int served_model(const char *server, char *out, size_t len, char *err, size_t errlen)
{
	char url[PATH_MAX];
	struct http_buf r;
	json_t *root = NULL, *id;
	long st = http_request(http_url(url, sizeof url, server, "/v1/models"), NULL, NULL, 30, &r, err,
			       errlen);
	int ret = -1;

	if (st > 0 && st != 200)
		snprintf(err, errlen, "%s: HTTP %ld", url, st);
	else if (st == 200 && (!(root = json_loadb(r.p ? r.p : "", r.len, 0, NULL)) ||
			       !(id = json_object_get(json_array_get(json_object_get(root, "data"),
								     0), "id")) ||
			       !json_is_string(id) || strlen(json_string_value(id)) >= len))
		snprintf(err, errlen, "%s: no model in the reply", url);
	else if (st == 200)
		ret = snprintf(out, len, "%s", json_string_value(id)) < 0 ? -1 : 0;
	json_decref(root);
	free(r.p);
	return ret;
}

/*
 * The body of job j's request: its params (what the engine's adapter
 * recorded: the sampling parameters), the model, its tokens as the prompt
 * and its budgets less what it generated; the token ids asked back.
 * NULL with j->error when its params are no JSON object.
 */
static char *body_of(const struct resubmit *rs, struct job *j)
{
	const struct rec_request *r = j->r;
	json_t *o, *prompt, *v;
	char *text;

	o = r->params_len ? json_loadb((const char *)r->params, r->params_len, 0, NULL)
			  : json_object();
	if (!json_is_object(o)) {
		snprintf(j->error, sizeof j->error, "its recorded params are not a JSON object");
		json_decref(o);
		return NULL;
	}
	prompt = json_array();
	for (uint32_t i = 0; i < r->ntokens; i++)
		json_array_append_new(prompt, json_integer(rec_request_token(r, i)));
	json_object_set_new(o, "model", json_string(rs->model));
	json_object_set_new(o, "prompt", prompt);
	json_object_set_new(o, "stream", json_false());
	json_object_set_new(o, "return_token_ids", json_true());
	/* What is left of the budgets; one with none left is done. */
	if ((v = json_object_get(o, "max_tokens")) && json_is_integer(v)) {
		if (json_integer_value(v) <= j->generated) {
			j->done = 1;
			json_decref(o);
			return NULL;
		}
		json_object_set_new(o, "max_tokens", json_integer(json_integer_value(v) -
								  j->generated));
	}
	if ((v = json_object_get(o, "min_tokens")) && json_is_integer(v))
		json_object_set_new(o, "min_tokens",
				    json_integer(json_integer_value(v) > j->generated ?
						 json_integer_value(v) - j->generated : 0));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!text)
		snprintf(j->error, sizeof j->error, "out of memory");
	return text;
}

/* The server's answer to job j into it. */
static void read_answer(struct job *j, const struct http_buf *b)
{
	json_t *root = json_loadb(b->p ? b->p : "", b->len, 0, NULL);
	json_t *choice = json_array_get(json_object_get(root, "choices"), 0);
	json_t *ids = json_object_get(choice, "token_ids");
	json_t *fin = json_object_get(choice, "finish_reason");
	json_t *cached = json_object_get(json_object_get(json_object_get(root, "usage"),
							 "prompt_tokens_details"), "cached_tokens");

	if (!json_is_array(ids)) {
		snprintf(j->error, sizeof j->error, "the reply has no token ids (%.120s)",
			 b->p ? b->p : "");
	} else {
		j->tokens_after = json_incref(ids);
		j->cached = json_is_integer(cached) ? json_integer_value(cached) : -1;
		snprintf(j->finish, sizeof j->finish, "%s",
			 json_is_string(fin) ? json_string_value(fin) : "");
	}
	json_decref(root);
}

static void *worker(void *arg)
{
	struct resubmit *rs = arg;
	char url[PATH_MAX], err[256];
	size_t i;

	http_url(url, sizeof url, rs->server, "/v1/completions");
	while ((i = atomic_fetch_add(&rs->next, 1)) < rs->njobs) {
		struct job *j = &rs->jobs[i];
		char *body = body_of(rs, j);
		struct http_buf b;
		long st;

		if (!body && j->done) {	/* complete as it was */
			j->tokens_after = json_array();
			j->cached = 0;
			snprintf(j->finish, sizeof j->finish, "length");
		}
		if (!body)
			continue;
		st = http_request(url, body, NULL, 0, &b, err, sizeof err);
		if (st < 0)
			snprintf(j->error, sizeof j->error, "%s", err);
		else if (st != 200)
			snprintf(j->error, sizeof j->error, "HTTP %ld: %.160s", st,
				 b.p ? b.p : "");
		else
			read_answer(j, &b);
		free(b.p);
		free(body);
	}
	return NULL;
}

/* The request indexes of OUT's logs (those its set file lists), and the
 * jobs of their unfinished requests.  0, or an exit status once said. */
static int load(const struct cli_command *cmd, struct resubmit *rs, const char *out, int json)
{
	char path[PATH_MAX], err[PATH_MAX + 128], *set;
	const char *p, *end;
	size_t len, n = 0;

	if (snprintf(path, sizeof path, "%s/%s", out, RESTORE_SET_NAME) >= (int)sizeof path)
		return cli_fail(cmd, json, EXIT_USAGE, "%s: path too long", out);
	if (!(set = restore_read_file(path, RESTORE_SET_MAX, &len, err, sizeof err)))
		return cli_fail(cmd, json, EXIT_USAGE, "%s (no server's restore there: run moeft "
				"restore --wal DIR -- CMD first)", err);
	if (restore_set_lists(set, "") < 0) {
		free(set);
		return cli_fail(cmd, json, EXIT_USAGE, "%s: not a restore set file", path);
	}
	for (p = set + sizeof RESTORE_SET_HEAD - 1; *p; p = end + 1)
		end = strchr(p, '\n'), n++;
	rs->idx = calloc(n ? n : 1, sizeof *rs->idx);
	rs->idx_bytes = calloc(n ? n : 1, sizeof *rs->idx_bytes);
	for (p = set + sizeof RESTORE_SET_HEAD - 1; rs->idx && rs->idx_bytes && *p; p = end + 1) {
		uint8_t *bytes;

		end = strchr(p, '\n');
		if (snprintf(path, sizeof path, "%s/%.*s/%s", out, (int)(end - p), p,
			     REQINDEX_NAME) >= (int)sizeof path) {
			free(set);
			return cli_fail(cmd, json, EXIT_USAGE, "%s: path too long", out);
		}
		if (!(bytes = (uint8_t *)restore_read_file(path, SIZE_MAX / 2, &len, err,
							   sizeof err))) {
			if (errno == ENOENT)
				continue;	/* a process that committed no requests */
			free(set);
			return cli_fail(cmd, json, EXIT_USAGE, "%s", err);
		}
		if (reqindex_parse(bytes, len, &rs->idx[rs->nidx], err, sizeof err) < 0) {
			free(bytes);
			free(set);
			return cli_fail(cmd, json, EXIT_BAD, "%s: %s", path, err);
		}
		rs->idx_bytes[rs->nidx++] = bytes;
	}
	free(set);
	if (!rs->idx || !rs->idx_bytes)
		return cli_fail(cmd, json, EXIT_USAGE, "out of memory");
	if (!rs->nidx)
		return cli_fail(cmd, json, EXIT_USAGE, "%s: no log of the restored server committed "
				"requests (is its connector configured?)", out);
	for (size_t k = 0; k < rs->nidx; k++)
		n += rs->idx[k].n;
	if (!(rs->jobs = calloc(n ? n : 1, sizeof *rs->jobs)))
		return cli_fail(cmd, json, EXIT_USAGE, "out of memory");
	for (size_t k = 0; k < rs->nidx; k++)
		for (size_t i = 0; i < rs->idx[k].n; i++) {
			const struct rec_request *r = &rs->idx[k].reqs[i];

			if (!(r->flags & REQUEST_FINISHED))
				rs->jobs[rs->njobs++] = (struct job){ .r = r, .cached = -1,
					.generated = r->ntokens - r->nprompt };
		}
	return 0;
}

static void json_tokens(struct json *j, const char *key, const struct job *jb)
{
	const struct rec_request *r = jb->r;
	int prompt = !strcmp(key, "prompt_token_ids");

	json_key(j, key);
	json_arr_begin(j);
	for (uint32_t i = prompt ? 0 : r->nprompt; i < (prompt ? r->nprompt : r->ntokens); i++)
		json_u64(j, rec_request_token(r, i));
	for (size_t i = 0; !prompt && i < json_array_size(jb->tokens_after); i++)
		json_u64(j, (uint64_t)json_integer_value(json_array_get(jb->tokens_after, i)));
	json_arr_end(j);
}

static void report(const struct resubmit *rs, int as_json)
{
	struct json j;

	if (as_json) {
		json_init(&j, stdout);
		json_arr_begin(&j);
	}
	for (size_t i = 0; i < rs->njobs; i++) {
		const struct job *jb = &rs->jobs[i];
		char id[REQUEST_MAX_ID + 1];

		snprintf(id, sizeof id, "%.*s", jb->r->id_len, (const char *)jb->r->id);
		if (!as_json) {
			if (jb->error[0])
				printf("%s: not completed: %s\n", id, jb->error);
			else
				printf("%s: resumed after %u generated tokens; %lld of the %u sent "
				       "were cached; %zu more generated (%s)\n", id, jb->generated,
				       jb->cached, jb->r->ntokens, json_array_size(jb->tokens_after),
				       jb->finish);
			continue;
		}
		json_obj_begin(&j);
		json_kv_str(&j, "id", id);
		json_tokens(&j, "prompt_token_ids", jb);
		json_tokens(&j, "token_ids", jb);
		json_kv_u64(&j, "resumed_from", jb->generated);
		json_kv_u64(&j, "prompt_tokens", jb->r->ntokens);
		json_kv_i64(&j, "cached_tokens", jb->cached);
		json_kv_str(&j, "finish_reason", jb->error[0] ? NULL : jb->finish);
		json_kv_str(&j, "error", jb->error[0] ? jb->error : NULL);
		json_obj_end(&j);
	}
	if (as_json)
		json_arr_end(&j);
}

static void release(struct resubmit *rs)
{
	for (size_t i = 0; i < rs->njobs; i++)
		json_decref(rs->jobs[i].tokens_after);
	for (size_t k = 0; k < rs->nidx; k++) {
		reqindex_free(&rs->idx[k]);
		free(rs->idx_bytes[k]);
	}
	free(rs->jobs);
	free(rs->idx);
	free(rs->idx_bytes);
}

static int resubmit(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wal", required_argument, NULL, 'w' },
		{ "restored", required_argument, NULL, 'r' },
		{ "server", required_argument, NULL, 's' },
		{ "model", required_argument, NULL, 'm' },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct resubmit rs = { 0 };
	const char *wal = NULL, *restored = NULL;
	char out[PATH_MAX], server[PATH_MAX], model[512], err[PATH_MAX + 128];
	pthread_t th[RESUBMIT_THREADS];
	unsigned nth = 0;
	double timeout = 600;
	int c, ret;

	server[0] = model[0] = '\0';
	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'w': if (!cli_path_opt(&o, "--wal", optarg, PATH_MAX - 16)) wal = optarg; break;
		case 'r': if (!cli_path_opt(&o, "--restored", optarg, 0)) restored = optarg; break;
		case 's': snprintf(server, sizeof server, "%s", optarg); break;
		case 'm': snprintf(model, sizeof model, "%s", optarg); break;
		case 't': cli_parse_double(&o, "--timeout", optarg, 0, 86400, &timeout); break;
		case 'j': o.json = 1; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind < argc)
		cli_usage_error(&o, "unexpected argument '%s'", argv[optind]);
	if (!wal && !restored)
		cli_usage_error(&o, "--wal DIR (or --restored OUT) is required");
	if (strncmp(server, "http://", 7) && strncmp(server, "https://", 8))
		cli_usage_error(&o, "--server must be an http:// or https:// URL");
	if ((ret = cli_parse_done(&o)))
		return ret;
	for (size_t n = strlen(server); n > 8 && server[n - 1] == '/'; n--)
		server[n - 1] = '\0';
	snprintf(out, sizeof out, "%s%s", restored ? restored : wal, restored ? "" : ".restore");
	if ((ret = load(cmd, &rs, out, o.json)))
		goto done;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "libcurl cannot start");
		goto done;
	}
	if (http_wait_healthy(server, timeout, err, sizeof err) < 0) {
		ret = cli_fail(cmd, o.json, EXIT_BAD, "the server did not become healthy in %.0f s: "
			       "%s", timeout, err);
		goto cleanup;
	}
	if (!model[0] && served_model(server, model, sizeof model, err, sizeof err) < 0) {
		ret = cli_fail(cmd, o.json, EXIT_BAD, "%s", err);
		goto cleanup;
	}
	rs.server = server;
	rs.model = model;
	while (nth < RESUBMIT_THREADS && nth < rs.njobs &&
	       pthread_create(&th[nth], NULL, worker, &rs) == 0)
		nth++;
	if (rs.njobs && !nth) {
		ret = cli_fail(cmd, o.json, EXIT_USAGE, "no thread: %s", strerror(errno));
		goto cleanup;
	}
	for (unsigned i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	report(&rs, o.json);
	ret = EXIT_OK;
	for (size_t i = 0; i < rs.njobs; i++)
		if (rs.jobs[i].error[0])
			ret = EXIT_BAD;
cleanup:
	curl_global_cleanup();
done:
	release(&rs);
	return ret;
}

const struct cli_command cmd_resubmit = {
	.name = "resubmit",
	.summary = "send a restored server's unfinished requests again, from where they stopped",
	.usage =
	"Usage: moeft resubmit --wal DIR --server URL [--restored OUT] [--model NAME]\n"
	"                      [--timeout SECONDS] [--json]\n"
	"\n"
	"After 'moeft restore --wal DIR -- CMD' restarted a server (its engine's\n"
	"connector recorded its requests: vLLM's MoeftConnector), send every request\n"
	"it had unfinished at the restored window again, as its prompt plus the\n"
	"tokens it had generated, with the rest of its token budget (max_tokens,\n"
	"min_tokens less what it generated; the other sampling parameters as\n"
	"recorded), to URL's OpenAI-compatible /v1/completions; the connector finds\n"
	"their KV in the restored state, so the server computes only what it must.\n"
	"Waits for URL/health first; the model is the first URL/v1/models lists.\n"
	"Requests are sent concurrently; it prints their continuations when all\n"
	"have answered.\n"
	"\n"
	"Options:\n"
	"  --wal DIR         the server's directory of logs (its restore is in\n"
	"                    DIR.restore, moeft restore's default)\n"
	"  --restored OUT    the restore's directory, when moeft restore had --out\n"
	"  --server URL      the restarted server, http://HOST:PORT\n"
	"  --model NAME      the model to ask for (default: the server's first)\n"
	"  --timeout S       seconds to wait for the server's health (default 600)\n"
	"  --json            a JSON array, one object per request: id,\n"
	"                    prompt_token_ids, token_ids (every token generated,\n"
	"                    before the crash and after), resumed_from (how many\n"
	"                    of token_ids were generated before), prompt_tokens\n"
	"                    (sent), cached_tokens (of them, those the server did\n"
	"                    not compute, as its usage reports: vLLM needs\n"
	"                    --enable-prompt-tokens-details; -1 when it does not),\n"
	"                    finish_reason, error (null when completed)\n"
	"\n"
	"Limits: greedy requests continue token for token; a sampled one continues\n"
	"from the same tokens but draws anew, and penalties that count generated\n"
	"tokens now count them as prompt.\n"
	"\n"
	"Exit status: 0 every request completed; 1 one did not, the server never\n"
	"became healthy, or an index is damaged; 2 usage or I/O error.\n",
	.run = resubmit,
};

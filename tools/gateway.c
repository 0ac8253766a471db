/*
 * gateway.c - moeft gateway: an OpenAI-compatible reverse proxy in front
 * of an engine's server that keeps its clients through the server's
 * crash.
 *
 * Each completion is sent on to the server as a stream with its token ids
 * asked back, and journaled as it comes: the prompt's token ids, every
 * token generated.  When the server's stream breaks before the request
 * finished, the gateway holds the client's connection, waits for the
 * restarted server's /health (moeft run restarts it) and sends the
 * request again as its prompt plus the tokens generated so far, with what
 * is left of max_tokens; the client's stream goes on from the next token,
 * nothing sent twice and nothing missed.  With moeft's restored state the
 * server computes none of that prompt again.  A non-streaming client gets
 * the whole answer when it is done.
 *
 * HTTP is libmicrohttpd's on the client side, a thread per connection,
 * and libcurl's towards the server, driven by that thread; JSON is
 * jansson's.  An event is passed on as soon as it is read: nothing is
 * buffered but the event itself.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <microhttpd.h>

#include "cli.h"
#include "http.h"

#define DEFAULT_MAX_BODY (1u << 20)
#define DEFAULT_MIGRATIONS 3
#define DEFAULT_WAIT_S 300.0
#define HEALTH_EVERY_S 0.5
#define COMMENT_EVERY_S 5.0	/* an SSE comment to a waiting client */
#define EVENT_MAX (16u << 20)	/* bytes of one event from the server */
#define COMPLETION_MAX_TOKENS 16	/* OpenAI's default for /v1/completions */
#define WAITING_LINE ": moeft: the server is restarting\n\n"

struct gateway {
	char backend[PATH_MAX];	/* http://HOST:PORT */
	atomic_int stopping;	/* SIGTERM: every request ends now */
	uint64_t max_body, migrations;
	double wait_s;
	atomic_ulong migrated;
};

enum phase { SENDING, WAITING, FINISHED };

/* One client's request, from its body to the end of its answer. */
struct flight {
	struct gateway *gw;
	struct http_buf body;	/* the client's request body */
	char *auth;		/* its Authorization header, passed on; NULL: none */
	int too_large;
	/* a completion */
	json_t *req;		/* the client's request */
	int chat;		/* /v1/chat/completions */
	int as_completion;	/* this transfer: a chat request sent again as a
				   completion of its prompt's and tokens' ids */
	int stream, want_ids, want_usage;
	json_t *prompt_ids;	/* as the server's first event said; NULL before */
	json_t *generated;	/* every token id generated */
	struct http_buf text;	/* and its text, for a non-streaming client */
	json_t *id, *finish, *stop_reason, *usage;
	long long max_tokens;	/* -1: none (a chat's: up to the context) */
	unsigned moves;		/* times sent again */
	enum phase phase;
	int ended;		/* the stream's last event is queued */
	int parsed;		/* the server parsed its output (reasoning):
				   sent again as ids, it would come back raw */
	char error[256];	/* why it ended without finishing */
	double wait_until, next_health, next_comment;
	double healthy_at;	/* when the server answered /health again */
	double first_token_s;	/* from then to its first token; <0: none yet */
	/* the transfer to the server */
	CURLM *multi;
	CURL *easy;
	struct curl_slist *headers;
	char *sent;		/* its body */
	struct http_buf in;		/* its bytes not yet a whole event */
	struct http_buf raw;		/* its whole reply, when not 200 */
	long status;
	int over;
	struct http_buf out;		/* for the client, not yet taken */
};

static void transfer_end(struct flight *f)
{
	if (f->easy) {
		curl_multi_remove_handle(f->multi, f->easy);
		curl_easy_cleanup(f->easy);
	}
	curl_slist_free_all(f->headers);
	free(f->sent);
	free(f->in.p);
	free(f->raw.p);
	f->easy = NULL;
	f->headers = NULL;
	f->sent = NULL;
	f->in = f->raw = (struct http_buf){ 0 };
}

static void flight_free(struct flight *f)
{
	transfer_end(f);
	if (f->multi)
		curl_multi_cleanup(f->multi);
	json_decref(f->req);
	json_decref(f->prompt_ids);
	json_decref(f->generated);
	json_decref(f->id);
	json_decref(f->finish);
	json_decref(f->stop_reason);
	json_decref(f->usage);
	free(f->body.p);
	free(f->auth);
	free(f->text.p);
	free(f->out.p);
	free(f);
}

/* The usage the client is told: its own prompt, every token generated. */
static void fix_usage(struct flight *f, json_t *usage)
{
	json_int_t prompt = f->prompt_ids ? (json_int_t)json_array_size(f->prompt_ids) : 0;
	json_int_t gen = (json_int_t)json_array_size(f->generated);

	if (!f->prompt_ids)
		prompt = json_integer_value(json_object_get(usage, "prompt_tokens"));
	json_object_set_new(usage, "prompt_tokens", json_integer(prompt));
	json_object_set_new(usage, "completion_tokens", json_integer(gen));
	json_object_set_new(usage, "total_tokens", json_integer(prompt + gen));
}

/* An event's data for the client: "data: TEXT\n\n". */
static void queue_data(struct flight *f, const char *text)
{
	http_buf_add(&f->out, "data: ", 6);
	http_buf_add(&f->out, text, strlen(text));
	http_buf_add(&f->out, "\n\n", 2);
}

static void queue_event(struct flight *f, json_t *ev)
{
	char *line = json_dumps(ev, JSON_COMPACT);

	if (line)
		queue_data(f, line);
	free(line);
}

/* What the restarted server computed of a request sent again: one line,
 * the evidence that moeft's restored KV spared it the prefill. */
static void say_resumed(const struct flight *f, json_t *usage)
{
	json_int_t sent = json_integer_value(json_object_get(usage, "prompt_tokens"));
	json_t *cached = json_object_get(json_object_get(usage, "prompt_tokens_details"),
					 "cached_tokens");

	fprintf(stderr, "moeft gateway: request %s went on after %u server failure%s: %" JSON_INTEGER_FORMAT
		" prompt tokens sent again, %s%" JSON_INTEGER_FORMAT " of them cached; its first "
		"token %.3f s after the server's health\n",
		f->id ? json_string_value(f->id) : "?", f->moves, f->moves == 1 ? "" : "s", sent,
		json_is_integer(cached) ? "" : "(not reported) ", json_integer_value(cached),
		f->first_token_s);
}

/* A completion's event (a chat request sent again) as a chat stream's:
 * the choice's text becomes its delta's content.  Takes ev. */
static json_t *as_chat_chunk(json_t *ev)
{
	json_t *choice = json_array_get(json_object_get(ev, "choices"), 0), *text;

	json_object_set_new(ev, "object", json_string("chat.completion.chunk"));
	if (choice && (text = json_object_get(choice, "text"))) {
		json_object_set_new(choice, "delta", json_pack("{s:O}", "content", text));
		json_object_del(choice, "text");
	}
	return ev;
}

/* One event's data from the server: journal it, and pass it on to a
 * streaming client as the client asked for it. */
static void on_event(void *arg, const char *data)
{
	struct flight *f = arg;
	json_t *ev, *choice, *ids, *v;

	if (!strcmp(data, "[DONE]") || !(ev = json_loads(data, 0, NULL)))
		return;		/* the gateway ends the stream itself */
	if (json_object_get(ev, "error")) {
		/* A server failing mid-answer (vLLM: its engine died): the
		 * request is sent again, or the client told the gateway's end. */
		json_decref(ev);
		return;
	}
	if (!f->id && (v = json_object_get(ev, "id")))
		f->id = json_incref(v);
	else if (f->id)
		json_object_set(ev, "id", f->id);
	if (f->as_completion)
		ev = as_chat_chunk(ev);
	if (!f->prompt_ids && json_is_array(v = json_object_get(ev, "prompt_token_ids")))
		f->prompt_ids = json_incref(v);		/* a chat stream's first event */
	if (!f->want_ids || f->moves)
		json_object_del(ev, "prompt_token_ids");
	if ((choice = json_array_get(json_object_get(ev, "choices"), 0))) {
		if (!f->prompt_ids && json_is_array(v = json_object_get(choice, "prompt_token_ids")))
			f->prompt_ids = json_incref(v);
		if (json_is_array(ids = json_object_get(choice, "token_ids"))) {
			if (f->moves && f->first_token_s < 0 && json_array_size(ids))
				f->first_token_s = cli_now() - f->healthy_at;
			json_array_extend(f->generated, ids);
		}
		v = json_object_get(choice, "delta");
		if (json_is_string(json_object_get(v, "reasoning_content")) ||
		    json_is_string(json_object_get(v, "reasoning")))
			f->parsed = 1;
		if (json_is_string(v = json_object_get(choice, "text")) ||
		    json_is_string(v = json_object_get(json_object_get(choice, "delta"), "content")))
			http_buf_add(&f->text, json_string_value(v), json_string_length(v));
		if ((v = json_object_get(choice, "finish_reason")) && !json_is_null(v)) {
			json_decref(f->finish);
			f->finish = json_incref(v);
			json_decref(f->stop_reason);
			f->stop_reason = json_incref(json_object_get(choice, "stop_reason"));
		}
		/* What the client did not ask for, and a continuation's prompt,
		 * which is not the client's. */
		if (!f->want_ids || f->moves)
			json_object_del(choice, "prompt_token_ids");
		if (!f->want_ids)
			json_object_del(choice, "token_ids");
	} else if (json_is_object(v = json_object_get(ev, "usage"))) {
		if (f->moves)
			say_resumed(f, v);
		json_decref(f->usage);
		f->usage = json_deep_copy(v);
		fix_usage(f, v);
		if (!f->want_usage) {
			json_decref(ev);
			return;
		}
	}
	if (f->stream && !f->moves && f->want_ids && !json_object_get(ev, "usage")) {
		/* The server's first answer, as the client asked for it: its
		 * bytes as they came, not parsed back into text. */
		queue_data(f, data);
	} else if (f->stream) {
		queue_event(f, ev);
	}
	json_decref(ev);
}

static size_t from_server(char *p, size_t size, size_t n, void *arg)
{
	struct flight *f = arg;
	size_t len = size * n;

	if (!f->status)
		curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &f->status);
	if (f->status != 200)
		return http_buf_add(&f->raw, p, len) < 0 || f->raw.len > HTTP_REPLY_MAX ? 0 : len;
	if (http_buf_add(&f->in, p, len) < 0 || f->in.len > EVENT_MAX)
		return 0;
	http_sse_take(&f->in, on_event, f);
	return len;
}

/* The body to send: the client's request as a stream with token ids,
 * and after a break its prompt plus what was generated, less that from
 * max_tokens.  NULL when out of memory. */
static char *continuation(struct flight *f)
{
	/* What a chat request has that a completion has not. */
	static const char *const chat_only[] = {
		"messages", "tools", "tool_choice", "parallel_tool_calls", "chat_template",
		"chat_template_kwargs", "add_generation_prompt", "continue_final_message",
		"documents", "max_completion_tokens", "logprobs", "top_logprobs",
		"echo", NULL
	};
	json_t *body = json_deep_copy(f->req), *prompt, *v;
	size_t gen = json_array_size(f->generated);
	char *text;

	if (!body)
		return NULL;
	for (const char *const *k = chat_only; f->as_completion && *k; k++)
		json_object_del(body, *k);
	json_object_set_new(body, "stream", json_true());
	json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
	json_object_set_new(body, "return_token_ids", json_true());
	if (f->prompt_ids && f->moves) {
		prompt = json_deep_copy(f->prompt_ids);
		json_array_extend(prompt, f->generated);
		json_object_set_new(body, "prompt", prompt);
		json_object_set_new(body, "echo", json_false());
		json_object_del(body, "max_completion_tokens");
		json_object_set_new(body, "max_tokens", f->max_tokens < 0 ? json_null() :
				    json_integer(f->max_tokens - (json_int_t)gen));
		/* What min_tokens asked for counts what was generated. */
		if (json_is_integer(v = json_object_get(body, "min_tokens")))
			json_object_set_new(body, "min_tokens", json_integer(
				json_integer_value(v) > (json_int_t)gen ?
				json_integer_value(v) - (json_int_t)gen : 0));
	}
	text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	return text;
}

/* Send the request (again) to the server: 0, or -1 with f->error. */
static int transfer_start(struct flight *f)
{
	char url[PATH_MAX];

	transfer_end(f);
	f->status = 0;
	f->over = 0;
	f->as_completion = f->chat && f->moves && f->prompt_ids;
	if (!(f->sent = continuation(f)) || !(f->easy = curl_easy_init())) {
		snprintf(f->error, sizeof f->error, "out of memory");
		return -1;
	}
	f->headers = curl_slist_append(NULL, "Content-Type: application/json");
	if (f->auth)
		f->headers = curl_slist_append(f->headers, f->auth);
	curl_easy_setopt(f->easy, CURLOPT_URL,
			 http_url(url, sizeof url, f->gw->backend, f->chat && !f->as_completion ?
				  "/v1/chat/completions" : "/v1/completions"));
	curl_easy_setopt(f->easy, CURLOPT_HTTPHEADER, f->headers);
	curl_easy_setopt(f->easy, CURLOPT_POSTFIELDS, f->sent);
	curl_easy_setopt(f->easy, CURLOPT_WRITEFUNCTION, from_server);
	curl_easy_setopt(f->easy, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(f->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(f->easy, CURLOPT_CONNECTTIMEOUT, 5L);
	curl_multi_add_handle(f->multi, f->easy);
	return 0;
}

/* The server's stream broke before the request finished: wait for it to
 * come back, unless that would be one move too many. */
static void broke(struct flight *f)
{
	size_t gen = json_array_size(f->generated);

	if (f->max_tokens >= 0 && gen && gen >= (size_t)f->max_tokens) {
		/* Only its last event was lost: the client gets one of its own. */
		json_t *ev = json_pack("{s:O,s:s,s:[{s:i,s:s,s:s,s:n}]}", "id",
				       f->id ? f->id : json_null(), "object", "text_completion",
				       "choices", "index", 0, "text", "", "finish_reason", "length",
				       "stop_reason");

		if (f->chat && ev)
			ev = as_chat_chunk(ev);

		f->finish = json_string("length");
		if (f->stream && ev)
			queue_event(f, ev);
		json_decref(ev);
		f->phase = FINISHED;
	} else if (f->parsed) {
		snprintf(f->error, sizeof f->error, "the server failed, and its answer was parsed "
			 "(reasoning): sent again as token ids it would not be");
		f->phase = FINISHED;
	} else if ((gen || f->text.len) && (!gen || !f->prompt_ids)) {
		/* Sent again without them, the client would get its text twice. */
		snprintf(f->error, sizeof f->error, "the server failed, and it gave no token ids "
			 "to send the request again with");
		f->phase = FINISHED;
	} else if (f->moves >= f->gw->migrations) {
		snprintf(f->error, sizeof f->error, "the server failed %u times during this "
			 "request (--migrations %u)", f->moves + 1, (unsigned)f->gw->migrations);
		f->phase = FINISHED;
	}
	if (f->phase == FINISHED)
		return;
	f->moves++;
	atomic_fetch_add(&f->gw->migrated, 1);
	f->phase = WAITING;
	f->wait_until = cli_now() + f->gw->wait_s;
	f->next_health = f->next_comment = cli_now();
	transfer_end(f);
}

/*
 * Move the request on until the client has bytes to take, the server's
 * status is known (want_status), or it is finished.  Blocks in the
 * server's socket or between health checks.
 */
static void pump(struct flight *f, int want_status)
{
	char url[PATH_MAX], err[256];
	struct http_buf r;
	CURLMsg *msg;
	int left, running;

	while (f->phase != FINISHED && !f->out.len && !(want_status && f->status)) {
		if (atomic_load(&f->gw->stopping)) {
			snprintf(f->error, sizeof f->error, "the gateway is stopping");
			f->phase = FINISHED;
			break;
		}
		if (f->phase == WAITING) {
			double t = cli_now();

			if (t >= f->wait_until) {
				snprintf(f->error, sizeof f->error, "the server did not come back "
					 "within %.0f s (--wait)", f->gw->wait_s);
				f->phase = FINISHED;
			} else if (t >= f->next_health) {
				f->next_health = t + HEALTH_EVERY_S;
				if (http_request(http_url(url, sizeof url, f->gw->backend, "/health"),
						 NULL, f->auth, 2, &r, err, sizeof err) == 200 &&
				    transfer_start(f) == 0) {
					f->phase = SENDING;
					f->healthy_at = t;
					f->first_token_s = -1;
				}
				else if (f->error[0])
					f->phase = FINISHED;
				free(r.p);
			} else if (f->stream && t >= f->next_comment) {
				f->next_comment = t + COMMENT_EVERY_S;
				http_buf_add(&f->out, WAITING_LINE, sizeof WAITING_LINE - 1);
			} else {
				struct timespec pause = { 0, 100000000L };

				nanosleep(&pause, NULL);
			}
			continue;
		}
		curl_multi_perform(f->multi, &running);
		while ((msg = curl_multi_info_read(f->multi, &left)))
			if (msg->msg == CURLMSG_DONE)
				f->over = 1;
		if (!f->over) {
			curl_multi_poll(f->multi, NULL, 0, 1000, NULL);
			continue;
		}
		if (!f->status)
			curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &f->status);
		if (f->status >= 500 && f->moves) {
			/* Healthy, but not serving yet: wait on, within --wait. */
			transfer_end(f);
			f->status = 0;
			f->phase = WAITING;
			continue;
		}
		if (f->status && f->status != 200 && f->moves)
			snprintf(f->error, sizeof f->error, "the restarted server refused the "
				 "request sent again: HTTP %ld", f->status);
		if (f->finish || (f->status && f->status != 200))
			f->phase = FINISHED;
		else
			broke(f);	/* refused, reset, or cut before the end */
	}
}

/* A reply of JSON text with status. */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *json)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), (void *)json,
								  MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "application/json");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* An OpenAI-style error reply. */
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
	json_t *e = json_pack("{s:{s:s,s:s,s:i}}", "error", "message", msg, "type",
			      status < 500 ? "invalid_request_error" : "moeft_gateway",
			      "code", (int)status);
	char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
	enum MHD_Result ret = reply(c, status, text ? text : "{}");

	free(text);
	json_decref(e);
	return ret;
}

/* The streaming client's bytes (libmicrohttpd's content reader). */
static ssize_t stream_out(void *arg, uint64_t pos, char *to, size_t max)
{
	struct flight *f = arg;
	size_t n;
	json_t *e;

	(void)pos;
	pump(f, 0);
	if (!f->out.len && f->phase == FINISHED) {
		if (f->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		f->ended = 1;
		if (f->error[0] && (e = json_pack("{s:{s:s,s:s}}", "error", "message", f->error,
						 "type", "moeft_gateway"))) {
			queue_event(f, e);
			json_decref(e);
		}
		queue_data(f, "[DONE]");
	}
	n = f->out.len < max ? f->out.len : max;
	memcpy(to, f->out.p, n);
	http_buf_drop(&f->out, n);
	return (ssize_t)n;
}

static void stream_free(void *arg)
{
	flight_free(arg);	/* the client went: so does its transfer */
}

/* A non-streaming client's answer, from the journal. */
static enum MHD_Result answer_whole(struct MHD_Connection *c, struct flight *f)
{
	json_t *choice, *a;
	char *text;
	enum MHD_Result ret;

	if (f->chat)
		choice = json_pack("{s:i,s:{s:s,s:s%},s:n,s:O,s:O}", "index", 0, "message", "role",
				   "assistant", "content", f->text.p ? f->text.p : "", f->text.len,
				   "logprobs", "finish_reason", f->finish, "stop_reason",
				   f->stop_reason ? f->stop_reason : json_null());
	else
		choice = json_pack("{s:i,s:s%,s:n,s:O,s:O}", "index", 0, "text",
				   f->text.p ? f->text.p : "", f->text.len, "logprobs",
				   "finish_reason", f->finish, "stop_reason",
				   f->stop_reason ? f->stop_reason : json_null());
	if (choice && f->want_ids) {
		json_object_set(choice, "token_ids", f->generated);
		json_object_set(choice, "prompt_token_ids", f->prompt_ids ? f->prompt_ids : json_null());
	}
	if (f->usage)
		fix_usage(f, f->usage);
	a = json_pack("{s:O,s:s,s:O,s:[o],s:O}", "id", f->id ? f->id : json_null(), "object",
		      f->chat ? "chat.completion" : "text_completion", "model", json_object_get(f->req, "model") ?
		      json_object_get(f->req, "model") : json_null(), "choices", choice,
		      "usage", f->usage ? f->usage : json_null());
	text = a ? json_dumps(a, JSON_COMPACT) : NULL;
	ret = text ? reply(c, 200, text) : reply_error(c, 500, "out of memory");
	free(text);
	json_decref(a);
	return ret;
}

/* Why the client's completion request cannot be served; NULL: it can. */
static const char *unservable(struct flight *f)
{
	json_t *p = json_object_get(f->req, "prompt"), *v;
	size_t i;

	if (!json_is_object(f->req))
		return "the body is not a JSON object";
	if (f->chat) {
		v = json_object_get(f->req, "messages");
		if (!json_is_array(v) || !json_array_size(v))
			return "\"messages\" must be an array of messages";
	} else {
		if (!json_is_string(p) && !(json_is_array(p) && json_array_size(p)))
			return "\"prompt\" must be a string or an array of token ids (one prompt)";
		json_array_foreach(json_is_array(p) ? p : NULL, i, v)
			if (!json_is_integer(v))
				return "\"prompt\" must be a string or an array of token ids (one "
				       "prompt)";
	}
	v = json_object_get(f->req, "tool_choice");
	if (f->chat && json_array_size(json_object_get(f->req, "tools")) &&
	    !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
		return "tool calls are not served through the gateway (yet)";
	if ((v = json_object_get(f->req, "n")) && !(json_is_integer(v) && json_integer_value(v) == 1))
		return "\"n\" must be 1 through the gateway";
	if ((v = json_object_get(f->req, "max_tokens")) && !json_is_null(v) &&
	    !(json_is_integer(v) && json_integer_value(v) >= 0))
		return "\"max_tokens\" must be a whole number";
	if ((v = json_object_get(f->req, "max_completion_tokens")) && !json_is_null(v) &&
	    !(json_is_integer(v) && json_integer_value(v) >= 0))
		return "\"max_completion_tokens\" must be a whole number";
	if ((v = json_object_get(f->req, "stream")) && !json_is_boolean(v))
		return "\"stream\" must be true or false";
	return NULL;
}

static enum MHD_Result completion(struct MHD_Connection *c, struct flight *f, void **slot)
{
	struct MHD_Response *r;
	json_error_t jerr;
	const char *why;
	json_t *v;
	enum MHD_Result ret;

	if (f->too_large)
		return reply_error(c, 413, "the request body is larger than --max-body");
	f->req = json_loadb(f->body.p ? f->body.p : "", f->body.len, 0, &jerr);
	if ((why = unservable(f)))
		return reply_error(c, 400, why);
	f->stream = json_is_true(json_object_get(f->req, "stream"));
	f->want_ids = json_is_true(json_object_get(f->req, "return_token_ids"));
	f->want_usage = json_is_true(json_object_get(json_object_get(f->req, "stream_options"),
						     "include_usage")) || !f->stream;
	/* A chat request's max_completion_tokens, where set, is its budget. */
	if (!json_is_integer(v = json_object_get(f->req, "max_completion_tokens")))
		v = json_object_get(f->req, "max_tokens");
	/* null asks for the context's rest; absent, a completion gets 16. */
	f->max_tokens = json_is_integer(v) ? json_integer_value(v) :
			f->chat || v ? -1 : COMPLETION_MAX_TOKENS;
	if (!(f->generated = json_array()) || !(f->multi = curl_multi_init()) ||
	    transfer_start(f) < 0)
		return reply_error(c, 500, "out of memory");
	pump(f, 1);
	if (f->status && f->status != 200 && !f->moves) {
		/* The server's own refusal (a bad parameter): passed on. */
		pump(f, 0);
		return reply(c, (unsigned)f->status, f->raw.p ? f->raw.p : "{}");
	}
	if (f->error[0])
		return reply_error(c, 503, f->error);
	if (!f->stream) {
		pump(f, 0);	/* to the end: it queues nothing for the client */
		return f->finish ? answer_whole(c, f) : reply_error(c, 503, f->error);
	}
	if (!(r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_out, f,
						    stream_free)))
		return reply_error(c, 500, "out of memory");
	*slot = NULL;		/* the response owns the flight now */
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

/* GET /health, /v1/models: the server's answer as it is, asked with the
 * client's Authorization. */
static enum MHD_Result pass_get(struct MHD_Connection *c, const struct flight *f,
				const char *path)
{
	char url[PATH_MAX], err[256];
	struct http_buf r;
	long st = http_request(http_url(url, sizeof url, f->gw->backend, path), NULL, f->auth, 10,
			       &r, err, sizeof err);
	enum MHD_Result ret;

	if (st <= 0)
		ret = reply_error(c, 503, "the server is not answering (restarting?)");
	else
		ret = reply(c, (unsigned)st, r.p ? r.p : "");
	free(r.p);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload, size_t *upload_len, void **slot)
{
	struct gateway *gw = cls;
	struct flight *f = *slot;
	const char *auth;

	(void)version;
	if (!f) {
		if (!(f = calloc(1, sizeof *f)))
			return MHD_NO;
		f->gw = gw;
		*slot = f;
		auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
		if (auth && asprintf(&f->auth, "Authorization: %s", auth) < 0)
			return MHD_NO;
		return MHD_YES;
	}
	if (*upload_len) {
		if (f->body.len + *upload_len > gw->max_body)
			f->too_large = 1;
		else if (http_buf_add(&f->body, upload, *upload_len) < 0)
			return MHD_NO;
		*upload_len = 0;
		return MHD_YES;
	}
	if (!strcmp(method, "GET") && (!strcmp(url, "/health") || !strcmp(url, "/v1/models")))
		return pass_get(c, f, url);
	f->chat = !strcmp(url, "/v1/chat/completions");
	if (f->chat || !strcmp(url, "/v1/completions"))
		return strcmp(method, "POST") ? reply_error(c, 405, "POST a completion")
					      : completion(c, f, slot);
	return reply_error(c, 404, "the gateway serves /v1/completions, /v1/chat/completions, "
			   "/v1/models and /health");
}

static void on_done(void *cls, struct MHD_Connection *c, void **slot,
		    enum MHD_RequestTerminationCode why)
{
	(void)cls, (void)c, (void)why;
	if (*slot)
		flight_free(*slot);
	*slot = NULL;
}

/* HOST:PORT into an address: 0, or -1 with msg. */
static int listen_addr(const char *text, struct addrinfo **ai, char *msg, size_t len)
{
	char host[256];
	const char *colon = strrchr(text, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV | AI_PASSIVE };
	int err;

	if (!colon || colon == text || (size_t)(colon - text) >= sizeof host || !colon[1]) {
		snprintf(msg, len, "--listen %s: want HOST:PORT", text);
		return -1;
	}
	if (text[0] == '[' && colon[-1] == ']')	/* [::1]:8000 */
		snprintf(host, sizeof host, "%.*s", (int)(colon - text - 2), text + 1);
	else
		snprintf(host, sizeof host, "%.*s", (int)(colon - text), text);
	if ((err = getaddrinfo(host, colon + 1, &hints, ai))) {
		snprintf(msg, len, "--listen %s: %s", text, gai_strerror(err));
		return -1;
	}
	return 0;
}

static int gateway_main(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "backend", required_argument, NULL, 'b' },
		{ "migrations", required_argument, NULL, 'm' },
		{ "wait", required_argument, NULL, 'W' },
		{ "max-body", required_argument, NULL, 'B' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct gateway gw = { .max_body = DEFAULT_MAX_BODY, .migrations = DEFAULT_MIGRATIONS,
			      .wait_s = DEFAULT_WAIT_S };
	const char *listen = NULL, *backend = NULL;
	struct addrinfo *ai = NULL;
	struct MHD_Daemon *d;
	char msg[PATH_MAX + 64];
	sigset_t stop;
	int c, ret, sig;

	while ((c = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (c) {
		case 'l': listen = optarg; break;
		case 'b': backend = optarg; break;
		case 'm': cli_parse_u64(&o, "--migrations", optarg, 0, 100, &gw.migrations); break;
		case 'W': cli_parse_double(&o, "--wait", optarg, 0, 86400, &gw.wait_s); break;
		case 'B': cli_parse_u64(&o, "--max-body", optarg, 1, 1u << 30, &gw.max_body); break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	if (optind < argc)
		cli_usage_error(&o, "unexpected argument '%s'", argv[optind]);
	if (!listen || !backend)
		cli_usage_error(&o, "--listen HOST:PORT and --backend URL are required");
	else if (strncmp(backend, "http://", 7) || strlen(backend) >= sizeof gw.backend - 64)
		cli_usage_error(&o, "--backend %s: want http://HOST:PORT", backend);
	else if (listen_addr(listen, &ai, msg, sizeof msg) < 0)
		cli_usage_error(&o, "%s", msg);
	if ((ret = cli_parse_done(&o)))
		return ret;
	snprintf(gw.backend, sizeof gw.backend, "%.*s", (int)strcspn(backend + 7, "/") + 7,
		 backend);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGPIPE);
	sigprocmask(SIG_BLOCK, &stop, NULL);	/* the server threads inherit it */
	d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
			     MHD_USE_POLL | MHD_USE_ERROR_LOG |
			     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0), 0, NULL, NULL,
			     on_request, &gw,
			     MHD_OPTION_SOCK_ADDR, ai->ai_addr,
			     MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
			     MHD_OPTION_CONNECTION_TIMEOUT, 0u, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!d) {
		curl_global_cleanup();
		return cli_fail(cmd, 0, EXIT_USAGE, "cannot listen on %s (its reason is above)",
				listen);
	}
	fprintf(stderr, "moeft gateway: listening on %s for %s\n", listen, gw.backend);
	sigdelset(&stop, SIGPIPE);
	while ((sig = sigwaitinfo(&stop, NULL)) < 0 && errno == EINTR)
		;
	atomic_store(&gw.stopping, 1);
	MHD_stop_daemon(d);
	curl_global_cleanup();
	fprintf(stderr, "moeft gateway: stopped; requests that lost the server mid-answer: %lu\n",
		(unsigned long)atomic_load(&gw.migrated));
	return EXIT_OK;
}

const struct cli_command cmd_gateway = {
	.name = "gateway",
	.summary = "an OpenAI-compatible proxy that keeps its clients through a server's crash",
	.usage =
	"Usage: moeft gateway --listen HOST:PORT --backend http://HOST:PORT\n"
	"                     [--migrations N] [--wait SECONDS] [--max-body BYTES]\n"
	"\n"
	"Serve /v1/completions (streaming or not), /v1/models and /health on\n"
	"HOST:PORT, passing each request on to the engine's server at --backend.\n"
	"Each completion is journaled (its prompt's and its tokens' ids, which the\n"
	"gateway asks the server for); when the server's answer breaks before the\n"
	"end, the gateway keeps the client's connection, waits for the server to\n"
	"answer /health again (moeft run restarts it) and sends the request again\n"
	"as its prompt plus the tokens generated so far, with the rest of\n"
	"max_tokens: the client's stream goes on from the next token.  A waiting\n"
	"streaming client gets an SSE comment line every 5 s, never data.\n"
	"\n"
	"  -l, --listen HOST:PORT  where to serve clients\n"
	"  -b, --backend URL       the engine's server, http://HOST:PORT\n"
	"  -m, --migrations N      times one request is sent again before its client\n"
	"                          gets an error (default 3)\n"
	"  -W, --wait SECONDS      how long a request waits for the server to come\n"
	"                          back (default 300)\n"
	"  -B, --max-body BYTES    the largest request body (default 1 MiB; 413 above)\n"
	"  -h, --help              show this help\n"
	"\n"
	"One prompt and one choice (n 1) per request.  A request the server refuses\n"
	"gets the server's status and answer; a malformed one 400.  Runs until\n"
	"SIGTERM or SIGINT.  Exit status: 0, or 2 a usage error or no address.\n",
	.run = gateway_main,
};

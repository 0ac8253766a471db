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
 * One thread, one epoll loop: libmicrohttpd serves the clients (its
 * epoll set, connections suspended while they have nothing to send),
 * libcurl's socket interface talks to the server, and a signalfd takes
 * SIGTERM and SIGINT.  A step of the server's ends with events for many
 * streams at once, and one wake-up of the loop passes them all on: the
 * gateway's cost grows with the events, not with the streams waiting.
 * JSON is jansson's.  An event is passed on as soon as it is read: nothing
 * is buffered but the event itself.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/signalfd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <microhttpd.h>

#include "cli.h"
#include "http.h"

#define DEFAULT_MAX_BODY (1u << 20)
#define DEFAULT_MIGRATIONS 3
#define DEFAULT_WAIT_S 300.0
#define HEALTH_EVERY_S 0.5
#define HEALTH_TIMEOUT_S 2L
#define GET_TIMEOUT_S 10L	/* /health and /v1/models passed on */
#define COMMENT_EVERY_S 5.0	/* an SSE comment to a waiting client */
#define TICK_MS 100		/* the loop's wake-up while a request waits */
#define IDLE_MS 1000
#define STOP_S 2.0		/* at SIGTERM: to tell the clients, then close */
#define OUT_MAX (1u << 20)	/* bytes a streaming client has not taken yet:
				   above, the server's transfer is paused */
#define LEFT_EVERY_S 1.0	/* a parked client is asked whether it left */
#define EVENT_MAX (16u << 20)	/* bytes of one event from the server */
#define COMPLETION_MAX_TOKENS 16	/* OpenAI's default for /v1/completions */
#define WAITING_LINE ": moeft: the server is restarting\n\n"

struct flight;

struct gateway {
	char backend[PATH_MAX];	/* http://HOST:PORT */
	uint64_t max_body, migrations;
	double wait_s;
	unsigned long migrated;
	double next_left_check;
	/* the loop */
	struct MHD_Daemon *mhd;
	CURLM *multi;
	int ep, mhd_fd, sig_fd;
	double curl_due;	/* libcurl's next timeout; <0: none */
	double stop_by;		/* SIGTERM came: close by then; 0: not yet */
	struct flight *flights;	/* every request in progress */
};

enum phase { SENDING, WAITING, FINISHED };
enum kind { COMPLETION, GET };

/* One client's request, from its body to the end of its answer. */
struct flight {
	struct gateway *gw;
	struct flight *prev, *next;	/* in gw->flights */
	struct MHD_Connection *conn;
	int suspended;		/* conn waits for something to send */
	int begun;		/* its transfer was started */
	int responding;		/* its streaming response is queued */
	enum kind kind;
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
	CURL *easy;
	struct curl_slist *headers;	/* its headers, and the probe's */
	char *sent;		/* its body */
	struct http_buf in;	/* its bytes not yet a whole event */
	struct http_buf raw;	/* its whole reply: not 200, or a GET's */
	long status;
	int over;		/* it ended */
	CURL *probe;		/* while WAITING: the server's /health asked */
	int paused;		/* the transfer waits for the client to read */
	struct http_buf out;	/* for the client, not yet taken */
};

/* A transfer to the server, its bytes going to f (CURLOPT_PRIVATE). */
static CURL *easy_new(struct flight *f, const char *path, struct curl_slist *headers,
		      curl_write_callback write, void *arg)
{
	CURL *e = curl_easy_init();
	char url[PATH_MAX];

	if (!e)
		return NULL;
	curl_easy_setopt(e, CURLOPT_URL, http_url(url, sizeof url, f->gw->backend, path));
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, arg);
	curl_easy_setopt(e, CURLOPT_PRIVATE, f);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 5L);
	curl_multi_add_handle(f->gw->multi, e);
	return e;
}

static void easy_end(struct flight *f, CURL **e)
{
	if (*e) {
		curl_multi_remove_handle(f->gw->multi, *e);
		curl_easy_cleanup(*e);
	}
	*e = NULL;
}

/* The transfer's own state; its reply (raw) stays for the client. */
static void transfer_end(struct flight *f)
{
	easy_end(f, &f->easy);
	free(f->sent);
	free(f->in.p);
	f->sent = NULL;
	f->in = (struct http_buf){ 0 };
}

/* Whether the client's connection has something to do: an answer to
 * start, bytes to send, or its end. */
static int ready(const struct flight *f)
{
	if (f->responding)
		return f->out.len || f->phase == FINISHED;
	if (f->kind == GET)
		return f->over;
	/* A stream starts when the server answers 200, or waits for it to
	 * come back: the client then gets SSE comment lines meanwhile. */
	return f->phase == FINISHED || (f->stream && (f->status == 200 || f->phase == WAITING));
}

/* Park the client's connection until it is ready(). */
static void park(struct flight *f)
{
	f->suspended = 1;
	MHD_suspend_connection(f->conn);
}

static void wake_if_ready(struct flight *f)
{
	if (f->suspended && ready(f)) {
		f->suspended = 0;
		MHD_resume_connection(f->conn);
	}
}

static struct flight *flight_new(struct gateway *gw, struct MHD_Connection *c)
{
	struct flight *f = calloc(1, sizeof *f);

	if (!f)
		return NULL;
	f->gw = gw;
	f->conn = c;
	f->next = gw->flights;
	if (f->next)
		f->next->prev = f;
	gw->flights = f;
	return f;
}

static void flight_free(struct flight *f)
{
	if (f->prev)
		f->prev->next = f->next;
	else
		f->gw->flights = f->next;
	if (f->next)
		f->next->prev = f->prev;
	transfer_end(f);
	easy_end(f, &f->probe);
	curl_slist_free_all(f->headers);
	free(f->raw.p);
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
	if (f->out.len > OUT_MAX) {	/* a client that does not read: wait for it */
		f->paused = 1;
		return CURL_WRITEFUNC_PAUSE;
	}
	if (http_buf_add(&f->in, p, len) < 0 || f->in.len > EVENT_MAX)
		return 0;
	http_sse_take(&f->in, on_event, f);
	wake_if_ready(f);
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
	transfer_end(f);
	free(f->raw.p);
	f->raw = (struct http_buf){ 0 };
	f->status = 0;
	f->over = 0;
	f->as_completion = f->chat && f->moves && f->prompt_ids;
	if (!(f->sent = continuation(f)) ||
	    !(f->easy = easy_new(f, f->chat && !f->as_completion ? "/v1/chat/completions" :
				 "/v1/completions", f->headers, from_server, f))) {
		snprintf(f->error, sizeof f->error, "out of memory");
		return -1;
	}
	curl_easy_setopt(f->easy, CURLOPT_POSTFIELDS, f->sent);
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
	f->gw->migrated++;
	f->phase = WAITING;
	f->wait_until = cli_now() + f->gw->wait_s;
	f->next_health = f->next_comment = cli_now();
	transfer_end(f);
}

/* f's transfer ended: the request is done, or it waits for the server. */
static void transfer_over(struct flight *f)
{
	f->over = 1;
	if (!f->status)
		curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &f->status);
	if (f->kind == GET) {
		transfer_end(f);
	} else if (f->status >= 500 && f->moves) {
		/* Healthy, but not serving yet: wait on, within --wait. */
		transfer_end(f);
		f->status = 0;
		f->phase = WAITING;
	} else {
		if (f->status && f->status != 200 && f->moves)
			snprintf(f->error, sizeof f->error, "the restarted server refused the "
				 "request sent again: HTTP %ld", f->status);
		if (f->finish || (f->status && f->status != 200))
			f->phase = FINISHED;
		else
			broke(f);	/* refused, reset, or cut before the end */
		transfer_end(f);
	}
	wake_if_ready(f);
}

/* f's /health asked while it waits ended: sent again when it said 200. */
static void probe_over(struct flight *f)
{
	long st = 0;

	curl_easy_getinfo(f->probe, CURLINFO_RESPONSE_CODE, &st);
	easy_end(f, &f->probe);
	if (st != 200 || f->phase != WAITING)
		return;
	if (transfer_start(f) == 0) {
		f->phase = SENDING;
		f->healthy_at = cli_now();
		f->first_token_s = -1;
	} else {
		f->phase = FINISHED;
		wake_if_ready(f);
	}
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
	(void)p, (void)arg;
	return size * n;
}

/* A waiting request, now: given up at --wait, the server's /health asked
 * every HEALTH_EVERY_S, its streaming client told every COMMENT_EVERY_S. */
static void tick(struct flight *f, double now)
{
	if (now >= f->wait_until) {
		easy_end(f, &f->probe);
		snprintf(f->error, sizeof f->error, "the server did not come back within %.0f s "
			 "(--wait)", f->gw->wait_s);
		f->phase = FINISHED;
	} else if (!f->probe && now >= f->next_health) {
		f->next_health = now + HEALTH_EVERY_S;
		/* with the client's Authorization, as a server may want it */
		if ((f->probe = easy_new(f, "/health", f->headers, discard, NULL)))
			curl_easy_setopt(f->probe, CURLOPT_TIMEOUT, HEALTH_TIMEOUT_S);
	} else if (f->responding && now >= f->next_comment) {
		f->next_comment = now + COMMENT_EVERY_S;
		http_buf_add(&f->out, WAITING_LINE, sizeof WAITING_LINE - 1);
	}
	wake_if_ready(f);
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
	if (!f->out.len && f->phase != FINISHED) {
		park(f);	/* resumed when the server sends more */
		return 0;
	}
	if (!f->out.len) {
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
	if (f->paused && f->out.len <= OUT_MAX / 2 && f->easy) {
		f->paused = 0;
		curl_easy_pause(f->easy, CURLPAUSE_CONT);	/* may add to out at once */
	}
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

/* The client's completion request: checked, then sent to the server.
 * 0, or -1 with the client's answer queued. */
static int begin_completion(struct MHD_Connection *c, struct flight *f, enum MHD_Result *ret)
{
	json_error_t jerr;
	const char *why;
	json_t *v;

	*ret = MHD_YES;
	if (f->too_large) {
		*ret = reply_error(c, 413, "the request body is larger than --max-body");
		return -1;
	}
	f->req = json_loadb(f->body.p ? f->body.p : "", f->body.len, 0, &jerr);
	if ((why = unservable(f))) {
		*ret = reply_error(c, 400, why);
		return -1;
	}
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
	if (!(f->generated = json_array()) ||
	    !(f->headers = curl_slist_append(NULL, "Content-Type: application/json")) ||
	    (f->auth && !curl_slist_append(f->headers, f->auth)) || transfer_start(f) < 0) {
		*ret = reply_error(c, 500, "out of memory");
		return -1;
	}
	return 0;
}

/* The client's answer, once ready(): the server's refusal, the gateway's
 * error, the whole answer, or the stream from here on. */
static enum MHD_Result answer_completion(struct MHD_Connection *c, struct flight *f,
					 void **slot)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (f->status && f->status != 200 && !f->moves)	/* a bad parameter, say */
		return reply(c, (unsigned)f->status, f->raw.p ? f->raw.p : "{}");
	if (f->error[0])
		return reply_error(c, 503, f->error);
	if (!f->stream)
		return f->finish ? answer_whole(c, f) : reply_error(c, 503, "no answer");
	if (!(r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_out, f,
						    stream_free)))
		return reply_error(c, 500, "out of memory");
	*slot = NULL;		/* the response owns the flight now */
	f->responding = 1;
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

static size_t into_raw(char *p, size_t size, size_t n, void *arg)
{
	struct flight *f = arg;

	return http_buf_add(&f->raw, p, size * n) < 0 || f->raw.len > HTTP_REPLY_MAX ? 0 : size * n;
}

/* GET /health, /v1/models: asked of the server with the client's
 * Authorization; 0, or -1 out of memory. */
static int begin_get(struct flight *f, const char *path)
{
	f->kind = GET;
	if (f->auth && !(f->headers = curl_slist_append(NULL, f->auth)))
		return -1;
	if (!(f->easy = easy_new(f, path, f->headers, into_raw, f)))
		return -1;
	curl_easy_setopt(f->easy, CURLOPT_TIMEOUT, GET_TIMEOUT_S);
	return 0;
}

/* The server's answer as it is. */
static enum MHD_Result answer_get(struct MHD_Connection *c, const struct flight *f)
{
	if (f->status <= 0)
		return reply_error(c, 503, "the server is not answering (restarting?)");
	return reply(c, (unsigned)f->status, f->raw.p ? f->raw.p : "");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload, size_t *upload_len, void **slot)
{
	struct gateway *gw = cls;
	struct flight *f = *slot;
	enum MHD_Result ret;
	const char *auth;
	int get;

	(void)version;
	if (!f) {
		if (!(f = flight_new(gw, c)))
			return MHD_NO;
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
	if (!f->begun) {	/* the whole request is here */
		get = !strcmp(method, "GET") && (!strcmp(url, "/health") ||
						 !strcmp(url, "/v1/models"));
		f->chat = !strcmp(url, "/v1/chat/completions");
		if (get && gw->stop_by) {
			return reply_error(c, 503, "the gateway is stopping");
		} else if (get) {
			if (begin_get(f, url) < 0)
				return reply_error(c, 500, "out of memory");
		} else if (!f->chat && strcmp(url, "/v1/completions")) {
			return reply_error(c, 404, "the gateway serves /v1/completions, "
					   "/v1/chat/completions, /v1/models and /health");
		} else if (strcmp(method, "POST")) {
			return reply_error(c, 405, "POST a completion");
		} else if (gw->stop_by) {
			return reply_error(c, 503, "the gateway is stopping");
		} else if (begin_completion(c, f, &ret) < 0) {
			return ret;
		}
		f->begun = 1;
	}
	if (!ready(f)) {
		park(f);	/* called again once resumed */
		return MHD_YES;
	}
	return f->kind == GET ? answer_get(c, f) : answer_completion(c, f, slot);
}

static void on_done(void *cls, struct MHD_Connection *c, void **slot,
		    enum MHD_RequestTerminationCode why)
{
	(void)cls, (void)c, (void)why;
	if (*slot)
		flight_free(*slot);
	*slot = NULL;
}

/* ---- the loop ------------------------------------------------------------------ */

/* libcurl's sockets, watched in the loop's epoll set. */
static int on_curl_socket(CURL *e, curl_socket_t s, int what, void *arg, void *known)
{
	struct gateway *gw = arg;
	struct epoll_event ev = { .data.fd = s };

	(void)e;
	if (what == CURL_POLL_REMOVE) {
		epoll_ctl(gw->ep, EPOLL_CTL_DEL, s, NULL);
		curl_multi_assign(gw->multi, s, NULL);
		return 0;
	}
	ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
	if (!known)
		curl_multi_assign(gw->multi, s, gw);	/* non-NULL: known from now on */
	/* An error here would fail every transfer of the multi handle: this
	 * one's times out instead, with a line. */
	if (epoll_ctl(gw->ep, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s, &ev) < 0)
		fprintf(stderr, "moeft gateway: epoll_ctl of a server connection: %s\n",
			strerror(errno));
	return 0;
}

static int on_curl_timer(CURLM *m, long ms, void *arg)
{
	struct gateway *gw = arg;

	(void)m;
	gw->curl_due = ms < 0 ? -1 : cli_now() + (double)ms / 1e3;
	return 0;
}

/* The transfers libcurl finished: to their requests. */
static void transfers_done(struct gateway *gw)
{
	struct flight *f;
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(gw->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&f);
		if (m->easy_handle == f->probe)
			probe_over(f);
		else
			transfer_over(f);
	}
}

/* SIGTERM or SIGINT: every request ends now, its client told why. */
static void stop(struct gateway *gw)
{
	gw->stop_by = cli_now() + STOP_S;
	for (struct flight *f = gw->flights; f; f = f->next) {
		if (f->phase == FINISHED || !f->begun)
			continue;
		transfer_end(f);
		easy_end(f, &f->probe);
		f->over = 1;
		if (f->kind == COMPLETION)
			snprintf(f->error, sizeof f->error, "the gateway is stopping");
		f->phase = FINISHED;
		wake_if_ready(f);
	}
}

/* Whether the client of a parked connection has gone: its socket reads
 * end-of-file or fails (libmicrohttpd does not watch parked ones). */
static int client_left(const struct flight *f)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(f->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	ssize_t r;
	char b;

	if (!ci)
		return 0;
	r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Every LEFT_EVERY_S, the parked clients that left: their requests end
 * and the server's transfers are cancelled; resumed, their connections
 * are closed by libmicrohttpd. */
static void end_left(struct gateway *gw, double now)
{
	if (now < gw->next_left_check)
		return;
	gw->next_left_check = now + LEFT_EVERY_S;
	for (struct flight *f = gw->flights; f; f = f->next) {
		if (!f->suspended || f->phase == FINISHED || !client_left(f))
			continue;
		transfer_end(f);
		easy_end(f, &f->probe);
		f->over = 1;
		snprintf(f->error, sizeof f->error, "the client went away");
		f->phase = FINISHED;
		wake_if_ready(f);
	}
}

/* How long the loop may sleep: to libcurl's and libmicrohttpd's next
 * timeouts, and a tick while a request waits. */
static int sleep_ms(struct gateway *gw, double now)
{
	MHD_UNSIGNED_LONG_LONG mhd_ms;
	double ms = IDLE_MS;

	for (struct flight *f = gw->flights; f; f = f->next) {
		if (f->phase == WAITING) {
			ms = TICK_MS;
			break;
		}
		if (f->suspended && (gw->next_left_check - now) * 1e3 < ms)
			ms = (gw->next_left_check - now) * 1e3;
	}
	if (gw->curl_due >= 0 && (gw->curl_due - now) * 1e3 < ms)
		ms = (gw->curl_due - now) * 1e3;
	if (MHD_get_timeout(gw->mhd, &mhd_ms) == MHD_YES && (double)mhd_ms < ms)
		ms = (double)mhd_ms;
	if (gw->stop_by)
		ms = ms < TICK_MS ? ms : TICK_MS;
	return ms > 0 ? (int)ms + 1 : 0;
}

/* Serve until SIGTERM or SIGINT, then until every request told its client
 * (STOP_S at most). */
static void serve(struct gateway *gw)
{
	struct epoll_event evs[64];
	struct signalfd_siginfo si;
	double now;
	int n, running;

	for (;;) {
		now = cli_now();
		n = epoll_wait(gw->ep, evs, 64, sleep_ms(gw, now));
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;

			if (fd == gw->sig_fd) {
				if (read(fd, &si, sizeof si) > 0 && !gw->stop_by)
					stop(gw);
			} else if (fd != gw->mhd_fd) {
				curl_multi_socket_action(gw->multi, fd,
					(evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
					(evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
					(evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0),
					&running);
			}
		}
		now = cli_now();
		if (gw->curl_due >= 0 && now >= gw->curl_due) {
			gw->curl_due = -1;
			curl_multi_socket_action(gw->multi, CURL_SOCKET_TIMEOUT, 0, &running);
		}
		transfers_done(gw);
		for (struct flight *f = gw->flights; f; f = f->next)
			if (f->phase == WAITING)
				tick(f, now);
		end_left(gw, now);
		MHD_run(gw->mhd);
		if (gw->stop_by && (!gw->flights || now >= gw->stop_by))
			return;
	}
}

/* The loop's epoll set: libmicrohttpd's, and SIGTERM and SIGINT as a
 * signalfd (blocked, as is SIGPIPE).  0, or -1 with errno. */
static int loop_start(struct gateway *gw)
{
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(gw->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	struct epoll_event ev = { .events = EPOLLIN };
	sigset_t stop;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	if (!info || (gw->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    (gw->sig_fd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		return -1;
	gw->mhd_fd = info->epoll_fd;
	ev.data.fd = gw->mhd_fd;
	if (epoll_ctl(gw->ep, EPOLL_CTL_ADD, gw->mhd_fd, &ev) < 0)
		return -1;
	ev.data.fd = gw->sig_fd;
	if (epoll_ctl(gw->ep, EPOLL_CTL_ADD, gw->sig_fd, &ev) < 0 ||
	    !(gw->multi = curl_multi_init()))
		return -1;
	gw->curl_due = -1;
	curl_multi_setopt(gw->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(gw->multi, CURLMOPT_SOCKETDATA, gw);
	curl_multi_setopt(gw->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(gw->multi, CURLMOPT_TIMERDATA, gw);
	return 0;
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
	char msg[PATH_MAX + 64];
	sigset_t stop;
	int c, ret;

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
	sigprocmask(SIG_BLOCK, &stop, NULL);	/* SIGTERM, SIGINT: the signalfd */
	gw.ep = gw.sig_fd = -1;
	gw.mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
				  (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0), 0, NULL, NULL,
				  on_request, &gw,
				  MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				  MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
				  MHD_OPTION_CONNECTION_TIMEOUT, 0u, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!gw.mhd) {
		curl_global_cleanup();
		return cli_fail(cmd, 0, EXIT_USAGE, "cannot listen on %s (its reason is above)",
				listen);
	}
	if (loop_start(&gw) < 0) {
		ret = cli_fail(cmd, 0, EXIT_USAGE, "cannot start the gateway's loop: %s",
			       strerror(errno));
	} else {
		fprintf(stderr, "moeft gateway: listening on %s for %s\n", listen, gw.backend);
		serve(&gw);
		fprintf(stderr, "moeft gateway: stopped; requests that lost the server mid-answer: "
			"%lu\n", gw.migrated);
		ret = EXIT_OK;
	}
	/* libmicrohttpd may not stop with a connection parked (a client
	 * still sending its request at the deadline, say) */
	for (struct flight *f = gw.flights; f; f = f->next)
		if (f->suspended) {
			f->suspended = 0;
			MHD_resume_connection(f->conn);
		}
	MHD_stop_daemon(gw.mhd);	/* frees the flights left */
	if (gw.multi)
		curl_multi_cleanup(gw.multi);
	if (gw.ep >= 0)
		close(gw.ep);
	if (gw.sig_fd >= 0)
		close(gw.sig_fd);
	curl_global_cleanup();
	return ret;
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

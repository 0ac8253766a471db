/*
 * http.h - the few HTTP requests the tools make of an engine's
 * OpenAI-compatible server, with libcurl: one request, waiting for its
 * /health; and reading a server-sent event stream.  Driving streams is
 * the gateway's and the demo's own (gateway.c, demo_vllm.c).
 */
#ifndef MOEFT_HTTP_H
#define MOEFT_HTTP_H

#include <stddef.h>

#define HTTP_REPLY_MAX (64u << 20)	/* bytes of one server reply */

/* Growing bytes, NUL-terminated once any were added (p NULL before);
 * free(p) when done. */
struct http_buf {
	char *p;
	size_t len, cap;
};

/* Append n bytes: 0, or -1 out of memory. */
int http_buf_add(struct http_buf *b, const char *p, size_t n);

/* Drop the first n bytes. */
void http_buf_drop(struct http_buf *b, size_t n);

/* Each whole event of the server-sent event stream read so far into b
 * (ended by a blank line): the value of each of its "data:" lines to
 * on_data, in order, then the event is dropped from b.  Other fields and
 * comment lines are ignored; an incomplete event stays for later. */
void http_sse_take(struct http_buf *b, void (*on_data)(void *arg, const char *data), void *arg);

/* GET (body NULL) or POST (a JSON body) url, with one more header line
 * ("Name: value"; NULL: none), within timeout_s (0: no limit): the HTTP
 * status with the reply (at most HTTP_REPLY_MAX bytes) in *out, or -1
 * with err. */
long http_request(const char *url, const char *body, const char *header, long timeout_s,
		  struct http_buf *out, char *err, size_t errlen);

/* The server's base URL + path into buf; buf. */
const char *http_url(char *buf, size_t len, const char *server, const char *path);

/* Until the server's /health answers 200 (0), or timeout_s pass (-1,
 * with why in err). */
int http_wait_healthy(const char *server, double timeout_s, char *err, size_t errlen);

#endif

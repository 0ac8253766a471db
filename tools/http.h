/*
 * http.h - the few HTTP requests the tools make of an engine's
 * OpenAI-compatible server, with libcurl: one request, waiting for its
 * /health.  Streams are the gateway's own (gateway.c).
 */
#ifndef MOEFT_HTTP_H
#define MOEFT_HTTP_H

#include <stddef.h>

#define HTTP_REPLY_MAX (64u << 20)	/* bytes of one server reply */

struct http_reply {
	char *data;		/* NUL-terminated; free() it */
	size_t len;
};

/* GET (body NULL) or POST (a JSON body) url, with one more header line
 * ("Name: value"; NULL: none), within timeout_s (0: no limit): the HTTP
 * status with the reply in *out, or -1 with err. */
long http_request(const char *url, const char *body, const char *header, long timeout_s,
		  struct http_reply *out, char *err, size_t errlen);

/* The server's base URL + path into buf; buf. */
const char *http_url(char *buf, size_t len, const char *server, const char *path);

/* Until the server's /health answers 200 (0), or timeout_s pass (-1,
 * with why in err). */
int http_wait_healthy(const char *server, double timeout_s, char *err, size_t errlen);

#endif

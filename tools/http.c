/*
 * http.c - requests to an engine's server (http.h).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "cli.h"
#include "http.h"

#define HEALTH_POLL_NS 500000000L

int http_buf_add(struct http_buf *b, const char *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *grown;

		while (cap < b->len + n + 1)
			cap *= 2;
		if (!(grown = realloc(b->p, cap)))
			return -1;
		b->p = grown;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

void http_buf_drop(struct http_buf *b, size_t n)
{
	memmove(b->p, b->p + n, b->len - n + 1);
	b->len -= n;
}

void http_sse_take(struct http_buf *b, void (*on_data)(void *arg, const char *data), void *arg)
{
	char *end;

	while ((end = strstr(b->p ? b->p : "", "\n\n"))) {
		*end = '\0';
		for (char *line = b->p; line && *line; ) {
			char *nl = strchr(line, '\n');

			if (nl)
				*nl = '\0';
			if (!strncmp(line, "data:", 5))
				on_data(arg, line + 5 + (line[5] == ' '));
			line = nl ? nl + 1 : NULL;
		}
		http_buf_drop(b, (size_t)(end + 2 - b->p));
	}
}

static size_t take(char *p, size_t size, size_t n, void *arg)
{
	struct http_buf *b = arg;
	size_t len = size * n;

	if (len > HTTP_REPLY_MAX - b->len || http_buf_add(b, p, len) < 0)
		return 0;	/* curl fails the transfer */
	return len;
}

long http_request(const char *url, const char *body, const char *header, long timeout_s,
		  struct http_buf *out, char *err, size_t errlen)
{
	char curl_err[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdr = NULL;
	CURL *c = curl_easy_init();
	long status = 0;
	CURLcode rc;

	*out = (struct http_buf){ 0 };
	if (!c) {
		snprintf(err, errlen, "libcurl: out of memory");
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
	if (body) {
		hdr = curl_slist_append(hdr, "Content-Type: application/json");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	}
	if (header)
		hdr = curl_slist_append(hdr, header);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	rc = curl_easy_perform(c);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	else
		snprintf(err, errlen, "%s: %s", url, curl_err[0] ? curl_err : curl_easy_strerror(rc));
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	return rc == CURLE_OK ? status : -1;
}

const char *http_url(char *buf, size_t len, const char *server, const char *path)
{
	snprintf(buf, len, "%s%s", server, path);
	return buf;
}

int http_wait_healthy(const char *server, double timeout_s, char *err, size_t errlen)
{
	const struct timespec pause = { 0, HEALTH_POLL_NS };
	double until = cli_now() + timeout_s;
	char url[PATH_MAX];
	struct http_buf r;
	long st;

	http_url(url, sizeof url, server, "/health");
	for (;;) {
		st = http_request(url, NULL, NULL, 5, &r, err, errlen);
		free(r.p);
		if (st == 200)
			return 0;
		if (st > 0)
			snprintf(err, errlen, "%s: HTTP %ld", url, st);
		if (cli_now() >= until)
			return -1;
		nanosleep(&pause, NULL);
	}
}

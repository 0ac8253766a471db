/*
 * json.c - the streaming JSON writer of json.h.
 *
 * Strings come from logs and paths, so they may hold any bytes: control
 * characters are escaped and bytes that are not valid UTF-8 become U+FFFD,
 * so the output always parses.
 */
#include <math.h>
#include <string.h>

#include "json.h"
#include "utf8.h"

void json_init(struct json *j, FILE *f)
{
	memset(j, 0, sizeof *j);
	j->f = f;
}

/* Separator before a value or a key at the current depth. */
static void sep(struct json *j)
{
	if (j->after_key) {
		j->after_key = 0;
		return;
	}
	if (j->depth == 0 || j->depth > JSON_MAX_DEPTH)
		return; /* deeper than JSON_MAX_DEPTH is a caller bug */
	if (j->used[j->depth - 1])
		fputc(',', j->f);
	j->used[j->depth - 1] = 1;
}

static void open_container(struct json *j, char c)
{
	sep(j);
	fputc(c, j->f);
	if (j->depth < JSON_MAX_DEPTH)
		j->used[j->depth] = 0;
	j->depth++;
}

static void close_container(struct json *j, char c)
{
	if (j->depth > 0)
		j->depth--;
	fputc(c, j->f);
	if (j->depth == 0)
		fputc('\n', j->f);
}

void json_obj_begin(struct json *j) { open_container(j, '{'); }
void json_obj_end(struct json *j) { close_container(j, '}'); }
void json_arr_begin(struct json *j) { open_container(j, '['); }
void json_arr_end(struct json *j) { close_container(j, ']'); }

static void put_string(FILE *f, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	fputc('"', f);
	while (*s) {
		size_t n = utf8_len(s);

		if (n == 0) {
			fputs("\\ufffd", f);
			s++;
		} else if (*s == '"' || *s == '\\') {
			fputc('\\', f);
			fputc(*s++, f);
		} else if (*s == '\n') {
			fputs("\\n", f);
			s++;
		} else if (*s == '\t') {
			fputs("\\t", f);
			s++;
		} else if (*s < 0x20 || *s == 0x7f) {
			fprintf(f, "\\u%04x", *s++);
		} else {
			fwrite(s, 1, n, f);
			s += n;
		}
	}
	fputc('"', f);
}

void json_key(struct json *j, const char *key)
{
	sep(j);
	put_string(j->f, key);
	fputc(':', j->f);
	j->after_key = 1;
}

void json_str(struct json *j, const char *s)
{
	sep(j);
	if (s)
		put_string(j->f, s);
	else
		fputs("null", j->f);
}

void json_u64(struct json *j, uint64_t v)
{
	sep(j);
	fprintf(j->f, "%llu", (unsigned long long)v);
}

void json_i64(struct json *j, int64_t v)
{
	sep(j);
	fprintf(j->f, "%lld", (long long)v);
}

void json_double(struct json *j, double v)
{
	sep(j);
	if (isfinite(v))
		fprintf(j->f, "%.10g", v);
	else
		fputs("null", j->f);
}

void json_float(struct json *j, float v)
{
	sep(j);
	if (isfinite(v))
		fprintf(j->f, "%.9g", (double)v);
	else
		fputs("null", j->f);
}

void json_bool(struct json *j, int v)
{
	sep(j);
	fputs(v ? "true" : "false", j->f);
}

void json_kv_str(struct json *j, const char *key, const char *s)
{
	json_key(j, key);
	json_str(j, s);
}

void json_kv_u64(struct json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	json_u64(j, v);
}

void json_kv_i64(struct json *j, const char *key, int64_t v)
{
	json_key(j, key);
	json_i64(j, v);
}

void json_kv_double(struct json *j, const char *key, double v)
{
	json_key(j, key);
	json_double(j, v);
}

void json_kv_bool(struct json *j, const char *key, int v)
{
	json_key(j, key);
	json_bool(j, v);
}

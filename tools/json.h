/*
 * json.h - a tiny streaming JSON writer.
 *
 * Values are written as they come, commas and nesting handled here; the
 * caller only opens and closes containers in the right order.  Inside an
 * object every value is preceded by json_key() (or use the json_kv_*
 * shorthands).  Output is compact, one line, ended by a newline when the
 * outermost container closes.
 */
#ifndef MOEFT_JSON_H
#define MOEFT_JSON_H

#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 32

struct json {
	FILE *f;
	int depth;
	int after_key;			/* a key was written, its value is next */
	unsigned char used[JSON_MAX_DEPTH]; /* container at that depth has members */
};

void json_init(struct json *j, FILE *f);

void json_obj_begin(struct json *j);
void json_obj_end(struct json *j);
void json_arr_begin(struct json *j);
void json_arr_end(struct json *j);
void json_key(struct json *j, const char *key);

void json_str(struct json *j, const char *s);	/* NULL writes null */
void json_u64(struct json *j, uint64_t v);
void json_i64(struct json *j, int64_t v);
void json_double(struct json *j, double v);	/* NaN and infinities: null */
/* 9 significant digits, which read back as float give v exactly. */
void json_float(struct json *j, float v);
void json_bool(struct json *j, int v);

void json_kv_str(struct json *j, const char *key, const char *s);
void json_kv_u64(struct json *j, const char *key, uint64_t v);
void json_kv_i64(struct json *j, const char *key, int64_t v);
void json_kv_double(struct json *j, const char *key, double v);
void json_kv_bool(struct json *j, const char *key, int v);

#endif

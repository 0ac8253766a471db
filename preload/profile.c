/*
 * profile.c - parse engine profiles, match kernel names, evaluate a rule
 * against one launch.  The format is specified in PROFILES.md.
 *
 * The parser works line by line on a private copy of each line (so the
 * tokenizer may cut it with NULs and every message can give LINE:COL).
 * Evaluation runs on the interposer's launch path: it allocates nothing,
 * reads parameter bytes only inside the sizes it is given, and copies them
 * with memcpy because parameter buffers carry no alignment promise.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "decimal.h"
#include "diag.h"
#include "profile.h"

#define PROFILE_FILE_MAX (1u << 20)
#define USE_DEPTH_MAX 4

/* ---- parser ----------------------------------------------------------- */

struct pctx {
	const char *origin;
	unsigned line;
	const char *base;      /* start of the current line: columns count from it */
	const char *eol;       /* its end, before the tokenizer cut it up */
	char *err;
	size_t errlen;
	struct profile *p;
	char label[RULE_LABEL_MAX];
	int depth;             /* `use` nesting */
};

static int parse_text(struct pctx *x, const char *text);

__attribute__((format(printf, 3, 4)))
static int perr(struct pctx *x, const char *at, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	if (!x->err || !x->errlen)
		return -1;
	snprintf(x->err, x->errlen, "%s:%u:%u: ", x->origin, x->line,
		 (unsigned)(at - x->base) + 1);
	n = strlen(x->err);
	va_start(ap, fmt);
	vsnprintf(x->err + n, x->errlen - n, fmt, ap);
	va_end(ap);
	return -1;
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int is_alnum(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* The word (letters and digits) at s, for ":i64"-style suffixes. */
static size_t word_len(const char *s)
{
	size_t n = 0;

	while (is_alnum(s[n]))
		n++;
	return n;
}

static int word_is(const char *s, size_t n, const char *w)
{
	return strlen(w) == n && memcmp(s, w, n) == 0;
}

/* pN with N < RULE_MAX_PARAMS. */
static int parse_param(struct pctx *x, const char **s, uint8_t *param)
{
	const char *at = *s, *p = *s + 1;
	uint64_t v;

	if (*at != 'p' || !is_digit(*p))
		return perr(x, at, "expected a parameter pN, got '%s'", at);
	if (parse_decimal(&p, UINT64_MAX, &v) < 0 || v >= RULE_MAX_PARAMS)
		return perr(x, at + 1, "parameter index '%.*s' out of range (p0 to p%d)",
			    (int)word_len(at + 1), at + 1, RULE_MAX_PARAMS - 1);
	*param = (uint8_t)v;
	*s = p;
	return 0;
}

/* "@OFF" after pN: a byte offset inside a by-value struct param. */
static int parse_off(struct pctx *x, const char **s, uint16_t *off)
{
	const char *p = *s + 1;
	uint64_t v;

	if (parse_decimal(&p, UINT64_MAX, &v) < 0 || v > RULE_MAX_OFF)
		return perr(x, *s + 1, "struct offset '%.*s' is not a byte offset from 0 to %d",
			    (int)word_len(*s + 1), *s + 1, RULE_MAX_OFF);
	*off = (uint16_t)v;
	*s = p;
	return 0;
}

static int parse_term(struct pctx *x, const char **s, struct rule_term *t)
{
	const char *p = *s;

	memset(t, 0, sizeof *t);
	if (*p == 'p' && is_digit(p[1])) {
		if (parse_param(x, &p, &t->param) < 0)
			return -1;
		t->kind = TERM_PARAM;
		if (*p == '@') {
			if (parse_off(x, &p, &t->off) < 0)
				return -1;
			t->kind = TERM_FIELD;
			t->width = 4;
		}
		if (*p == ':') {
			size_t n = word_len(p + 1);

			if (word_is(p + 1, n, "i32"))
				t->width = 4;
			else if (word_is(p + 1, n, "i64"))
				t->width = 8;
			else
				return perr(x, p + 1, "unknown integer width ':%.*s' (expected :i32 or :i64)",
					    (int)n, p + 1);
			p += 1 + n;
		}
	} else if (strncmp(p, "grid.", 5) == 0 || strncmp(p, "block.", 6) == 0) {
		t->kind = *p == 'g' ? TERM_GRID : TERM_BLOCK;
		p += *p == 'g' ? 5 : 6;
		if (*p < 'x' || *p > 'z' || is_alnum(p[1]))
			return perr(x, p, "expected %s.x, %s.y or %s.z",
				    t->kind == TERM_GRID ? "grid" : "block",
				    t->kind == TERM_GRID ? "grid" : "block",
				    t->kind == TERM_GRID ? "grid" : "block");
		t->axis = (uint8_t)(*p++ - 'x');
	} else if (is_digit(*p) || (*p == '-' && is_digit(p[1]))) {
		int neg = *p == '-';
		uint64_t v;

		p += neg;
		if (parse_decimal(&p, neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &v) < 0)
			return perr(x, *s, "integer '%.*s' out of range", (int)word_len(*s + neg) + neg, *s);
		t->kind = TERM_CONST;
		t->k = neg ? (int64_t)(0 - v) : (int64_t)v;
	} else {
		return perr(x, p, "expected pN, pN@OFF, grid.x|y|z, block.x|y|z or an integer, got '%s'",
			    p);
	}
	*s = p;
	return 0;
}

/* VAL = TERM (('*' | '/') TERM)*, at most RULE_MAX_FACTORS terms. */
static int parse_val(struct pctx *x, const char **s, struct rule_val *v)
{
	int divide = 0;

	v->n = 0;
	for (;;) {
		if (v->n == RULE_MAX_FACTORS)
			return perr(x, *s, "a value has at most %d factors", RULE_MAX_FACTORS);
		if (parse_term(x, s, &v->t[v->n]) < 0)
			return -1;
		v->t[v->n++].divide = (uint8_t)divide;
		if (**s != '*' && **s != '/')
			return 0;
		divide = **s == '/';
		(*s)++;
	}
}

/* The dtypes a REF may name, by the first one of its family. */
static const char *const dtype_names[] = {
	[RULE_I32] = "i32", [RULE_U32] = "u32", [RULE_I64] = "i64",
	[RULE_F32] = "f32", [RULE_BF16] = "bf16", [RULE_F16] = "f16",
};

/* REF = pN[@OFF][:DTYPE].  `family` is the default dtype and its kind:
 * RULE_I32 (ids, slots: i32, u32, i64), RULE_F32 (weights: f32, bf16,
 * f16), or 0 for a plain pointer (no DTYPE). */
static int parse_ref(struct pctx *x, const char **s, struct rule_ref *r, int family)
{
	int first = family, last = family == RULE_I32 ? RULE_I64 : RULE_F16, d;
	const char *p = *s;

	memset(r, 0, sizeof *r);
	if (parse_param(x, &p, &r->param) < 0)
		return -1;
	if (*p == '@') {
		if (parse_off(x, &p, &r->off) < 0)
			return -1;
		r->in_struct = 1;
	}
	if (family) {
		r->dtype = (uint8_t)family;
		if (*p == ':') {
			size_t n = word_len(p + 1);

			for (d = first; d <= last && !word_is(p + 1, n, dtype_names[d]); d++)
				;
			if (d > last)
				return perr(x, p + 1, "unknown dtype ':%.*s' (expected %s, %s or %s)",
					    (int)n, p + 1, dtype_names[first],
					    dtype_names[first + 1], dtype_names[last]);
			r->dtype = (uint8_t)d;
			p += 1 + n;
		}
	}
	*s = p;
	return 0;
}

/* The whole value of key= must have been consumed. */
static int value_end(struct pctx *x, const char *p, const char *key)
{
	if (*p)
		return perr(x, p, "unexpected '%s' in the value of %s=", p, key);
	return 0;
}

static const struct { const char *text; int op; } ops[] = {
	{ "==", OP_EQ }, { "!=", OP_NE }, { "<=", OP_LE }, { ">=", OP_GE },
	{ "<", OP_LT }, { ">", OP_GT },
};

static int parse_cond(struct pctx *x, const char *s, struct rule_cond *c)
{
	size_t i;

	if (parse_val(x, &s, &c->a) < 0)
		return -1;
	for (i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (strncmp(s, ops[i].text, strlen(ops[i].text)) == 0)
			break;
	if (i == sizeof ops / sizeof ops[0])
		return perr(x, s, "expected ==, !=, <, <=, > or >= in when=, got '%s'", s);
	c->op = ops[i].op;
	s += strlen(ops[i].text);
	if (parse_val(x, &s, &c->b) < 0)
		return -1;
	return value_end(x, s, "when");
}

/* Patterns match mangled names: identifiers, digits, '_', '$', '.' and the
 * wildcards.  Refusing ':' and '<' catches demangled names early. */
static int parse_pattern(struct pctx *x, const char *tok, struct rule *r)
{
	const char *q;
	int literal = 0;

	if (!tok)
		return perr(x, x->eol, "missing kernel name PATTERN");
	if (strchr(tok, '='))
		return perr(x, tok, "expected a kernel name PATTERN before '%s'", tok);
	for (q = tok; *q; q++) {
		if (*q != '*' && *q != '?')
			literal = 1;
		if (!is_alnum(*q) && !strchr("_$.*?", *q))
			return perr(x, q, "'%c' cannot occur in a mangled kernel name; "
				    "patterns match mangled names (e.g. *sbtopk*gatherTopK*)", *q);
	}
	if ((size_t)(q - tok) >= RULE_PATTERN_MAX)
		return perr(x, tok, "pattern longer than %d bytes", RULE_PATTERN_MAX - 1);
	if (!literal)
		return perr(x, tok, "pattern '%s' would match every kernel", tok);
	memcpy(r->pattern, tok, (size_t)(q - tok) + 1);
	return 0;
}

/* Next whitespace-separated token, NUL-terminated in place; NULL at the end. */
static char *next_token(char **s)
{
	char *p = *s, *tok;

	while (*p == ' ' || *p == '\t')
		p++;
	if (!*p) {
		*s = p;
		return NULL;
	}
	tok = p;
	while (*p && *p != ' ' && *p != '\t')
		p++;
	if (*p)
		*p++ = '\0';
	*s = p;
	return tok;
}

enum key {
	K_IDS, K_ROWS, K_K, K_STRIDE, K_EXPERTS, K_WEIGHTS, K_SLOTS, K_COUNT, K_BLOCK, K_POOL,
	K_WHEN, K_TRITON, K_NKEYS
};

static const char *const key_names[K_NKEYS] = {
	"ids", "rows", "k", "stride", "experts", "weights", "slots", "count", "block", "pool",
	"when", "triton"
};

/* Keys each kind takes, in the order messages list them; required first. */
static const struct {
	const char *name;
	int nreq;
	int keys[8];
	int nkeys;
} kinds[] = {
	[RULE_ROUTING] = { "routing", 3, { K_IDS, K_ROWS, K_K, K_STRIDE, K_EXPERTS, K_WEIGHTS,
					   K_WHEN, K_TRITON }, 8 },
	[RULE_KV] = { "kv", 2, { K_SLOTS, K_COUNT, K_BLOCK, K_STRIDE, K_POOL, K_WHEN, K_TRITON },
		      7 },
	[RULE_STEP] = { "step", 0, { K_WHEN, K_TRITON }, 2 },
};

static int parse_pool(struct pctx *x, const char *s, struct rule *r)
{
	for (;;) {
		if (r->npool == RULE_MAX_POOL)
			return perr(x, s, "pool= lists at most %d parameters", RULE_MAX_POOL);
		if (parse_ref(x, &s, &r->pool[r->npool++], 0) < 0)
			return -1;
		if (*s != ',')
			return value_end(x, s, "pool");
		s++;
	}
}

/* triton=NAME[,NAME]...: identifiers, each once. */
static int parse_triton(struct pctx *x, const char *s, struct rule *r)
{
	size_t used = 0;

	for (;;) {
		const char *name = s, *d = r->triton;
		size_t n = 0;

		while (is_alnum(s[n]) || s[n] == '_')
			n++;
		if (n == 0 || is_digit(*name))
			return perr(x, name, "expected an argument name, got '%s'", name);
		if (n >= 64)
			return perr(x, name, "argument name '%.*s' longer than 63 bytes", (int)n,
				    name);
		for (unsigned i = 0; i < r->ntriton; i++, d += strlen(d) + 1)
			if (word_is(name, n, d))
				return perr(x, name, "argument '%s' named twice", d);
		if (r->ntriton == RULE_MAX_PARAMS || used + n + 1 > RULE_TRITON_MAX)
			return perr(x, name, "triton= lists at most %d names", RULE_MAX_PARAMS);
		memcpy(r->triton + used, name, n);
		r->triton[used + n] = '\0';
		used += n + 1;
		r->ntriton++;
		s += n;
		if (*s != ',')
			return value_end(x, s, "triton");
		s++;
	}
}

static int parse_kv_pair(struct pctx *x, char *tok, struct rule *r, unsigned *seen)
{
	char *eq = strchr(tok, '=');
	const char *v;
	int i, k = -1, kind = r->kind;
	char expected[96] = "";
	size_t n = 0;

	if (!eq || eq == tok)
		return perr(x, tok, "expected KEY=VALUE, got '%s'", tok);
	*eq = '\0';
	v = eq + 1;
	for (i = 0; i < kinds[kind].nkeys; i++) {
		int key = kinds[kind].keys[i];

		if (strcmp(tok, key_names[key]) == 0)
			k = key;
		n += (size_t)snprintf(expected + n, sizeof expected - n, "%s%s",
				      i ? ", " : "", key_names[key]);
	}
	if (k < 0)
		return perr(x, tok, "unknown key '%s' for %s (expected %s)", tok,
			    kinds[kind].name, expected);
	if (!*v)
		return perr(x, v, "empty value for %s=", tok);
	if (k != K_WHEN && (*seen & (1u << k)))
		return perr(x, tok, "duplicate key '%s'", tok);
	*seen |= 1u << k;
	switch (k) {
	case K_IDS:
	case K_SLOTS:
		if (parse_ref(x, &v, &r->ref, RULE_I32) < 0)
			return -1;
		return value_end(x, v, tok);
	case K_WEIGHTS:
		if (parse_ref(x, &v, &r->weights, RULE_F32) < 0)
			return -1;
		return value_end(x, v, tok);
	case K_POOL:
		return parse_pool(x, v, r);
	case K_TRITON:
		return parse_triton(x, v, r);
	case K_WHEN:
		if (r->nwhen == RULE_MAX_WHEN)
			return perr(x, tok, "at most %d when= conditions per rule", RULE_MAX_WHEN);
		return parse_cond(x, v, &r->when[r->nwhen++]);
	default: {
		struct rule_val *val = k == K_ROWS ? &r->rows : k == K_K ? &r->k :
			k == K_STRIDE ? &r->stride : k == K_EXPERTS ? &r->experts :
			k == K_COUNT ? &r->count : &r->block;

		if (parse_val(x, &v, val) < 0)
			return -1;
		return value_end(x, v, tok);
	}
	}
}

static int add_rule(struct pctx *x, const struct rule *r)
{
	struct profile *p = x->p;

	if (p->count == p->cap) {
		unsigned cap = p->cap ? p->cap * 2 : 16;
		struct rule *nr = realloc(p->rules, cap * sizeof *nr);

		if (!nr)
			return perr(x, x->base, "out of memory");
		p->rules = nr;
		p->cap = cap;
	}
	p->rules[p->count++] = *r;
	return 0;
}

/* A triton= rule's pN index its names, and Triton passes no structs. */
struct misuse {
	const struct rule *r;
	struct rule_use u;
};

static int triton_misuse(const struct rule_use *u, void *arg)
{
	struct misuse *m = arg;

	if (u->param < m->r->ntriton && (u->what == USE_POINTER || u->what == USE_INT))
		return 0;
	m->u = *u;
	return 1;
}

static int parse_rule(struct pctx *x, int kind, char *rest)
{
	struct misuse m = { .r = NULL };
	struct rule r;
	unsigned seen = 0;
	char *tok;
	int i;

	memset(&r, 0, sizeof r);
	m.r = &r;
	r.kind = kind;
	r.line = x->line;
	memcpy(r.label, x->label, sizeof r.label);
	if (parse_pattern(x, next_token(&rest), &r) < 0)
		return -1;
	while ((tok = next_token(&rest)))
		if (parse_kv_pair(x, tok, &r, &seen) < 0)
			return -1;
	for (i = 0; i < kinds[kind].nreq; i++) {
		int key = kinds[kind].keys[i];

		if (!(seen & (1u << key)))
			return perr(x, x->eol, "%s rule without %s=",
				    kinds[kind].name, key_names[key]);
	}
	if (kind == RULE_KV && (seen & (1u << K_STRIDE)) && !(seen & (1u << K_POOL)))
		return perr(x, x->eol, "kv rule with stride= but without pool= (stride= is the "
			    "bytes between the pools' blocks)");
	if (kind == RULE_KV && (seen & (1u << K_STRIDE)) && !(seen & (1u << K_BLOCK)))
		return perr(x, x->eol, "kv rule with stride= but without block= (block= is the "
			    "slots per KV block, whose starts stride= are apart)");
	if (r.ntriton && rule_each_use(&r, triton_misuse, &m))
		return perr(x, x->eol, "%s=p%u: %s", m.u.key, m.u.param, m.u.param >= r.ntriton ?
			    "triton= names fewer arguments" : "a Triton argument is no struct");
	return add_rule(x, &r);
}

static int parse_use(struct pctx *x, const char *name)
{
	struct pctx sub;
	const char *text = profile_builtin_text(name);
	char origin[64];

	if (!text)
		return perr(x, name, "unknown built-in profile '%s' (expected vllm, sglang, torch, llamacpp or auto)",
			    name);
	if (x->depth >= USE_DEPTH_MAX)
		return perr(x, name, "'use' nested more than %d deep", USE_DEPTH_MAX);
	snprintf(origin, sizeof origin, "builtin:%s", name);
	sub = *x;
	sub.origin = origin;
	sub.depth = x->depth + 1;
	snprintf(sub.label, sizeof sub.label, "%s", name);
	return parse_text(&sub, text);
}

/* `profile NAME` / `use NAME`: one name and nothing after it. */
static int parse_name_arg(struct pctx *x, const char *dir, char **rest, const char **name)
{
	const char *q, *extra;

	*name = next_token(rest);
	if (!*name)
		return perr(x, x->eol, "%s needs a NAME", dir);
	for (q = *name; *q; q++)
		if (!is_alnum(*q) && !strchr("_.-", *q))
			return perr(x, q, "'%c' in a profile name (use letters, digits, '_', '.', '-')",
				    *q);
	if (q - *name >= RULE_LABEL_MAX)
		return perr(x, *name, "profile name longer than %d bytes", RULE_LABEL_MAX - 1);
	if ((extra = next_token(rest)))
		return perr(x, extra, "unexpected '%s' after %s %s", extra, dir, *name);
	return 0;
}

static int parse_line(struct pctx *x, char *buf)
{
	char *rest = buf, *dir, *q;
	const char *name;

	if ((q = strchr(buf, '#')))
		*q = '\0';
	/* A CR is allowed only where a CR LF line ends. */
	for (q = buf; *q; q++) {
		unsigned char c = (unsigned char)*q;

		if ((c < 0x20 && c != '\t' && !(c == '\r' && !q[1])) || c == 0x7f)
			return perr(x, q, "control character 0x%02x", c);
	}
	if (q > buf && q[-1] == '\r')
		*--q = '\0';
	x->eol = q;
	if (!(dir = next_token(&rest)))
		return 0;
	if (strcmp(dir, "routing") == 0)
		return parse_rule(x, RULE_ROUTING, rest);
	if (strcmp(dir, "kv") == 0)
		return parse_rule(x, RULE_KV, rest);
	if (strcmp(dir, "step") == 0)
		return parse_rule(x, RULE_STEP, rest);
	if (strcmp(dir, "profile") == 0) {
		if (parse_name_arg(x, "profile", &rest, &name) < 0)
			return -1;
		snprintf(x->label, sizeof x->label, "%s", name);
		return 0;
	}
	if (strcmp(dir, "use") == 0) {
		if (parse_name_arg(x, "use", &rest, &name) < 0)
			return -1;
		return parse_use(x, name);
	}
	return perr(x, dir, "unknown directive '%s' (expected routing, kv, step, profile or use)",
		    dir);
}

static int parse_text(struct pctx *x, const char *text)
{
	char buf[PROFILE_LINE_MAX + 1];
	const char *s = text;

	x->line = 0;
	while (*s) {
		const char *nl = strchr(s, '\n');
		size_t len = nl ? (size_t)(nl - s) : strlen(s);

		x->line++;
		if (len > PROFILE_LINE_MAX) {
			x->base = s;
			return perr(x, s + PROFILE_LINE_MAX, "line longer than %d bytes",
				    PROFILE_LINE_MAX);
		}
		memcpy(buf, s, len);
		buf[len] = '\0';
		x->base = buf;
		if (parse_line(x, buf) < 0)
			return -1;
		s += len + (nl != NULL);
	}
	return 0;
}

int profile_parse(const char *text, const char *origin, struct profile *p,
		  char *err, size_t errlen)
{
	struct pctx x;
	unsigned before = p->count;
	int owned = p->rules != NULL;

	memset(&x, 0, sizeof x);
	x.origin = origin ? origin : "profile";
	x.err = err;
	x.errlen = errlen;
	x.p = p;
	snprintf(x.label, sizeof x.label, "user");
	if (parse_text(&x, text) < 0) {
		if (owned)
			p->count = before;
		else
			profile_free(p);
		return -1;
	}
	return 0;
}

int profile_load_file(const char *path, struct profile *p, char *err, size_t errlen)
{
	struct stat st;
	char *text, *nul;
	size_t got = 0;
	int fd, rc;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return fail_msg(err, errlen, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = errno;
		close(fd);
		return fail_msg(err, errlen, "%s: cannot stat: %s", path, strerror(rc));
	}
	if (!S_ISREG(st.st_mode) || st.st_size > PROFILE_FILE_MAX) {
		close(fd);
		if (!S_ISREG(st.st_mode))
			return fail_msg(err, errlen, "%s: not a regular file", path);
		return fail_msg(err, errlen, "%s: larger than %u bytes", path, PROFILE_FILE_MAX);
	}
	if (!(text = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return fail_msg(err, errlen, "%s: out of memory", path);
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (got != (size_t)st.st_size) {
		free(text);
		return fail_msg(err, errlen, "%s: short read", path);
	}
	text[got] = '\0';
	if ((nul = memchr(text, '\0', got))) {
		unsigned line = 1;
		const char *q;

		for (q = text; q < nul; q++)
			line += *q == '\n';
		free(text);
		return fail_msg(err, errlen, "%s:%u: NUL byte: not a text file", path, line);
	}
	rc = profile_parse(text, path, p, err, errlen);
	free(text);
	return rc;
}

int profile_builtin(const char *name, struct profile *p, char *err, size_t errlen)
{
	const char *text = profile_builtin_text(name);
	char origin[64];

	if (!text)
		return fail_msg(err, errlen, "unknown built-in profile '%s' (expected auto, vllm, sglang, torch or llamacpp)",
			    name);
	snprintf(origin, sizeof origin, "builtin:%s", name);
	return profile_parse(text, origin, p, err, errlen);
}

int profile_load(const char *spec, struct profile *p, char *err, size_t errlen)
{
	if (profile_builtin_text(spec))
		return profile_builtin(spec, p, err, errlen);
	if (strchr(spec, '/'))
		return profile_load_file(spec, p, err, errlen);
	return fail_msg(err, errlen, "unknown profile '%s' (built-in: auto, vllm, sglang, torch, llamacpp; "
		    "a file must be given as a path with a '/', e.g. ./%s)", spec, spec);
}

void profile_free(struct profile *p)
{
	free(p->rules);
	memset(p, 0, sizeof *p);
}

/* ---- matching ---------------------------------------------------------- */

/*
 * Two pointers and one backtrack point: on a mismatch, let the last '*'
 * swallow one more byte and retry from there.  Earlier stars never need
 * revisiting (whatever they matched, a later star can absorb), so this is
 * O(n*m) with no recursion, whatever the number of stars.
 */
int profile_glob(const char *pat, const char *s)
{
	const char *star = NULL, *resume = NULL;

	while (*s) {
		if (*pat == '*') {
			star = ++pat;
			resume = s;
		} else if (*pat && (*pat == '?' || *pat == *s)) {
			pat++;
			s++;
		} else if (star) {
			pat = star;
			s = ++resume;
		} else {
			return 0;
		}
	}
	while (*pat == '*')
		pat++;
	return *pat == '\0';
}

int profile_match(const struct profile *p, const char *kernel_name)
{
	unsigned i;

	for (i = 0; i < p->count; i++)
		if (profile_glob(p->rules[i].pattern, kernel_name))
			return (int)i;
	return -1;
}

const char *profile_rule_label(const struct profile *p, int rule, char *buf, size_t len)
{
	const struct rule *r = &p->rules[rule];

	snprintf(buf, len, "%s:%u", r->label, r->line);
	return buf;
}

/* ---- evaluation -------------------------------------------------------- */

struct launch {
	void *const *args;
	const uint32_t *sizes;
	unsigned nparams;
	const unsigned *grid, *block;
};

/* Param i's bytes and size; unknown sizes count as 8 (a pointer). */
static const uint8_t *param(const struct launch *l, unsigned i, uint32_t *size)
{
	if (i >= l->nparams || !l->args || !l->args[i])
		return NULL;
	*size = l->sizes ? l->sizes[i] : 8;
	return l->args[i];
}

static int load_int(const uint8_t *b, unsigned width, int64_t *v)
{
	int8_t i8;
	int16_t i16;
	int32_t i32;

	switch (width) {
	case 1: memcpy(&i8, b, 1); *v = i8; return 0;
	case 2: memcpy(&i16, b, 2); *v = i16; return 0;
	case 4: memcpy(&i32, b, 4); *v = i32; return 0;
	case 8: memcpy(v, b, 8); return 0;
	}
	return -1;
}

/*
 * Whether a term reading param t->param fits a param of `size` bytes: a
 * bare pN reads the param at its own size (1, 2, 4 or 8), an explicit
 * width must agree with it (which catches a rule gone stale), a field
 * must lie inside it.  The one rule for rule_eval and rule_fits.
 */
static int term_fits(const struct rule_term *t, uint32_t size)
{
	if (t->kind == TERM_FIELD)
		return (uint32_t)t->off + t->width <= size;
	if (t->width)
		return t->width == size;
	return size == 1 || size == 2 || size == 4 || size == 8;
}

/* Whether a ref fits a param of `size` bytes: a pointer param is 8 bytes;
 * a pointer inside a struct param lies inside it. */
static int ref_fits(const struct rule_ref *r, uint32_t size)
{
	return r->in_struct ? (uint32_t)r->off + 8 <= size : size == 8;
}

static int eval_term(const struct launch *l, const struct rule_term *t, int64_t *v)
{
	const uint8_t *b;
	uint32_t size;

	switch (t->kind) {
	case TERM_CONST:
		*v = t->k;
		return 0;
	case TERM_GRID:
		*v = l->grid[t->axis];
		return 0;
	case TERM_BLOCK:
		*v = l->block[t->axis];
		return 0;
	case TERM_PARAM:
		if (!(b = param(l, t->param, &size)))
			return -1;
		if (!l->sizes)	/* sizes unknown: an int unless told */
			return load_int(b, t->width ? t->width : 4, v);
		return term_fits(t, size) ? load_int(b, size, v) : -1;
	case TERM_FIELD:
		if (!(b = param(l, t->param, &size)) || !term_fits(t, size))
			return -1;
		return load_int(b + t->off, t->width, v);
	}
	return -1;
}

static int eval_val(const struct launch *l, const struct rule_val *val, int64_t dflt, int64_t *v)
{
	unsigned i;
	int64_t f;

	if (!val->n) {
		*v = dflt;
		return 0;
	}
	for (i = 0; i < val->n; i++) {
		if (eval_term(l, &val->t[i], &f) < 0)
			return -1;
		if (i == 0)
			*v = f;
		else if (val->t[i].divide ? f < 1 || *v % f : __builtin_mul_overflow(*v, f, v))
			return -1;	/* a remainder: the rule reads what it did not mean */
		else if (val->t[i].divide)
			*v /= f;
	}
	return 0;
}

static int eval_ref(const struct launch *l, const struct rule_ref *r, uint64_t *ptr)
{
	const uint8_t *b;
	uint32_t size;

	if (!(b = param(l, r->param, &size)) || !ref_fits(r, size))
		return -1;
	memcpy(ptr, b + r->off, 8);
	return 0;
}

static int cond_true(const struct launch *l, const struct rule_cond *c, int *truth)
{
	int64_t a, b;

	if (eval_val(l, &c->a, 0, &a) < 0 || eval_val(l, &c->b, 0, &b) < 0)
		return -1;
	switch (c->op) {
	case OP_EQ: *truth = a == b; break;
	case OP_NE: *truth = a != b; break;
	case OP_LT: *truth = a < b; break;
	case OP_LE: *truth = a <= b; break;
	case OP_GT: *truth = a > b; break;
	default: *truth = a >= b; break;
	}
	return 0;
}

int rule_eval(const struct rule *r, void *const *args, const uint32_t *param_sizes,
	      unsigned nparams, const unsigned grid[3], const unsigned block[3],
	      struct rule_hit *out)
{
	const struct launch l = { args, param_sizes, nparams, grid, block };
	struct rule_hit h;
	unsigned i;
	int ok = 1, truth;

	memset(&h, 0, sizeof h);
	h.kind = r->kind;
	h.dtype = r->ref.dtype;
	h.experts = -1;
	/* Resolve everything before judging the conditions, so a rule that
	 * does not fit the kernel is reported on its first launch. */
	if (r->kind == RULE_ROUTING) {
		if (eval_ref(&l, &r->ref, &h.ptr) < 0 ||
		    eval_val(&l, &r->rows, 0, &h.rows) < 0 ||
		    eval_val(&l, &r->k, 0, &h.k) < 0 ||
		    eval_val(&l, &r->stride, h.k, &h.stride) < 0 ||
		    eval_val(&l, &r->experts, -1, &h.experts) < 0 ||
		    (r->weights.dtype && eval_ref(&l, &r->weights, &h.weights) < 0))
			return -1;
		h.wdtype = h.weights ? r->weights.dtype : 0;
	} else if (r->kind == RULE_KV) {
		if (eval_ref(&l, &r->ref, &h.ptr) < 0 ||
		    eval_val(&l, &r->count, 0, &h.count) < 0 ||
		    eval_val(&l, &r->block, 1, &h.block) < 0 ||
		    eval_val(&l, &r->stride, 0, &h.stride) < 0)
			return -1;
		for (i = 0; i < r->npool; i++)
			if (eval_ref(&l, &r->pool[i], &h.pool[i]) < 0)
				return -1;
		h.npool = r->npool;
	}
	for (i = 0; i < r->nwhen; i++) {
		if (cond_true(&l, &r->when[i], &truth) < 0)
			return -1;
		ok &= truth;
	}
	if (!ok || (r->kind != RULE_STEP && !h.ptr))
		return 0;
	if (r->kind == RULE_ROUTING &&
	    (h.rows < 0 || h.k < 1 || h.stride < h.k || (r->experts.n && h.experts < 1)))
		return -1;
	if (r->kind == RULE_KV && (h.count < 0 || h.block < 1 || (r->stride.n && h.stride < 1)))
		return -1;
	*out = h;
	return 1;
}

/* ---- the parameters a rule reads ---------------------------------------- */

static int ref_use(const char *key, const struct rule_ref *r,
		   int (*fn)(const struct rule_use *u, void *arg), void *arg)
{
	struct rule_use u = { key, r->param, r->in_struct ? USE_FIELD_POINTER : USE_POINTER,
			      8, r->off, r->dtype };

	return fn(&u, arg);
}

static int val_uses(const char *key, const struct rule_val *v,
		    int (*fn)(const struct rule_use *u, void *arg), void *arg)
{
	for (unsigned i = 0; i < v->n; i++) {
		const struct rule_term *t = &v->t[i];
		struct rule_use u = { key, t->param, t->kind == TERM_FIELD ? USE_FIELD_INT : USE_INT,
				      t->width, t->off, 0 };
		int ret;

		if ((t->kind == TERM_PARAM || t->kind == TERM_FIELD) && (ret = fn(&u, arg)))
			return ret;
	}
	return 0;
}

int rule_each_use(const struct rule *r, int (*fn)(const struct rule_use *u, void *arg),
		  void *arg)
{
	int ret = 0;

	if (r->kind != RULE_STEP)
		ret = ref_use(r->kind == RULE_ROUTING ? "ids" : "slots", &r->ref, fn, arg);
	if (!ret && r->weights.dtype)
		ret = ref_use("weights", &r->weights, fn, arg);
	ret = ret ? ret : val_uses("rows", &r->rows, fn, arg);
	ret = ret ? ret : val_uses("k", &r->k, fn, arg);
	ret = ret ? ret : val_uses("stride", &r->stride, fn, arg);
	ret = ret ? ret : val_uses("experts", &r->experts, fn, arg);
	ret = ret ? ret : val_uses("count", &r->count, fn, arg);
	ret = ret ? ret : val_uses("block", &r->block, fn, arg);
	for (unsigned i = 0; !ret && i < r->npool; i++)
		ret = ref_use("pool", &r->pool[i], fn, arg);
	for (unsigned i = 0; !ret && i < r->nwhen; i++) {
		ret = val_uses("when", &r->when[i].a, fn, arg);
		ret = ret ? ret : val_uses("when", &r->when[i].b, fn, arg);
	}
	return ret;
}

/* ---- fitting a kernel's parameter table ------------------------------- */

struct fit {
	const uint32_t *sizes;
	unsigned n;
	char *why;
	size_t len;
};

static int use_misfit(const struct rule_use *u, void *arg)
{
	struct fit *f = arg;
	struct rule_term t = { .kind = u->what == USE_FIELD_INT ? TERM_FIELD : TERM_PARAM,
			       .param = (uint8_t)u->param, .width = (uint8_t)u->width,
			       .off = (uint16_t)u->off };
	struct rule_ref r = { .param = (uint8_t)u->param,
			      .in_struct = u->what == USE_FIELD_POINTER, .off = (uint16_t)u->off };
	uint32_t size;

	if (u->param >= f->n) {
		snprintf(f->why, f->len, "%s: p%u: the kernel has %u parameters", u->key, u->param,
			 f->n);
		return 1;
	}
	size = f->sizes[u->param];
	switch (u->what) {
	case USE_POINTER:
		if (ref_fits(&r, size))
			return 0;
		snprintf(f->why, f->len, "%s: p%u: a pointer is 8 bytes, the parameter %u",
			 u->key, u->param, size);
		return 1;
	case USE_FIELD_POINTER:
	case USE_FIELD_INT:
		if (u->what == USE_FIELD_POINTER ? ref_fits(&r, size) : term_fits(&t, size))
			return 0;
		snprintf(f->why, f->len, "%s: p%u@%u: %u bytes at byte %u pass the end of the "
			 "%u-byte parameter", u->key, u->param, u->off, u->width, u->off, size);
		return 1;
	default:
		if (term_fits(&t, size))
			return 0;
		if (u->width)
			snprintf(f->why, f->len, "%s: p%u read as %u bytes, the parameter is %u",
				 u->key, u->param, u->width, size);
		else
			snprintf(f->why, f->len, "%s: p%u is %u bytes, not an integer", u->key,
				 u->param, size);
		return 1;
	}
}

int rule_fits(const struct rule *r, const uint32_t *sizes, unsigned nparams, char *why,
	      size_t len)
{
	struct fit f = { sizes, nparams, why, len };

	if (len)
		why[0] = '\0';
	return rule_each_use(r, use_misfit, &f) ? -1 : 0;
}

/* ---- a triton= rule placed on one compiled kernel ----------------------- */

/* Name i of triton=. */
static const char *triton_name(const struct rule *r, unsigned i)
{
	const char *name = r->triton;

	while (i--)
		name += strlen(name) + 1;
	return name;
}

/* 1 when the argument was dropped (a pointer: None), else 0. */
static int place_ref(struct rule_ref *r, const int8_t *map)
{
	if (map[r->param] < 0)
		return 1;
	r->param = (uint8_t)map[r->param];
	return 0;
}

/* Triton drops an integer argument equal to 1: the constant 1 stands in.
 * An argument the IR shows a pointer is no value: -1 with why. */
static int place_val(const struct rule *r, const char *key, struct rule_val *v,
		     const int8_t *map, const char (*elem)[RULE_ELEM_MAX], char *why, size_t len)
{
	for (unsigned i = 0; i < v->n; i++) {
		struct rule_term *t = &v->t[i];

		if (t->kind != TERM_PARAM)
			continue;
		if (elem[t->param][0]) {
			snprintf(why, len, "%s: %s points at %s, it is no value", key,
				 triton_name(r, t->param), elem[t->param]);
			return -1;
		}
		if (map[t->param] < 0)
			*t = (struct rule_term){ .kind = TERM_CONST, .k = 1, .divide = t->divide };
		else
			t->param = (uint8_t)map[t->param];
	}
	return 0;
}

/* Whether argument ref points at the rule's dtype: 0, or -1 with why. */
static int elem_is(const struct rule *r, const char *key, const struct rule_ref *ref,
		   const char (*elem)[RULE_ELEM_MAX], char *why, size_t len)
{
	const char *want = ref->dtype == RULE_U32 ? "i32" : dtype_names[ref->dtype];
	const char *got = elem[ref->param];

	if (!strcmp(got, want))
		return 0;
	if (*got && strcmp(got, "?"))
		snprintf(why, len, "%s=%s points at %s, the rule reads %s", key,
			 triton_name(r, ref->param), got, dtype_names[ref->dtype]);
	else
		snprintf(why, len, "%s=%s: the IR does not say what it points at", key,
			 triton_name(r, ref->param));
	return -1;
}

int rule_place(const struct rule *r, const int8_t *map, const char (*elem)[RULE_ELEM_MAX],
	       struct rule *out, char *why, size_t len)
{
	const char *key = r->kind == RULE_ROUTING ? "ids" : "slots";
	unsigned i;

	*out = *r;
	out->ntriton = 0;
	memset(out->triton, 0, sizeof out->triton);
	if (r->kind != RULE_STEP && place_ref(&out->ref, map)) {
		snprintf(why, len, "%s=%s was None when it was compiled", key,
			 triton_name(r, r->ref.param));
		return -1;
	}
	if (r->kind != RULE_STEP && elem_is(r, key, &r->ref, elem, why, len) < 0)
		return -1;
	if (out->weights.dtype && place_ref(&out->weights, map))
		out->weights = (struct rule_ref){ 0 };
	else if (out->weights.dtype && elem_is(r, "weights", &r->weights, elem, why, len) < 0)
		return -1;
	for (i = 0; i < out->npool; i++)
		if (place_ref(&out->pool[i], map)) {
			snprintf(why, len, "pool=%s was None when it was compiled",
				 triton_name(r, r->pool[i].param));
			return -1;
		}
	if (place_val(r, "rows", &out->rows, map, elem, why, len) < 0 ||
	    place_val(r, "k", &out->k, map, elem, why, len) < 0 ||
	    place_val(r, "stride", &out->stride, map, elem, why, len) < 0 ||
	    place_val(r, "experts", &out->experts, map, elem, why, len) < 0 ||
	    place_val(r, "count", &out->count, map, elem, why, len) < 0 ||
	    place_val(r, "block", &out->block, map, elem, why, len) < 0)
		return -1;
	for (i = 0; i < out->nwhen; i++)
		if (place_val(r, "when", &out->when[i].a, map, elem, why, len) < 0 ||
		    place_val(r, "when", &out->when[i].b, map, elem, why, len) < 0)
			return -1;
	return 0;
}

/* ---- formatting -------------------------------------------------------- */

struct out {
	char *buf;
	size_t len, n;
};

__attribute__((format(printf, 2, 3)))
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->n < o->len ? o->buf + o->n : NULL,
		      o->n < o->len ? o->len - o->n : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->n += (size_t)n;
}

static void put_val(struct out *o, const struct rule_val *v)
{
	static const char *const axis = "xyz";
	unsigned i;

	for (i = 0; i < v->n; i++) {
		const struct rule_term *t = &v->t[i];

		put(o, "%s", !i ? "" : t->divide ? "/" : "*");
		switch (t->kind) {
		case TERM_CONST: put(o, "%lld", (long long)t->k); break;
		case TERM_GRID: put(o, "grid.%c", axis[t->axis]); break;
		case TERM_BLOCK: put(o, "block.%c", axis[t->axis]); break;
		case TERM_PARAM:
			put(o, "p%u%s", t->param, t->width == 4 ? ":i32" : t->width == 8 ? ":i64" : "");
			break;
		case TERM_FIELD:
			put(o, "p%u@%u%s", t->param, t->off, t->width == 8 ? ":i64" : "");
			break;
		}
	}
}

static void put_ref(struct out *o, const struct rule_ref *r)
{
	put(o, "p%u", r->param);
	if (r->in_struct)
		put(o, "@%u", r->off);
	if (r->dtype)
		put(o, ":%s", dtype_names[r->dtype]);
}

static void put_key_val(struct out *o, const char *key, const struct rule_val *v)
{
	if (v->n) {
		put(o, " %s=", key);
		put_val(o, v);
	}
}

int rule_format(const struct rule *r, char *buf, size_t len)
{
	static const char *const opnames[] = { "", "==", "!=", "<", "<=", ">", ">=" };
	struct out o = { buf, len, 0 };
	unsigned i;

	if (len)
		buf[0] = '\0';
	put(&o, "%s %s", kinds[r->kind].name, r->pattern);
	if (r->kind != RULE_STEP) {
		put(&o, " %s=", r->kind == RULE_ROUTING ? "ids" : "slots");
		put_ref(&o, &r->ref);
	}
	if (r->weights.dtype) {
		put(&o, " weights=");
		put_ref(&o, &r->weights);
	}
	put_key_val(&o, "rows", &r->rows);
	put_key_val(&o, "k", &r->k);
	if (r->kind == RULE_ROUTING)
		put_key_val(&o, "stride", &r->stride);
	put_key_val(&o, "experts", &r->experts);
	put_key_val(&o, "count", &r->count);
	put_key_val(&o, "block", &r->block);
	if (r->kind == RULE_KV)
		put_key_val(&o, "stride", &r->stride);
	for (i = 0; i < r->npool; i++) {
		put(&o, "%s", i ? "," : " pool=");
		put_ref(&o, &r->pool[i]);
	}
	for (i = 0; i < r->nwhen; i++) {
		put(&o, " when=");
		put_val(&o, &r->when[i].a);
		put(&o, "%s", opnames[r->when[i].op]);
		put_val(&o, &r->when[i].b);
	}
	for (i = 0; i < r->ntriton; i++)
		put(&o, "%s%s", i ? "," : " triton=", triton_name(r, i));
	return (int)o.n;
}

/*
 * plan.c - the restore plan (plan.h): its parser and its writer.
 *
 * The plan is written by moeft restore, but to the preload it is still an
 * input from outside the process: every line is checked, and a bad one is
 * named.  The writer checks what it wrote with the same parser, so the
 * rules of the format are written down once.  Pools that share a number
 * or a file are found once every line is read, by a bitmap and a sort, so
 * the cost stays O(n log n) for the largest plan.  The reader of these
 * files is here too: restore mode and the tools read them alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "decimal.h"
#include "plan.h"

struct cursor {
	const char *p;
	unsigned line;
	char *err;
	size_t errlen;
};

__attribute__((format(printf, 2, 3)))
static int fail(struct cursor *c, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(c->err, c->errlen, "line %u: ", c->line);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < c->errlen)
		vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* The word `w` and one space. */
static int word(struct cursor *c, const char *w)
{
	size_t n = strlen(w);

	if (strncmp(c->p, w, n) != 0 || c->p[n] != ' ')
		return fail(c, "expected '%s '", w);
	c->p += n + 1;
	return 0;
}

/* After a field: a space (more follows) or the end of the line. */
static int field_end(struct cursor *c, int last)
{
	if (*c->p != (last ? '\n' : ' '))
		return fail(c, last ? "expected the end of the line" : "expected a space");
	c->p++;
	return 0;
}

/* A decimal, then the field's end. */
static int number(struct cursor *c, uint64_t max, uint64_t *v, int last)
{
	if (parse_decimal(&c->p, max, v) < 0)
		return fail(c, "expected a number up to %llu", (unsigned long long)max);
	return field_end(c, last);
}

/* Exactly 16 lowercase hex digits, then the field's end. */
static int hex64(struct cursor *c, uint64_t *v, int last)
{
	unsigned i;

	*v = 0;
	for (i = 0; i < 16; i++) {
		char ch = c->p[i];

		if (ch >= '0' && ch <= '9')
			*v = *v << 4 | (uint64_t)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			*v = *v << 4 | (uint64_t)(ch - 'a' + 10);
		else
			return fail(c, "expected 16 hex digits");
	}
	c->p += 16;
	return field_end(c, last);
}

/* A file name of [A-Za-z0-9._-], not "." or "..", to the end of the line. */
static int name(struct cursor *c, char *out)
{
	size_t n = strcspn(c->p, "\n");
	size_t i;

	if (n == 0 || n >= RESTORE_NAME_MAX || c->p[n] != '\n' ||
	    !strncmp(c->p, ".", n) || !strncmp(c->p, "..", n))
		return fail(c, "expected a file name of 1 to %u bytes", RESTORE_NAME_MAX - 1);
	for (i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
			    c->p[i]))
			return fail(c, "the file name may hold letters, digits, '.', '_', '-'");
	memcpy(out, c->p, n);
	out[n] = '\0';
	c->p += n + 1;
	return 0;
}

/* One more pool, the array grown when full: NULL when out of memory. */
static struct restore_pool *more(struct restore_plan *p, unsigned *cap)
{
	struct restore_pool *q;
	unsigned want;

	if (p->npools == *cap) {
		want = *cap ? 2 * *cap : 16;
		if (!(q = realloc(p->pools, want * sizeof *q)))
			return NULL;
		p->pools = q;
		*cap = want;
	}
	q = &p->pools[p->npools];
	memset(q, 0, sizeof *q);
	q->fd = -1;
	return q;
}

static int pool_line(struct cursor *c, struct restore_plan *p, unsigned *cap)
{
	struct restore_pool *q;
	uint64_t no, ordinal;

	if (p->npools == KVS_MAX_POOLS)
		return fail(c, "more than %u pools", KVS_MAX_POOLS);
	if (!(q = more(p, cap)))
		return fail(c, "out of memory");
	if (word(c, "pool") || number(c, KVS_MAX_POOLS - 1, &no, 0) ||
	    hex64(c, &q->fingerprint, 0) || number(c, UINT64_MAX, &q->size, 0) ||
	    number(c, UINT32_MAX, &ordinal, 0) || number(c, UINT64_MAX, &q->chunk_bytes, 0) ||
	    name(c, q->file))
		return -1;
	if (q->size == 0 || q->chunk_bytes == 0)
		return fail(c, "a pool has a size and a chunk size");
	q->no = (uint32_t)no;
	q->ordinal = (uint32_t)ordinal;
	p->npools++;
	return 0;
}

/* A lost chunk of the pool on the line above; *total counts them all. */
static int lost_line(struct cursor *c, struct restore_plan *p, unsigned *total)
{
	struct restore_pool *q = p->npools ? &p->pools[p->npools - 1] : NULL;
	uint64_t chunk, *grown;

	if (word(c, "lost"))
		return -1;
	if (!q)
		return fail(c, "a lost chunk before any pool");
	if (*total == RESTORE_LOST_MAX)
		return fail(c, "more than %u lost chunks", RESTORE_LOST_MAX);
	if (restore_file_is_map(q->file))
		return fail(c, "a lost chunk of a pool read from the KV store (%s)", q->file);
	if (number(c, (q->size - 1) / q->chunk_bytes, &chunk, 1))
		return -1;
	if (q->nlost && chunk <= q->lost[q->nlost - 1])
		return fail(c, "lost chunks out of order");
	/* Grown at each power of two. */
	if (!(q->nlost & (q->nlost - 1))) {
		if (!(grown = realloc(q->lost, (q->nlost ? 2 * (size_t)q->nlost : 1) * sizeof *grown)))
			return fail(c, "out of memory");
		q->lost = grown;
	}
	q->lost[q->nlost++] = chunk;
	(*total)++;
	return 0;
}

int restore_file_is_map(const char *file)
{
	size_t n = strlen(file);

	return n > 4 && !strcmp(file + n - 4, ".map");
}

int restore_pool_lost(const struct restore_pool *q, uint64_t offset, uint64_t length)
{
	uint64_t first = offset / q->chunk_bytes, last;
	size_t lo = 0, hi = q->nlost;

	if (!length || !q->nlost)
		return 0;
	last = (offset + length - 1) / q->chunk_bytes;
	/* The first lost chunk at or after first. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (q->lost[mid] < first)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < q->nlost && q->lost[lo] <= last;
}

static int by_file(const void *x, const void *y)
{
	const struct restore_pool *a = *(const struct restore_pool *const *)x,
				  *b = *(const struct restore_pool *const *)y;
	int d = strcmp(a->file, b->file);

	return d ? d : (a > b) - (a < b);
}

/* The first pool whose number or file an earlier pool has: p->npools when
 * none, or -1 when out of memory. */
static long first_twice(const struct restore_plan *p)
{
	uint8_t seen[(KVS_MAX_POOLS + 7) / 8] = { 0 };
	const struct restore_pool **v;
	unsigned i, first = p->npools;

	for (i = 0; i < p->npools && first == p->npools; i++) {
		if (seen[p->pools[i].no / 8] & 1u << p->pools[i].no % 8)
			first = i;
		seen[p->pools[i].no / 8] |= (uint8_t)(1u << p->pools[i].no % 8);
	}
	if (p->npools < 2)
		return first;
	if (!(v = malloc(p->npools * sizeof *v)))
		return -1;
	for (i = 0; i < p->npools; i++)
		v[i] = &p->pools[i];
	qsort(v, p->npools, sizeof *v, by_file);
	/* Of two equal names the later pool sorts second. */
	for (i = 1; i < p->npools; i++)
		if (!strcmp(v[i - 1]->file, v[i]->file) && (unsigned)(v[i] - p->pools) < first)
			first = (unsigned)(v[i] - p->pools);
	free(v);
	return first;
}

int restore_plan_parse(const char *text, struct restore_plan *p, char *err, size_t errlen)
{
	struct cursor c = { text, 1, err, errlen };
	unsigned cap = 0, lost = 0;
	long twice;

	memset(p, 0, sizeof *p);
	p->store_fd = -1;
	if (strncmp(c.p, "moeft-restore-plan 1\n", 21) != 0)
		return fail(&c, "not a moeft restore plan of version 1");
	c.p += 21;
	c.line++;
	if (word(&c, "log") || hex64(&c, &p->log_id, 1))
		return -1;
	c.line++;
	if (word(&c, "window") || number(&c, UINT64_MAX, &p->window, 0) ||
	    number(&c, UINT64_MAX, &p->first_step, 0) || number(&c, UINT64_MAX, &p->last_step, 1))
		return -1;
	if (p->last_step < p->first_step)
		return fail(&c, "the window ends before it begins");
	for (c.line++; *c.p; c.line++)
		if ((strncmp(c.p, "lost ", 5) ? pool_line(&c, p, &cap)
					       : lost_line(&c, p, &lost)) < 0) {
			restore_plan_free(p);
			return -1;
		}
	if ((twice = first_twice(p)) < 0) {
		c.line--;
		restore_plan_free(p);
		return fail(&c, "out of memory");
	}
	if (twice != p->npools) {
		const struct restore_pool *q = &p->pools[twice];

		/* Its line: after the pools and lost chunks before it. */
		c.line = 4 + (unsigned)twice;
		for (long i = 0; i < twice; i++)
			c.line += p->pools[i].nlost;
		fail(&c, "pool %u or file %s given twice", q->no, q->file);
		restore_plan_free(p);
		return -1;
	}
	return 0;
}

void restore_plan_free(struct restore_plan *p)
{
	for (unsigned i = 0; i < p->npools; i++) {
		free(p->pools[i].lost);
		kvmap_free(&p->pools[i].map);
	}
	free(p->pools);
	p->pools = NULL;
	p->npools = 0;
}

/* Print at buf + n (nothing once full): the length the text would have. */
__attribute__((format(printf, 4, 5)))
static size_t put(char *buf, size_t len, size_t n, const char *fmt, ...)
{
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(n < len ? buf + n : NULL, n < len ? len - n : 0, fmt, ap);
	va_end(ap);
	return k < 0 ? len : n + (size_t)k;
}

int restore_plan_format(const struct restore_plan *p, char *buf, size_t len, char *err,
			size_t errlen)
{
	struct restore_plan back;
	size_t n;
	unsigned i;

	if (p->npools > KVS_MAX_POOLS) {
		snprintf(err, errlen, "%u pools, more than %u", p->npools, KVS_MAX_POOLS);
		return -1;
	}
	n = put(buf, len, 0, "moeft-restore-plan 1\nlog %016" PRIx64 "\nwindow %" PRIu64 " %"
		PRIu64 " %" PRIu64 "\n", p->log_id, p->window, p->first_step, p->last_step);
	for (i = 0; i < p->npools; i++) {
		const struct restore_pool *q = &p->pools[i];

		/* A name without its NUL is printed whole, and refused below. */
		n = put(buf, len, n, "pool %" PRIu32 " %016" PRIx64 " %" PRIu64 " %" PRIu32 " %"
			PRIu64 " %.*s\n", q->no, q->fingerprint, q->size, q->ordinal,
			q->chunk_bytes, (int)sizeof q->file, q->file);
		for (uint32_t k = 0; k < q->nlost; k++)
			n = put(buf, len, n, "lost %" PRIu64 "\n", q->lost[k]);
	}
	if (n >= len) {
		snprintf(err, errlen, "the plan takes %zu bytes and a NUL; the buffer holds %zu",
			 n, len);
		return -1;
	}
	if (restore_plan_parse(buf, &back, err, errlen) < 0)
		return -1;
	restore_plan_free(&back);
	return (int)n;
}

char *restore_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
	struct stat st;
	size_t got = 0;
	ssize_t n = 1;
	char *buf;
	int fd, e;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		errno = e;
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		close(fd);
		snprintf(err, errlen, "%s: not a regular file of at most %zu bytes", path, max);
		errno = EINVAL;
		return NULL;
	}
	if (!(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		snprintf(err, errlen, "%s: out of memory", path);
		errno = ENOMEM;
		return NULL;
	}
	/* To its end: a short read would drop some of it. */
	while (got < (size_t)st.st_size &&
	       ((n = read(fd, buf + got, (size_t)st.st_size - got)) > 0 || (n < 0 && errno == EINTR)))
		got += n > 0 ? (size_t)n : 0;
	close(fd);
	if (got != (size_t)st.st_size) {
		free(buf);
		snprintf(err, errlen, "%s: cannot be read whole", path);
		errno = EIO;
		return NULL;
	}
	buf[got] = '\0';
	*len = got;
	return buf;
}

int restore_set_lists(const char *text, const char *name)
{
	size_t n = strlen(name), len;
	const char *p, *end;
	int found = 0;

	if (strncmp(text, RESTORE_SET_HEAD, sizeof RESTORE_SET_HEAD - 1))
		return -1;
	/* Every line a name of the log names' bytes, ended; the whole file
	 * checked before an answer. */
	for (p = text + sizeof RESTORE_SET_HEAD - 1; *p; p = end + 1) {
		if (!(end = strchr(p, '\n')) || end == p)
			return -1;
		len = (size_t)(end - p);
		if (strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") <
		    len)
			return -1;
		found |= len == n && !strncmp(p, name, n);
	}
	return found;
}

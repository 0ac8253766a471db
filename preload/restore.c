/*
 * restore.c - the plan of restore mode (restore.h): parsing, the pool
 * images, matching allocations.
 *
 * The plan is written by moeft restore, but it is still an input from
 * outside the process: every line is checked, and a bad one is named.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "decimal.h"
#include "restore.h"

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

/* A decimal, then a space (more follows) or the end of the line. */
static int number(struct cursor *c, uint64_t max, uint64_t *v, int last)
{
	if (parse_decimal(&c->p, max, v) < 0)
		return fail(c, "expected a number up to %llu", (unsigned long long)max);
	if (*c->p != (last ? '\n' : ' '))
		return fail(c, last ? "expected the end of the line" : "expected a space");
	c->p++;
	return 0;
}

/* Exactly 16 lowercase hex digits, then a space or the end of the line. */
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
	if (*c->p != (last ? '\n' : ' '))
		return fail(c, last ? "expected the end of the line" : "expected a space");
	c->p++;
	return 0;
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

static int pool_line(struct cursor *c, struct restore_plan *p)
{
	struct restore_pool *q = &p->pools[p->npools];
	uint64_t no, ordinal;
	unsigned i;

	if (p->npools == KVS_MAX_POOLS)
		return fail(c, "more than %u pools", KVS_MAX_POOLS);
	memset(q, 0, sizeof *q);
	if (word(c, "pool") || number(c, KVS_MAX_POOLS - 1, &no, 0) ||
	    hex64(c, &q->fingerprint, 0) || number(c, UINT64_MAX, &q->size, 0) ||
	    number(c, UINT32_MAX, &ordinal, 0) || number(c, UINT64_MAX, &q->chunk_bytes, 0) ||
	    name(c, q->file))
		return -1;
	if (q->size == 0 || q->chunk_bytes == 0)
		return fail(c, "a pool has a size and a chunk size");
	for (i = 0; i < p->npools; i++)
		if (p->pools[i].no == no || !strcmp(p->pools[i].file, q->file))
			return fail(c, "pool %llu or file %s given twice", (unsigned long long)no,
				    q->file);
	q->no = (uint32_t)no;
	q->ordinal = (uint32_t)ordinal;
	p->npools++;
	return 0;
}

int restore_plan_parse(const char *text, struct restore_plan *p, char *err, size_t errlen)
{
	struct cursor c = { text, 1, err, errlen };

	memset(p, 0, sizeof *p);
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
		if (pool_line(&c, p) < 0)
			return -1;
	return 0;
}

/* Map dir/file read-only; it must hold exactly size bytes. */
static const void *map_image(const char *dir, const char *file, uint64_t size, char *err,
			     size_t errlen)
{
	char path[PATH_MAX];
	struct stat st;
	void *m;
	int fd;

	if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) {
		snprintf(err, errlen, "%s/%s: path too long", dir, file);
		return NULL;
	}
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
		snprintf(err, errlen, "%s: not a file of %llu bytes", path, (unsigned long long)size);
		close(fd);
		return NULL;
	}
	m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
		return NULL;
	}
	return m;
}

int restore_plan_load(const char *path, struct restore_plan *p, char *err, size_t errlen)
{
	static char text[RESTORE_PLAN_MAX + 1];
	char dir[PATH_MAX], what[200];
	const char *slash = strrchr(path, '/');
	ssize_t n = -1;
	unsigned i;
	int fd;

	if (!slash || (size_t)(slash - path) >= sizeof dir) {
		snprintf(err, errlen, "%s: not an absolute path", path);
		return -1;
	}
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, text, RESTORE_PLAN_MAX + 1);
		close(fd);
	}
	if (n < 0 || n > RESTORE_PLAN_MAX || memchr(text, '\0', (size_t)n)) {
		snprintf(err, errlen, "%s: %s", path, n < 0 ? strerror(errno)
			 : "not a plan (too long, or binary)");
		return -1;
	}
	text[n] = '\0';
	if (restore_plan_parse(text, p, what, sizeof what) < 0) {
		snprintf(err, errlen, "%s: %s", path, what);
		return -1;
	}
	for (i = 0; i < p->npools; i++)
		if (!(p->pools[i].image = map_image(dir, p->pools[i].file, p->pools[i].size, err,
						    errlen)))
			return -1;
	return 0;
}

const struct restore_pool *restore_match(struct restore_plan *p, uint64_t fingerprint,
					 uint64_t size, uint32_t ordinal, uint64_t base)
{
	struct alloc_ident want = { fingerprint, size, ordinal };
	unsigned i;

	for (i = 0; i < p->npools; i++) {
		struct restore_pool *q = &p->pools[i];

		if (!q->base &&
		    alloc_ident_eq((struct alloc_ident){ q->fingerprint, q->size, q->ordinal }, want)) {
			q->base = base;
			return q;
		}
	}
	return NULL;
}

int restore_claimed(const struct restore_plan *p, uint64_t base)
{
	unsigned i;

	for (i = 0; i < p->npools; i++)
		if (p->pools[i].base == base)
			return 1;
	return 0;
}

const struct restore_pool *restore_unmatched(const struct restore_plan *p)
{
	unsigned i;

	for (i = 0; i < p->npools; i++)
		if (!p->pools[i].base)
			return &p->pools[i];
	return NULL;
}

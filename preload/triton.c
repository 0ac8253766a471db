/*
 * triton.c - a Triton kernel's arguments among its parameters (triton.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "crc32c.h"
#include "diag.h"
#include "triton.h"

#define IR_MAX (64u << 20)	/* bytes of an IR file read; a kernel's is far less */

static int is_ident(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_';
}

/* A cursor over the text: p .. end. */
struct cur {
	const char *p, *end;
};

static int at(const struct cur *c, const char *s)
{
	size_t n = strlen(s);

	return (size_t)(c->end - c->p) >= n && !memcmp(c->p, s, n);
}

static void skip_space(struct cur *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
}

/* Past a run of open..close, nested (c at `open`): 0, or -1 cut short. */
static int skip_nested(struct cur *c, char open, char close)
{
	unsigned depth = 0;
	int quoted = 0;

	for (; c->p < c->end; c->p++) {
		char ch = *c->p;

		if (quoted) {
			if (ch == '\\' && c->p + 1 < c->end)
				c->p++;
			else if (ch == '"')
				quoted = 0;
		} else if (ch == '"') {
			quoted = 1;
		} else if (ch == open) {
			depth++;
		} else if (ch == close && --depth == 0) {
			c->p++;
			return 0;
		} else if (ch == '\n') {
			return -1;
		}
	}
	return -1;
}

/* Bytes of a parameter of IR type t (n bytes): 0 for a type not known. */
static unsigned type_size(const char *t, size_t n)
{
	static const struct { const char *name; unsigned size; } types[] = {
		{ "i1", 1 }, { "i8", 1 }, { "i16", 2 }, { "i32", 4 }, { "i64", 8 },
		{ "f16", 2 }, { "bf16", 2 }, { "f32", 4 }, { "f64", 8 },
	};

	if (n > 9 && !memcmp(t, "!tt.ptr<", 8) && t[n - 1] == '>')
		return 8;
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		if (strlen(types[i].name) == n && !memcmp(t, types[i].name, n))
			return types[i].size;
	return 0;
}

/* Copy the identifier at [s, s + n) into a name: 0, or -1 when it is not
 * one or too long. */
static int take_name(char *dst, const char *s, size_t n)
{
	if (n == 0 || n >= TRITON_NAME_MAX)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!is_ident(s[i]))
			return -1;
	memcpy(dst, s, n);
	dst[n] = '\0';
	return 0;
}

/* One argument: %SSA: TYPE [{attrs}] [loc(...)].  Its name is the loc's
 * quoted name where there is one (Triton's source name), else the SSA
 * name unless that is a bare %argN. */
static int parse_arg(struct cur *c, struct triton_sig *s, char *why, size_t len)
{
	const char *ssa, *type;
	size_t nssa, ntype;
	unsigned i = s->n, size;
	int named = 0;

	if (i == TRITON_MAX_ARGS)
		return fail_msg(why, len, "more than %d arguments", TRITON_MAX_ARGS);
	skip_space(c);
	if (!at(c, "%"))
		return fail_msg(why, len, "argument %u: expected '%%'", i);
	for (ssa = ++c->p; c->p < c->end && is_ident(*c->p); c->p++)
		;
	nssa = (size_t)(c->p - ssa);
	if (!at(c, ": "))
		return fail_msg(why, len, "argument %u: expected ': ' after its name", i);
	c->p += 2;
	type = c->p;
	for (unsigned depth = 0; c->p < c->end; c->p++) {
		if (*c->p == '<')
			depth++;
		else if (*c->p == '>' && depth)
			depth--;
		else if (!depth && (*c->p == ' ' || *c->p == ',' || *c->p == ')'))
			break;
		else if (*c->p == '\n')
			return fail_msg(why, len, "argument %u: line ends in its type", i);
	}
	if (c->p == c->end)
		return fail_msg(why, len, "argument %u: type cut short", i);
	ntype = (size_t)(c->p - type);
	if (!(size = type_size(type, ntype)))
		return fail_msg(why, len, "argument %u: type '%.*s' of unknown size", i,
			    ntype > 40 ? 40 : (int)ntype, type);
	s->elem[i][0] = '\0';
	/* !tt.ptr<T> or !tt.ptr<T, SPACE>: T when it is a plain type name,
	 * else TRITON_ELEM_OTHER (a pointer all the same). */
	if (size == 8 && type[0] == '!') {
		size_t n = 0;

		while (8 + n < ntype && is_ident(type[8 + n]))
			n++;
		if (n && n < TRITON_ELEM_MAX && (type[8 + n] == '>' || type[8 + n] == ',')) {
			memcpy(s->elem[i], type + 8, n);
			s->elem[i][n] = '\0';
		} else {
			strcpy(s->elem[i], TRITON_ELEM_OTHER);
		}
	}
	skip_space(c);
	if (at(c, "{") && skip_nested(c, '{', '}') < 0)
		return fail_msg(why, len, "argument %u: attributes cut short", i);
	skip_space(c);
	if (at(c, "loc(\"")) {
		const char *q = c->p + 5, *e = q;

		while (e < c->end && *e != '"' && *e != '\n')
			e++;
		/* loc("NAME"(...)) names it; loc("FILE":LINE:COL) does not */
		if (c->end - e >= 2 && e[0] == '"' && e[1] == '(') {
			if (take_name(s->name[i], q, (size_t)(e - q)) < 0)
				return fail_msg(why, len, "argument %u: its location names no "
					    "identifier", i);
			named = 1;
		}
	}
	if (at(c, "loc(") && skip_nested(c, '(', ')') < 0)
		return fail_msg(why, len, "argument %u: location cut short", i);
	if (!named) {
		int bare = nssa > 3 && !memcmp(ssa, "arg", 3);

		for (size_t k = 3; bare && k < nssa; k++)
			bare = ssa[k] >= '0' && ssa[k] <= '9';
		if (bare || take_name(s->name[i], ssa, nssa) < 0)
			return fail_msg(why, len, "argument %u has no name", i);
	}
	s->size[i] = (uint8_t)size;
	s->n++;
	return 0;
}

int triton_sig_parse(const char *text, size_t len, const char *kernel, struct triton_sig *s,
		     char *why, size_t whylen)
{
	char head[8 + 256];
	struct cur c = { text, text + len };
	const char *hit = NULL;
	int n;

	s->n = 0;
	n = snprintf(head, sizeof head, "@%s(", kernel);
	if (n < 0 || (size_t)n >= sizeof head)
		return fail_msg(why, whylen, "kernel name too long");
	/* The line `tt.func public @kernel(`: its name exactly, then '('. */
	for (const char *p = text; p < c.end; p++) {
		const char *nl = memchr(p, '\n', (size_t)(c.end - p));
		const char *eol = nl ? nl : c.end;
		struct cur l = { p, eol };

		skip_space(&l);
		if (at(&l, "tt.func ")) {
			const char *q = memmem(l.p, (size_t)(eol - l.p), head, (size_t)n);

			hit = q ? q + n : NULL;
		}
		if (hit || !nl)
			break;
		p = nl;
	}
	if (!hit)
		return fail_msg(why, whylen, "no 'tt.func' line for @%s", kernel);
	c.p = hit;
	if (at(&c, ")"))
		return 0;
	for (;;) {
		if (parse_arg(&c, s, why, whylen) < 0)
			return -1;
		skip_space(&c);
		if (at(&c, ")"))
			return 0;
		if (!at(&c, ","))
			return fail_msg(why, whylen, "argument %u: expected ',' or ')' after it", s->n);
		c.p++;
	}
}

int triton_cache_dir(char *buf, size_t len)
{
	const char *dir = secure_getenv("TRITON_CACHE_DIR"), *home;
	int n;

	if (dir && *dir)
		n = snprintf(buf, len, "%s", dir);
	else if ((home = secure_getenv("TRITON_HOME")) && *home)
		n = snprintf(buf, len, "%s/.triton/cache", home);
	else if ((home = secure_getenv("HOME")) && *home)
		n = snprintf(buf, len, "%s/.triton/cache", home);
	else
		return -1;
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* The whole of a regular file at dirfd/path into a new buffer: it (with
 * *n its length), or NULL. */
static char *read_whole(int dirfd, const char *path, size_t *n)
{
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat st;
	char *buf = NULL;
	size_t got = 0;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
	    (uint64_t)st.st_size <= IR_MAX && (buf = malloc((size_t)st.st_size))) {
		while (got < (size_t)st.st_size) {
			ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			got += (size_t)r;
		}
	}
	close(fd);
	if (buf && got != (size_t)st.st_size) {
		free(buf);
		buf = NULL;
	}
	*n = got;
	return buf;
}

int triton_entry_sig(int dirfd, const char *entry, const char *kernel, struct triton_sig *s,
		     char *why, size_t whylen)
{
	static const char *const exts[] = { "source", "ttir" };
	char path[512], *text = NULL;
	size_t n = 0;
	int r;

	for (size_t x = 0; !text && x < sizeof exts / sizeof exts[0]; x++) {
		int k = snprintf(path, sizeof path, "%s/%s.%s", entry, kernel, exts[x]);

		if (k > 0 && (size_t)k < sizeof path)
			text = read_whole(dirfd, path, &n);
	}
	if (!text)
		return 1;
	r = triton_sig_parse(text, n, kernel, s, why, whylen);
	free(text);
	return r;
}

int triton_sig_fits(const struct triton_sig *s, const uint32_t *sizes, unsigned nparams)
{
	if (s->n > nparams || nparams - s->n > TRITON_MAX_SCRATCH)
		return 0;
	for (unsigned i = 0; i < nparams; i++)
		if (sizes[i] != (i < s->n ? s->size[i] : 8u))
			return 0;
	return 1;
}

int triton_sig_map(const struct triton_sig *s, const char *declared, unsigned ndeclared,
		   int8_t *map)
{
	const char *d = declared;
	unsigned k = 0;

	for (unsigned i = 0; i < ndeclared; i++, d += strlen(d) + 1) {
		map[i] = TRITON_DROPPED;
		if (k < s->n && !strcmp(d, s->name[k]))
			map[i] = (int8_t)k++;
	}
	return k == s->n ? 0 : -1;
}

void triton_sig_elems(const struct triton_sig *s, const int8_t *map, unsigned ndeclared,
		      char elem[][TRITON_ELEM_MAX])
{
	for (unsigned i = 0; i < ndeclared; i++)
		snprintf(elem[i], TRITON_ELEM_MAX, "%s", map[i] < 0 ? "" : s->elem[map[i]]);
}

/* Whether entry's <kernel>.cubin is img, byte count and CRC. */
static int holds_image(int dirfd, const char *entry, const char *kernel,
		       const struct triton_image *img)
{
	char path[512];
	size_t n = 0;
	char *bytes;
	int k = snprintf(path, sizeof path, "%s/%s.cubin", entry, kernel), same;

	struct stat st;

	if (k < 0 || (size_t)k >= sizeof path ||
	    fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 || (uint64_t)st.st_size != img->size ||
	    !(bytes = read_whole(dirfd, path, &n)))
		return 0;
	same = n == img->size && crc32c(0, bytes, n) == img->crc;
	free(bytes);
	return same;
}

int triton_place(const char *dir, const char *kernel, const struct triton_image *img,
		 const uint32_t *sizes, unsigned nparams, const char *declared, unsigned ndeclared,
		 int8_t map[TRITON_MAX_ARGS], char elem[TRITON_MAX_ARGS][TRITON_ELEM_MAX],
		 char *why, size_t whylen)
{
	char cand_elem[TRITON_MAX_ARGS][TRITON_ELEM_MAX];
	struct triton_sig *s = malloc(sizeof *s);
	int8_t cand[TRITON_MAX_ARGS];
	unsigned fits = 0, other = 0, read = 0;
	char first[NAME_MAX + 1] = "";
	struct dirent *e;
	DIR *d;
	int r = -1;

	for (const char *k = kernel; *k; k++)
		if (!is_ident(*k) || k - kernel >= 200) {
			free(s);
			return fail_msg(why, whylen, "'%.40s' is not a Triton kernel's name", kernel);
		}
	if (!s)
		return fail_msg(why, whylen, "out of memory");
	if (!(d = opendir(dir))) {
		fail_msg(why, whylen, "Triton's cache %s: %s", dir, strerror(errno));
		goto out;
	}
	while ((e = readdir(d))) {
		int got;

		if (e->d_name[0] == '.' ||
		    (img && !holds_image(dirfd(d), e->d_name, kernel, img)) ||
		    (got = triton_entry_sig(dirfd(d), e->d_name, kernel, s, why, whylen)) > 0)
			continue;
		read++;
		if (got == 0 && triton_sig_fits(s, sizes, nparams)) {
			if (triton_sig_map(s, declared, ndeclared, cand) < 0) {
				other++;
			} else if (!fits++) {
				memcpy(map, cand, ndeclared);
				triton_sig_elems(s, map, ndeclared, elem);
				snprintf(first, sizeof first, "%s", e->d_name);
			} else if (memcmp(map, cand, ndeclared)) {
				fail_msg(why, whylen, "its entries %s and %s in %s place the arguments "
				     "differently", first, e->d_name, dir);
				goto close;
			} else {
				/* Which one runs is not known: a type they disagree
				 * on is not known either (pointers both: their
				 * sizes are equal and a pointer is never dropped
				 * where the other keeps an integer of its name). */
				triton_sig_elems(s, cand, ndeclared, cand_elem);
				for (unsigned i = 0; i < ndeclared; i++)
					if (strcmp(elem[i], cand_elem[i]))
						strcpy(elem[i], TRITON_ELEM_OTHER);
			}
		}
	}
	if (fits && !other)
		r = 0;
	else if (fits)
		fail_msg(why, whylen, "%u entr%s in %s fit%s its %u parameters but keep%s an argument "
		     "the rule does not list, or in another order, beside %u that fit: another "
		     "version of the kernel?", other, other == 1 ? "y" : "ies", dir,
		     other == 1 ? "s" : "", nparams, other == 1 ? "s" : "", fits);
	else if (img && !read)
		fail_msg(why, whylen, "no entry in %s holds the cubin it was loaded from (%llu bytes, "
		     "CRC-32C %08x)", dir, (unsigned long long)img->size, (unsigned)img->crc);
	else if (other)
		fail_msg(why, whylen, "%u entr%s in %s fit%s its %u parameters but keep%s an argument "
		     "the rule does not list, or in another order (another version of the kernel?)", other,
		     other == 1 ? "y" : "ies", dir, other == 1 ? "s" : "", nparams,
		     other == 1 ? "s" : "");
	else
		fail_msg(why, whylen, "none of its %u entr%s in %s fits its %u parameters", read,
		     read == 1 ? "y" : "ies", dir, nparams);
close:
	closedir(d);
out:
	free(s);
	return r;
}

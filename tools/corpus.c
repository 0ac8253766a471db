/*
 * corpus.c - one line of an engine corpus file (corpus.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corpus.h"

/* Split s at tabs into at most n fields; the count. */
static unsigned split(char *s, char **f, unsigned n)
{
	unsigned i = 0;

	while (i < n) {
		f[i++] = s;
		if (!(s = strchr(s, '\t')))
			break;
		*s++ = '\0';
	}
	return s ? n + 1 : i;	/* n + 1: more fields than asked for */
}

/* A decimal number of at most max, ended by the byte `sep`, or with
 * last set also by the string's end: its end, or NULL. */
static char *number(char *s, unsigned long max, char sep, int last, unsigned long *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return NULL;
	errno = 0;
	*v = strtoul(s, &end, 10);
	if (errno || *v > max || (*end != sep && (*end || !last)))
		return NULL;
	return end;
}

/* "ORD:OFF:SIZE ORD:OFF:SIZE ...", "-" (no params) or "?" (unknown)
 * into k. */
static int parse_params(char *s, struct corpus_kernel *k, char *why, size_t len)
{
	unsigned long ord, off, size, end = 0;

	k->nparams = 0;
	k->known = strcmp(s, "?") != 0;
	if (!strcmp(s, "-") || !k->known)
		return 0;
	if (!*s) {
		snprintf(why, len, "an empty parameter table (want '-' for none, '?' for unknown)");
		return -1;
	}
	while (*s) {
		char *p = s;

		if (!(p = number(p, CORPUS_MAX_PARAMS - 1, ':', 0, &ord)) ||
		    !(p = number(p + 1, CORPUS_PARAM_BYTES, ':', 0, &off)) ||
		    !(p = number(p + 1, CORPUS_PARAM_BYTES, ' ', 1, &size))) {
			snprintf(why, len, "parameter %u: want ORDINAL:OFFSET:SIZE, got '%.40s'",
				 k->nparams, s);
			return -1;
		}
		if (ord != k->nparams || off < end || !size || off + size > CORPUS_PARAM_BYTES) {
			snprintf(why, len, "parameter %u: '%.*s' is out of order, overlaps the one "
				 "before, or passes %d bytes", k->nparams, (int)(p - s), s,
				 CORPUS_PARAM_BYTES);
			return -1;
		}
		k->sizes[k->nparams++] = (uint32_t)size;
		end = off + size;
		s = *p ? p + 1 : p;
		if (*p && !*s) {
			snprintf(why, len, "a space ends the parameter table");
			return -1;
		}
	}
	return 0;
}

int corpus_parse_line(char *line, struct corpus_kernel *k, char *why, size_t len)
{
	char *f[6];
	unsigned n;

	int disagree;

	if (line[0] == '#' || !line[0])
		return 0;
	n = split(line, f, 5);
	if (!strcmp(f[0], "lib") || !strcmp(f[0], "sm") || !strcmp(f[0], "others"))
		return 0;
	disagree = !strcmp(f[0], "disagree");
	if (!disagree && strcmp(f[0], "kernel")) {
		snprintf(why, len, "'%.40s': not a line of a corpus file (kernel, disagree, lib, sm, "
			 "others or a # comment)", f[0]);
		return -1;
	}
	if (n != 5 || !*f[1] || !*f[2] || !*f[3]) {
		snprintf(why, len, disagree ? "a disagree line has 5 tab-separated fields: "
			 "disagree, library, mangled name, architectures, parameters" :
			 "a kernel line has 5 tab-separated fields: kernel, library, mangled name, "
			 "demangled name, parameters");
		return -1;
	}
	k->lib = f[1];
	k->mangled = f[2];
	k->demangled = disagree ? NULL : f[3];
	k->sms = disagree ? f[3] : NULL;
	if (parse_params(f[4], k, why, len) < 0)
		return -1;
	return disagree ? 2 : 1;
}

const char *corpus_header(char *line, const char *field)
{
	size_t n = strlen(field);

	if (strncmp(line, "# ", 2) || strncmp(line + 2, field, n) || strncmp(line + 2 + n, ": ", 2))
		return NULL;
	return line + 4 + n;
}

/*
 * profile_check.c - moeft profile check: the built-in profiles (or
 * MOEFT_PROFILE's) against the kernels of real engine builds.
 *
 * For each corpus file (tests/engines/README.md: an engine package's
 * kernels with their parameter tables, from its cubins), every kernel
 * goes to the rule that owns it, as the preload would decide
 * (profile_match), and the rule's positions are checked against the
 * kernel's table (rule_fits) and the parameter types of its demangled
 * name (a pointer where it reads ids, slots or weights, of the element type it
 * reads; an integer where it reads a count).  Kernels whose names look like routing
 * (top-k, gating, router) or KV-cache writes that no rule owns are
 * listed, by name.  A rule that misfits a kernel it owns would read the
 * wrong bytes; it fails the check (exit status 1).
 *
 * A directory is Triton's cache (or the corpus of one, tests/engines/
 * triton/): each entry's IR names the arguments its kernel kept, and a
 * triton= rule is placed on the kernel as the preload places it.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli.h"
#include "corpus.h"
#include "devcode.h"
#include "json.h"
#include "profile.h"
#include "triton.h"

/* libstdc++'s demangler (the C++ ABI's), for the names in binaries. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define SHOWN_MISFITS 3		/* kernels named per misfitting rule */
#define NAME_MAX_LEN 240	/* of a kernel's base name */

/* Words of names that write routing ids or KV-cache slots. */
static const char *const telling_words[] = {
	"topk", "top_k", "gating", "gate", "router", "argsort", "softplus",
	"cache", "set_rows", NULL
};

struct misfit {
	char kernel[NAME_MAX_LEN];
	char why[160];
};

struct rule_tally {
	unsigned matched, misfits;
	struct misfit shown[SHOWN_MISFITS];
};

struct name_tally {
	char name[NAME_MAX_LEN];
	unsigned count;
};

struct file_check {
	char path[4096];
	char package[128], version[64];
	int binary;			/* dev holds what the file is */
	int triton;			/* a Triton cache directory */
	struct devcode_file dev;
	unsigned kernels;
	struct rule_tally *rules;	/* by rule index */
	struct name_tally *unmatched;
	unsigned nunmatched, capunmatched;
};

/* A kernel's parameter types, from its demangled name. */
struct signature {
	unsigned n;
	const char *type[CORPUS_MAX_PARAMS];
	unsigned len[CORPUS_MAX_PARAMS];
};

struct check {
	const struct cli_command *cmd;
	int json;
	struct profile prof;
	const char *spec;
	unsigned misfits;
	struct signature sig;
};

/* ---- the parameter types a demangled name gives ------------------------------ */

/* The types of the last parenthesised list of d, which ends the name of a
 * function: 0, or -1 when there is none to read. */
static int read_signature(const char *d, struct signature *sig)
{
	size_t len = strlen(d), i, start;
	int depth = 0;

	sig->n = 0;
	if (!len || d[len - 1] != ')')
		return -1;
	for (i = len - 1;; i--) {
		depth += (d[i] == ')' || d[i] == '>') - (d[i] == '(' || d[i] == '<');
		if (!depth)
			break;
		if (!i)
			return -1;
	}
	if (!strcmp(d + i, "()") || !strcmp(d + i, "(void)"))
		return 0;
	for (start = ++i; i < len; i++) {
		depth += (d[i] == '(' || d[i] == '<' || d[i] == '[') -
			 (d[i] == ')' || d[i] == '>' || d[i] == ']');
		if ((depth || d[i] != ',') && i != len - 1)
			continue;
		if (sig->n == CORPUS_MAX_PARAMS)
			return -1;
		while (d[start] == ' ')
			start++;
		sig->type[sig->n] = d + start;
		sig->len[sig->n++] = (unsigned)(i - start);
		start = i + 1;
	}
	return 0;
}

/* A type with its qualifiers (const, volatile, restrict) dropped. */
static void bare_type(const char *t, unsigned n, char *out, size_t len)
{
	static const char *const quals[] = { " const", " volatile", " restrict", " __restrict__",
					     NULL };
	size_t k;
	int again = 1;

	snprintf(out, len, "%.*s", (int)n, t);
	if (!strncmp(out, "const ", 6))
		memmove(out, out + 6, strlen(out + 6) + 1);
	while (again) {
		again = 0;
		for (const char *const *q = quals; *q; q++) {
			k = strlen(out);
			if (k > strlen(*q) && !strcmp(out + k - strlen(*q), *q)) {
				out[k - strlen(*q)] = '\0';
				again = 1;
			}
		}
	}
}

static int one_of(const char *t, const char *const *set)
{
	for (; *set; set++)
		if (!strcmp(t, *set))
			return 1;
	return 0;
}

static const char *const not_counts[] = {
	"bool", "float", "double", "half", "__half", "__nv_bfloat16", "c10::Half",
	"c10::BFloat16", "cutlass::half_t", "cutlass::bfloat16_t", NULL
};
static const char *const ints32[] = { "int", NULL };
static const char *const uints32[] = { "unsigned int", NULL };
static const char *const ints64[] = { "long", "long long", NULL };
static const char *const floats32[] = { "float", NULL };
static const char *const bfloats16[] = {
	"__nv_bfloat16", "c10::BFloat16", "cutlass::bfloat16_t", NULL
};
static const char *const floats16[] = { "half", "__half", "c10::Half", "cutlass::half_t", NULL };
static const char *const any_int[] = {
	"char", "signed char", "unsigned char", "short", "unsigned short", "int", "unsigned int",
	"long", "unsigned long", "long long", "unsigned long long", NULL
};

struct typing {
	const struct signature *sig;
	char *why;
	size_t len;
};

/* Whether the type of the parameter a rule reads is what it reads it as. */
static int use_mistyped(const struct rule_use *u, void *arg)
{
	static const char *const dtypes[] = {
		"", "int32", "uint32", "int64", "float32", "bfloat16", "float16"
	};
	static const char *const *const wants[] = {
		NULL, ints32, uints32, ints64, floats32, bfloats16, floats16
	};
	const struct typing *ty = arg;
	char t[256], elem[256];
	size_t n;

	if (u->what == USE_FIELD_POINTER || u->what == USE_FIELD_INT || u->param >= ty->sig->n)
		return 0;	/* inside a struct: its type says nothing */
	bare_type(ty->sig->type[u->param], ty->sig->len[u->param], t, sizeof t);
	n = strlen(t);
	if (u->what == USE_INT) {
		if (n && t[n - 1] == '*')
			snprintf(ty->why, ty->len, "%s: p%u is %s, a pointer, not a count", u->key,
				 u->param, t);
		else if (one_of(t, not_counts))
			snprintf(ty->why, ty->len, "%s: p%u is %s, not a count", u->key, u->param, t);
		else
			return 0;
		return 1;
	}
	if (!n || t[n - 1] != '*') {
		snprintf(ty->why, ty->len, "%s: p%u is %s, not a pointer", u->key, u->param, t);
		return 1;
	}
	bare_type(t, (unsigned)(n - 1), elem, sizeof elem);
	if (!u->dtype || one_of(elem, wants[u->dtype]) ||
	    (!one_of(elem, any_int) && !one_of(elem, not_counts)))
		return 0;	/* as read, or void or a type the name leaves open */
	snprintf(ty->why, ty->len, "%s: p%u is %s, the rule reads %s elements", u->key, u->param,
		 t, dtypes[u->dtype]);
	return 1;
}

/* Whether rule r reads the kernel's parameters as its signature types
 * them: 0, or -1 with why.  A name without a signature passes. */
static int rule_typed(struct check *c, const struct rule *r, const char *demangled, char *why,
		      size_t len)
{
	struct typing ty = { &c->sig, why, len };

	if (read_signature(demangled, &c->sig) < 0)
		return 0;
	return rule_each_use(r, use_mistyped, &ty) ? -1 : 0;
}

/* The kernel's name without return type, template arguments or
 * parameters: "vllm::moe::topkGating" of "void vllm::moe::topkGating<8,
 * ...>(float const*, ...)". */
static void base_name(const char *demangled, char *out, size_t len)
{
	static const char anon[] = "(anonymous namespace)";
	const char *end = demangled, *start;
	int depth = 0;

	for (; *end; end++) {
		if (!strncmp(end, anon, sizeof anon - 1))
			end += sizeof anon - 2;		/* a name's part, not its params */
		else if (*end == '(' && !depth)
			break;
		else
			depth += (*end == '<') - (*end == '>');
	}
	/* back over trailing template arguments */
	while (end > demangled && end[-1] == '>') {
		depth = 0;
		do {
			end--;
			depth += (*end == '>') - (*end == '<');
		} while (end > demangled && depth);
	}
	start = end;
	for (;;) {
		if (start - demangled >= (ptrdiff_t)sizeof anon - 1 &&
		    !strncmp(start - (sizeof anon - 1), anon, sizeof anon - 1))
			start -= sizeof anon - 1;	/* "(anonymous namespace)" */
		else if (start > demangled && (isalnum((unsigned char)start[-1]) ||
					       start[-1] == '_' || start[-1] == ':'))
			start--;
		else
			break;
	}
	snprintf(out, len, "%.*s", (int)(end - start), start);
	if (!*out)
		snprintf(out, len, "%s", demangled);
}

static int telling(const char *name)
{
	char low[NAME_MAX_LEN];
	size_t i;

	for (i = 0; name[i] && i < sizeof low - 1; i++)
		low[i] = (char)tolower((unsigned char)name[i]);
	low[i] = '\0';
	for (const char *const *w = telling_words; *w; w++)
		if (strstr(low, *w))
			return 1;
	return 0;
}

static int count_unmatched(struct file_check *fc, const char *name)
{
	struct name_tally *grown;

	for (unsigned i = 0; i < fc->nunmatched; i++)
		if (!strcmp(fc->unmatched[i].name, name)) {
			fc->unmatched[i].count++;
			return 0;
		}
	if (fc->nunmatched == fc->capunmatched) {
		unsigned cap = fc->capunmatched ? 2 * fc->capunmatched : 64;

		if (!(grown = realloc(fc->unmatched, cap * sizeof *grown)))
			return -1;
		fc->unmatched = grown;
		fc->capunmatched = cap;
	}
	snprintf(fc->unmatched[fc->nunmatched].name, NAME_MAX_LEN, "%s", name);
	fc->unmatched[fc->nunmatched++].count = 1;
	return 0;
}

/* Whether rule r, triton=, placed on the kernel whose kept arguments sig
 * names fits its table: 0, or -1 with why.  Without the IR (a kernel of a
 * binary or corpus file) it cannot be placed. */
static int triton_fits(const struct rule *r, const struct triton_sig *sig,
		       const struct corpus_kernel *k, char *why, size_t len)
{
	char elem[TRITON_MAX_ARGS][TRITON_ELEM_MAX];
	int8_t map[TRITON_MAX_ARGS];
	struct rule placed;

	if (!sig) {
		snprintf(why, len, "a Triton rule: its places come from the IR in Triton's cache; "
			 "check that directory");
		return -1;
	}
	if (!triton_sig_fits(sig, k->sizes, k->nparams)) {
		snprintf(why, len, "the IR keeps %u arguments that do not make its %u parameters",
			 sig->n, k->nparams);
		return -1;
	}
	if (triton_sig_map(sig, r->triton, r->ntriton, map) < 0) {
		snprintf(why, len, "the IR keeps an argument the rule does not list, or in "
			 "another order");
		return -1;
	}
	triton_sig_elems(sig, map, r->ntriton, elem);
	if (rule_place(r, map, (const char (*)[RULE_ELEM_MAX])elem, &placed, why, len) < 0)
		return -1;
	return rule_fits(&placed, k->sizes, k->nparams, why, len);
}

/* One kernel of the file, or another architecture's table of one (a
 * disagree line): to its rule, or to the unmatched names.  sig: a Triton
 * kernel's IR signature, or NULL. */
static int check_kernel(struct check *c, struct file_check *fc, const struct corpus_kernel *k,
			const struct triton_sig *sig)
{
	int ri = profile_match(&c->prof, k->mangled);
	char name[NAME_MAX_LEN], why[160];
	const struct rule *r;
	struct rule_tally *t;

	if (k->demangled)
		fc->kernels++;
	if (ri < 0) {
		if (!k->demangled)
			return 0;
		base_name(k->demangled, name, sizeof name);
		return telling(name) ? count_unmatched(fc, name) : 0;
	}
	r = &c->prof.rules[ri];
	t = &fc->rules[ri];
	t->matched += k->demangled != NULL;
	if (!k->known)
		snprintf(why, sizeof why, "its cubin has no parameter table: the rule cannot be "
			 "checked");
	else if (r->ntriton ? triton_fits(r, sig, k, why, sizeof why) == 0 :
		 rule_fits(r, k->sizes, k->nparams, why, sizeof why) == 0 &&
		 (!k->demangled || rule_typed(c, r, k->demangled, why, sizeof why) == 0))
		return 0;
	if (t->misfits < SHOWN_MISFITS) {
		snprintf(t->shown[t->misfits].kernel, NAME_MAX_LEN, "%s%s%s",
			 k->demangled ? k->demangled : k->mangled, k->sms ? ", the table of " : "",
			 k->sms ? k->sms : "");
		snprintf(t->shown[t->misfits].why, sizeof t->shown[0].why, "%s", why);
	}
	t->misfits++;
	c->misfits++;
	return 0;
}

/* Read the corpus file f: 0, or EXIT_USAGE once said why. */
static int read_corpus(struct check *c, struct file_check *fc, FILE *f)
{
	char *line = malloc(CORPUS_LINE_MAX + 1), why[200];
	struct corpus_kernel *k = malloc(sizeof *k);
	const char *v;
	unsigned lineno = 0;
	int ret = 0, r;

	if (!line || !k) {
		ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "out of memory");
		goto out;
	}
	while (fgets(line, CORPUS_LINE_MAX + 1, f)) {
		size_t n = strlen(line);

		lineno++;
		if (n && line[n - 1] == '\n')
			line[--n] = '\0';
		else if (!feof(f) || n == CORPUS_LINE_MAX) {
			ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "%s:%u: a line longer than %d "
				       "bytes", fc->path, lineno, CORPUS_LINE_MAX - 1);
			goto out;
		}
		if (memchr(line, '\0', n) != NULL) {
			ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "%s:%u: a NUL byte: not a text "
				       "file", fc->path, lineno);
			goto out;
		}
		if ((v = corpus_header(line, "package")))
			snprintf(fc->package, sizeof fc->package, "%s", v);
		else if ((v = corpus_header(line, "version")))
			snprintf(fc->version, sizeof fc->version, "%s", v);
		if ((r = corpus_parse_line(line, k, why, sizeof why)) < 0) {
			ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "%s:%u: %s", fc->path, lineno,
				       why);
			goto out;
		}
		if (r && check_kernel(c, fc, k, NULL) < 0) {
			ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "out of memory");
			goto out;
		}
	}
	if (ferror(f))
		ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "%s: %s", fc->path, strerror(errno));
	else if (!fc->package[0])	/* a corpus may list no kernel, never no package */
		ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "%s: no '# package:' line: not a corpus "
			       "file (tests/engines/README.md)", fc->path);
out:
	free(line);
	free(k);
	return ret;
}

/* ---- kernels from device code -------------------------------------------------- */

_Static_assert(DEVCODE_MAX_PARAMS == CORPUS_MAX_PARAMS &&
	       DEVCODE_PARAM_BYTES == CORPUS_PARAM_BYTES, "a binary's table is a corpus line's");

/* A kernel's table in one cubin of a binary. */
struct table {
	char *name;
	unsigned sm, nparams;
	uint32_t *sizes;
};

struct tables {
	struct table *v;
	size_t n, cap;
};

static int keep_table(const struct devcode_kernel *k, void *arg)
{
	struct tables *t = arg;
	struct table *e;

	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 256;
		struct table *grown = realloc(t->v, cap * sizeof *grown);

		if (!grown)
			return 1;
		t->v = grown;
		t->cap = cap;
	}
	e = &t->v[t->n];
	e->name = strdup(k->name);
	e->sizes = malloc((k->nparams ? k->nparams : 1) * sizeof *e->sizes);
	if (!e->name || !e->sizes) {
		free(e->name);
		free(e->sizes);
		return 1;
	}
	memcpy(e->sizes, k->sizes, k->nparams * sizeof *e->sizes);
	e->sm = k->sm;
	e->nparams = k->nparams;
	t->n++;
	return 0;
}

/* By name; a name's sm_90 table first (the corpus files' choice), then
 * the others by architecture. */
static int table_order(const void *a, const void *b)
{
	const struct table *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	if (r)
		return r;
	if ((x->sm == 90) != (y->sm == 90))
		return x->sm == 90 ? -1 : 1;
	return (x->sm > y->sm) - (x->sm < y->sm);
}

static int same_table(const struct table *x, const struct table *y)
{
	return x->nparams == y->nparams &&
	       !memcmp(x->sizes, y->sizes, x->nparams * sizeof *x->sizes);
}

/* The tables of a binary, each name's first as a kernel (demangled for
 * its signature), another architecture's only where it differs. */
static int check_tables(struct check *c, struct file_check *fc, const struct tables *t)
{
	struct corpus_kernel *k = malloc(sizeof *k);
	char sm[16];
	int ret = 0;

	if (!k)
		return -1;
	for (size_t i = 0, first = 0; i < t->n && !ret; i++) {
		const struct table *e = &t->v[i];
		char *demangled = NULL;
		int status = -1;

		if (i && strcmp(e->name, t->v[i - 1].name))
			first = i;
		if (i != first && same_table(e, &t->v[first]))
			continue;
		*k = (struct corpus_kernel){ .lib = fc->path, .mangled = e->name, .known = 1,
					     .nparams = e->nparams };
		memcpy(k->sizes, e->sizes, e->nparams * sizeof *e->sizes);
		if (i == first) {
			demangled = __cxa_demangle(e->name, NULL, NULL, &status);
			k->demangled = status == 0 && demangled ? demangled : e->name;
		} else {
			snprintf(sm, sizeof sm, "sm_%u", e->sm);
			k->sms = sm;
		}
		ret = check_kernel(c, fc, k, NULL);
		free(demangled);
	}
	free(k);
	return ret;
}

/* Read the cubin, fatbin or host ELF open at fd: 0, or EXIT_USAGE once
 * said why. */
static int read_binary(struct check *c, struct file_check *fc, int fd)
{
	struct tables t = { 0 };
	char why[400];
	int r, ret = 0;

	fc->binary = 1;
	r = devcode_read(fd, keep_table, &t, &fc->dev, why, sizeof why);
	if (r < 0) {
		ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "%s: %s", fc->path, why);
	} else {
		if (t.n)
			qsort(t.v, t.n, sizeof *t.v, table_order);
		if (r || check_tables(c, fc, &t) < 0)
			ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "out of memory");
	}
	for (size_t i = 0; i < t.n; i++) {
		free(t.v[i].name);
		free(t.v[i].sizes);
	}
	free(t.v);
	return ret;
}

/* ---- Triton's cache ------------------------------------------------------------ */

/* The table of `kernel` in cache entry `entry`: from its cubin, else from
 * a corpus's `params` lines ("ORDINAL OFFSET SIZE").  k->known stays 0
 * without either. */
static void entry_table(int dirfd, const char *entry, const char *kernel, struct corpus_kernel *k)
{
	struct tables t = { 0 };
	struct devcode_file dev;
	char path[600], why[200];
	unsigned ord, off, size;
	FILE *f;
	int fd;

	snprintf(path, sizeof path, "%s/%s.cubin", entry, kernel);
	if ((fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC)) >= 0) {
		if (devcode_read(fd, keep_table, &t, &dev, why, sizeof why) == 0)
			for (size_t i = 0; i < t.n && !k->known; i++)
				if (!strcmp(t.v[i].name, kernel) && t.v[i].nparams <= CORPUS_MAX_PARAMS) {
					k->nparams = t.v[i].nparams;
					memcpy(k->sizes, t.v[i].sizes, k->nparams * sizeof *k->sizes);
					k->known = 1;
				}
		for (size_t i = 0; i < t.n; i++) {
			free(t.v[i].name);
			free(t.v[i].sizes);
		}
		free(t.v);
		close(fd);
		return;
	}
	snprintf(path, sizeof path, "%s/params", entry);
	if ((fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC)) < 0 || !(f = fdopen(fd, "r"))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while (k->nparams < CORPUS_MAX_PARAMS && fscanf(f, "%u %u %u", &ord, &off, &size) == 3 &&
	       ord == k->nparams)
		k->sizes[k->nparams++] = size;
	k->known = feof(f) != 0;
	fclose(f);
}

/* The kernels of one cache entry: each IR file's (.source, or .ttir
 * without one). */
static int check_entry(struct check *c, struct file_check *fc, int cachefd, const char *entry,
		       struct triton_sig *sig)
{
	struct corpus_kernel *k = malloc(sizeof *k);
	char kernel[256], source[300], shown[NAME_MAX_LEN], why[200];
	struct dirent *e;
	DIR *d = NULL;
	int fd = openat(cachefd, entry, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (!k || fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		free(k);
		return k ? 0 : -1;
	}
	while ((e = readdir(d))) {
		const char *dot = strrchr(e->d_name, '.');
		size_t n = dot ? (size_t)(dot - e->d_name) : 0;

		if (!n || n >= sizeof kernel ||
		    (strcmp(dot, ".source") && strcmp(dot, ".ttir")))
			continue;
		memcpy(kernel, e->d_name, n);
		kernel[n] = '\0';
		snprintf(source, sizeof source, "%s.source", kernel);
		if (!strcmp(dot, ".ttir") && faccessat(dirfd(d), source, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
			continue;	/* the .source is read instead */
		/* Named with its entry, where many share the name. */
		snprintf(shown, sizeof shown, "%.150s (entry %.80s)", kernel, entry);
		*k = (struct corpus_kernel){ .lib = fc->path, .mangled = kernel, .demangled = shown };
		entry_table(cachefd, entry, kernel, k);
		if (triton_entry_sig(cachefd, entry, kernel, sig, why, sizeof why) != 0)
			k->known = 0;
		if (check_kernel(c, fc, k, k->known ? sig : NULL) < 0)
			break;
	}
	closedir(d);
	free(k);
	return 0;
}

/* Read the Triton cache directory open at fd (taken): 0, or EXIT_USAGE once
 * said why. */
static int read_triton(struct check *c, struct file_check *fc, int fd)
{
	struct triton_sig *sig = malloc(sizeof *sig);
	struct dirent *e;
	DIR *d = fdopendir(fd);
	int ret = 0;

	fc->triton = 1;
	if (!d || !sig) {
		if (!d)
			close(fd);
		free(sig);
		return cli_fail(c->cmd, c->json, EXIT_USAGE, "%s: %s", fc->path,
				d ? "out of memory" : strerror(errno));
	}
	while (!ret && (e = readdir(d)))
		if (e->d_name[0] != '.' && check_entry(c, fc, dirfd(d), e->d_name, sig) < 0)
			ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "out of memory");
	closedir(d);
	free(sig);
	return ret;
}

/* Read fc->path, a corpus file, device code or Triton's cache: 0, or
 * EXIT_USAGE once said why. */
static int read_file(struct check *c, struct file_check *fc)
{
	uint8_t head[8];
	ssize_t got;
	FILE *f;
	int fd = open(fc->path, O_RDONLY | O_CLOEXEC), ret;
	struct stat st;

	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
		return read_triton(c, fc, fd);
	if (fd < 0 || (got = pread(fd, head, sizeof head, 0)) < 0) {
		ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "%s: %s", fc->path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	if (devcode_is_binary(head, (size_t)got)) {
		ret = read_binary(c, fc, fd);
		close(fd);
		return ret;
	}
	if (!(f = fdopen(fd, "r"))) {
		close(fd);
		return cli_fail(c->cmd, c->json, EXIT_USAGE, "%s: %s", fc->path, strerror(errno));
	}
	ret = read_corpus(c, fc, f);
	fclose(f);
	return ret;
}

/* ---- the report ---------------------------------------------------------------- */

static const char *const kind_names[] = {
	[DEVCODE_CUBIN] = "cubin", [DEVCODE_FATBIN] = "fatbin", [DEVCODE_HOST_ELF] = "ELF",
};

/* "cubin sm_90", "ELF, 2 cubins (sm_80 sm_90), 1 PTX" */
static void describe_binary(const struct devcode_file *d, char *out, size_t len)
{
	size_t n = (size_t)snprintf(out, len, "%s", kind_names[d->kind]);

	if (!d->cubins && !d->ptx) {
		snprintf(out + n, len - n, ", no device code (no .nv_fatbin section)");
		return;
	}
	if (d->kind != DEVCODE_CUBIN)
		n += (size_t)snprintf(out + n, len - n, ", %u cubin%s (", d->cubins,
				      d->cubins == 1 ? "" : "s");
	for (unsigned i = 0; i < d->nsms && n < len; i++)
		n += (size_t)snprintf(out + n, len - n, "%ssm_%u", i || d->kind == DEVCODE_CUBIN ?
				      " " : "", d->sms[i]);
	if (d->kind != DEVCODE_CUBIN && n < len)
		n += (size_t)snprintf(out + n, len - n, ")");
	if (d->ptx && n < len)
		snprintf(out + n, len - n, ", %u PTX", d->ptx);
}

static void print_text(const struct check *c, const struct file_check *fc)
{
	char label[64], text[1200];

	if (fc->binary) {
		describe_binary(&fc->dev, text, sizeof text);
		printf("%s: %s, %u kernels\n", fc->path, text, fc->kernels);
	} else if (fc->triton) {
		printf("%s: Triton cache, %u kernels\n", fc->path, fc->kernels);
	} else {
		printf("%s: %s %s, %u kernels\n", fc->path, fc->package[0] ? fc->package : "?",
		       fc->version[0] ? fc->version : "?", fc->kernels);
	}
	for (unsigned i = 0; i < c->prof.count; i++) {
		const struct rule_tally *t = &fc->rules[i];

		if (!t->matched)
			continue;
		profile_rule_label(&c->prof, (int)i, label, sizeof label);
		rule_format(&c->prof.rules[i], text, sizeof text);
		printf("  %s %s\n      %u kernel%s, ", label, text, t->matched,
		       t->matched == 1 ? "" : "s");
		if (!t->misfits) {
			printf("positions and types fit\n");
			continue;
		}
		printf("%u MISFIT:\n", t->misfits);
		for (unsigned j = 0; j < t->misfits && j < SHOWN_MISFITS; j++)
			printf("        %s\n          %s\n", t->shown[j].kernel, t->shown[j].why);
		if (t->misfits > SHOWN_MISFITS)
			printf("        and %u more\n", t->misfits - SHOWN_MISFITS);
	}
	if (fc->nunmatched)
		printf("  no rule owns these (routing or KV-cache names):\n");
	for (unsigned i = 0; i < fc->nunmatched; i++)
		printf("    %s (%u)\n", fc->unmatched[i].name, fc->unmatched[i].count);
}

static void json_file(const struct check *c, struct json *j, const struct file_check *fc)
{
	char label[64], text[1200];

	json_obj_begin(j);
	json_kv_str(j, "path", fc->path);
	json_kv_str(j, "package", fc->package[0] ? fc->package : NULL);
	json_kv_str(j, "version", fc->version[0] ? fc->version : NULL);
	json_kv_str(j, "kind", fc->binary ? kind_names[fc->dev.kind] :
		    fc->triton ? "triton" : "corpus");
	if (fc->binary) {
		json_kv_u64(j, "cubins", fc->dev.cubins);
		json_kv_u64(j, "ptx", fc->dev.ptx);
		json_key(j, "architectures");
		json_arr_begin(j);
		for (unsigned i = 0; i < fc->dev.nsms; i++)
			json_u64(j, fc->dev.sms[i]);
		json_arr_end(j);
	}
	json_kv_u64(j, "kernels", fc->kernels);
	json_key(j, "rules");
	json_arr_begin(j);
	for (unsigned i = 0; i < c->prof.count; i++) {
		const struct rule_tally *t = &fc->rules[i];

		if (!t->matched)
			continue;
		profile_rule_label(&c->prof, (int)i, label, sizeof label);
		rule_format(&c->prof.rules[i], text, sizeof text);
		json_obj_begin(j);
		json_kv_str(j, "rule", label);
		json_kv_str(j, "text", text);
		json_kv_u64(j, "matched", t->matched);
		json_kv_u64(j, "misfits", t->misfits);
		json_key(j, "first_misfits");
		json_arr_begin(j);
		for (unsigned k = 0; k < t->misfits && k < SHOWN_MISFITS; k++) {
			json_obj_begin(j);
			json_kv_str(j, "kernel", t->shown[k].kernel);
			json_kv_str(j, "why", t->shown[k].why);
			json_obj_end(j);
		}
		json_arr_end(j);
		json_obj_end(j);
	}
	json_arr_end(j);
	json_key(j, "unmatched");
	json_arr_begin(j);
	for (unsigned i = 0; i < fc->nunmatched; i++) {
		json_obj_begin(j);
		json_kv_str(j, "name", fc->unmatched[i].name);
		json_kv_u64(j, "kernels", fc->unmatched[i].count);
		json_obj_end(j);
	}
	json_arr_end(j);
	json_obj_end(j);
}

/* ---- the command ----------------------------------------------------------------- */

static int check_files(struct check *c, char **paths, int n)
{
	struct file_check *fcs = calloc((size_t)n, sizeof *fcs);
	int ret = 0;
	struct json j;

	if (!fcs)
		return cli_fail(c->cmd, c->json, EXIT_USAGE, "out of memory");
	for (int i = 0; i < n && !ret; i++) {
		snprintf(fcs[i].path, sizeof fcs[i].path, "%s", paths[i]);
		if (!(fcs[i].rules = calloc(c->prof.count ? c->prof.count : 1, sizeof *fcs[i].rules)))
			ret = cli_fail(c->cmd, c->json, EXIT_USAGE, "out of memory");
		else
			ret = read_file(c, &fcs[i]);
	}
	if (!ret && c->json) {
		json_init(&j, stdout);
		json_obj_begin(&j);
		json_kv_str(&j, "status", c->misfits ? "misfit" : "ok");
		json_kv_str(&j, "profile", c->spec);
		json_kv_u64(&j, "misfits", c->misfits);
		json_key(&j, "files");
		json_arr_begin(&j);
		for (int i = 0; i < n; i++)
			json_file(c, &j, &fcs[i]);
		json_arr_end(&j);
		json_obj_end(&j);
	} else if (!ret) {
		for (int i = 0; i < n; i++)
			print_text(c, &fcs[i]);
		printf("%s: %u misfit%s\n", c->misfits ? "MISFITS" : "OK", c->misfits,
		       c->misfits == 1 ? "" : "s");
	}
	for (int i = 0; i < n; i++) {
		free(fcs[i].rules);
		free(fcs[i].unmatched);
	}
	free(fcs);
	return ret ? ret : c->misfits ? EXIT_BAD : EXIT_OK;
}

static int profile_main(const struct cli_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "profile", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_opts o = { .cmd = cmd };
	struct check c = { .cmd = cmd, .spec = "auto" };
	char err[512];
	int ch, ret;

	if (argc < 2 || strcmp(argv[1], "check")) {
		if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
			cli_print_usage(cmd, stdout);
			return EXIT_OK;
		}
		return cli_fail(cmd, 0, EXIT_USAGE, "%s: want 'moeft profile check FILE...' (moeft "
				"profile --help)", argc < 2 ? "no verb" : argv[1]);
	}
	argc--, argv++;
	while ((ch = cli_getopt(&o, argc, argv, opts)) != -1) {
		switch (ch) {
		case 'p': c.spec = optarg; break;
		case 'j': o.json = 1; break;
		case 'h': cli_print_usage(cmd, stdout); return EXIT_OK;
		}
	}
	c.json = o.json;
	if (optind == argc)
		cli_usage_error(&o, "no FILE: give corpus files (tests/engines/*.tsv), cubins, "
				"fatbins or libraries");
	if ((ret = cli_parse_done(&o)))
		return ret;
	if (profile_load(c.spec, &c.prof, err, sizeof err) < 0)
		return cli_fail(cmd, c.json, EXIT_USAGE, "--profile %s: %s", c.spec, err);
	ret = check_files(&c, argv + optind, argc - optind);
	profile_free(&c.prof);
	return ret;
}

const struct cli_command cmd_profile = {
	.name = "profile",
	.summary = "check the engine profiles against real kernels' parameter tables",
	.run = profile_main,
	.usage =
	"Usage: moeft profile check [--profile SPEC] [--json] FILE...\n"
	"\n"
	"Each FILE is an engine corpus (tests/engines/README.md; made from a\n"
	"package's cubins by tools/engines/corpus.sh), or device code itself: a\n"
	"cubin, a fatbin, or a shared library or program with a .nv_fatbin\n"
	"section (an engine's _C.abi3.so), its cubins compressed or not (zstd and\n"
	"LZ4 through the system's libzstd.so.1 and liblz4.so.1), or a directory:\n"
	"Triton's cache (~/.triton/cache; or its corpus, tests/engines/triton/),\n"
	"each entry's kernel read from its IR (.source or .ttir) and its cubin\n"
	"(or a corpus's params).  Their kernels have parameter tables; in a\n"
	"binary a kernel is counted once, its sm_90 table read first and another\n"
	"architecture's checked where it differs.\n"
	"Every kernel goes to the rule that owns it, as the preload decides (the\n"
	"first rule whose pattern matches its mangled name),\n"
	"and the rule's positions are checked against the kernel's table: every\n"
	"parameter it reads exists, a pointer is 8 bytes, an integer 1, 2, 4 or 8\n"
	"(:i32 and :i64 exactly 4 and 8), and a field lies inside its struct;\n"
	"a triton= rule is first placed on each Triton kernel from its IR, as\n"
	"the preload places it.\n"
	"Prints per file each rule that owns kernels, how many, and those it\n"
	"misfits; then the kernels no rule owns whose names say routing or KV\n"
	"cache (topk, gating, router, cache, ...), by name.\n"
	"\n"
	"  -p, --profile SPEC  the rules: a built-in name (auto, vllm, sglang, torch,\n"
	"                      llamacpp) or a profile file, as MOEFT_PROFILE takes\n"
	"                      (default auto: every built-in)\n"
	"  -j, --json          print one JSON object instead\n"
	"  -h, --help          show this help\n"
	"\n"
	"Exit status: 0 every rule fits the kernels it owns, 1 a rule misfits one\n"
	"(it would read the wrong bytes), 2 usage, or a FILE that is neither a\n"
	"corpus nor device code read to its end.\n",
};

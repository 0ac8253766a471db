/*
 * corpus.h - reading an engine corpus file (tests/engines/README.md): the
 * kernels of one released package version, each with its mangled and
 * demangled name and its parameter table, as tools/engines/corpus.sh
 * wrote them from the package's cubins.
 *
 * A corpus file is read from disk, so every line is checked: a kernel's
 * table must list ordinals 0..n-1 in order, offsets rising, sizes of 1 to
 * CORPUS_PARAM_BYTES bytes, all inside CUDA's parameter space.
 */
#ifndef MOEFT_CORPUS_H
#define MOEFT_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#define CORPUS_MAX_PARAMS 1024		/* ordinals 0..1023 */
#define CORPUS_PARAM_BYTES 32764	/* CUDA's parameter space (12.1+) */
#define CORPUS_LINE_MAX 65536		/* bytes of one line, newline included */

struct corpus_kernel {
	const char *lib, *mangled;	/* into the line parsed */
	const char *demangled;		/* a kernel line's; NULL on a disagree line */
	const char *sms;		/* a disagree line's architectures, else NULL */
	int known;			/* the table is known ("?": its cubin has none) */
	unsigned nparams;
	uint32_t sizes[CORPUS_MAX_PARAMS];	/* bytes, by ordinal */
};

/*
 * One line of a corpus file, its newline removed, split in place (tabs
 * become NULs).  Returns 1 a kernel (in *k), 2 another table of a kernel
 * listed (a "disagree" line: the cubins of other architectures), 0
 * another known line (a comment, "lib", "sm", "others"), or -1 with why
 * in `why`.
 */
int corpus_parse_line(char *line, struct corpus_kernel *k, char *why, size_t len);

/* "# package: NAME" and "# version: V" header lines: the value (into the
 * line), or NULL. */
const char *corpus_header(char *line, const char *field);

#endif

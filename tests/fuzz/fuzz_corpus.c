/*
 * fuzz_corpus.c - libFuzzer target: read any bytes as the lines of an
 * engine corpus file (tools/corpus.h), as moeft profile check does.
 *
 * ASan and UBSan watch the parser; the target checks that a refusal says
 * why, and that what is accepted holds what the format promises: a
 * kernel's names, a table of ordinals 0..n-1 with sizes inside CUDA's
 * parameter space (or none, or unknown).  Seeds: the files of
 * tests/engines.
 */
#include <stdlib.h>
#include <string.h>

#include "corpus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct corpus_kernel k;

static void check_line(char *line)
{
	char why[200] = "";
	uint64_t bytes = 0;
	int r = corpus_parse_line(line, &k, why, sizeof why);

	if (r < 0) {
		if (!why[0])
			abort();
		return;
	}
	if (r == 0)
		return;
	if (r > 2 || !k.lib || !*k.lib || !k.mangled || !*k.mangled ||
	    (r == 1) != (k.demangled != NULL) || (r == 2) != (k.sms != NULL) ||
	    k.nparams > CORPUS_MAX_PARAMS || (!k.known && k.nparams))
		abort();
	for (unsigned i = 0; i < k.nparams; i++) {
		if (!k.sizes[i] || k.sizes[i] > CORPUS_PARAM_BYTES)
			abort();
		bytes += k.sizes[i];
	}
	if (bytes > CORPUS_PARAM_BYTES)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *line, *nl;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	for (line = text; line; line = nl) {
		if ((nl = strchr(line, '\n')))
			*nl++ = '\0';
		check_line(line);
	}
	free(text);
	return 0;
}

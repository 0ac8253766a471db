/*
 * fuzz_triton.c - libFuzzer target: read any bytes as the Triton IR the
 * preload finds in Triton's cache (preload/triton.h), for the kernel
 * named on the first line of the input.
 *
 * ASan and UBSan watch the reader on an exact-size copy; the target checks
 * that a refusal says why, that an accepted signature holds at most
 * TRITON_MAX_ARGS identifiers of known sizes (element types only for
 * pointers, identifiers too), and that reading is a pure
 * function of the bytes.  Seeds: tests/engines/triton (each IR line, with
 * the kernel's name before it).
 */
#include <stdlib.h>
#include <string.h>

#include "triton.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int valid_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= TRITON_NAME_MAX)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_'))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct triton_sig a, b;
	const uint8_t *nl = memchr(data, '\n', size < 200 ? size : 200);
	char kernel[201], why[256], why2[256];
	size_t klen = nl ? (size_t)(nl - data) : 0, len = size - (nl ? klen + 1 : 0);
	char *text = malloc(len ? len : 1);
	int r;

	if (!text)
		return 0;
	memcpy(kernel, data, klen);
	kernel[klen] = '\0';
	memcpy(text, data + (size - len), len);
	why[0] = '\0';
	r = triton_sig_parse(text, len, kernel, &a, why, sizeof why);
	if (r < 0 && !why[0])
		abort();
	if (r == 0) {
		if (a.n > TRITON_MAX_ARGS)
			abort();
		for (unsigned i = 0; i < a.n; i++)
			if (!valid_name(a.name[i]) || !(a.size[i] == 1 || a.size[i] == 2 ||
							a.size[i] == 4 || a.size[i] == 8) ||
			    (a.elem[i][0] && (a.size[i] != 8 || strlen(a.elem[i]) >= TRITON_ELEM_MAX ||
					      (!valid_name(a.elem[i]) &&
					       strcmp(a.elem[i], TRITON_ELEM_OTHER)))))
				abort();
	}
	if (triton_sig_parse(text, len, kernel, &b, why2, sizeof why2) != r ||
	    (r == 0 && (a.n != b.n || memcmp(a.size, b.size, a.n) ||
			memcmp(a.name, b.name, sizeof a.name[0] * a.n) ||
			memcmp(a.elem, b.elem, sizeof a.elem[0] * a.n))) ||
	    (r < 0 && strcmp(why, why2)))
		abort();
	free(text);
	return 0;
}

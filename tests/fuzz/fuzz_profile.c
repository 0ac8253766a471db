/*
 * fuzz_profile.c - libFuzzer target: parse any bytes as an engine profile
 * (preload/profile.h), as the preload reads a MOEFT_PROFILE file.
 *
 * ASan and UBSan watch the parser; the target checks that a refusal says
 * why and leaves no rule, that every rule accepted writes back (rule_format)
 * to text that parses to the same rule, and that rule_fits and rule_eval
 * take any parameter table the input's bytes make without reading past
 * it.  Seeds: tests/fuzz/profile-seeds (the built-in profiles).
 */
#include <stdlib.h>
#include <string.h>

#include "profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NPARAMS 16

static void check_rule(const struct rule *r, const uint8_t *data, size_t size)
{
	static const unsigned grid[3] = { 3, 1, 1 }, block[3] = { 32, 1, 1 };
	struct profile again = { 0 };
	uint32_t sizes[NPARAMS];
	void *args[NPARAMS];
	struct rule_hit hit;
	char text[2048], back[2048], why[200], err[300];
	unsigned n = size ? (unsigned)(size % (NPARAMS + 1)) : 0;

	if (rule_format(r, text, sizeof text) >= (int)sizeof text)
		return;
	if (profile_parse(text, "fuzz:formatted", &again, err, sizeof err) < 0 ||
	    again.count != 1)
		abort();
	rule_format(&again.rules[0], back, sizeof back);
	if (strcmp(text, back))
		abort();
	profile_free(&again);
	for (unsigned i = 0; i < n; i++) {
		sizes[i] = (uint32_t)(data[i % size] % 64 + 1);
		if (!(args[i] = calloc(1, sizes[i])))
			abort();
	}
	if (rule_fits(r, sizes, n, why, sizeof why) < 0 && !why[0])
		abort();
	(void)rule_eval(r, args, sizes, n, grid, block, &hit);
	for (unsigned i = 0; i < n; i++)
		free(args[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct profile p = { 0 };
	char *text = malloc(size + 1), err[300] = "";

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (profile_parse(text, "fuzz", &p, err, sizeof err) < 0) {
		if (!err[0] || p.count || p.rules)
			abort();
	} else {
		for (unsigned i = 0; i < p.count; i++)
			check_rule(&p.rules[i], data, size);
	}
	profile_free(&p);
	free(text);
	return 0;
}

/*
 * fuzz_plan.c - libFuzzer target: parse any text as a restore plan
 * (preload/plan.h), and as a server's restore set file.
 *
 * The input is the plan file's bytes up to its first NUL, as
 * restore_plan_load hands them over (it refuses a file holding one).
 * ASan and UBSan watch the parser (and LeakSanitizer its pools); the
 * target checks that a refusal names its line and leaves no pools, and
 * that whatever is accepted is written back by the writer, which parses
 * to the same plan and is its own fixed point.
 */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char text[RESTORE_PLAN_MAX + 1], once[RESTORE_PLAN_MAX + 1], twice[RESTORE_PLAN_MAX + 1];
static struct restore_plan p, q;

/* The pools of p and q hold the same fields and lost chunks. */
static int same_pools(void)
{
	for (unsigned i = 0; i < p.npools; i++) {
		struct restore_pool a = p.pools[i], b = q.pools[i];

		if (a.nlost != b.nlost ||
		    (a.nlost && memcmp(a.lost, b.lost, a.nlost * sizeof *a.lost) != 0))
			return 0;
		a.lost = b.lost = NULL;
		if (memcmp(&a, &b, sizeof a) != 0)
			return 0;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[200];
	int n;

	if (size > RESTORE_PLAN_MAX)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	/* The set file of a server's restore (plan.h), the same text. */
	if (restore_set_lists(text, "a.dev") == 1 && restore_set_lists(text, "") < 0)
		abort();
	if (restore_plan_parse(text, &p, err, sizeof err) < 0) {
		if (strncmp(err, "line ", 5) != 0 || p.pools || p.npools)
			abort();
		return 0;
	}
	if (p.npools > KVS_MAX_POOLS)
		abort();
	n = restore_plan_format(&p, once, sizeof once, err, sizeof err);
	if (n < 0 || (size_t)n > strlen(text) || restore_plan_parse(once, &q, err, sizeof err) < 0)
		abort();
	if (restore_plan_format(&q, twice, sizeof twice, err, sizeof err) != n ||
	    strcmp(once, twice) != 0 || q.npools != p.npools || q.log_id != p.log_id ||
	    q.window != p.window || q.first_step != p.first_step || q.last_step != p.last_step ||
	    !same_pools())
		abort();
	restore_plan_free(&p);
	restore_plan_free(&q);
	return 0;
}

/*
 * requests_log.c - a scheduler's log of known requests, committed through
 * the public C API (run under LD_PRELOAD=libmoeft.so, MOEFT_WAL set), for
 * resubmit.sh: one window, steps 0-3, of
 *   "a"  prompt 1 2 3, generated 4 5, params max_tokens 10: 8 left
 *   "b"  finished at the window (not sent again)
 *   "c"  prompt 7, generated 8 9, params max_tokens 2: its budget spent
 * Exit status 0 when the window is committed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "moeft.h"

int main(void)
{
	static const uint32_t a[5] = { 1, 2, 3, 4, 5 }, b[2] = { 6, 6 }, c[3] = { 7, 8, 9 };
	static const uint32_t blocks[3] = { 5, 1, 2 };
	static const uint32_t *const groups[1] = { blocks };
	static const size_t two[1] = { 2 };
	static const char pa[] = "{\"max_tokens\":10,\"temperature\":0,\"ignore_eos\":true}",
			  pc[] = "{\"max_tokens\":2}";
	const struct moeft_request r[3] = {
		{ .id = "a", .id_len = 1, .tokens = a, .ntokens = 5, .nprompt = 3, .ncomputed = 4,
		  .block_tokens = 2, .ngroups = 1, .blocks = groups, .nblocks = two,
		  .params = pa, .params_len = sizeof pa - 1 },
		{ .id = "b", .id_len = 1, .tokens = b, .ntokens = 2, .nprompt = 1, .ncomputed = 2,
		  .block_tokens = 2, .ngroups = 1, .blocks = groups, .nblocks = two, .finished = 1 },
		{ .id = "c", .id_len = 1, .tokens = c, .ntokens = 3, .nprompt = 1, .ncomputed = 2,
		  .block_tokens = 2, .ngroups = 1, .blocks = groups, .nblocks = two,
		  .params = pc, .params_len = sizeof pc - 1 },
	};
	int (*commit)(uint64_t, uint32_t, const struct moeft_request *, size_t);
	void *sym = dlsym(RTLD_DEFAULT, "moeft_commit_requests");
	int ret;

	if (!sym) {
		fprintf(stderr, "requests_log: libmoeft.so is not preloaded\n");
		return 2;
	}
	memcpy(&commit, &sym, sizeof sym);
	if ((ret = commit(0, 4, r, 3)) != 0) {
		fprintf(stderr, "requests_log: moeft_commit_requests: %d\n", ret);
		return 1;
	}
	return 0;
}

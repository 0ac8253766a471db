/*
 * requests.c - an engine adapter's windows (requests.h): the requests its
 * scheduler had running at a step, as REQUEST records committed together.
 *
 * Every request is checked and encoded before the log is touched; then,
 * under the log's order lock (allocs.h) so that no other producer's
 * records ride along, the records are appended and the window committed,
 * or all of it dropped.
 */
#include <errno.h>
#include <stdlib.h>

#include "allocs.h"
#include "msg.h"
#include "record.h"
#include "reqindex.h"
#include "requests.h"
#include "start.h"
#include "wal.h"

/* r in the record's terms: 0, or -1 when a count is past what the record
 * can say (its codec checks the rest). */
static int to_record(const struct moeft_request *m, uint64_t step, struct rec_request *r)
{
	unsigned g;

	if (!m->id || m->id_len > REQUEST_MAX_ID || m->ntokens > REQUEST_MAX_TOKENS ||
	    !m->tokens || m->ngroups > REQUEST_MAX_GROUPS || !m->blocks || !m->nblocks ||
	    m->params_len > REQUEST_MAX_PARAMS || (m->params_len && !m->params))
		return -1;
	*r = (struct rec_request){ .step = step, .ntokens = (uint32_t)m->ntokens,
				   .nprompt = m->nprompt > m->ntokens ? UINT32_MAX
								      : (uint32_t)m->nprompt,
				   .ncomputed = m->ncomputed > m->ntokens ? UINT32_MAX
									  : (uint32_t)m->ncomputed,
				   .block_tokens = m->block_tokens, .id_len = (uint8_t)m->id_len,
				   .ngroups = (uint8_t)m->ngroups,
				   .flags = m->finished ? REQUEST_FINISHED : 0,
				   .id = (const uint8_t *)m->id,
				   .params_len = (uint32_t)m->params_len,
				   .params = (const uint8_t *)m->params };
	for (g = 0; g < m->ngroups; g++) {
		if (m->nblocks[g] > REQUEST_MAX_TOKENS || (m->nblocks[g] && !m->blocks[g]))
			return -1;
		r->nblocks[g] = (uint32_t)m->nblocks[g];
	}
	return 0;
}

/* The n requests encoded one after the other into a new buffer, each
 * length in lens[]: the buffer, or NULL with *err -EINVAL or -ENOMEM. */
static uint8_t *encode_all(const struct moeft_request *reqs, size_t n, uint64_t step,
			   uint32_t *lens, int *err)
{
	const uint8_t **at_of;
	struct rec_request r;
	size_t i, total = 0, at = 0, len;
	uint8_t *buf;

	*err = -EINVAL;
	for (i = 0; i < n; i++) {
		if (to_record(&reqs[i], step, &r) < 0 || !(len = rec_request_size(&r)) ||
		    len > UINT32_MAX || total > SIZE_MAX - len)
			return NULL;
		lens[i] = (uint32_t)len;
		total += len;
	}
	*err = -ENOMEM;
	if (!(buf = malloc(total ? total : 1)) || !(at_of = malloc((n ? n : 1) * sizeof *at_of))) {
		free(buf);
		return NULL;
	}
	for (i = 0; i < n; i++) {
		to_record(&reqs[i], step, &r);
		at_of[i] = buf + at;
		at += rec_request_encode(buf + at, total - at, &r, reqs[i].tokens, reqs[i].blocks);
	}
	/* What a restore could not index (two of one id) is refused now. */
	switch (reqindex_indexable(at_of, lens, n)) {
	case 1:
		free(at_of);
		return buf;
	case 0:
		*err = -EINVAL;
	}
	free(at_of);
	free(buf);
	return NULL;
}

int requests_commit(uint64_t first_step, uint32_t steps, const struct moeft_request *reqs,
		    size_t n)
{
	struct rec_window_steps ws = { .first_step = first_step, .steps = steps,
				       .flags = WINDOW_REQUESTS };
	uint8_t extra[WINDOW_STEPS_SIZE], *buf;
	uint32_t *lens;
	struct wal *w;
	size_t i, at = 0;
	int64_t r = 0;
	int err;

	if (!steps || first_step > UINT64_MAX - steps || (n && !reqs) || n > REQINDEX_MAX_REQUESTS)
		return -EINVAL;
	if (!(w = preload_log()))
		return -ENODEV;
	if (!(lens = malloc((n ? n : 1) * sizeof *lens)))
		return -ENOMEM;
	if (!(buf = encode_all(reqs, n, first_step + steps - 1, lens, &err))) {
		free(lens);
		return err;
	}
	rec_window_steps_encode(extra, &ws);
	allocs_begin();
	for (i = 0; i < n && r >= 0; at += lens[i++])
		r = wal_append(w, WAL_REC_REQUEST, buf + at, lens[i]);
	if (r >= 0)
		r = wal_commit(w, extra, sizeof extra, NULL);
	if (r < 0)
		wal_abort(w);	/* half a window must not ride along with the next */
	allocs_end();
	free(buf);
	free(lens);
	if (r < 0) {
		msg_log(WAL_LOG_WARN, "the engine's requests of steps %llu-%llu were not "
			"committed: %s", (unsigned long long)first_step,
			(unsigned long long)(first_step + steps - 1), wal_strerror((int)r));
		return wal_errno((int)r);
	}
	return 0;
}

/*
 * requests.h - an engine adapter's windows: moeft_commit_requests of
 * include/moeft.h (its contract there), over this process's log.
 */
#ifndef MOEFT_REQUESTS_H
#define MOEFT_REQUESTS_H

#include <stddef.h>
#include <stdint.h>

#include "moeft.h"

/* moeft_commit_requests, once the preload's start has been asked for. */
int requests_commit(uint64_t first_step, uint32_t steps, const struct moeft_request *reqs,
		    size_t n);

#endif

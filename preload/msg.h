/*
 * msg.h - the preload's messages: one line "moeft: ..." on stderr per
 * call, filtered by MOEFT_LOG.
 */
#ifndef MOEFT_MSG_H
#define MOEFT_MSG_H

#include <stdatomic.h>

/* Lines at level (enum wal_log_level) and below are written; warn until
 * the configuration is read. */
void msg_set_level(int level);
int msg_level(void);

void msg_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line of the log library's or the shim's, as it is. */
void msg_line(int level, const char *line);

/* True the first time a condition is reported (said starts false). */
static inline int msg_first(atomic_bool *said)
{
	return !atomic_exchange_explicit(said, 1, memory_order_relaxed);
}

#endif

/*
 * dispatch.h - the events the shim reports (shim.h), each handed to the
 * modules that own what it concerns, and the launch path's rule
 * evaluation.  The table is the shim's shim_events_above, bound when
 * libmoeft.so is linked.
 */
#ifndef MOEFT_DISPATCH_H
#define MOEFT_DISPATCH_H

#include "profile.h"

/* At start, before events flow: the rules, and whether MOEFT_KV selectors
 * may make new allocations pools.  0, or -1 without memory. */
int dispatch_init(const struct profile *prof, int kv_selectors);
/* Drop what dispatch_init made (a start that failed). */
void dispatch_fini(void);

struct dispatch_stats {
	unsigned long long graph_launches, capture_begin, capture_end;
};

void dispatch_stats(struct dispatch_stats *st);
/* Launches that rule `rule` hit. */
unsigned long long dispatch_rule_hits(unsigned rule);

#endif

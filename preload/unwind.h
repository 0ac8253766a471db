/*
 * unwind.h - libunwind, loaded privately.
 *
 * libunwind.so.8 exports _Unwind_* functions.  Linked into a preloaded
 * library it would enter the process's global scope ahead of libgcc_s and
 * take over the application's C++ exception unwinding.  So it is opened
 * with RTLD_LOCAL and reached through these calls only.
 */
#ifndef MOEFT_UNWIND_H
#define MOEFT_UNWIND_H

#include <stdint.h>

/* Open libunwind now (not async-signal-safe; the crash handler needs it
 * done before a signal comes).  0, or -1 when it is not available. */
int unwind_load(void);

/* Return addresses of the caller's stack, innermost first, like
 * unw_backtrace(); 0 when libunwind is not available. */
int unwind_backtrace(void **ip, int max);

/* Return addresses from the interrupted state of a signal handler's
 * ucontext outwards.  Async-signal-safe once unwind_load() succeeded. */
uint32_t unwind_signal_frames(void *ucontext, uint64_t *ip, uint32_t max);

#endif

/*
 * crash.h - one CRASH record in the log when the process dies by a signal.
 */
#ifndef MOEFT_CRASH_H
#define MOEFT_CRASH_H

struct wal;

/*
 * Catch SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL and SIGTERM: the first one
 * delivered writes one WAL_REC_CRASH record (signal, code, address, pid, a
 * backtrace) to w, then the disposition that was there before is put back
 * and the signal delivered to it, so the application's own handlers and
 * core dumps are unchanged.  A SIGBUS inside a mapping of the log or the
 * KV store (its file truncated under the process) is no crash: the
 * process runs on without capture, after one line (media_fault), unless
 * it is restoring and its KV is not copied in yet (then status 3).  Call
 * once, with the log open, from the preload's start; later calls do
 * nothing.  w must stay mapped for the
 * life of the process (a child of fork() never writes it).
 */
void crash_install(struct wal *w);

#endif

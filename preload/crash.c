/*
 * crash.c - the crash handlers: a CRASH record with a backtrace, then the
 * application's own disposition.
 *
 * Everything in the handler is async-signal-safe: the record is built on
 * the stack, libunwind (loaded at install, see unwind.h) unwinds locally
 * without allocating, and wal_append_crash only tries the log's lock.  The
 * record is a courtesy to whoever reads the log: recovery never depends on
 * it, since SIGKILL, an OOM kill or a power cut leave no chance to write
 * one, and a handler that finds the log busy gives up.  A SIGTERM that
 * ends the process by its default action is a stop someone asked for:
 * it writes the writer's EXIT record instead (wal_end_signal), so the
 * log's state is not held for a restore (wal/held.h).
 *
 * Chaining: each handler is used once (SA_RESETHAND by hand).  It puts back
 * the disposition it replaced, then lets the signal reach it: a fault of an
 * instruction (SIGSEGV, SIGBUS, SIGFPE, SIGILL sent by the kernel) returns
 * and faults again; anything else (abort(), kill, SIGTERM) is raised again
 * and delivered once the handler returns, since it is blocked until then.
 * An application that installs its own handler after ours simply replaces
 * it, and no record is written for that signal.
 *
 * One SIGBUS is no crash: a fault in a mapping of the log or the KV store,
 * whose file was truncated under the process (a full disk, a careless
 * cleanup).  media_fault puts zero pages there, so the access runs again
 * and succeeds; capture stops for good with one line, and the server runs
 * on.  The handler stays in place for the next one.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "crash.h"
#include "media.h"
#include "msg.h"
#include "record.h"
#include "resume.h"
#include "shim.h"
#include "unwind.h"
#include "wal.h"

static const int crash_signals[] = { SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTERM };
#define NSIG_CAUGHT (sizeof crash_signals / sizeof crash_signals[0])

static struct {
	struct wal *w;
	pid_t pid;                        /* the process that owns w */
	struct sigaction prev[NSIG_CAUGHT];
	atomic_bool installed;
	atomic_bool written;              /* one record per process */
	atomic_bool lost;                 /* one line for a lost medium */
} crash;

/*
 * An alternate stack for the thread that starts the preload, when it has
 * none: a stack overflow there can still be recorded.  Other threads
 * handle on their own stack, and an overflow there dies by the default
 * SIGSEGV without a record (the kernel cannot deliver the signal).
 */
static _Alignas(16) unsigned char altstack[64 * 1024];

static int slot_of(int sig)
{
	unsigned i;

	for (i = 0; i < NSIG_CAUGHT; i++)
		if (crash_signals[i] == sig)
			return (int)i;
	return -1;
}

/* Whether the kernel raised sig for the interrupted instruction
 * (si_code > 0) rather than someone sending it (kill, raise, abort). */
static int from_instruction(int sig, const siginfo_t *si)
{
	return si && si->si_code > 0 && sig != SIGTERM && sig != SIGABRT;
}

static void write_record(int sig, const siginfo_t *si, void *uc)
{
	uint8_t buf[CRASH_HDR_SIZE + 8 * CRASH_MAX_FRAMES];
	struct rec_crash c;
	size_t len;

	c.signo = sig;
	c.code = si ? si->si_code : 0;
	/* si_addr means something only for a fault (for a kill it overlays
	 * the sender's pid). */
	c.addr = from_instruction(sig, si) ? (uint64_t)(uintptr_t)si->si_addr : 0;
	c.pid = (uint32_t)crash.pid;
	c.nframes = uc ? unwind_signal_frames(uc, c.frames, CRASH_MAX_FRAMES) : 0;
	len = rec_crash_encode(buf, sizeof buf, &c);
	(void)wal_append_crash(crash.w, buf, (uint32_t)len);
}

/* A SIGTERM that ends the process (no handler of the application's): a
 * stop that was asked for, not a crash.  The log says the writer ended
 * (EXIT), so a later run does not hold its state for a restore (held.h). */
static int asked_to_stop(int sig, int slot)
{
	return sig == SIGTERM && !(crash.prev[slot].sa_flags & SA_SIGINFO) &&
	       crash.prev[slot].sa_handler == SIG_DFL;
}

static void write_exit(void)
{
	uint8_t buf[EXIT_PAYLOAD_SIZE];

	rec_exit_encode(buf, &(struct rec_exit){ .pid = (uint32_t)crash.pid });
	(void)wal_end_signal(crash.w, buf, sizeof buf);
}

/* Append s to the line at *p, short of end (no stdio in a handler). */
static void put(char **p, const char *end, const char *s)
{
	while (*s && *p < end)
		*(*p)++ = *s++;
}

/* A medium lost under the process: capture off, one line. */
static void lost(const char *path)
{
	char line[512], *p = line, *end = line + sizeof line - 1;

	int refuse = resume_pending();

	shim_events_off();
	if (atomic_exchange(&crash.lost, 1) || (!refuse && msg_level() < WAL_LOG_ERROR))
		return;
	put(&p, end, "moeft: ");
	put(&p, end, path);
	put(&p, end, ": truncated under this process (SIGBUS in its mapping); ");
	/* Fail closed in restore mode: nothing can copy the KV in any more. */
	put(&p, end, refuse ? "the restored KV was not copied in yet: stopping (status 3)" :
	    "capture stopped, running un-instrumented");
	*p++ = '\n';
	(void)!write(STDERR_FILENO, line, (size_t)(p - line));
	if (refuse)
		_exit(RESUME_EXIT_REFUSED);
}

static void on_crash(int sig, siginfo_t *si, void *uc)
{
	int saved = errno, i = slot_of(sig);
	const char *path;

	if (i < 0)
		return;
	if (sig == SIGBUS && from_instruction(sig, si) && (path = media_fault(si->si_addr))) {
		lost(path);
		errno = saved;
		return;
	}
	/* Never the parent's log from a child of fork() (its handle is gone),
	 * and one record even when several threads crash at once. */
	if (getpid() == crash.pid && !atomic_exchange(&crash.written, 1)) {
		if (asked_to_stop(sig, i))
			write_exit();
		else
			write_record(sig, si, uc);
	}
	sigaction(sig, &crash.prev[i], NULL);
	/* A faulting instruction runs (and faults) again on return. */
	if (!from_instruction(sig, si))
		raise(sig);
	errno = saved;
}

void crash_install(struct wal *w)
{
	struct sigaction sa;
	stack_t ss;
	unsigned i;

	if (!w || atomic_exchange(&crash.installed, 1))
		return;
	unwind_load(); /* now: dlopen is no call for a signal handler */
	crash.w = w;
	crash.pid = getpid();
	if (sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_DISABLE)) {
		ss = (stack_t){ .ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0 };
		sigaltstack(&ss, NULL);
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_crash;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	/* Ours goes in and the previous one comes out in one call.  A signal
	 * the application ignores stays ignored: it is no crash. */
	for (i = 0; i < NSIG_CAUGHT; i++)
		if (sigaction(crash_signals[i], &sa, &crash.prev[i]) == 0 &&
		    !(crash.prev[i].sa_flags & SA_SIGINFO) && crash.prev[i].sa_handler == SIG_IGN)
			sigaction(crash_signals[i], &crash.prev[i], NULL);
}

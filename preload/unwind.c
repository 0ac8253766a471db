/*
 * unwind.c - libunwind through dlopen(RTLD_LOCAL); see unwind.h.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "unwind.h"

/* libunwind.h maps unw_step and friends to versioned names with macros;
 * stringifying the macro gives the symbol to look up. */
#define SYMBOL(f) SYMBOL_(f)
#define SYMBOL_(f) #f

static struct {
	int (*backtrace)(void **, int);
	int (*init_local2)(unw_cursor_t *, unw_context_t *, int);
	int (*step)(unw_cursor_t *);
	int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
} unw;
static pthread_once_t unw_once = PTHREAD_ONCE_INIT;
static int unw_ok;

static void open_libunwind(void)
{
	void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);

	if (!h)
		return;
	*(void **)&unw.backtrace = dlsym(h, "unw_backtrace");
	*(void **)&unw.init_local2 = dlsym(h, SYMBOL(unw_init_local2));
	*(void **)&unw.step = dlsym(h, SYMBOL(unw_step));
	*(void **)&unw.get_reg = dlsym(h, SYMBOL(unw_get_reg));
	unw_ok = unw.backtrace && unw.init_local2 && unw.step && unw.get_reg;
}

int unwind_load(void)
{
	pthread_once(&unw_once, open_libunwind);
	return unw_ok ? 0 : -1;
}

int unwind_backtrace(void **ip, int max)
{
	if (unwind_load() < 0)
		return 0;
	return unw.backtrace(ip, max);
}

uint32_t unwind_signal_frames(void *ucontext, uint64_t *ip, uint32_t max)
{
	unw_cursor_t cur;
	unw_word_t reg;
	uint32_t n = 0;

	/* No pthread_once here: not async-signal-safe, and a handler only
	 * runs after crash_install() loaded the library. */
	if (!unw_ok)
		return 0;
	/* The kernel's ucontext is the interrupted state: start there, not in
	 * the handler, so the first frame is the faulting instruction. */
	if (unw.init_local2(&cur, (unw_context_t *)ucontext, UNW_INIT_SIGNAL_FRAME) < 0)
		return 0;
	do {
		if (unw.get_reg(&cur, UNW_REG_IP, &reg) < 0 || !reg)
			break;
		ip[n++] = (uint64_t)reg;
	} while (n < max && unw.step(&cur) > 0);
	return n;
}

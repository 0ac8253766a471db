/*
 * dlsym.c - our dlsym, in front of the C library's.
 *
 * Triton finds cuLaunchKernelEx with dlsym(dlopen("libcuda.so.1"), ...),
 * and cudart finds cuGetProcAddress the same way: symbol binding never
 * sees those calls, only a dlsym of our own does.  For an explicit handle
 * and the name of a hooked symbol we answer with our wrapper (real.c
 * decides, and remembers what the real lookup found); every other lookup
 * is the C library's, untouched.
 *
 * Untouched includes the caller.  glibc's dlsym resolves RTLD_NEXT (and
 * RTLD_DEFAULT's scope) relative to the object that called it, which it
 * takes from its return address: a C wrapper that calls the real dlsym
 * would make every RTLD_NEXT lookup in the process relative to
 * libmoeft.so.  So the exported dlsym is a few instructions of assembly
 * that ask route() what to do, then either return its answer or jump (not
 * call) to the real dlsym with the caller's return address still on the
 * stack.
 */
#include <dlfcn.h>
#include <stdatomic.h>

#include "hooks.h"

/* Where the real dlsym was first versioned: glibc 2.34 moved it into libc. */
#if defined(__x86_64__)
#define DLSYM_BASE_VERSION "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define DLSYM_BASE_VERSION "GLIBC_2.17"
#else
#error "dlsym trampoline: only x86_64 and aarch64 are supported"
#endif

typedef void *(*dlsym_fn)(void *, const char *);

static _Atomic(void *) real_dlsym;

static void *find_real_dlsym(void)
{
	void *p = atomic_load_explicit(&real_dlsym, memory_order_acquire);

	if (p)
		return p;
	p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!p)
		p = dlvsym(RTLD_NEXT, "dlsym", DLSYM_BASE_VERSION);
	if (p)
		atomic_store_explicit(&real_dlsym, p, memory_order_release);
	else
		shim_log(SHIM_LOG_ERROR, "cannot find the C library's dlsym; dlsym returns NULL");
	return p;
}

void *shim_real_dlsym(void *handle, const char *name)
{
	void *p = find_real_dlsym();
	dlsym_fn f;

	if (!p)
		return NULL;
	memcpy(&f, &p, sizeof f);
	return f(handle, name);
}

/* What the trampoline does: jump to `jump` with the caller's arguments, or
 * (jump == NULL) return `value`.  Two pointers come back in two registers
 * on both ABIs. */
struct route {
	void *jump;
	void *value;
};

struct route moeft_dlsym_route(void *handle, const char *name) __attribute__((used));

struct route moeft_dlsym_route(void *handle, const char *name)
{
	struct route r = { find_real_dlsym(), NULL };
	int id;

	if (!r.jump || handle == RTLD_DEFAULT || handle == RTLD_NEXT || !name ||
	    (id = shim_export_id(name)) < 0)
		return r;
	/* An explicit handle: the lookup does not depend on who asks, and
	 * its outcome (dlerror included) is the caller's. */
	r.value = shim_dlsym((unsigned)id, handle);
	r.jump = NULL;
	return r;
}

#if defined(__x86_64__)
#if defined(__CET__)
#define ENDBR "endbr64\n"
#else
#define ENDBR ""
#endif
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	"dlsym:\n"
	".cfi_startproc\n"
	ENDBR
	"push %rdi\n"
	".cfi_adjust_cfa_offset 8\n"
	"push %rsi\n"
	".cfi_adjust_cfa_offset 8\n"
	"sub $8, %rsp\n"                /* 16-byte alignment at the call */
	".cfi_adjust_cfa_offset 8\n"
	"call moeft_dlsym_route\n"
	"add $8, %rsp\n"
	".cfi_adjust_cfa_offset -8\n"
	"pop %rsi\n"
	".cfi_adjust_cfa_offset -8\n"
	"pop %rdi\n"
	".cfi_adjust_cfa_offset -8\n"
	"test %rax, %rax\n"
	"jz 1f\n"
	"jmp *%rax\n"
	"1:\n"
	"mov %rdx, %rax\n"
	"ret\n"
	".cfi_endproc\n"
	".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, %function\n"
	".p2align 2\n"
	"dlsym:\n"
	".cfi_startproc\n"
	"hint #34\n"                    /* bti c */
	"stp x29, x30, [sp, #-32]!\n"
	".cfi_def_cfa_offset 32\n"
	".cfi_offset 29, -32\n"
	".cfi_offset 30, -24\n"
	"mov x29, sp\n"
	"stp x0, x1, [sp, #16]\n"
	"bl moeft_dlsym_route\n"
	"mov x16, x0\n"
	"mov x0, x1\n"
	"cbz x16, 1f\n"
	"ldp x0, x1, [sp, #16]\n"
	".cfi_remember_state\n"
	"ldp x29, x30, [sp], #32\n"
	".cfi_def_cfa_offset 0\n"
	".cfi_restore 29\n"
	".cfi_restore 30\n"
	"br x16\n"
	".cfi_restore_state\n"
	"1:\n"
	"ldp x29, x30, [sp], #32\n"
	".cfi_def_cfa_offset 0\n"
	".cfi_restore 29\n"
	".cfi_restore 30\n"
	"ret\n"
	".cfi_endproc\n"
	".size dlsym, .-dlsym\n");
#endif

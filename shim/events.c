/*
 * events.c - the switch between the wrappers and the layer above: whether
 * events are on, the launch counters, and the shim's own messages.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hooks.h"

#define KID_SLOTS_LOG2 16        /* 32768 distinct kernels */
#define KID_MAX_MATCH 4096       /* kernels claimed by a rule */

atomic_int shim_state;
atomic_int shim_watch;
struct kid_cache *shim_kids;

/* Whether a shared CUDA runtime is loaded: an object whose file is
 * libcudart*.so.* (a wheel's renamed private copy too).  dl_iterate_phdr
 * leaves the application's dlerror() as it was, as dlopen would not. */
static int is_runtime(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;

	(void)size;
	(void)arg;
	base = base ? base + 1 : info->dlpi_name;
	return base && strncmp(base, "libcudart", 9) == 0 && strstr(base, ".so.") != NULL;
}

static int runtime_loaded(void)
{
	return dl_iterate_phdr(is_runtime, NULL) != 0;
}

static void start_once(void)
{
	int on = 0;

	/* The table before the layer above starts: a failure here leaves
	 * nothing of it behind (no log file). */
	if (!(shim_kids = kid_create(KID_SLOTS_LOG2, KID_MAX_MATCH)))
		shim_log(SHIM_LOG_ERROR, "out of memory for the kernel table; running "
			 "un-instrumented");
	else if (!(on = shim_events_above.start())) {
		kid_destroy(shim_kids);
		shim_kids = NULL;
	}
	/* The first CUDA call with neither runtime loaded: a runtime linked
	 * in statically calls the driver, which we wrap, and nothing else. */
	if (on && !runtime_loaded())
		shim_log(SHIM_LOG_WARN, "no shared CUDA runtime (%s, %s) is loaded as moeft "
			 "starts: a runtime linked statically into the program is seen only "
			 "through the driver (its allocations and launches, not its runtime "
			 "calls)", SHIM_CUDART_SONAME, SHIM_CUDART12_SONAME);
	atomic_store_explicit(&shim_state, on ? SHIM_ON : SHIM_OFF, memory_order_release);
}

int shim_start(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	if (!&shim_events_above)
		return 0;
	pthread_once(&once, start_once);
	return atomic_load_explicit(&shim_state, memory_order_acquire) == SHIM_ON;
}

/* The program's handle searches the global scope only; RTLD_DEFAULT from
 * here would search our own local scope too, and find us when dlopen'ed. */
int shim_interposing(void)
{
	void *global = dlopen(NULL, RTLD_LAZY);
	int ours = global && shim_real_dlsym(global, "cudaLaunchKernel") ==
			     shim_wrapper(SHIM_cudaLaunchKernel);

	if (global)
		dlclose(global);
	return ours;
}

int shim_events_on(void)
{
	return shim_on();
}

void shim_events_off(void)
{
	atomic_store_explicit(&shim_state, SHIM_OFF, memory_order_release);
}

void shim_watch_launches(int on)
{
	atomic_store_explicit(&shim_watch, on, memory_order_relaxed);
}

/*
 * Launches are counted without a locked instruction (one costs more than
 * the rest of an unclaimed launch): each thread owns a slot that only it
 * writes (shim_my_launches points at it), the total adds them up.  Threads
 * beyond the slots share the last one through an atomic add.
 */
#define LAUNCH_SLOTS 256

struct launch_slot {
	_Alignas(64) atomic_ullong n;
};

static struct launch_slot launch_slots[LAUNCH_SLOTS];
static atomic_uint launch_slots_used;
_Thread_local atomic_ullong *shim_my_launches __attribute__((tls_model("initial-exec")));

void shim_count_launch_slow(void)
{
	unsigned s = atomic_load_explicit(&launch_slots_used, memory_order_relaxed);

	if (s < LAUNCH_SLOTS - 1)
		s = atomic_fetch_add_explicit(&launch_slots_used, 1, memory_order_relaxed);
	if (s < LAUNCH_SLOTS - 1) {
		shim_my_launches = &launch_slots[s].n;
		atomic_store_explicit(shim_my_launches, 1, memory_order_relaxed);
		return;
	}
	atomic_fetch_add_explicit(&launch_slots[LAUNCH_SLOTS - 1].n, 1, memory_order_relaxed);
}

unsigned long long shim_launches(void)
{
	unsigned long long sum = 0;
	unsigned i;

	for (i = 0; i < LAUNCH_SLOTS; i++)
		sum += atomic_load_explicit(&launch_slots[i].n, memory_order_relaxed);
	return sum;
}

void shim_kernel_counts(unsigned *seen, unsigned *named, unsigned *claimed)
{
	*seen = shim_kids ? kid_count(shim_kids) : 0;
	*named = shim_kids ? kid_named(shim_kids) : 0;
	*claimed = shim_kids ? kid_matched(shim_kids) : 0;
}

void shim_log(int level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (&shim_events_above)
		shim_events_above.log(level, line);
	else
		dprintf(STDERR_FILENO, "moeft: %s\n", line);
	errno = saved;
}

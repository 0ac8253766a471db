/*
 * moeft.h - libmoeft's public C API: the one door for engine adapters.
 *
 * An adapter is the thin piece of an engine's own plug-in interface that
 * cannot be reached by interposing CUDA (vLLM's KV connector is the first:
 * python/ wraps this header with ctypes).  It calls libmoeft.so through
 * these functions only, never through the preload's internals, whether
 * libmoeft.so came in by LD_PRELOAD or by dlopen.
 *
 * What comes next here (the engine issues): open a window, record a
 * request's tokens and block ids, store KV chunks the preload cannot see,
 * query the restore index.  Every function is thread-safe; a failure is a
 * return value (moeft_instrumenting says when the preload's start ends a
 * process).
 */
#ifndef MOEFT_H
#define MOEFT_H

#ifdef __cplusplus
extern "C" {
#endif

#define MOEFT_API __attribute__((visibility("default")))

/* This header's version; moeft_api_version() returns the library's.  An
 * adapter built against version N needs a library of version N or newer. */
#define MOEFT_API_VERSION 1

MOEFT_API int moeft_api_version(void);

/* The release of libmoeft.so ("0.1.0"). */
MOEFT_API const char *moeft_version(void);

/*
 * 1 when this process's CUDA work is logged: libmoeft.so interposes its
 * CUDA calls (it came in by LD_PRELOAD; a library opened with dlopen sees
 * none of them), and the configuration was good and the log opened.  0
 * when not: dlopen'ed, MOEFT_DISABLE, a bad variable or a log that cannot
 * be opened (the reason was logged once), or a child of fork(), which
 * never writes its parent's log.  The first call starts the preload if no
 * CUDA call has yet, exactly as that call would; so, as that call would,
 * it ends the process where the configuration says so: MOEFT_STRICT and a
 * start that failed (status 1), restore mode and a state that cannot be
 * taken (status 3).
 */
MOEFT_API int moeft_instrumenting(void);

#ifdef __cplusplus
}
#endif

#endif

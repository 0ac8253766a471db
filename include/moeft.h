/*
 * moeft.h - libmoeft's public C API: the one door for engine adapters.
 *
 * An adapter is the thin piece of an engine's own plug-in interface that
 * cannot be reached by interposing CUDA (vLLM's KV connector is the first:
 * python/ wraps this header with ctypes).  It calls libmoeft.so through
 * these functions only, never through the preload's internals, whether
 * libmoeft.so came in by LD_PRELOAD or by dlopen.
 *
 * Here now: versions, whether the process is instrumented, the
 * scheduler's side of a window (its running requests, their tokens and KV
 * block ids), the worker's side where the preload cannot see the KV
 * (host pools and their written chunks), and after a restore the restored
 * requests' prefixes and host pools' bytes.  Every function is thread-safe; a failure is a
 * return value (moeft_instrumenting says when the preload's start ends a
 * process).
 */
#ifndef MOEFT_H
#define MOEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOEFT_API __attribute__((visibility("default")))

/* This header's version; moeft_api_version() returns the library's.  An
 * adapter built against version N needs a library of version N or newer. */
#define MOEFT_API_VERSION 4

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

/* The decode steps of a window (MOEFT_WINDOW, 16 unless set): an adapter
 * commits its requests every that many engine steps.  0 when the process
 * is not instrumented. */
MOEFT_API unsigned moeft_window(void);

/* A request as the engine's scheduler holds it. */
struct moeft_request {
	const char *id;                 /* id_len bytes (1 to 255) of printable
					   ASCII, unique among those running */
	size_t id_len;
	const uint32_t *tokens;         /* the prompt's token ids, then those
					   generated so far */
	size_t ntokens;                 /* 1 to 2^22 */
	size_t nprompt;                 /* of them the prompt's */
	size_t ncomputed;               /* of them those whose KV is in the
					   blocks */
	uint32_t block_tokens;          /* tokens per KV block, 1 to 65536 */
	uint32_t ngroups;               /* KV cache groups, 1 to 8 (a model
					   with one kind of attention has 1) */
	const uint32_t *const *blocks;  /* blocks[g]: group g's block ids, in
					   token order */
	const size_t *nblocks;          /* their counts; each group's blocks
					   hold the computed tokens */
	int finished;                   /* the engine finished it at this
					   window's last step */
	const char *params;             /* params_len bytes (0 to 4096) of
					   printable ASCII the engine needs to
					   send the request again (its sampling
					   parameters, as JSON for moeft
					   resubmit); opaque to the log */
	size_t params_len;
};

/*
 * Commit, as one window of this process's log, the n requests the engine
 * had running when its steps first_step .. first_step + steps - 1 ended:
 * all of them (a request missing from the window was not running), at
 * most 2^20.  Each is checked first; nothing is written unless every one
 * is good.  0 when the window is durable, or a negative errno: -EINVAL (no
 * steps, the steps overflow, too many requests, two of one id, or a
 * request out of the bounds above), -ENODEV (the process is not
 * instrumented), -E2BIG (more than one window of the log can ever hold),
 * -ENOSPC (the log has no room now: MOEFT_WAL_SIZE), -ENOMEM, -EIO.
 *
 * A restore takes these requests from a process whose kernels the
 * preload does not log (a scheduler's); where it logs them too, the
 * engine's steps and its own are not paired yet, and none are taken.
 */
MOEFT_API int moeft_commit_requests(uint64_t first_step, uint32_t steps,
				    const struct moeft_request *reqs, size_t n);

/*
 * The worker's side of a window, where the preload cannot see the KV
 * writes (an engine's CPU backend: no kernel launches).
 *
 * moeft_kv_pool registers bytes of host memory at base as a KV pool named
 * name (1 to 255 bytes of printable ASCII; with its size and the order of
 * registration among pools of that name and size it is the pool's
 * identity across restarts), tracked in chunks of chunk_bytes (a power of
 * two from 4 KiB to 1 GiB; 0: the preload's default for the size).  It
 * returns a handle (>= 0), or a negative errno: -EINVAL (an argument out
 * of those bounds, or more than 64 pools), -EEXIST (memory a registered
 * pool or a tracked allocation holds), -ENODEV (not instrumented, or no KV
 * store), -ENOSPC (the KV store's pool table is full), -EIO.
 *
 * In a process `moeft restore -- CMD` started, the pool takes the crashed
 * process's pool of its identity (none: the process is stopped with
 * status 3, another model) and its bytes are left as they are: the
 * restored ones are read with moeft_restored_read, into the blocks the
 * engine gives the requests it resumes.
 */
MOEFT_API int moeft_kv_pool(const char *name, void *base, size_t bytes, size_t chunk_bytes);

/* In a restored process: length bytes at offset of pool's restored bytes
 * (as of the restored window) into dst.  0, or -ENODEV (the pool was not
 * restored), -EINVAL (no such handle, a range past the pool), -EBADMSG
 * (the range holds a chunk the restore found damaged: never served),
 * -EIO. */
MOEFT_API int moeft_restored_read(int pool, size_t offset, void *dst, size_t length);

/* In a restored process: 1 when every restored byte of the range is as
 * it was committed, 0 when a chunk of it was lost (damaged in the store;
 * moeft_restored_read refuses it), or a negative errno as
 * moeft_restored_read's.  An engine offers only blocks that are whole. */
MOEFT_API int moeft_restored_intact(int pool, size_t offset, size_t length);

/* Restored KV in device memory (moeft_restored_copy). */
struct moeft_restored_range {
	const void *at;                 /* where the bytes were, in a restored pool */
	void *dst;                      /* device memory to copy them to */
	size_t length;
};

/*
 * In a restored process, device KV: the preload copied the crashed
 * process's device KV pools into the allocations of the same identity
 * (at their pools' initialiser), so a block's restored bytes were at the
 * same address.  An engine that gives a resumed request other blocks
 * copies them there with moeft_restored_copy, which reads the restored
 * bytes again (from the KV store, each chunk checked, or from the images
 * of `moeft restore --images`), never the pools (the engine may have
 * written them since).
 * moeft_restored_device: 1 when [at, at + length) lies in one restored
 * device pool whose bytes are in, -ENODEV when not (no restore, not such
 * a pool, before its initialiser), -EINVAL (length 0, a range that wraps).
 */
MOEFT_API int moeft_restored_device(const void *at, size_t length);

/*
 * Copy n ranges of restored device KV to their dst, ordered on stream (a
 * cudaStream_t; NULL the legacy default stream): the work enqueued there
 * after the call sees the bytes, the work enqueued before cannot overwrite
 * them.  Returns once every byte has been read and copied, so the calling
 * thread also waits for the work enqueued on stream before the call.
 * 0, or -ENODEV or -EINVAL as moeft_restored_device (for any range; NULL
 * ranges or dst, n 0), -EBUSY (stream is being captured into a graph: the
 * copies would join it instead of running), -ENOMEM, -EIO (an image or
 * the store could not be read, a chunk's bytes in the store were written
 * since the restore (the restored server's own windows reuse its slots),
 * a copy failed: one line says which; serve nothing from these ranges).  Calls from several threads may run at once.
 */
MOEFT_API int moeft_restored_copy(const struct moeft_restored_range *ranges, size_t n,
				  void *stream);

/* In a restored process: 0 with *step the last engine step of the
 * window it restored (an adapter numbers its next steps after it), or
 * -ENODEV when it restored none, -EINVAL when step is NULL. */
MOEFT_API int moeft_restored_step(uint64_t *step);

/* Bytes of a registered pool the engine wrote. */
struct moeft_kv_range {
	int pool;                       /* moeft_kv_pool's handle */
	size_t offset, length;
};

/*
 * Commit, as one window, the chunks of the n ranges the engine wrote
 * during its steps first_step .. first_step + steps - 1, copied from the
 * pools as they are now (the engine writes none meanwhile).  Nothing is
 * written unless every range is good.  0 when the window is durable, or a
 * negative errno: -EINVAL (no steps, steps that overflow, a handle or
 * range out of bounds; in a restored process, steps not after the
 * restored window's), -EBUSY (a restored process whose restored pools are
 * not all registered again yet), -ENODEV, -ENOSPC (the log or the store
 * has no room now), -E2BIG (the ranges name more than 2^24 chunks, or
 * more than the log can hold), -ENOMEM, -EIO.
 */
MOEFT_API int moeft_commit_kv(uint64_t first_step, uint32_t steps,
			      const struct moeft_kv_range *ranges, size_t n);

/*
 * In a process `moeft restore -- CMD` started, whose crashed predecessor
 * committed its requests: of tokens[n] (a request sent again, its prompt
 * and what it had generated before), the leading tokens whose KV the
 * restored state holds, in the crashed engine's blocks.  The longest
 * prefix any restored request shares with tokens, by token ids, no longer
 * than that request's computed tokens nor n - 1 (the engine computes at
 * least the last token itself), in whole blocks.  Returns that count of
 * tokens (0: none) with *nblocks block ids of KV cache group `group` in
 * blocks[max], in token order; or a negative errno: -ENODEV (this process
 * restored no request index), -EINVAL (tokens NULL, group 8 or more, or a
 * matching request without that group), -ENOSPC (max is short: *nblocks
 * says how many it takes).
 */
MOEFT_API long moeft_restored_prefix(const uint32_t *tokens, size_t n, unsigned group,
				     uint32_t *blocks, size_t max, size_t *nblocks);

#ifdef __cplusplus
}
#endif

#endif

/*
 * resume.h - restore mode: the fresh process of `moeft restore -- CMD`
 * takes the KV pools of the crashed one (the plan, restore.h) and resumes
 * at the step after the restored window.
 *
 * The preload takes the plan when it is loaded, before the command's main,
 * and only then hands the command its resume position: it sets
 * MOEFT_RESTORE_MANIFEST to the manifest beside the plan (moeft restore
 * never does).  A command without this preload, or with it disabled or
 * misconfigured, is never told to resume.
 *
 * Allocations claim the plan's pools by identity as they are made.  With
 * MOEFT_RESTORE_AT=init (the default) the first launch once every pool is
 * claimed is taken for their initialiser (torch.zeros' fill kernel runs
 * right after the allocation), and the images are copied in right after it
 * in its stream, before anything can read the pools; until then every
 * launch is watched (shim_watch_launches).  With MOEFT_RESTORE_AT=step
 * they are copied in at the process's first step, ahead of its first
 * launch.  Either way every other stream waits for the copies before its
 * own first step.
 *
 * MOEFT_RESTORE may instead name a directory, `moeft restore --wal DIR --
 * CMD`'s for a server whose processes each kept their own log: each
 * process takes DIR/NAME/plan at the start, NAME its log's file name less
 * ".wal", and is not restoring when there is none; no resume position is
 * handed over then (an engine's connector resumes its requests).
 *
 * A plan without pools (a scheduler's process: the engine's requests
 * alone) is in at the start.  Lost chunks (plan.h) are allowed in host
 * pools only, whose bytes are read through resume_host_read, which
 * refuses them; a device pool with any stops the process.  The engine's requests beside the plan
 * (reqindex.h) are read at load and answer moeft_restored_prefix.
 *
 * Whatever keeps the process from taking the plan (MOEFT_DISABLE, a bad
 * variable, a bad plan or request index, a log it cannot open or of
 * another identity, a pool no allocation claimed, a KV write into an
 * allocation the crashed process had no pool for, a copy the driver
 * refused) stops it with status
 * RESUME_EXIT_REFUSED and one line: running on would serve from state the
 * user believes restored.
 */
#ifndef MOEFT_RESUME_H
#define MOEFT_RESUME_H

#include <stddef.h>
#include <stdint.h>

#include "alloc_table.h"
#include "clock.h"

struct wal;

#define RESUME_EXIT_REFUSED 3

/* MOEFT_RESTORE was set: the plan was taken at load (and
 * MOEFT_RESTORE_MANIFEST handed to the command); every failure of the
 * start must stop the process. */
int resume_requested(void);

/* Restore mode in the process that took the plan, and its KV not copied
 * in yet: what stops capture or the process now must stop it with
 * RESUME_EXIT_REFUSED instead (capturing.c, crash.c, and an exit check).
 * Async-signal-safe. */
int resume_pending(void);

/* At the start, with the log w (at wal_path) open: the plan must be this
 * log's; MOEFT_RESTORE_AT=step when at_step.  Stops the process if not. */
void resume_start(struct wal *w, const char *wal_path, int at_step);

/* Restore mode is on (resume_start ran). */
int resume_active(void);
/* The last step of the restored window. */
uint64_t resume_last_step(void);

/* A new allocation may claim a pool of the plan. */
void resume_alloc(const struct alloc_info *a);

/* MOEFT_RESTORE_AT=init, for a launch on stream while launches are
 * watched: 1 when it is the pools' initialiser, after which
 * resume_after(stream) must enqueue the copies.  A launch recorded into a
 * graph never is: copies enqueued behind it would join the graph and
 * overwrite the pools at every replay.  (Pools zeroed by a memset, no
 * launch, meet their first launch in a capture so; the copies then go
 * ahead of the first step.) */
int resume_initialiser(void *stream);
void resume_after(void *stream);

/* A stream starts a step (t: the clock's tick): the copies go ahead of it
 * if they have not been enqueued, else a stream's first step waits for
 * them. */
void resume_step(void *stream, const struct clk_tick *t);

/* Allocation a holds KV here: stop if the copies are in and the crashed
 * process had no pool there. */
void resume_check_kv_pool(const struct alloc_info *a);

/* Host memory an adapter registered (a, an allocation of api
 * ALLOC_API_ADAPTER) claims the plan's pool of its identity, which is
 * then read from its image (resume_host_read) and never copied in; it
 * stops the process when there is none.  Returns the plan pool's index. */
int resume_host_pool(const struct alloc_info *a);
/* length bytes at offset of the restored image of plan pool `pool` (a
 * claimed host pool) into dst: 0, -ENODEV, -EINVAL, -EBADMSG (a lost
 * chunk, never served) or -EIO. */
int resume_host_read(int pool, uint64_t offset, void *dst, uint64_t length);
/* 1 when no chunk of the range was lost, 0 when one was; -ENODEV or
 * -EINVAL as resume_host_read. */
int resume_host_intact(int pool, uint64_t offset, uint64_t length);

/* Device KV the copies restored, copied again from its image to another
 * device address (moeft_restored_device and moeft_restored_copy of
 * include/moeft.h, their contracts there): an engine that gives a resumed
 * request other blocks than it had moves its restored KV there.  The pools
 * themselves are no source: the engine may have written them since. */
struct moeft_restored_range;
int resume_device_restored(const void *at, size_t length);
int resume_device_copy(const struct moeft_restored_range *r, size_t n, void *stream);

/* moeft_restored_prefix of include/moeft.h (its contract there). */
long resume_prefix(const uint32_t *tokens, size_t n, unsigned group, uint32_t *blocks,
		   size_t max, size_t *nblocks);

/* Stop the process: the plan cannot be taken (printf-style reason). */
__attribute__((noreturn, format(printf, 1, 2)))
void resume_refuse(const char *fmt, ...);

#endif

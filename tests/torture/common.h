/*
 * common.h - shared by the crash-torture and corruption tests.
 *
 * Both tests write logs whose content proves itself: every payload is
 * derived from a seed it carries (or, when too short to carry one, from
 * its header fields), and every WINDOW record's extra bytes name the
 * window, its number of user records and the sum of their keys.  So a
 * checker needs no model of what was written to tell whether an intact
 * window is exactly what a writer committed.
 */
#ifndef MOEFT_TORTURE_COMMON_H
#define MOEFT_TORTURE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wal.h"

#define ULL(x) ((unsigned long long)(x))

/* splitmix64: tiny, fast, and every seed (0 too) gives a good stream. */
uint64_t rng_next(uint64_t *state);
uint64_t rng_below(uint64_t *state, uint64_t n); /* uniform in [0, n) */

/*
 * Append one self-describing record to the open window `window`, its
 * payload built in buf (len bytes).  Adds the record's key to *digest;
 * returns the LSN or a negative wal_status.
 */
int64_t append_record(struct wal *w, uint64_t window, unsigned type, uint32_t len,
		      uint64_t seed, uint8_t *buf, uint64_t *digest);
/* The same with a random type (ROUTING, KVREF, ALLOC or a user type) and
 * a random length (0 .. max_len, skewed towards small). */
int64_t append_random(struct wal *w, uint64_t window, uint64_t *rng, uint8_t *buf,
		      uint32_t max_len, uint64_t *digest);

/* Commit the open window with its self-description in the extra bytes. */
int commit_window(struct wal *w, uint64_t window, uint32_t users, uint64_t digest,
		  struct wal_commit_info *info);

struct verify_stats {
	uint64_t windows;   /* intact windows checked */
	uint64_t records;   /* user records checked */
	uint64_t pads, epochs;
};

/*
 * Check every intact window of r against the image it was read from
 * (img, len): the iterator yields exactly the window's records, in LSN
 * order, packed back to back from the window's position (a skipped LSN
 * must be a PAD filling the end of the ring), with consistent headers,
 * self-verifying payloads, EPOCH records where the epoch rises, and a
 * WINDOW record whose fixed part and extra bytes match the window.  Only
 * windows with id >= count_from are added to *st.  Returns 0, or -1 with
 * the first mismatch described in why.
 */
int verify_intact(const struct wal_reader *r, const uint8_t *img, size_t len,
		  uint64_t count_from, struct verify_stats *st, char *why, size_t whylen);

/* ---- Killing a child at a chosen instant ------------------------------ */

uint64_t mono_ns(void); /* CLOCK_MONOTONIC, ns */

/* A moving estimate of a duration, one more sample in. */
uint64_t estimate(uint64_t est, uint64_t sample);

/*
 * How long after a child's start to kill it: one time in eight at once,
 * one in four within open_est (how long opening takes it; 0: not known
 * yet), else up to max_ns past open_est, however slow the build.
 */
uint64_t pick_kill_delay(uint64_t *rng, uint64_t open_est, uint64_t max_ns);

/* SIGKILL pid once delay ns have passed since start_ns, and reap it.  0
 * when it died of that signal; else -1, its wait status in *status (-1
 * when waitpid failed). */
int kill_at(pid_t pid, uint64_t start_ns, uint64_t delay, int *status);

/* A number from the environment, dflt when unset; exits on garbage. */
uint64_t env_u64(const char *name, uint64_t dflt);

/* A scratch file path, unique per process and tag, under $MOEFT_TEST_DIR
 * or /dev/shm (tmpfs: a log there behaves as on a CXL mapping). */
const char *scratch_path(char *buf, size_t len, const char *tag);

/* Read a whole file into a malloc'ed buffer of exactly its size. */
uint8_t *read_file(const char *path, size_t *len);

#endif

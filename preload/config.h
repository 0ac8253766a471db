/*
 * config.h - the preload's configuration, read from MOEFT_* variables.
 *
 * Every variable is validated at startup; a bad one yields one line naming
 * the variable, the value and what is accepted.  The preload then runs
 * un-instrumented, or refuses to start when MOEFT_STRICT asks for it.
 * The variables are documented in PROFILES.md ("Configuration").
 */
#ifndef MOEFT_CONFIG_H
#define MOEFT_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define CONFIG_KV_MAX 16         /* selectors in MOEFT_KV */
#define CONFIG_KV_TEXT_MAX 1024  /* bytes of MOEFT_KV, NUL included */
#define CONFIG_RING_MIN (UINT64_C(64) << 10) /* bytes of MOEFT_RING, at least */

/* One MOEFT_KV selector: device allocations of exactly `size` bytes (only
 * the ordinal-th of them, 0-based, unless ordinal is -1) are KV pools made
 * of `block`-byte blocks (0: kv_default_chunk of the pool's size). */
struct kv_selector {
	uint64_t size;
	int32_t ordinal;
	uint64_t block;
};

struct moeft_config {
	char wal_path[PATH_MAX];        /* the log, or with wal_dir its directory */
	int wal_dir;                    /* MOEFT_WAL names a directory (logname.h) */
	char restore_plan[PATH_MAX];    /* MOEFT_RESTORE ("" if unset) */
	uint64_t wal_size;
	int numa_node;                  /* -1: no binding */
	unsigned window;                /* decode steps per committed window */
	uint64_t ring_bytes;            /* MOEFT_RING: the capture ring's data */
	int commit_async;               /* MOEFT_COMMIT=async: host waits do not
					 * wait for a window's commit */
	int restore_at_step;            /* MOEFT_RESTORE_AT=step: restore at the
					 * first step, not after the initialiser */
	char profile[PATH_MAX];         /* built-in name or file path */
	char kernel_image[PATH_MAX];    /* MOEFT_KERNEL_IMAGE ("" if unset) */
	char kv_rules[CONFIG_KV_TEXT_MAX]; /* MOEFT_KV as given ("" if unset) */
	unsigned kv_count;
	struct kv_selector kv[CONFIG_KV_MAX];
	int kv_hash;                    /* MOEFT_KV_TRACK=hash: every window
					 * reads every chunk of every KV pool,
					 * not only those of the blocks that
					 * KV rules with stride= name */
	int log_level;                  /* enum wal_log_level */
	int disable;
	int strict;
	int force_fresh;                /* MOEFT_FORCE_FRESH: this run may
					 * replace the state of a run that did
					 * not exit (held.h) */
};

/*
 * Fill c from the variables `get` returns (NULL: secure_getenv; a table
 * lookup in tests).  A variable set to the empty string counts as unset.
 * Returns 0, or -1 with one line in err.  Either way every field holds its
 * default or a validated value; disable, strict and log_level are read
 * first, so they hold even when another variable is bad.  An unparsable
 * MOEFT_STRICT counts as set: whoever wrote it wanted strictness.
 */
int config_load(struct moeft_config *c, const char *(*get)(const char *name),
		char *err, size_t errlen);

/*
 * Names in envp ("NAME=value" strings, NULL-terminated) that start with
 * MOEFT_ but are no variable of the preload, comma-separated into out,
 * each with "(did you mean X?)" when a known name is within two edits
 * (one for names of up to 4 bytes after MOEFT_); swapping two neighbouring
 * characters counts as one edit.  Returns how many there are.
 */
int config_unknown_vars(char **envp, char *out, size_t len);

/* One-line summary, e.g. for the startup log line. */
void config_describe(const struct moeft_config *c, char *out, size_t len);

/* The variables config_load reads, NULL-terminated. */
extern const char *const config_vars[];

#endif

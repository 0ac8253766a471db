/*
 * report.h - load a log for the offline tools and render its recovery
 * report (what is committed, what was dropped, what is damaged), as text
 * or as JSON members.  Shared by verify and inspect.
 */
#ifndef MOEFT_REPORT_H
#define MOEFT_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "json.h"
#include "wal.h"

struct report {
	const char *path;
	struct wal_reader *r;
	const struct wal_recovery *rec;
	const struct wal_window *win;
	size_t nwin;
};

/* Recover `path` read-only.  0: loaded, intact or damaged; otherwise a
 * negative wal_status with err filled. */
int report_load(struct report *rp, const char *path, struct wal_error *err);
void report_free(struct report *rp);

/* Exit status for a log report_load() refused: 1 when it is a moeft log
 * too damaged to recover (WAL_ECORRUPT), else 2. */
int report_load_exit(int status);

/* Damage was found inside the committed part. */
int report_damaged(const struct report *rp);

/* Text: windows, records, the dropped tail, every damage finding, the
 * damaged windows and the notes (as warnings). */
void report_text(const struct report *rp, FILE *f);

/* The same facts as members of the JSON object being written. */
void report_json(const struct report *rp, struct json *j);

/* The JSON object of a log report_load failed on with status: "damaged"
 * when it is a moeft log with neither superblock nor checkpoint intact (as
 * the exit status says), else "error". */
void report_failed_json(struct json *j, const char *path, int status, const char *msg);

#endif

/*
 * restore.h - the offline restore of restore.c for callers inside moeft:
 * 'moeft bench restore' times it in-process, on the path the command runs.
 */
#ifndef MOEFT_RESTORE_H
#define MOEFT_RESTORE_H

#include <stdint.h>

/* What a restore wrote, and how long its parts took. */
struct restore_stats {
	uint64_t bytes;         /* of the KV pool images */
	uint64_t chunks, lost;
	double load_s;          /* state_load: the log read and checked, the store opened */
	double images_s;        /* the KV pool images: chunks checked, written, synced */
	double total_s;         /* all of it: load, images, routing, manifest, fsync */
};

/*
 * What 'moeft restore --wal wal --out out' does, without its summary
 * line.  EXIT_OK; EXIT_BAD, restored but not whole (lost chunks are named
 * on stderr); or EXIT_USAGE with the failure reported as the command
 * reports it.  *st is filled as far as the restore got.
 */
int restore_offline(const char *wal, const char *out, struct restore_stats *st);

#endif

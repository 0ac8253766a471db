/*
 * heatmap.h - expert usage per layer drawn as an SVG picture.
 *
 * A grid of layers (rows) by experts (columns), one cell for each expert
 * a layer has (its slots in the histogram).  A cell's colour is the
 * expert's share of its layer's routed token-slots (hist_share) on a
 * light-to-dark ramp running from the smallest share drawn to the largest,
 * which the legend labels.  Cells are <rect class="cell"> elements with
 * data-layer, data-expert and data-share attributes, so scripts can read
 * the picture back.
 */
#ifndef MOEFT_HEATMAP_H
#define MOEFT_HEATMAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "hist.h"

/* What the picture covers, for its title. */
struct heatmap_span {
	const char *log;	/* path of the log */
	uint64_t log_id;
	uint64_t windows;	/* decode windows counted */
	uint64_t first_window, last_window; /* their ids */
	uint64_t tokens;	/* rows they decoded */
	uint64_t gaps;		/* of them, windows flagged as missing routing */
};

/* Whether a picture could be written at `path`: its directory exists and
 * is writable, and `path` is not something other than a regular file, nor
 * a file guard.h keeps (a moeft log or KV store, or `log`, the stat of the
 * log drawn).  Checked before the log is read, so a typo costs no scan.
 * 0, or -1 with msg naming the path. */
int heatmap_check_path(const char *path, const struct stat *log, char *msg, size_t len);

/* Draw `h`, which must hold routing (h->total > 0), into `path`
 * atomically: a temporary file beside it is written, synced and renamed
 * over it.  0, or -1 with msg naming the path (`path` is then untouched). */
int heatmap_write(const char *path, const struct hist *h, const struct heatmap_span *span,
		  char *msg, size_t len);

#endif

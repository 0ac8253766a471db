/*
 * held.c - whether a log holds the state of a run that did not exit
 * (held.h).
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "held.h"
#include "media.h"
#include "record.h"

/* The window a restore would take (tools/state.h): the newest decode
 * window, else the newest engine adapter's; or NULL. */
static const struct wal_window *restorable(const struct wal_reader *r)
{
	const struct wal_window *win, *adapter = NULL;
	struct rec_window_steps st;
	size_t n;

	win = wal_reader_windows(r, &n);
	while (n-- > 0) {
		if (rec_decode_window(&win[n], &st))
			return &win[n];
		if (!adapter && rec_requests_window(&win[n], &st))
			adapter = &win[n];
	}
	return adapter;
}

void held_read(const struct wal_reader *r, struct held_state *h)
{
	const struct wal_window *c = restorable(r);
	uint32_t newest = wal_reader_recovery(r)->epoch;
	struct rec_window_steps st;
	struct wal_record rec;
	struct rec_epoch ep;
	struct wal_iter it;
	int exit_after = 0;

	memset(h, 0, sizeof *h);
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec)) {
		if (rec.type == WAL_REC_EXIT) {
			h->exited |= rec.epoch == newest;
			exit_after |= c && rec.lsn > c->last_lsn;
		} else if (c && rec.type == WAL_REC_EPOCH && rec.epoch == c->epoch &&
			   rec_epoch_decode(rec.payload, rec.len, &ep) == 0) {
			h->pid = ep.pid;
		}
	}
	if (!c)
		return;
	if (!rec_decode_window(c, &st))
		rec_requests_window(c, &st);
	h->held = !exit_after;
	h->epoch = c->epoch;
	h->window = c->id;
	h->last_step = st.first_step + st.steps - 1;
}

int held_read_path(const char *path, struct held_state *h)
{
	struct wal_reader *r;
	struct wal_error err;
	struct stat st;
	int fd, ret = 0;

	memset(h, 0, sizeof *h);
	/* What wal_open would refuse (another user's file, not a device-DAX
	 * node; a damaged log), it refuses with its own words; and a FIFO
	 * planted at the path must not block this open. */
	if (lstat(path, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)) ||
	    (!S_ISCHR(st.st_mode) && media_trust(path, &st, &err) < 0))
		return 0;
	if (media_hold(path, &fd, &err) != 0)
		return 0;
	if (wal_reader_open_path(path, &r, &err) == 0) {
		if (!wal_reader_recovery(r)->damage_count) {
			held_read(r, h);
			ret = 1;
		}
		wal_reader_close(r);
	}
	close(fd);
	return ret;
}

/*
 * report.c - load a log read-only and render its recovery report.
 */
#include <inttypes.h>

#include "cli.h"
#include "report.h"

int report_load(struct report *rp, const char *path, struct wal_error *err)
{
	int ret = wal_reader_open_path(path, &rp->r, err);

	rp->path = path;
	if (ret < 0)
		return ret;
	rp->rec = wal_reader_recovery(rp->r);
	rp->win = wal_reader_windows(rp->r, &rp->nwin);
	return 0;
}

void report_free(struct report *rp)
{
	wal_reader_close(rp->r);
	rp->r = NULL;
}

int report_load_exit(int status)
{
	return status == WAL_ECORRUPT ? EXIT_BAD : EXIT_USAGE;
}

int report_damaged(const struct report *rp)
{
	return rp->rec->damage_count > 0;
}

/* Damaged window ids as "3, 7-9"; long lists are cut short. */
static void print_damaged_ranges(const struct report *rp, FILE *f)
{
	unsigned ranges = 0;

	for (size_t i = 0; i < rp->nwin; i++) {
		size_t k = i;

		if (rp->win[i].state != WAL_WINDOW_DAMAGED)
			continue;
		while (k + 1 < rp->nwin && rp->win[k + 1].state == WAL_WINDOW_DAMAGED &&
		       rp->win[k + 1].id == rp->win[k].id + 1)
			k++;
		if (ranges++ == 32) {
			fputs(", ...", f);
			break;
		}
		fprintf(f, "%s%" PRIu64, ranges > 1 ? ", " : "", rp->win[i].id);
		if (k > i)
			fprintf(f, "-%" PRIu64, rp->win[k].id);
		i = k;
	}
}

static void damage_text(const struct report *rp, FILE *f)
{
	const struct wal_recovery *rec = rp->rec;
	size_t listed = sizeof rec->damage / sizeof rec->damage[0];

	if (listed > rec->damage_count)
		listed = rec->damage_count;
	cli_row(f, "damage", "%" PRIu64 " finding%s inside the committed part:",
		rec->damage_count, rec->damage_count == 1 ? "" : "s");
	for (size_t i = 0; i < listed; i++) {
		const struct wal_damage *d = &rec->damage[i];

		fprintf(f, "%-11s- offset %" PRIu64, "", d->offset);
		if (d->lsn)
			fprintf(f, ", LSN %" PRIu64 " expected", d->lsn);
		fprintf(f, ": %s", d->reason);
		if (d->lost_records)
			fprintf(f, "; %" PRIu64 " record%s lost", d->lost_records,
				d->lost_records == 1 ? "" : "s");
		fputc('\n', f);
	}
	if (rec->damage_count > listed)
		fprintf(f, "%-11s- and %" PRIu64 " more, not listed\n", "",
			rec->damage_count - listed);
	if (rec->damaged_windows) {
		fprintf(f, "%-11s%" PRIu64 " window%s: ", "damaged", rec->damaged_windows,
			rec->damaged_windows == 1 ? "" : "s");
		print_damaged_ranges(rp, f);
		fputc('\n', f);
	}
}

void report_text(const struct report *rp, FILE *f)
{
	const struct wal_recovery *rec = rp->rec;
	char b[32];

	if (rp->nwin == 1)
		cli_row(f, "windows", "1 committed (id %" PRIu64 "): %s", rp->win[0].id,
			rec->intact_windows ? "intact" : "damaged");
	else if (rp->nwin)
		cli_row(f, "windows", "%zu committed (ids %" PRIu64 "-%" PRIu64 "): %" PRIu64
			" intact, %" PRIu64 " damaged", rp->nwin, rp->win[0].id,
			rp->win[rp->nwin - 1].id, rec->intact_windows, rec->damaged_windows);
	else
		cli_row(f, "windows", "none committed");
	if (rec->records)
		cli_row(f, "records", "%" PRIu64 " committed, %s, LSN %" PRIu64 "-%" PRIu64,
			rec->records, cli_fmt_bytes(b, sizeof b, rec->bytes), rec->first_lsn,
			rec->last_committed_lsn);
	else
		cli_row(f, "records", "none committed");
	if (report_damaged(rp))
		cli_row(f, "tail", "not scanned (damage inside the committed part)");
	else if (rec->tail_records)
		cli_row(f, "tail", "uncommitted tail dropped: %" PRIu64 " records, %s (%s)",
			rec->tail_records, cli_fmt_bytes(b, sizeof b, rec->tail_bytes),
			rec->tail_stop);
	else
		cli_row(f, "tail", "no uncommitted records");
	if (report_damaged(rp))
		damage_text(rp, f);
	for (unsigned i = 0; i < rec->note_count; i++)
		cli_row(f, "warning", "%s", rec->notes[i]);
}

void report_failed_json(struct json *j, const char *path, int status, const char *msg)
{
	json_obj_begin(j);
	json_kv_str(j, "status", status == WAL_ECORRUPT ? "damaged" : "error");
	json_kv_str(j, "path", path);
	json_kv_str(j, "error", msg);
	json_obj_end(j);
}

void report_json(const struct report *rp, struct json *j)
{
	const struct wal_recovery *rec = rp->rec;
	size_t listed = sizeof rec->damage / sizeof rec->damage[0];

	if (listed > rec->damage_count)
		listed = rec->damage_count;
	json_kv_str(j, "status", report_damaged(rp) ? "damaged" : "ok");
	json_kv_str(j, "path", rp->path);
	json_kv_u64(j, "epoch", rec->epoch);
	json_kv_u64(j, "windows", rp->nwin);
	json_kv_u64(j, "intact_windows", rec->intact_windows);
	json_key(j, "damaged_windows");
	json_arr_begin(j);
	for (size_t i = 0; i < rp->nwin; i++)
		if (rp->win[i].state == WAL_WINDOW_DAMAGED)
			json_u64(j, rp->win[i].id);
	json_arr_end(j);
	if (rp->nwin) {
		json_kv_u64(j, "first_window", rp->win[0].id);
		json_kv_u64(j, "last_window", rp->win[rp->nwin - 1].id);
	}
	json_kv_u64(j, "records", rec->records);
	json_kv_u64(j, "bytes", rec->bytes);
	json_kv_u64(j, "first_lsn", rec->first_lsn);
	json_kv_u64(j, "last_committed_lsn", rec->last_committed_lsn);
	json_key(j, "tail");
	json_obj_begin(j);
	json_kv_bool(j, "scanned", !report_damaged(rp));
	json_kv_u64(j, "records", rec->tail_records);
	json_kv_u64(j, "bytes", rec->tail_bytes);
	json_kv_str(j, "stop", rec->tail_stop);
	json_obj_end(j);
	json_kv_u64(j, "damage_count", rec->damage_count);
	json_key(j, "damage");
	json_arr_begin(j);
	for (size_t i = 0; i < listed; i++) {
		json_obj_begin(j);
		json_kv_u64(j, "offset", rec->damage[i].offset);
		json_kv_u64(j, "lsn", rec->damage[i].lsn);
		json_kv_u64(j, "lost_records", rec->damage[i].lost_records);
		json_kv_str(j, "reason", rec->damage[i].reason);
		json_obj_end(j);
	}
	json_arr_end(j);
	json_key(j, "notes");
	json_arr_begin(j);
	for (unsigned i = 0; i < rec->note_count; i++)
		json_str(j, rec->notes[i]);
	json_arr_end(j);
}

/*
 * wal.h - moeft's write-ahead log: public API.
 *
 * A log is one mapped region (shared-memory file, DAX file or device-DAX
 * node, optionally bound to a CXL NUMA node) holding a ring of CRC'd
 * records.  Producers append records to the open window; wal_commit()
 * closes the window with a WINDOW record and publishes it with a single
 * aligned 8-byte store.  A reader trusts exactly the windows committed
 * before that store and drops (and reports) everything after it.
 * The on-media layout is specified in wal/FORMAT.md.
 *
 * Pure C + libnuma; never includes a CUDA header.
 */
#ifndef MOEFT_WAL_H
#define MOEFT_WAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: 0 is success, errors are negative. */
enum wal_status {
	WAL_OK = 0,
	WAL_EINVAL = -1,   /* bad argument */
	WAL_EIO = -2,      /* open/map/read/write of the medium failed */
	WAL_ENOTLOG = -3,  /* not a moeft log (bad magic) */
	WAL_EVERSION = -4, /* a moeft log of an unsupported version */
	WAL_EBUSY = -5,    /* another process is writing this log */
	WAL_EFULL = -6,    /* no space even after reclaiming old windows */
	WAL_E2BIG = -7,    /* record larger than the log can ever hold */
	WAL_ENOMEM = -8,
	WAL_ENUMA = -9,    /* NUMA node missing or binding failed */
	WAL_ECORRUPT = -10, /* damage found inside the committed part */
	WAL_EUNSAFE = -11, /* a symbolic link, another user's file, or one that
			      others may write: refused */
	WAL_EENDED = -12   /* the writer has ended (wal_end): nothing more is
			      written */
};

const char *wal_strerror(int status);
/* The negative errno a public API says for a status: -EINVAL, -E2BIG,
 * -ENOSPC (WAL_EFULL), -ENOMEM, -EBUSY, else -EIO. */
int wal_errno(int status);

/* A detailed message for open/recovery failures. */
struct wal_error {
	int code;
	char msg[256];
};

/* Record types.  Types >= WAL_REC_USER are free for later layers. */
enum wal_rec_type {
	WAL_REC_PAD = 1,     /* filler up to the physical end of the ring */
	WAL_REC_EPOCH = 2,   /* first record of a writer's epoch */
	WAL_REC_WINDOW = 3,  /* closes (commits) a window */
	WAL_REC_ROUTING = 4, /* top-k expert ids of one layer and step */
	WAL_REC_KVREF = 5,   /* reference to a KV block in the KV store */
	WAL_REC_ALLOC = 6,   /* device allocation with fingerprint */
	WAL_REC_FREE = 7,    /* device allocation released */
	WAL_REC_CRASH = 8,   /* crash marker written by a signal handler */
	WAL_REC_REQUEST = 9, /* an engine request's tokens and KV blocks */
	WAL_REC_EXIT = 10,   /* a writer's clean end (wal_end) */
	WAL_REC_USER = 0x100
};

const char *wal_rec_type_name(unsigned type);

/* ---- Logging ---------------------------------------------------------- */

enum wal_log_level { WAL_LOG_ERROR = 0, WAL_LOG_WARN = 1, WAL_LOG_INFO = 2, WAL_LOG_DEBUG = 3 };
typedef void (*wal_log_fn)(int level, const char *msg);
/* Messages at or below `level` go to fn (NULL: stderr with a "moeft: " prefix). */
void wal_set_log(wal_log_fn fn, int level);

/* ---- Writer ----------------------------------------------------------- */

enum wal_media {
	WAL_MEDIA_SHM = 1,    /* file on tmpfs or a regular filesystem, MAP_SHARED */
	WAL_MEDIA_DAXFILE = 2,/* file on a DAX filesystem, MAP_SHARED_VALIDATE|MAP_SYNC */
	WAL_MEDIA_DEVDAX = 3  /* device-DAX character node, MAP_SHARED, 2 MiB aligned */
};
const char *wal_media_name(int media);

enum wal_open_flags {
	WAL_OPEN_CREATE = 1 << 0, /* create the file when it does not exist */
	WAL_OPEN_FORMAT = 1 << 1  /* format even if the medium holds data (destroys it) */
};

struct wal_options {
	uint64_t size;  /* bytes for a new log; 0: default (64 MiB); ignored for devdax */
	int numa_node;  /* -1: no binding */
	unsigned flags; /* enum wal_open_flags */
};
void wal_options_init(struct wal_options *opt);

struct wal;

/*
 * Open a log for writing.  An existing log is recovered first; writing then
 * continues after its last committed window in a new epoch, so the committed
 * history survives.  A medium that holds no log is formatted when it is
 * blank, refused (WAL_ENOTLOG) when it holds anything else (blank.h).
 * Only one writer may hold a log (flock); a second one gets WAL_EBUSY.
 * A new log appears at path only once formatted (media.h); a symbolic
 * link, a file of another user or one writable by group or others is
 * refused (WAL_EUNSAFE).
 */
int wal_open(const char *path, const struct wal_options *opt, struct wal **out,
	     struct wal_error *err);
/* Unmap and unlock.  An open window is left uncommitted. */
void wal_close(struct wal *w);

/*
 * Append one record to the open window.  Thread-safe; records get LSNs in
 * one total order.  Returns the LSN (> 0) or a negative status.
 */
int64_t wal_append(struct wal *w, unsigned type, const void *payload, uint32_t len);

struct wal_commit_info {
	uint64_t window;    /* id of the committed window */
	uint64_t lsn;       /* LSN of its WINDOW record */
	uint64_t first_lsn; /* first record of the window */
	uint32_t records;   /* records in the window, WINDOW record included */
	uint64_t bytes;     /* ring bytes the window occupies */
};

/*
 * Close the open window: append its WINDOW record (with `extra`, opaque
 * bytes for the caller, e.g. step counters), make everything durable, then
 * publish the commit.  When it returns 0 the window survives any crash.
 */
int wal_commit(struct wal *w, const void *extra, uint32_t extra_len,
	       struct wal_commit_info *info);

/*
 * Drop what was appended to the open window since the last commit (the
 * epoch's EPOCH record stays): for a producer whose window cannot be
 * completed, e.g. a full log, so that the next commit does not publish
 * half of it.  The dropped bytes are erased.
 */
void wal_abort(struct wal *w);

/*
 * The only call that is async-signal-safe: for a crash handler.  Appends
 * one WAL_REC_CRASH record and commits the open window with it (no extra
 * bytes), so the record is durable when this returns 0.  The window may
 * also hold records another producer appended and had not committed yet;
 * they are committed with it (a window ends early, never inside a record).
 * The writer lock is only tried: WAL_EBUSY when another thread (or the
 * interrupted one) holds it, and nothing is written.  Recovery never
 * depends on this record: a process killed by SIGKILL writes none.
 */
int wal_append_crash(struct wal *w, const void *payload, uint32_t len);

/*
 * A writer's clean end: drop what the open window holds (a window that can
 * no longer be completed), append one WAL_REC_EXIT record and commit it;
 * from then on every append and commit returns WAL_EENDED.  A log whose
 * last committed window is followed by an EXIT record was left by a
 * process that exited, not by a crash.  0, or a negative status: the
 * writer goes on (a full log), less the open window's records.
 */
int wal_end(struct wal *w, const void *payload, uint32_t len);
/* The same from a signal handler (async-signal-safe): the lock is only
 * tried, as by wal_append_crash; WAL_EBUSY when it is held. */
int wal_end_signal(struct wal *w, const void *payload, uint32_t len);

/* Move the checkpointed tail to the start of the last committed window,
 * freeing older windows for reuse.  Durable when it returns. */
int wal_checkpoint(struct wal *w);

struct wal_stats {
	int media;
	int numa_node;
	uint64_t size, capacity;      /* whole mapping, ring bytes */
	uint64_t used;                /* ring bytes between tail and head */
	uint32_t epoch;
	uint64_t appends, append_bytes;
	uint64_t commits, reclaims, full_errors, aborts;
	uint64_t next_lsn, last_committed_lsn;
	uint64_t open_window;         /* id the next commit will get */
	uint64_t log_id;              /* random id given when the log was formatted */
};
void wal_stats(struct wal *w, struct wal_stats *st);

/* ---- Reader (recovery) ----------------------------------------------- */

enum wal_window_state { WAL_WINDOW_INTACT = 0, WAL_WINDOW_DAMAGED = 1 };

struct wal_window {
	uint64_t id;
	uint32_t epoch;
	uint32_t state;      /* enum wal_window_state */
	uint64_t first_lsn, last_lsn; /* last_lsn: its WINDOW record */
	uint64_t pos;        /* logical ring position of its first record */
	uint32_t records;    /* from the WINDOW record (0 if that is lost) */
	uint64_t bytes;
	uint64_t commit_ns;  /* CLOCK_REALTIME at commit */
	const uint8_t *extra; /* caller bytes given to wal_commit (NULL if damaged) */
	uint32_t extra_len;
};

/* One finding inside the committed part. */
struct wal_damage {
	uint64_t offset;      /* byte offset in the medium */
	uint64_t lsn;         /* LSN expected there */
	uint64_t lost_records;/* records skipped until the scan resynchronised */
	char reason[96];
};

struct wal_recovery {
	uint32_t version;
	uint64_t log_id;
	uint64_t size, capacity, data_off;
	uint32_t epoch;            /* highest epoch seen (checkpoint or records) */
	uint32_t first_epoch;      /* epoch of the oldest retained record */
	uint64_t ckpt_gen;         /* generation of the checkpoint copy used */
	uint64_t tail_pos, head_pos; /* logical: checkpointed tail, end of committed part */
	uint64_t tail_lsn, tail_window; /* first LSN and window id at the tail */
	uint64_t first_lsn;        /* first retained record (0: none) */
	uint64_t last_committed_lsn;
	uint64_t committed_windows, intact_windows, damaged_windows;
	uint64_t records, bytes;   /* committed records and their ring bytes */
	uint64_t rec_count[16], rec_bytes[16]; /* per type; index 0 = types >= 16 */
	/* Uncommitted tail: dropped, reported, never an error. */
	uint64_t tail_records, tail_bytes;
	uint64_t tail_end_pos;     /* logical: where the scan of the tail stopped */
	char tail_stop[96];        /* why it stopped there */
	/* Damage inside the committed part (capped list, full count). */
	uint64_t damage_count;
	struct wal_damage damage[16];
	char notes[2][128];        /* non-fatal findings, e.g. a torn checkpoint copy */
	unsigned note_count;
};

struct wal_reader;

/* Recover from a byte image of a log (the reader never trusts its input).
 * The buffer must outlive the reader.  Damage is not an error here: it is
 * reported in wal_recovery and damaged windows are never iterated. */
int wal_reader_open_buf(const void *buf, size_t len, struct wal_reader **out,
			struct wal_error *err);
/* Map a log file read-only and recover it. */
int wal_reader_open_path(const char *path, struct wal_reader **out,
			 struct wal_error *err);
void wal_reader_close(struct wal_reader *r);

const struct wal_recovery *wal_reader_recovery(const struct wal_reader *r);
/* Committed windows, oldest first (damaged ones included, flagged). */
const struct wal_window *wal_reader_windows(const struct wal_reader *r, size_t *count);

struct wal_record {
	unsigned type;
	uint32_t len;
	uint32_t index;  /* position within its window */
	uint32_t epoch;
	uint64_t lsn, window;
	uint64_t offset; /* byte offset of the header in the medium */
	const uint8_t *payload;
};

/* Iterate the records of intact committed windows in LSN order (PAD records
 * skipped).  Returns 1 with *rec filled, 0 at the end. */
struct wal_iter {
	const struct wal_reader *r;
	size_t window;
	uint64_t pos;
	uint32_t left;
};
void wal_iter_init(struct wal_iter *it, const struct wal_reader *r);
int wal_iter_next(struct wal_iter *it, struct wal_record *rec);

#ifdef __cplusplus
}
#endif
#endif

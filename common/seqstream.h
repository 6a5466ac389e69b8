/* gmblock: sequential stream detection and readahead windows.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Pure bookkeeping, no I/O and no locking: the caller serialises all
 * calls on one table (a short mutex, never held across I/O).
 *
 * A table holds a fixed number of streams.  A read continues a stream
 * when it starts within 'slack' bytes either side of where the stream
 * has got to (the end of its furthest read): queue depth delivers a
 * sequential scan slightly out of order, and several connections may
 * share one scan.  (Until confirmed, a candidate accepts only reads
 * within GM_SEQ_CANDIDATE_REQS request sizes.)  A read that continues nothing starts a candidate
 * stream in a free or least recently used slot.  After 'confirm' reads
 * continue it, the stream is sequential and gets readahead windows:
 *
 *   first window  [round_up(end, align), +clamp(pow2(4 * len), min, max))
 *   trigger       the start of the newest window: a read reaching it
 *                 issues the next window, twice as large (up to max),
 *                 right after the previous one
 *   outrun        a read beyond everything prefetched restarts the
 *                 windows at that read, keeping the current size
 *
 * so prefetch runs between one and two windows ahead of the reader, as
 * Linux's on-demand readahead does with its async mark.
 *
 * Each window keeps a ledger: every byte queued ends up exactly once as
 * useful (read by the stream after it was issued), wasted (issued, never
 * read), cancelled (never issued), invalidated (changed by a write after
 * it was prefetched; the changed blocks are prefetched again as a new
 * window) or failed.
 */
#ifndef GMBLOCK_SEQSTREAM_H
#define GMBLOCK_SEQSTREAM_H

#include <stdbool.h>
#include <stdint.h>

#define GM_SEQ_WINDOWS 8        /* live windows per stream */
#define GM_SEQ_CANDIDATE_REQS 8 /* candidates tolerate this many requests */

enum gm_win_state {
  GM_WIN_FREE, GM_WIN_QUEUED, GM_WIN_INFLIGHT, GM_WIN_DONE,
};

struct gm_seq_window {
  uint64_t start, len;
  uint64_t consumed;            /* bytes read since it was issued */
  uint64_t issued;              /* bytes of its pieces sent below */
  uint64_t invalidated;         /* of those, changed since by writes */
  uint64_t skipped;             /* bytes of its pieces never sent */
  uint64_t failed;              /* bytes of its pieces that failed below */
  uint64_t inflight;            /* bytes of its pieces sent, not completed */
  uint32_t inflight_pieces;
  uint32_t id;                  /* unique: queued pieces refer to it */
  uint32_t pieces_left;         /* pieces not yet completed or skipped */
  uint8_t state;
  bool orphan;                  /* its stream was replaced: it only waits
                                 * for its pieces in flight */
};

struct gm_seq_stream {
  uint64_t next;                /* end of the furthest read */
  uint64_t last_use;            /* table tick of its last read */
  uint64_t run;                 /* bytes read in sequence */
  uint32_t hits;                /* reads that continued it */
  bool live;
  bool detected;                /* counted once as detected */
  uint64_t win_size;            /* size of the newest window, 0: none */
  uint64_t pf_end;              /* end of everything prefetched */
  uint64_t trigger;             /* reaching this issues the next window */
  struct gm_seq_window win[GM_SEQ_WINDOWS];
};

struct gm_seq_config {
  uint64_t ra_min, ra_max;      /* powers of two, align <= ra_min */
  uint64_t align;               /* power of two */
  uint64_t size;                /* export size: windows stop there */
  uint64_t slack_min;           /* reorder tolerance, at least this */
  unsigned slack_reqs;          /* ... or this many request sizes */
  unsigned confirm;             /* continuing reads before readahead */
  uint64_t stale_ticks;         /* idle this long: may be replaced first */
  uint64_t piece;               /* the caller queues a window as pieces of
                                 * this many bytes (room is counted in
                                 * whole pieces); 0: no cutting */
};

struct gm_seq_ledger {
  uint64_t queued, useful, wasted, cancelled, invalidated, failed;
};

struct gm_seq_table {
  struct gm_seq_config cfg;
  struct gm_seq_stream *s;
  unsigned n;
  uint64_t tick;                /* counts reads */
  uint32_t next_win_id;
  uint64_t detected;            /* streams that became sequential */
  uint64_t seq_reads;           /* reads that continued a stream */
  struct gm_seq_ledger ledger;
};

/* What gm_seq_read asks the caller to prefetch. */
struct gm_seq_issue {
  unsigned stream;
  struct gm_seq_window *win;    /* valid while the caller holds the lock */
  uint64_t start, len;
  uint64_t dedup;               /* bytes trimmed: already being prefetched */
};

void gm_seq_init (struct gm_seq_table *t, struct gm_seq_stream *streams,
                  unsigned n, const struct gm_seq_config *cfg);

/* Note a client read.  room is how many bytes the caller can queue
 * now (0: nothing).  Returns true and fills *issue when a window must
 * be prefetched; the window is then QUEUED and the caller must set
 * win->pieces_left before dropping the lock.
 */
bool gm_seq_read (struct gm_seq_table *t, uint64_t offset, uint32_t len,
                  uint64_t room, struct gm_seq_issue *issue);

/* A worker is about to issue a piece of window 'id' of 'stream'.
 * False means skip it: the window is gone, or the reader has passed
 * it (then the piece's bytes count as cancelled).  The pieces of a
 * window are claimed in order, and all but the last are the same
 * length.
 */
bool gm_seq_claim (struct gm_seq_table *t, unsigned stream, uint32_t id,
                   uint64_t piece_off, uint64_t piece_len);

/* How a claimed piece ended below. */
enum gm_seq_outcome {
  GM_SEQ_OK,
  GM_SEQ_FAILED,
  GM_SEQ_ABORTED,   /* cut short by the server shutting down */
};

/* A claimed piece of piece_len bytes ended.  A failed piece counts
 * exactly its own bytes as failed, an aborted one as cancelled (nothing
 * went wrong below); the window's other pieces stay prefetched.
 */
void gm_seq_done (struct gm_seq_table *t, unsigned stream, uint32_t id,
                  uint64_t piece_len, enum gm_seq_outcome how);

/* A write, trim or zero changed [offset, offset+len).  The aligned
 * blocks of it inside completed or in-flight windows still ahead of
 * their reader count as invalidated and are queued again as new windows
 * (at most max_refill of them, within room bytes) in *refill, for the
 * caller to queue like gm_seq_read's.  *dropped gets the bytes
 * invalidated.  Returns the number of refills.
 */
unsigned gm_seq_invalidate (struct gm_seq_table *t, uint64_t offset,
                            uint64_t len, uint64_t room,
                            struct gm_seq_issue *refill, unsigned max_refill,
                            uint64_t *dropped);

/* Retire every window (at shutdown, workers stopped): queued ones are
 * cancelled, completed ones useful or wasted.
 */
void gm_seq_retire_all (struct gm_seq_table *t);

/* Smallest power of two >= 4 * len, within [ra_min, ra_max]. */
uint64_t gm_seq_first_window (const struct gm_seq_config *c, uint32_t len);

#endif /* GMBLOCK_SEQSTREAM_H */

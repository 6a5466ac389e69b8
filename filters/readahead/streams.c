/* gmblock-readahead filter: the stream table shared by all connections.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * One table, not one per connection: nbdcopy and multi-queue clients
 * split a single scan over several connections, and only a shared
 * table sees it whole.  The lock is held for a scan of a few dozen
 * streams and never across I/O.
 */
#include "readahead.h"

#define RA_STREAMS 32
#define SLACK_MIN (256u << 10)  /* reorder tolerance of a known stream */
#define SLACK_REQS 64           /* ... or this many requests (deep queues) */
#define CONFIRM 2               /* continuing reads before readahead */
#define STALE_READS 4096        /* a stream idle this long may go */

pthread_mutex_t ra_lock = PTHREAD_MUTEX_INITIALIZER;
struct gm_seq_table table;
bool ra_active;
static struct gm_seq_stream stream_slots[RA_STREAMS];

void
streams_init (uint64_t export_size, uint64_t align)
{
  struct gm_seq_config c = {
    .ra_min = cfg.ra_min > align ? cfg.ra_min : align,
    .ra_max = cfg.ra_max,
    .align = align,
    .size = export_size,
    .slack_min = SLACK_MIN,
    .slack_reqs = SLACK_REQS,
    .confirm = CONFIRM,
    .stale_ticks = STALE_READS,
    .piece = piece_size,
  };
  gm_seq_init (&table, stream_slots, RA_STREAMS, &c);
}

/* Cut a queued window into pieces, so that several workers fill it at
 * once (a slow layer below serves one request at a time per context).
 */
static void
queue_window (const struct gm_seq_issue *is)
{
  uint64_t off = is->start, end = is->start + is->len;

  is->win->pieces_left = (is->len + piece_size - 1) / piece_size;
  while (off < end) {
    struct ra_piece p = {
      .offset = off,
      .len = end - off < piece_size ? end - off : piece_size,
      .win_id = is->win->id,
      .stream = is->stream,
    };
    prefetch_push (&p);
    off += p.len;
  }
  prefetch_wake ();
}

void
streams_note_read (uint64_t offset, uint32_t count)
{
  struct gm_seq_issue is;
  bool queued = false;
  unsigned room;

  pthread_mutex_lock (&ra_lock);
  room = prefetch_room ();
  if (gm_seq_read (&table, offset, count, (uint64_t) room * piece_size, &is)) {
    if (is.dedup)
      RCOUNT (RS_DEDUP_BYTES, is.dedup);
    if (is.win) {
      queue_window (&is);
      queued = true;
    }
  }
  else if (room == 0)
    RCOUNT (RS_QUEUE_FULL, 1);
  pthread_mutex_unlock (&ra_lock);

  if (queued) {
    RCOUNT (RS_WINDOWS, 1);
    stats_window (is.len);
    nbdkit_debug (RNAME ": stream %u: window %llu+%llu", is.stream,
                  (unsigned long long) is.start, (unsigned long long) is.len);
  }
}

/* The changed blocks of windows ahead of a reader are queued again, so
 * the reader still finds them prefetched, now with the new data.
 */
void
streams_invalidate (uint64_t offset, uint64_t count)
{
  struct gm_seq_issue refill[4];
  uint64_t dropped;
  unsigned n;

  pthread_mutex_lock (&ra_lock);
  n = gm_seq_invalidate (&table, offset, count,
                         (uint64_t) prefetch_room () * piece_size,
                         refill, 4, &dropped);
  for (unsigned i = 0; i < n; i++)
    queue_window (&refill[i]);
  pthread_mutex_unlock (&ra_lock);
  if (dropped)
    RCOUNT (RS_WRITES_INVALIDATING, 1);
  if (n)
    RCOUNT (RS_REFILLS, n);
}

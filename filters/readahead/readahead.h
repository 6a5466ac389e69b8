/* gmblock-readahead filter: shared declarations.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Client reads are noted in one table of sequential streams
 * (common/seqstream) shared by every connection; a stream that turns
 * out sequential gets readahead windows, cut into pieces and queued
 * for a few background workers, each with its own context into the
 * layer below, which issue them as NBD_CMD_CACHE.  One mutex guards
 * the table and the queue; it is never held across I/O.
 */
#ifndef GMBLOCK_READAHEAD_H
#define GMBLOCK_READAHEAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-filter.h>

#include "counters.h"
#include "statsout.h"
#include "seqstream.h"

#define RNAME "gmblock-readahead"

struct ra_config {
  uint64_t ra_min, ra_max;      /* window bounds, powers of two */
  unsigned max_inflight;        /* workers = prefetches in flight */
};
extern struct ra_config cfg;

/* ---- streams.c: the shared table, under ra_lock ---- */
extern pthread_mutex_t ra_lock;
extern struct gm_seq_table table;
extern bool ra_active;          /* set once in .after_fork */

void streams_init (uint64_t export_size, uint64_t align);
void streams_note_read (uint64_t offset, uint32_t count);
void streams_invalidate (uint64_t offset, uint64_t count);

/* ---- prefetch.c: bounded queue and workers ---- */
struct ra_piece {
  uint64_t offset;
  uint32_t len;
  uint32_t win_id;
  unsigned stream;
};

extern uint64_t piece_size;
/* With ra_lock held: free queue slots, and queue one piece. */
unsigned prefetch_room (void);
void prefetch_push (const struct ra_piece *p);
void prefetch_wake (void);
int prefetch_start (nbdkit_backend *backend);
void prefetch_stop (void);

/* ---- stats.c ---- */
enum ra_stat {
  RS_READS, RS_READ_BYTES, RS_WRITES_INVALIDATING,
  RS_WINDOWS, RS_PREFETCH_REQUESTS, RS_PREFETCH_BYTES,
  RS_PREFETCH_ERRORS, RS_DEDUP_BYTES, RS_QUEUE_FULL, RS_REFILLS,
  RS_COUNT
};
extern struct gm_counter rstats[RS_COUNT];
#define RCOUNT(s, n) gm_count (&rstats[s], (n))

void stats_window (uint64_t size);
extern struct gm_stats_out rstats_out;

#endif /* GMBLOCK_READAHEAD_H */

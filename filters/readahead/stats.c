/* gmblock-readahead filter: counters, printed with
 * -D gmblock-readahead.stats=1 or written to ra-stats=FILE at exit.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdio.h>

#include "readahead.h"

/* -D NAME.stats=1 (see GM_DEBUG_FLAG for the hyphenated name). */
GM_DEBUG_FLAG (gmblock_readahead_debug_stats, "gmblock-readahead_debug_stats");

#define C GM_COUNTER
struct gm_counter rstats[RS_COUNT] = {
  C (RS_READS, "reads", "client read requests"),
  C (RS_READ_BYTES, "read_bytes", "bytes read by clients"),
  C (RS_WRITES_INVALIDATING, "writes_invalidating", "writes, trims or zeroes that dropped prefetched windows"),
  C (RS_WINDOWS, "windows", "readahead windows queued"),
  C (RS_PREFETCH_REQUESTS, "prefetch_requests", "NBD_CMD_CACHE requests sent below"),
  C (RS_PREFETCH_BYTES, "prefetch_bytes", "bytes prefetched below (successful requests)"),
  C (RS_PREFETCH_ERRORS, "prefetch_errors", "prefetch requests that failed below (never seen by clients)"),
  C (RS_DEDUP_BYTES, "dedup_bytes", "window bytes not queued: another stream was prefetching them"),
  C (RS_QUEUE_FULL, "queue_full", "reads that found the prefetch queue full"),
  C (RS_REFILLS, "refills", "changed blocks queued again after a write"),
};

/* Windows queued, by size (powers of two, 4K to 64M). */
#define HIST 15
static _Atomic uint64_t window_hist[HIST];

void
stats_window (uint64_t size)
{
  unsigned b = 0;

  while (b + 1 < HIST && (4096ull << (b + 1)) <= size)
    b++;
  atomic_fetch_add_explicit (&window_hist[b], 1, memory_order_relaxed);
}

/* The ledger and stream counts live in the table, under ra_lock: the
 * interval writer reads them while clients and workers run.
 */
static void
print_ledger (FILE *fp, void *opaque)
{
  struct gm_seq_ledger l_copy;
  const struct gm_seq_ledger *l = &l_copy;
  uint64_t read_bytes = gm_counter_get (&rstats[RS_READ_BYTES]);
  uint64_t detected, seq_reads;

  pthread_mutex_lock (&ra_lock);
  l_copy = table.ledger;
  detected = table.detected;
  seq_reads = table.seq_reads;
  pthread_mutex_unlock (&ra_lock);

  fprintf (fp, RNAME ".active %d\n", ra_active);
  fprintf (fp, RNAME ".streams_detected %llu\n",
           (unsigned long long) detected);
  fprintf (fp, RNAME ".sequential_reads %llu\n",
           (unsigned long long) seq_reads);
  fprintf (fp, RNAME ".queued_bytes %llu\n", (unsigned long long) l->queued);
  fprintf (fp, RNAME ".useful_bytes %llu\n", (unsigned long long) l->useful);
  fprintf (fp, RNAME ".wasted_bytes %llu\n", (unsigned long long) l->wasted);
  fprintf (fp, RNAME ".cancelled_bytes %llu\n",
           (unsigned long long) l->cancelled);
  fprintf (fp, RNAME ".invalidated_bytes %llu\n",
           (unsigned long long) l->invalidated);
  fprintf (fp, RNAME ".failed_bytes %llu\n", (unsigned long long) l->failed);
  fprintf (fp, RNAME ".wasted_per_read_byte %.4f\n",
           read_bytes ? (double) l->wasted / read_bytes : 0.0);
  for (unsigned b = 0; b < HIST; b++) {
    uint64_t n = atomic_load (&window_hist[b]);
    if (n)
      fprintf (fp, RNAME ".window_%lluK %llu\n",
               (unsigned long long) (4ull << b), (unsigned long long) n);
  }
}

struct gm_stats_out rstats_out =
  GM_STATS_OUT ("readahead", RNAME, "ra-stats", rstats, RS_COUNT, print_ledger,
                &gmblock_readahead_debug_stats);

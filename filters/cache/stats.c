/* gmblock-cache filter: counters, printed with -D gmblock-cache.stats=1
 * or written to cache-stats=FILE when nbdkit exits.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdio.h>

#include "cache.h"

/* -D NAME.stats=1 (see GM_DEBUG_FLAG for the hyphenated name). */
GM_DEBUG_FLAG (gmblock_cache_debug_stats, "gmblock-cache_debug_stats");

#define C GM_COUNTER
struct gm_counter cstats[CS_COUNT] = {
  C (CS_READS, "reads", "read requests"),
  C (CS_READ_BYTES, "read_bytes", "bytes read by clients"),
  C (CS_HITS, "hits", "block lookups found in the cache"),
  C (CS_MISSES, "misses", "block lookups not found"),
  C (CS_HIT_BYTES, "hit_bytes", "bytes served from the cache"),
  C (CS_SCAN_HITS, "scan_hits", "hits by reads that were part of a scan"),
  C (CS_SCAN_MISSES, "scan_misses", "misses by reads that were part of a scan"),
  C (CS_FILLS, "fills", "blocks read from below into the cache"),
  C (CS_FILL_BYTES, "fill_bytes", "bytes read from below into the cache"),
  C (CS_FILL_WAITS, "fill_waits", "waits for a block another request was filling or writing"),
  C (CS_BYPASS_BYTES, "bypass_bytes", "bytes read from below straight into the client's buffer"),
  C (CS_ADMIT_REPEAT, "admit_repeat", "adaptive: admitted on a repeated read"),
  C (CS_ADMIT_SHARED, "admit_shared", "adaptive: admitted because another connection read it"),
  C (CS_ADMIT_FOLLOWED, "admit_followed", "adaptive: admitted because other scans follow this one"),
  C (CS_ADMIT_PREFETCH, "admit_prefetch", "admitted by NBD_CMD_CACHE"),
  C (CS_EVICTIONS, "evictions", "blocks evicted (a dirty one once written back)"),
  C (CS_DIRTY_EVICTIONS, "dirty_evictions", "dirty blocks written back to make room (failed attempts not counted)"),
  C (CS_STALE_FILLS, "stale_fills", "fills discarded because a write raced with them"),
  C (CS_WRITES, "writes", "write requests"),
  C (CS_WRITE_BYTES, "write_bytes", "bytes written by clients"),
  C (CS_WRITE_FILLS, "write_fills", "blocks read below to complete a partial write"),
  C (CS_WRITEBACKS, "writebacks", "dirty blocks written below"),
  C (CS_WRITEBACK_BYTES, "writeback_bytes", "bytes written back"),
  C (CS_WRITEBACK_WRITES, "writeback_writes", "writes below that carried them (fewer than blocks when merged)"),
  C (CS_FLUSHES, "flushes", "flush requests"),
  C (CS_FUA, "fua", "writes with FUA"),
  C (CS_TRIMS, "trims", "trim requests"),
  C (CS_ZEROS, "zeros", "zero requests"),
  C (CS_INVALIDATIONS, "invalidations", "blocks dropped by trim, zero or a racing write"),
  C (CS_PREFETCHES, "prefetches", "NBD_CMD_CACHE requests"),
  C (CS_MEMCPY_READ_BYTES, "memcpy_read_bytes", "bytes copied cache -> client buffer"),
  C (CS_MEMCPY_WRITE_BYTES, "memcpy_write_bytes", "bytes copied client buffer -> cache"),
  C (CS_ERRORS, "errors", "failed write-backs"),
  C (CS_NO_SLOT, "no_slot", "block pieces served below: every victim dirty and failing"),
  C (CS_WB_FULL_STRIPE, "wb_full_stripe_writes", "stripe write-back: writes of whole, aligned stripes"),
  C (CS_WB_PARTIAL_STRIPE, "wb_partial_stripe_writes", "stripe write-back: writes of part of a stripe"),
  C (CS_WB_MERGED, "wb_merged_writes", "write-back: writes carrying more than one block (a stripe's, or writeback-merge's run)"),
  C (CS_WB_BLOCKS, "wb_blocks", "write-back: blocks carried by stripe or merged writes"),
  C (CS_WB_HELD, "wb_partial_held", "stripe write-back: partly dirty stripes a background pass left for later"),
  C (CS_WB_PRESSURE, "wb_pressure_passes", "stripe write-back: background passes that wrote partial stripes because the cache was nearly all dirty"),
  C (CS_FUA_FLUSHES, "fua_flushes", "FUA requests in a write-back mode, served as a flush of every dirty block"),
  C (CS_FLUSH_FAILURES_REPORTED, "flush_failures_reported", "flush and FUA replies failed with EIO for a flush below that failed on another request (once per connection)"),
};

static void
print_derived (FILE *fp, void *opaque)
{
  /* The scans' parts first and capped: requests count the totals
   * first, so parts read after them may be ahead (a review finding:
   * the live ratio wrapped to 0, or above 1). */
  uint64_t sh = gm_counter_get (&cstats[CS_SCAN_HITS]);
  uint64_t sm = gm_counter_get (&cstats[CS_SCAN_MISSES]);
  uint64_t h = gm_counter_get (&cstats[CS_HITS]);
  uint64_t m = gm_counter_get (&cstats[CS_MISSES]);

  if (sh > h)
    sh = h;
  if (sm > m)
    sm = m;

  fprintf (fp, CNAME ".hit_ratio %.4f\n", h + m ? (double) h / (h + m) : 0.0);
  fprintf (fp, CNAME ".nonscan_hit_ratio %.4f\n",
           h + m - sh - sm ? (double) (h - sh) / (h + m - sh - sm) : 0.0);
  fprintf (fp, CNAME ".dirty_bytes %llu\n",
           (unsigned long long) atomic_load (&tbl.ndirty) * tbl.bs);
  fprintf (fp, CNAME ".block_size %llu\n", (unsigned long long) tbl.bs);
  fprintf (fp, CNAME ".wb_stripe_bytes %llu\n",
           (unsigned long long) (swb.used && swb.geometry ? swb.width : 0));
  fprintf (fp, CNAME ".wb_merge_bytes %llu\n",
           (unsigned long long) (swb.used && !swb.geometry ? swb.unit : 0));
  fprintf (fp, CNAME ".slots %u\n", tbl.nslots);
  fprintf (fp, CNAME ".shards %u\n", tbl.nshards);
  fprintf (fp, CNAME ".backing %s\n",
           tbl.pool ? tbl.pool->mem.backing : "none");
}

struct gm_stats_out cstats_out =
  GM_STATS_OUT ("cache", CNAME, "cache-stats", cstats, CS_COUNT, print_derived,
                &gmblock_cache_debug_stats);

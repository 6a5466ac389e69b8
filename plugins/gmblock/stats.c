/* gmblock plugin: counters, so that copies per byte served is measured.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdatomic.h>
#include <stdio.h>

#include "gmblock.h"

/* -D gmblock.stats=1 prints the counters when nbdkit exits. */
NBDKIT_DLL_PUBLIC int gmblock_debug_stats = 0;

#define C GM_COUNTER
struct gm_counter gm_stats[ST_COUNT] = {
  C (ST_READS, "reads", "read requests"),
  C (ST_READ_BYTES, "read_bytes", "bytes requested by reads"),
  C (ST_WRITES, "writes", "write requests"),
  C (ST_WRITE_BYTES, "write_bytes", "bytes written by clients"),
  C (ST_FUA_WRITES, "fua_writes", "writes with FUA"),
  C (ST_FLUSHES, "flushes", "flush requests"),
  C (ST_TRIMS, "trims", "trim requests"),
  C (ST_TRIM_BYTES, "trim_bytes", "bytes trimmed"),
  C (ST_ZEROS, "zeros", "zero requests"),
  C (ST_ZERO_BYTES, "zero_bytes", "bytes zeroed"),
  C (ST_FAST_ZERO_REFUSED, "fast_zero_refused", "fast zeros refused (ENOTSUP)"),
  C (ST_EXTENTS, "extents", "block status requests"),
  C (ST_CACHES, "caches", "cache (prefetch) requests"),
  C (ST_CACHE_BYTES, "cache_bytes", "bytes prefetched"),
  C (ST_DMA_POOL_BYTES, "dma_pool_bytes", "bytes moved by O_DIRECT to or from pool buffers"),
  C (ST_DMA_CLIENT_BYTES, "dma_client_bytes", "bytes moved by O_DIRECT straight to or from nbdkit's buffer"),
  C (ST_BUFFERED_BYTES, "buffered_bytes", "bytes moved through the page cache"),
  C (ST_MEMCPY_READ_BYTES, "memcpy_read_bytes", "bytes copied pool -> nbdkit buffer"),
  C (ST_MEMCPY_WRITE_BYTES, "memcpy_write_bytes", "bytes copied nbdkit buffer -> pool"),
  C (ST_RMW_BYTES, "rmw_bytes", "bytes read for read-modify-write"),
  C (ST_WIDEN_BYTES, "widen_bytes", "extra bytes read to align reads"),
  C (ST_SERVED_BYTES, "served_bytes", "bytes returned to readers"),
  C (ST_ERRORS, "errors", "requests that failed"),
  C (ST_DMA_DEVICE_BYTES, "dma_device_bytes", "bytes moved by O_DIRECT to or from device memory (buffer=p2pmem or bar)"),
  C (ST_COPY_FROM_DEVICE_BYTES, "cpu_copy_from_device_bytes", "bytes the CPU copied out of device memory"),
  C (ST_COPY_TO_DEVICE_BYTES, "cpu_copy_to_device_bytes", "bytes the CPU copied into device memory"),
  C (ST_STAGED_BYTES, "staged_bytes", "bytes staged through host memory because the device memory cannot take DMA"),
  C (ST_DMA_OPS, "dma_ops", "O_DIRECT transfers (into pool, device memory or nbdkit's buffer)"),
  C (ST_DMA_NS, "dma_ns", "nanoseconds spent waiting for those transfers"),
  C (ST_FUA_SYNCS, "fua_syncs", "FUA writes that also synced earlier writes (fdatasync)"),
  C (ST_SYNCS_SHARED, "syncs_shared", "flushes answered by another's fdatasync that started after their writes"),
  C (ST_POOL_GETS, "pool_gets", "pool buffers taken"),
  C (ST_POOL_WAITS, "pool_waits", "waits for a free pool buffer"),
};

/* The pool counts its own takes and waits; brought into the table
 * before each output, so they are counters (_total in Prometheus).
 */
static void
pool_refresh (void)
{
  struct gm_pool_stats ps;

  if (gm.pool == NULL)
    return;
  gm_pool_get_stats (gm.pool, &ps);
  atomic_store (&gm_stats[ST_POOL_GETS].value, ps.gets);
  atomic_store (&gm_stats[ST_POOL_WAITS].value, ps.waits);
}

static void
print_derived (FILE *fp, void *opaque)
{
  uint64_t served = gm_counter_get (&gm_stats[ST_SERVED_BYTES]);
  uint64_t copied = gm_counter_get (&gm_stats[ST_MEMCPY_READ_BYTES]);
  struct gm_pool_stats ps = { 0 };

  if (gm.pool)
    gm_pool_get_stats (gm.pool, &ps);
  fprintf (fp, GM_NAME ".read_copies_per_byte %.3f\n",
           served ? (double) copied / served : 0.0);
  fprintf (fp, GM_NAME ".tcp_device_copies_per_byte %.3f\n",
           served ? (double) gm_counter_get (&gm_stats[ST_COPY_FROM_DEVICE_BYTES])
           / served : 0.0);
  fprintf (fp, GM_NAME ".dma_avg_us %.1f\n",
           gm_counter_get (&gm_stats[ST_DMA_OPS]) ?
           gm_counter_get (&gm_stats[ST_DMA_NS]) / 1e3 /
           gm_counter_get (&gm_stats[ST_DMA_OPS]) : 0.0);
  fprintf (fp, GM_NAME ".fail_stop %d\n", gm_failstop_level ());
  fprintf (fp, GM_NAME ".pool_size %zu\n", ps.size);
  fprintf (fp, GM_NAME ".pool_in_use %zu\n", ps.in_use);
  fprintf (fp, GM_NAME ".pool_peak %zu\n", ps.peak);
  fprintf (fp, GM_NAME ".pool_quarantined %zu\n", ps.quarantined);
}

struct gm_stats_out gm_stats_out =
  GM_STATS_OUT ("plugin", GM_NAME, "stats", gm_stats, ST_COUNT, print_derived,
                &gmblock_debug_stats, .refresh = pool_refresh);

/* gmblock-rdma filter: counters, and how much disk and network overlap.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Per request size (powers of two, rounded up), for successful READs:
 * the time the disk was busy (the union of the pieces' reads), the
 * time the network was (the union of the pieces' RDMA WRITEs, posted
 * to completed), and both at once, over the request's time from its
 * receive to its reply's completion.  Issue 10 asks for an overlap
 * ratio of at least 0.6 for 1M requests on RAID0.
 */
#include <inttypes.h>
#include <stdio.h>

#include "rdma.h"
#include "sizes.h"

struct gm_counter gm_rdma_stats[RC_COUNT] = {
  GM_COUNTER (RC_CLIENTS, "clients_accepted", "RDMA clients accepted"),
  GM_COUNTER (RC_REFUSED, "clients_refused", "RDMA connect requests refused"),
  GM_COUNTER (RC_DROPPED, "clients_dropped", "RDMA clients dropped for a protocol or transport error"),
  GM_COUNTER (RC_PROTO_ERRORS, "protocol_errors", "malformed messages received"),
  GM_COUNTER (RC_REQUESTS, "requests", "requests served (with a reply)"),
  GM_COUNTER (RC_READ_BYTES, "read_bytes", "bytes sent to clients by RDMA WRITE"),
  GM_COUNTER (RC_WRITE_BYTES, "write_bytes", "bytes fetched from clients by RDMA READ"),
  GM_COUNTER (RC_RDMA_WRITES, "rdma_writes", "RDMA WRITEs posted"),
  GM_COUNTER (RC_RDMA_READS, "rdma_reads", "RDMA READs posted"),
  GM_COUNTER (RC_ERROR_REPLIES, "error_replies", "replies carrying an error"),
  GM_COUNTER (RC_POOL_WAITS, "pool_waits", "requests that waited for pool memory"),
  GM_COUNTER (RC_SPLIT_READS, "split_reads", "READs sent in pieces as they landed"),
  GM_COUNTER (RC_PIECES, "pieces", "pieces of split READs"),
  GM_COUNTER (RC_WHOLE_BUSY, "whole_reads_busy", "READs read whole because the client had other requests in service"),
  GM_COUNTER (RC_DEVICE_MR, "device_mr", "1: the NIC registered the device memory pool"),
  GM_COUNTER (RC_EXTENTS, "extents_sent", "BLOCK_STATUS extents sent"),
  GM_COUNTER (RC_STAGED_BYTES, "staged_bytes", "bytes copied by the CPU between device memory and registered host memory"),
  GM_COUNTER (RC_GOODBYES, "goodbyes", "clients told at shutdown that everything acknowledged is flushed"),
  GM_COUNTER (RC_FENCE_WAITS, "fence_waits", "writes, trims and zeros (RDMA or TCP) that waited for an overlapping one of a client gone meanwhile to land"),
  GM_COUNTER (RC_REPLACED, "clients_replaced", "RDMA clients dropped because their bridge connected again (the same connection identity) while they still looked open here"),
  GM_COUNTER (RC_KEEPALIVE_PROBES, "keepalive_probes", "zero-length RDMA WRITEs sent to clients silent for rdma-keepalive seconds"),
  GM_COUNTER (RC_KEEPALIVE_DROPS, "keepalive_drops", "silent RDMA clients dropped because a keepalive probe found them gone"),
  GM_COUNTER (RC_ABANDONED, "clients_abandoned", "RDMA clients dropped because another connection of their bridge said it gave up on them (ABANDON)"),
  GM_COUNTER (RC_UNSERVED, "unserved_at_shutdown", "requests received while shutting down, left unserved and unanswered (the client sends them again)"),
};

#define MIN_SHIFT 12            /* 4K */
#define NBUCKETS 14             /* 4K .. 32M */

static struct {
  _Atomic uint64_t requests, total_ns, disk_ns, net_ns, both_ns;
} bucket[NBUCKETS];

/* -D gmblock-rdma.trace=1: one debug line per READ with each piece's
 * read and send, in microseconds from the request's receive, to see
 * where a request's time goes (bench/rdma/overlap).
 */
static void
trace (const struct req *q, uint64_t t_end)
{
  char line[MAX_PIECES * 48 + 64];
  size_t n = 0;

#define US(t) ((t) > q->t0 ? ((t) - q->t0) / 1000 : 0)
  n += snprintf (line, sizeof line, "off %" PRIu64 " len %" PRIu32
                 " end %" PRIu64, q->r.offset, q->r.length, US (t_end));
  for (unsigned i = 0; i < q->npieces && n < sizeof line; i++)
    n += snprintf (line + n, sizeof line - n,
                   " | %u disk %" PRIu64 "-%" PRIu64 " net %" PRIu64
                   "-%" PRIu64, i, US (q->disk[i].start), US (q->disk[i].end),
                   US (q->net[i].start), US (q->net[i].end));
#undef US
  nbdkit_debug (NAME ": trace: %s", line);
}

void
gm_rdma_overlap_add (const struct req *q, uint64_t t_end)
{
  struct gm_span d[MAX_PIECES], n[MAX_PIECES];
  unsigned b = 0, np = q->npieces;

  while (b + 1 < NBUCKETS && (1ull << (MIN_SHIFT + b)) < q->r.length)
    b++;
  for (unsigned i = 0; i < np; i++) {
    d[i] = q->disk[i];
    n[i] = q->net[i];
  }
  bucket[b].requests++;
  bucket[b].total_ns += t_end - q->t0;
  bucket[b].both_ns += gm_overlap_ns (d, np, n, np);
  bucket[b].disk_ns += gm_union_ns (d, np);
  bucket[b].net_ns += gm_union_ns (n, np);
  if (gmblock_rdma_debug_trace)
    trace (q, t_end);
}

/* "overlap_1M 0.634" and its parts, per size seen. */
static void
overlap_lines (FILE *fp, void *opaque)
{
  for (unsigned b = 0; b < NBUCKETS; b++) {
    uint64_t r = bucket[b].requests, t = bucket[b].total_ns;
    char sz[32];

    if (r == 0 || t == 0)
      continue;
    gm_format_size (1ull << (MIN_SHIFT + b), sz, sizeof sz);
    fprintf (fp, NAME ".overlap_%s %.3f\n", sz,
             (double) bucket[b].both_ns / t);
    fprintf (fp, NAME ".overlap_%s_requests %" PRIu64 "\n", sz, r);
    fprintf (fp, NAME ".overlap_%s_disk_busy %.3f\n", sz,
             (double) bucket[b].disk_ns / t);
    fprintf (fp, NAME ".overlap_%s_net_busy %.3f\n", sz,
             (double) bucket[b].net_ns / t);
    fprintf (fp, NAME ".overlap_%s_mean_us %.1f\n", sz,
             t / 1000.0 / r);
  }
}

struct gm_stats_out gm_rdma_stats_out =
  GM_STATS_OUT ("rdma", NAME, "rdma-stats", gm_rdma_stats, RC_COUNT,
                overlap_lines, &gmblock_rdma_debug_stats,
                .refresh = gm_rdma_memory_stats);

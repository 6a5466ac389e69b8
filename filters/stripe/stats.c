/* gmblock-stripe filter: counters, printed with -D gmblock-stripe.stats=1
 * or written to stripe-stats=FILE at exit, with the geometry in use.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdio.h>

#include "stripe.h"

/* -D NAME.stats=1 and -D NAME.verbose=1 (see GM_DEBUG_FLAG). */
GM_DEBUG_FLAG (gmblock_stripe_debug_stats, "gmblock-stripe_debug_stats");
GM_DEBUG_FLAG (gmblock_stripe_debug_verbose, "gmblock-stripe_debug_verbose");

#define C GM_COUNTER
struct gm_counter sstats[SS_COUNT] = {
  C (SS_CACHE_REQUESTS, "cache_requests", "NBD_CMD_CACHE requests from above"),
  C (SS_CACHE_ROUNDED, "cache_rounded", "of those, rounded out to whole stripes"),
  C (SS_CACHE_BYTES_IN, "cache_bytes_in", "bytes asked to be cached from above"),
  C (SS_CACHE_BYTES_OUT, "cache_bytes_out", "bytes asked to be cached below, after rounding"),
  C (SS_WRITES, "writes", "write requests (passed through)"),
  C (SS_WRITES_FULL_STRIPE, "writes_full_stripe", "writes made of whole, aligned stripes only"),
  C (SS_WRITES_PARTIAL, "writes_partial", "writes touching part of a stripe (read-modify-write on parity RAID)"),
  C (SS_CONNECTIONS, "connections", "connections opened, those of filters above included (gmblock-cache opens one of its own; each reads the geometry again)"),
  C (SS_RESHAPE_CONNECTIONS, "reshape_connections", "of those, opened during an md reshape: passed through"),
  C (SS_GEOMETRY_CHANGES, "geometry_changes", "times new connections got a geometry other than the last one in use"),
};

/* The geometry for new connections at exit (after a reshape: the new
 * one, with geometry_changes counting it).
 */
static void
print_geometry (FILE *fp, void *opaque)
{
  struct sp_geom g;

  geometry_current (&g);
  fprintf (fp, SNAME ".active %d\n", g.active);
  fprintf (fp, SNAME ".reshape %d\n", g.reshape);
  fprintf (fp, SNAME ".chunk %llu\n", (unsigned long long) g.geo.chunk);
  fprintf (fp, SNAME ".data_disks %u\n", g.geo.data_disks);
  fprintf (fp, SNAME ".parity %u\n", g.geo.parity);
  fprintf (fp, SNAME ".parity_known %d\n", g.geo.parity_known);
  fprintf (fp, SNAME ".stripe_bytes %llu\n", (unsigned long long) g.width);
  fprintf (fp, SNAME ".offset %llu\n", (unsigned long long) g.geo.offset);
  fprintf (fp, SNAME ".preferred_block %u\n",
           g.active ? shape_preferred (&g) : 0);
}

struct gm_stats_out sstats_out =
  GM_STATS_OUT ("stripe", SNAME, "stripe-stats", sstats, SS_COUNT,
                print_geometry, &gmblock_stripe_debug_stats);

/* gmblock-stripe filter: shared declarations.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Learns the RAID stripe geometry under the export (md sysfs, the
 * queue's io_min/io_opt, or options) once at start-up, then shapes
 * what it can: the block sizes advertised to clients and NBD_CMD_CACHE
 * requests going down.  Data requests pass through unchanged.
 */
#ifndef GMBLOCK_STRIPE_FILTER_H
#define GMBLOCK_STRIPE_FILTER_H

#include <stdbool.h>
#include <stdint.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-filter.h>

#include "counters.h"
#include "stripegeo.h"

#define SNAME "gmblock-stripe"

/* Largest full stripe: the largest NBD request nbdkit and gmblock take. */
#define MAX_STRIPE (32u << 20)
#define MAX_DATA_DISKS 1024

struct sp_config {
  uint64_t chunk;               /* stripe-chunk=, 0 unset */
  unsigned data_disks;          /* stripe-data-disks=, 0 unset */
  int parity;                   /* stripe-parity=, -1 unset */
  char *sysfs;                  /* stripe-sysfs=, NULL = /sys */
  char *stats_file;             /* stripe-stats= */
};
extern struct sp_config cfg;

/* ---- geometry.c: what the filter decided, fixed after config ---- */
extern bool sp_active;          /* a geometry is known: shape */
extern struct gm_stripe geo;
extern uint64_t sp_width;       /* one full data stripe, bytes */

/* After the layers below completed their configuration: detect, merge
 * the options in, report.  Returns 0 or -1 (refused, error given).
 */
int geometry_decide (void);
/* Print the geometry to stderr (-D gmblock-stripe.verbose=1). */
void geometry_print (void);

/* ---- shape.c ---- */
/* The largest power of two not above the full stripe. */
uint32_t shape_preferred (void);
/* [*start, *end) rounded out to whole stripes, clamped to size. */
void shape_round_out (uint64_t offset, uint32_t count, uint64_t size,
                      uint64_t *start, uint64_t *end);

/* The filter's request entries. */
int sp_block_size (nbdkit_next *next, void *handle, uint32_t *minimum,
                   uint32_t *preferred, uint32_t *maximum);
int sp_cache (nbdkit_next *next, void *handle, uint32_t count,
              uint64_t offset, uint32_t flags, int *err);
int sp_pwrite (nbdkit_next *next, void *handle, const void *buf,
               uint32_t count, uint64_t offset, uint32_t flags, int *err);

/* ---- stats.c ---- */
enum sp_stat {
  SS_CACHE_REQUESTS, SS_CACHE_ROUNDED, SS_CACHE_BYTES_IN, SS_CACHE_BYTES_OUT,
  SS_WRITES, SS_WRITES_FULL_STRIPE, SS_WRITES_PARTIAL,
  SS_COUNT
};
extern struct gm_counter sstats[SS_COUNT];
#define SCOUNT(s, n) gm_count (&sstats[s], (n))
extern int gmblock_stripe_debug_verbose;

void stats_report (void);

#endif /* GMBLOCK_STRIPE_FILTER_H */

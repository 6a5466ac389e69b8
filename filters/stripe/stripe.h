/* gmblock-stripe filter: shared declarations.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Learns the RAID stripe geometry under the export (md sysfs, the
 * queue's io_min/io_opt, or options) at start-up and again as each
 * connection opens (an md reshape changes it), then shapes what it
 * can: the block sizes advertised to clients and NBD_CMD_CACHE
 * requests going down.  Data requests pass through unchanged.
 */
#ifndef GMBLOCK_STRIPE_FILTER_H
#define GMBLOCK_STRIPE_FILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-filter.h>

#include "counters.h"
#include "statsout.h"
#include "stripegeo.h"

#define SNAME "gmblock-stripe"

/* Largest full stripe: the largest NBD request nbdkit and gmblock take. */
#define MAX_STRIPE (32u << 20)
#define MAX_DATA_DISKS 4096     /* as detection (common/stripegeo.c) */

struct sp_config {
  uint64_t chunk;               /* stripe-chunk=, 0 unset */
  unsigned data_disks;          /* stripe-data-disks=, 0 unset */
  int parity;                   /* stripe-parity=, -1 unset */
  int64_t offset;               /* stripe-offset=, -1 unset */
  char *sysfs;                  /* stripe-sysfs=, NULL = /sys */
};
extern struct sp_config cfg;

/* ---- geometry.c: what the filter decided ---- */
/* A geometry in use: the start-up one, or one connection's. */
struct sp_geom {
  bool active;                  /* a geometry is known: shape */
  bool reshape;                 /* inactive because md is reshaping */
  struct gm_stripe geo;
  uint64_t width;               /* one full data stripe, bytes */
};

/* After the layers below completed their configuration: detect, merge
 * the options in, report.  Returns 0 or -1 (refused, error given).
 */
int geometry_decide (void);
/* Detect and merge the options into *g.  At start-up a refusal gives
 * an error and returns -1; later the same cases leave *g inactive.
 * When *g is inactive, why says why (a reshape: g->reshape).
 */
int geometry_resolve (bool startup, struct sp_geom *g, char *why,
                      size_t len);
/* Whether the plugin below named a device (so detection can change). */
bool geometry_has_device (void);
/* The geometry for new connections, as last decided (a copy). */
void geometry_current (struct sp_geom *g);
/* Make *g the geometry for new connections; *old gets the previous
 * one.  Returns 0 (the same), 1 (changed) or 2 (changed to an active
 * geometry other than the last one in use: a reshape's result).
 */
int geometry_replace (const struct sp_geom *g, struct sp_geom *old);
/* One line: source, chunk, data disks, parity, stripe, offset, preferred. */
void geometry_describe (const struct sp_geom *g, char *buf, size_t len);
/* Say where an active geometry does not hold (RAID0 zones), if it
 * does not everywhere.
 */
void geometry_note (const struct sp_geom *g);
/* Print the geometry to stderr (-D gmblock-stripe.verbose=1). */
void geometry_print (void);
void geometry_unload (void);

/* Per connection (reshape.c): the device's geometry is read again when
 * a connection opens, so a reshape is noticed; the handle is the
 * connection's struct sp_geom.
 */
void *sp_open (nbdkit_next_open *next, nbdkit_context *nxdata,
               int readonly, const char *exportname, int is_tls);
int sp_prepare (nbdkit_next *next, void *handle, int readonly);
void sp_close (void *handle);

/* ---- shape.c ---- */
/* The largest power of two not above the full stripe. */
uint32_t shape_preferred (const struct sp_geom *g);
/* [*start, *end) rounded out to whole stripes, clamped to size. */
void shape_round_out (const struct sp_geom *g, uint64_t offset,
                      uint32_t count, uint64_t size,
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
  SS_CONNECTIONS, SS_RESHAPE_CONNECTIONS, SS_GEOMETRY_CHANGES,
  SS_COUNT
};
extern struct gm_counter sstats[SS_COUNT];
#define SCOUNT(s, n) gm_count (&sstats[s], (n))
extern int gmblock_stripe_debug_verbose;

extern struct gm_stats_out sstats_out;

#endif /* GMBLOCK_STRIPE_FILTER_H */

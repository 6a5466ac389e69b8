/* gmblock-stripe filter: options and life cycle.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * RAID stripe hinting (issue 11): geometry.c decides the geometry,
 * reshape.c decides it again per connection, shape.c shapes block
 * sizes and NBD_CMD_CACHE, stats.c counts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "once.h"
#include "registry.h"
#include "sizes.h"
#include "trialopen.h"
#include "stripe.h"

struct sp_config cfg = { .parity = -1, .offset = -1 };

static int
parse_chunk (const char *value)
{
  const char *why = NULL;
  uint64_t v;

  if (gm_parse_size (value, &v, &why) == 0) {
    /* As detection takes it: md RAID0 chunks need not be powers of two. */
    why = v == 0 ? "zero" : v % 512 ? "not a multiple of 512" :
      v > MAX_STRIPE ? "too large" : NULL;
    if (why == NULL) {
      cfg.chunk = v;
      return 0;
    }
  }
  nbdkit_error (SNAME ": stripe-chunk=%s: %s (expected the RAID chunk size: "
                "a multiple of 512 from 512 to 32M, such as 64K)", value, why);
  return -1;
}

static int
parse_number (const char *key, const char *value, unsigned lo, unsigned hi,
              const char *what, unsigned *out)
{
  const char *why;

  if (gm_parse_count (value, lo, hi, out, &why)) {
    nbdkit_error (SNAME ": %s=%s: expected %s", key, value, what);
    return -1;
  }
  return 0;
}

/* *dst = value made absolute (nbdkit changes directory). */
static int
set_path (char **dst, const char *value)
{
  free (*dst);
  *dst = nbdkit_absolute_path (value);
  return *dst ? 0 : -1;
}

static int
sp_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
           const char *key, const char *value)
{
  unsigned n;

  if (strcmp (key, "stripe-chunk") == 0)
    return parse_chunk (value);
  if (strcmp (key, "stripe-data-disks") == 0)
    return parse_number (key, value, 1, MAX_DATA_DISKS, "a whole number from "
                         "1 to 4096: the members holding data (RAID5 on 4 "
                         "disks has 3)", &cfg.data_disks);
  if (strcmp (key, "stripe-parity") == 0) {
    if (parse_number (key, value, 0, 2, "0, 1 or 2: parity chunks per "
                      "stripe (RAID0/10 0, RAID4/5 1, RAID6 2)", &n) == -1)
      return -1;
    cfg.parity = n;
    return 0;
  }
  if (strcmp (key, "stripe-offset") == 0) {
    const char *why = NULL;
    uint64_t v;
    if (gm_parse_size (value, &v, &why) == -1 || v > INT64_MAX) {
      nbdkit_error (SNAME ": stripe-offset=%s: %s (expected where the export "
                    "starts in the array, in bytes or with a unit, such as "
                    "1M or 1114112)", value, why ? why : "too large");
      return -1;
    }
    cfg.offset = v;
    return 0;
  }
  if (strcmp (key, "stripe-sysfs") == 0) {
    char dev[4096];
    if (*value == '\0') {
      nbdkit_error (SNAME ": stripe-sysfs= is empty: expected a directory "
                    "standing for /sys (it holds dev/block)");
      return -1;
    }
    if (set_path (&cfg.sysfs, value) == -1)
      return -1;
    snprintf (dev, sizeof dev, "%s/dev/block", cfg.sysfs);
    if (access (dev, X_OK) == -1) {
      nbdkit_error (SNAME ": stripe-sysfs=%s: no dev/block in it (expected "
                    "a directory standing for /sys)", value);
      return -1;
    }
    return 0;
  }
  switch (gm_stats_config (&sstats_out, key, value)) {
  case 1: return 0;
  case -1: return -1;
  }
  return next (nxdata, key, value);
}

static int
sp_config_complete (nbdkit_next_config_complete *next, nbdkit_backend *nxdata)
{
  struct sp_geom g;
  char v[96];

  /* Both instances would share one shared object's state (once.h). */
  if (!gm_first_instance ()) {
    nbdkit_error (SNAME ": --filter=gmblock-stripe is given twice: the "
                  "stack can hold it once (one geometry and its counters "
                  "per process)");
    return -1;
  }

  /* The layers below first: the gmblock plugin publishes its file. */
  if (gm_stats_config_complete (&sstats_out) == -1 ||
      next (nxdata) == -1 || geometry_decide () == -1)
    return -1;
  geometry_current (&g);
  if (!g.active)
    return 0;
  /* The exact geometry for gmblock-cache's write-back (a stripe that
   * is not a power of two cannot travel as a preferred block size).
   */
  snprintf (v, sizeof v, "%llu:%u:%c:%llu", (unsigned long long) g.geo.chunk,
            g.geo.data_disks, g.geo.parity_known ? '0' + g.geo.parity : '?',
            (unsigned long long) g.geo.offset);
  if (gm_registry_publish (GM_REG_STRIPE, v) == -1) {
    nbdkit_error (SNAME ": publishing the geometry: %m");
    return -1;
  }
  return 0;
}

#define SP_CONFIG_HELP \
  "stripe-chunk=SIZE       RAID chunk size (multiple of 512), overrides detection.\n" \
  "stripe-data-disks=N     Members holding data, overrides detection.\n" \
  "stripe-parity=0|1|2     Parity chunks per stripe, overrides detection.\n" \
  "stripe-offset=SIZE      Where the export starts in the array.\n" \
  "stripe-sysfs=DIR        Read sysfs from DIR instead of /sys (tests).\n" \
  "stripe-stats=FILE       Write counters and the geometry to FILE at exit.\n" \
  "stripe-stats-interval=SECONDS  Also rewrite FILE every SECONDS (Prometheus)."

/* A chunk larger than the export cannot be. */
static int
check_chunk (const struct sp_geom *g, uint64_t size)
{
  char a[32], b[32];

  if (g->geo.chunk <= size)
    return 0;
  if (cfg.chunk)
    nbdkit_error (SNAME ": stripe-chunk=%s is larger than the export (%s): "
                  "expected a chunk no larger than the export",
                  gm_format_size (g->geo.chunk, a, sizeof a),
                  gm_format_size (size, b, sizeof b));
  else
    nbdkit_error (SNAME ": the detected chunk %s (%s) is larger than the "
                  "export (%s): give stripe-chunk=SIZE",
                  gm_format_size (g->geo.chunk, a, sizeof a), g->geo.source,
                  gm_format_size (size, b, sizeof b));
  return -1;
}

static int
sp_get_ready (int thread_model)
{
  struct sp_geom g;
  uint64_t size;

  if (gm_stats_ready (&sstats_out) == -1)
    return -1;
  if (gmblock_stripe_debug_verbose)
    geometry_print ();
  /* Over the gmblock plugin the size is known before nbdkit forks, when
   * a refusal still reaches the user (registry.h); else .after_fork.
   */
  geometry_current (&g);
  if (g.active && gm_registry_served_size (&size) == 1 &&
      check_chunk (&g, size) == -1)
    return -1;
  return 0;
}

/* The export's size over other plugins is known only after the fork. */
static int
sp_after_fork (nbdkit_backend *backend)
{
  struct sp_geom g;
  nbdkit_next *n;
  int64_t size;

  if (gm_stats_start (&sstats_out) == -1)
    return -1;
  geometry_current (&g);
  if (!g.active)
    return 0;
  if (gm_trial_open_below (SNAME, backend, 1) == -1)
    return -1;
  if ((n = nbdkit_next_context_open (backend, 1, "", 1)) == NULL) {
    nbdkit_error (SNAME ": cannot open a context to the layer below");
    return -1;
  }
  size = n->prepare (n) == -1 ? -1 : n->get_size (n);
  n->finalize (n);
  nbdkit_next_context_close (n);
  if (size == -1)
    return -1;
  return check_chunk (&g, size);
}

static void
sp_cleanup (nbdkit_backend *backend)
{
  gm_stats_stop (&sstats_out);
}

static void
sp_unload (void)
{
  gm_stats_final (&sstats_out);
  geometry_unload ();
  free (cfg.sysfs);
}

static struct nbdkit_filter filter = {
  .name = SNAME,
  .longname = "gmblock RAID stripe hinting",
  .config = sp_config,
  .config_complete = sp_config_complete,
  .config_help = SP_CONFIG_HELP,
  .get_ready = sp_get_ready,
  .after_fork = sp_after_fork,
  .cleanup = sp_cleanup,
  .unload = sp_unload,
  .open = sp_open,
  .prepare = sp_prepare,
  .close = sp_close,
  .block_size = sp_block_size,
  .cache = sp_cache,
  .pwrite = sp_pwrite,
};

NBDKIT_REGISTER_FILTER (filter)

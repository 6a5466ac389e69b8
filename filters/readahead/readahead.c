/* gmblock-readahead filter: options, life cycle and client requests.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Emulates on the server the readahead a client kernel's page cache
 * would do: sequential streams are detected across all connections and
 * prefetched ahead of the reader with NBD_CMD_CACHE to a caching layer
 * below (gmblock-cache, or gmblock direct=false).  A client's read is
 * never delayed by prefetch: it is noted under a short lock and then
 * passed down unchanged.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "once.h"
#include "readahead.h"
#include "sizes.h"
#include "trialopen.h"

#define MIN_WINDOW (4u << 10)
#define MAX_WINDOW (64u << 20)
#define MIN_RA_MAX (64u << 10)
#define MAX_INFLIGHT 64

struct ra_config cfg = {
  .ra_min = 64u << 10,
  .ra_max = 2u << 20,
  .max_inflight = 8,
};
static bool disabled;           /* thread model or layer below forbids it */

/* A power of two in [lo, hi]; on error says what is accepted. */
static int
parse_window (const char *key, const char *value, uint64_t lo, uint64_t hi,
              uint64_t *out)
{
  const char *why;
  char a[32], b[32];

  if (gm_parse_pow2_size (value, lo, hi, out, &why) == 0)
    return 0;
  nbdkit_error (RNAME ": %s=%s: %s (expected a power of two from %s to %s, "
                "such as %s)", key, value, why, gm_format_size (lo, a, sizeof a),
                gm_format_size (hi, b, sizeof b),
                strcmp (key, "ra-min") == 0 ? "64K" : "2M");
  return -1;
}

static int
ra_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
           const char *key, const char *value)
{
  if (strcmp (key, "ra-min") == 0)
    return parse_window (key, value, MIN_WINDOW, MAX_WINDOW, &cfg.ra_min);
  if (strcmp (key, "ra-max") == 0)
    return parse_window (key, value, MIN_RA_MAX, MAX_WINDOW, &cfg.ra_max);
  if (strcmp (key, "ra-max-inflight") == 0) {
    const char *why;
    if (gm_parse_count (value, 1, MAX_INFLIGHT, &cfg.max_inflight, &why)) {
      nbdkit_error (RNAME ": ra-max-inflight=%s: expected a whole number "
                    "from 1 to %d (prefetch requests in flight at once)",
                    value, MAX_INFLIGHT);
      return -1;
    }
    return 0;
  }
  switch (gm_stats_config (&rstats_out, key, value)) {
  case 1: return 0;
  case -1: return -1;
  }
  return next (nxdata, key, value);
}

static int
ra_config_complete (nbdkit_next_config_complete *next, nbdkit_backend *nxdata)
{
  char a[32], b[32];

  /* Both instances would share one shared object's state (once.h). */
  if (!gm_first_instance ()) {
    nbdkit_error (RNAME ": --filter=gmblock-readahead is given twice: the "
                  "stack can hold it once (one set of prefetch workers "
                  "per process)");
    return -1;
  }

  if (gm_stats_config_complete (&rstats_out) == -1)
    return -1;
  if (cfg.ra_min > cfg.ra_max) {
    nbdkit_error (RNAME ": ra-min=%s is larger than ra-max=%s (expected "
                  "ra-min <= ra-max)", gm_format_size (cfg.ra_min, a, sizeof a),
                  gm_format_size (cfg.ra_max, b, sizeof b));
    return -1;
  }
  return next (nxdata);
}

#define RA_CONFIG_HELP \
  "ra-min=SIZE             Smallest readahead window (power of 2, 64K).\n" \
  "ra-max=SIZE             Largest readahead window (power of 2, 2M).\n" \
  "ra-max-inflight=N       Prefetch requests in flight at once (8).\n" \
  "ra-stats=FILE           Write counters to FILE at exit.\n" \
  "ra-stats-interval=SECONDS  Also rewrite FILE every SECONDS (Prometheus)."

static int
ra_get_ready (int thread_model)
{
  if (gm_stats_ready (&rstats_out) == -1)
    return -1;
  /* Serialised calls below would make prefetch block the clients it is
   * meant to speed up.  Each worker has its own context, so a plugin
   * that serialises per connection alone would do, but the cache under
   * this filter sends every call below through one context and one
   * lock when the stack is not parallel (filters/cache/lower.c).
   */
  if (thread_model < NBDKIT_THREAD_MODEL_PARALLEL) {
    fprintf (stderr, "nbdkit: " RNAME ": warning: the plugin serialises "
             "%s, so prefetch would delay client reads: readahead is "
             "disabled\n",
             thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS
             ? "requests (gmblock-cache below then serialises them all)"
             : "all requests");
    disabled = true;
  }
  return 0;
}

static int
ra_after_fork (nbdkit_backend *backend)
{
  int r;

  if (!disabled) {
    if (gm_trial_open_below (RNAME, backend, 1) == -1)
      return -1;
    r = prefetch_start (backend);
    if (r == -1)
      return -1;
    ra_active = r == 1;
  }
  /* The statistics thread last: it prints ra_active, which
   * its pthread_create publishes.
   */
  if (gm_stats_start (&rstats_out) == -1) {
    prefetch_stop ();
    return -1;
  }
  return 0;
}

static void
ra_cleanup (nbdkit_backend *backend)
{
  gm_stats_stop (&rstats_out);
  prefetch_stop ();
}

static void
ra_unload (void)
{
  pthread_mutex_lock (&ra_lock);
  gm_seq_retire_all (&table);
  pthread_mutex_unlock (&ra_lock);
  gm_stats_final (&rstats_out);
}

/* The workers' contexts were opened, with no client, on export "" (the
 * plugin's default): only connections to that same name share their
 * data.  A client of another export of a plugin serving several got
 * its reads prefetched from the default export (wasted I/O, and its
 * writes invalidated the default's windows).  Its requests now pass
 * through untouched.  The handle says which: &ra_on or &ra_off.
 */
static char ra_on, ra_off;

/* nbdkit hands .open the default export's resolved name ("a"), not
 * the "" the client asked for.  It asks .default_export on the
 * connection's thread once per connection and keeps the answer, so a
 * client that sent NBD_OPT_INFO "" and then NBD_OPT_GO "" is asked
 * once, for the INFO: a mark that its open used up left the GO's
 * connection without readahead.  So the name is kept for the
 * connection (its thread) instead, and a connection opening that name
 * is the default's: after INFO "", GO "" and GO "a" both read what the
 * workers read, GO "b" passes through.  The buffer holds any name
 * nbdkit accepts as a default (NBD_MAX_STRING, 4096 bytes; it refuses
 * longer ones): a 256-byte cap passed a legal default's clients
 * through.
 */
#define MAX_DEFAULT_NAME 4096
static __thread char conn_default[MAX_DEFAULT_NAME + 1];
static __thread bool conn_default_known;

static const char *
ra_default_export (nbdkit_next_default_export *next, nbdkit_backend *nxdata,
                   int readonly, int is_tls)
{
  const char *name = next (nxdata, readonly);

  conn_default_known = name && strlen (name) < sizeof conn_default;
  if (conn_default_known)
    strcpy (conn_default, name);
  return name;
}

static void *
ra_open (nbdkit_next_open *next, nbdkit_context *ctx, int readonly,
         const char *exportname, int is_tls)
{
  if (next (ctx, readonly, exportname) == -1)
    return NULL;
  if (ra_active && *exportname &&
      !(conn_default_known && strcmp (exportname, conn_default) == 0)) {
    nbdkit_debug (RNAME ": export \"%s\" is not the default export the "
                  "prefetch workers read: no readahead on this connection",
                  exportname);
    return &ra_off;
  }
  return &ra_on;
}

#define RA_ON(handle) (ra_active && (handle) == &ra_on)

static int
ra_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count,
          uint64_t offset, uint32_t flags, int *err)
{
  RCOUNT (RS_READS, 1);
  RCOUNT (RS_READ_BYTES, count);
  if (RA_ON (handle))
    streams_note_read (offset, count);
  return next->pread (next, buf, count, offset, flags, err);
}

/* Writes, trims and zeroes change data: the blocks they change inside
 * prefetched windows still ahead of a reader are counted as
 * invalidated and prefetched again (the cache below keeps its own
 * contents coherent; this keeps the prefetch ahead of the reader).
 */
static int
ra_pwrite (nbdkit_next *next, void *handle, const void *buf, uint32_t count,
           uint64_t offset, uint32_t flags, int *err)
{
  int r = next->pwrite (next, buf, count, offset, flags, err);
  if (RA_ON (handle))
    streams_invalidate (offset, count);
  return r;
}

static int
ra_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
         uint32_t flags, int *err)
{
  int r = next->trim (next, count, offset, flags, err);
  if (RA_ON (handle))
    streams_invalidate (offset, count);
  return r;
}

static int
ra_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
         uint32_t flags, int *err)
{
  int r = next->zero (next, count, offset, flags, err);
  if (RA_ON (handle))
    streams_invalidate (offset, count);
  return r;
}

static struct nbdkit_filter filter = {
  .name = RNAME,
  .longname = "gmblock client-side readahead emulation",
  .config = ra_config,
  .config_complete = ra_config_complete,
  .config_help = RA_CONFIG_HELP,
  .get_ready = ra_get_ready,
  .after_fork = ra_after_fork,
  .cleanup = ra_cleanup,
  .unload = ra_unload,
  .default_export = ra_default_export,
  .open = ra_open,
  .pread = ra_pread,
  .pwrite = ra_pwrite,
  .trim = ra_trim,
  .zero = ra_zero,
};

NBDKIT_REGISTER_FILTER (filter)

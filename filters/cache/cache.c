/* gmblock-cache filter: options, life cycle and what is negotiated.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "ops.h"
#include "once.h"
#include "pin.h"
#include "registry.h"
#include "sizes.h"
#include "trialopen.h"

#define DEFAULT_SIZE (256u << 20)
#define DEFAULT_BS (64u << 10)
#define MIN_BS 4096u
#define MAX_BS (16u << 20)
#define MIN_BLOCKS 16               /* below this, 2Q has nothing to choose */

struct cache_config cfg = {
  .mode = MODE_ADAPTIVE,
  .size = DEFAULT_SIZE,
  .scan_bytes = 4u << 20,
  .flush_interval_ms = 1000,
  .hold_s = 30,
  .merge_bytes = 256u << 10,
  .hugepages = GM_HUGE_AUTO,
};

static const char *mode_names[] = {
  [MODE_BYPASS] = "bypass", [MODE_READ] = "read",
  [MODE_WRITETHROUGH] = "writethrough", [MODE_WRITEBACK] = "writeback",
  [MODE_UNSAFE] = "unsafe", [MODE_ADAPTIVE] = "adaptive",
};
static bool adaptive_back;
static const char *size_arg = NULL;
/* Any export name is the same disk (see cache_open). */
static bool any_export_name;

static uint64_t
ram_bytes (void)
{
  return (uint64_t) sysconf (_SC_PHYS_PAGES) * sysconf (_SC_PAGESIZE);
}

static int
cache_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
              const char *key, const char *value)
{
  const char *why;
  uint64_t v;

  if (strcmp (key, "cache-mode") == 0) {
    for (size_t i = 0; i < sizeof mode_names / sizeof *mode_names; i++)
      if (strcmp (value, mode_names[i]) == 0) {
        cfg.mode = i;
        return 0;
      }
    nbdkit_error (CNAME ": cache-mode=%s: unknown mode (expected bypass, "
                  "read, writethrough, writeback, unsafe or adaptive)", value);
    return -1;
  }
  if (strcmp (key, "cache-size") == 0) {
    if (gm_parse_size_or_percent (value, ram_bytes (), &v, &why) == -1) {
      nbdkit_error (CNAME ": cache-size=%s: %s (expected a size such as "
                    "512M or a percentage of RAM such as 10%%)", value, why);
      return -1;
    }
    cfg.size = v;
    size_arg = value;
    return 0;
  }
  if (strcmp (key, "cache-block-size") == 0) {
    if (gm_parse_pow2_size (value, MIN_BS, MAX_BS, &v, &why) == -1) {
      nbdkit_error (CNAME ": cache-block-size=%s: %s (expected a power of "
                    "two from 4K to 16M)", value, why);
      return -1;
    }
    cfg.block_size = v;
    cfg.block_size_set = true;
    return 0;
  }
  if (strcmp (key, "adaptive-writes") == 0) {
    if (strcmp (value, "around") == 0)
      adaptive_back = false;
    else if (strcmp (value, "back") == 0)
      adaptive_back = true;
    else {
      nbdkit_error (CNAME ": adaptive-writes=%s: expected around or back",
                    value);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "adaptive-scan") == 0) {
    /* v is set only when the value parses: test it only then. */
    why = NULL;
    if (gm_parse_size (value, &v, &why) == 0 && v == 0)
      why = "must not be zero";
    if (why) {
      nbdkit_error (CNAME ": adaptive-scan=%s: %s (expected a size such as "
                    "4M: sequential runs this long are scans)", value, why);
      return -1;
    }
    cfg.scan_bytes = v;
    return 0;
  }
  if (strcmp (key, "writeback-interval") == 0) {
    double s;
    if (gm_parse_seconds (value, 0.01, 3600, &s, &why) == -1) {
      nbdkit_error (CNAME ": writeback-interval=%s: %s (expected seconds "
                    "from 0.01 to 3600)", value, why);
      return -1;
    }
    cfg.flush_interval_ms = s * 1000;
    return 0;
  }
  if (strcmp (key, "writeback-hold") == 0) {
    double s = 0;
    why = NULL;
    if (gm_parse_seconds (value, 0, 3600, &s, &why) == 0 &&
        s != (unsigned) s)
      why = "not a whole number";
    if (why == NULL) {
      cfg.hold_s = s;
      return 0;
    }
    nbdkit_error (CNAME ": writeback-hold=%s: %s (expected whole seconds "
                  "from 0 to 3600; 0 writes partial stripes at once)",
                  value, why);
    return -1;
  }
  if (strcmp (key, "writeback-merge") == 0) {
    if (gm_parse_size_range (value, 0, WB_MAX_UNIT, &v, &why) == -1) {
      nbdkit_error (CNAME ": writeback-merge=%s: %s (expected a size from "
                    "0, which writes back block by block, to 32M)",
                    value, why);
      return -1;
    }
    cfg.merge_bytes = v;
    return 0;
  }
  if (strcmp (key, "cache-hugepages") == 0) {
    if (gm_huge_mode_parse (value, &cfg.hugepages) == -1) {
      nbdkit_error (CNAME ": cache-hugepages=%s: expected auto, on or off",
                    value);
      return -1;
    }
    return 0;
  }
  switch (gm_stats_config (&cstats_out, key, value)) {
  case 1: return 0;
  case -1: return -1;
  }
  return next (nxdata, key, value);
}

static int
cache_config_complete (nbdkit_next_config_complete *next,
                       nbdkit_backend *nxdata)
{
  uint64_t bs = cfg.block_size_set ? cfg.block_size : DEFAULT_BS;
  char a[32], b[32], c[32];

  /* Both instances would share one shared object's state (once.h). */
  if (!gm_first_instance ()) {
    nbdkit_error (CNAME ": --filter=gmblock-cache is given twice: the "
                  "stack can hold it once (one cache "
                  "per process)");
    return -1;
  }

  if (gm_stats_config_complete (&cstats_out) == -1)
    return -1;
  cfg.writes_back = cfg.mode == MODE_WRITEBACK || cfg.mode == MODE_UNSAFE ||
    (cfg.mode == MODE_ADAPTIVE && adaptive_back);
  cfg.unsafe = cfg.mode == MODE_UNSAFE;
  if (adaptive_back && cfg.mode != MODE_ADAPTIVE)
    nbdkit_debug (CNAME ": adaptive-writes is only used with "
                  "cache-mode=adaptive");
  if (cfg.mode != MODE_BYPASS) {
    /* The default size was given by no one: say it as a size. */
    const char *sz = size_arg ? size_arg : gm_format_size (cfg.size, c,
                                                           sizeof c);
    if (cfg.size / bs < MIN_BLOCKS) {
      nbdkit_error (CNAME ": cache-size=%s is too small: it holds %llu "
                    "blocks of %s, at least %d are needed (raise cache-size "
                    "or lower cache-block-size)",
                    sz, (unsigned long long) (cfg.size / bs),
                    gm_format_size (bs, b, sizeof b), MIN_BLOCKS);
      return -1;
    }
    if (cfg.size > ram_bytes ()) {
      nbdkit_error (CNAME ": cache-size=%s is larger than RAM (%s)",
                    sz, gm_format_size (ram_bytes (), a, sizeof a));
      return -1;
    }
    if ((uint64_t) (cfg.size / bs) >= UINT32_MAX / 2) {
      nbdkit_error (CNAME ": cache-size=%s: too many blocks of %s; raise "
                    "cache-block-size", sz,
                    gm_format_size (bs, b, sizeof b));
      return -1;
    }
  }
  return next (nxdata);
}

#define CACHE_CONFIG_HELP \
  "cache-mode=MODE         adaptive (default), bypass, read, writethrough,\n" \
  "                        writeback or unsafe.\n" \
  "cache-size=SIZE|N%      Cache size (default 256M).\n" \
  "cache-block-size=SIZE   Power of two, 4K..16M (default 64K or the\n" \
  "                        plugin's preferred block size if larger).\n" \
  "adaptive-writes=around|back  Writes in adaptive mode (default around).\n" \
  "adaptive-scan=SIZE      Sequential run that counts as a scan (4M).\n" \
  "writeback-interval=SECS Background write-back period (1).\n" \
  "writeback-hold=SECS     Parity RAID: partly dirty stripes wait (30).\n" \
  "writeback-merge=SIZE    No stripe below: longest run of dirty blocks\n" \
  "                        written back as one write (256K; 0 = off).\n" \
  "cache-hugepages=auto|on|off  Backing of the cache memory (auto).\n" \
  "cache-stats=FILE        Write counters to FILE at exit.\n" \
  "cache-stats-interval=SECONDS  Also rewrite FILE every SECONDS (Prometheus)."

static int
cache_get_ready (int thread_model)
{
  char err[256], s[32];
  uint64_t size;

  if (gm_stats_ready (&cstats_out) == -1)
    return -1;
  if (cfg.mode == MODE_BYPASS)
    return 0;
  /* Refused again in .after_fork over other plugins, where nbdkit 1.32
   * hangs with --run and exits 0 as a daemon (registry.h).
   */
  if (gm_registry_served_size (&size) == 1) {
    if (size == 0) {
      nbdkit_error (CNAME ": the export is empty: nothing to cache");
      return -1;
    }
    any_export_name = true;     /* the gmblock plugin has one export */
  }
  lower_set_thread_model (thread_model);
  /* The pool is created now, where its errors reach the user; it is cut
   * into blocks in .after_fork, once the block size is known.
   */
  tbl.pool = gm_pool_create (cfg.size, cfg.hugepages, err, sizeof err);
  if (tbl.pool == NULL) {
    gm_format_size (cfg.size, s, sizeof s);
    nbdkit_error (CNAME ": cache-size=%s%s%s%s%s: %s (the cache is mapped and "
                  "touched whole at start-up: it must fit in free memory)",
                  size_arg ? size_arg : s, size_arg ? " (" : "",
                  size_arg ? s : "", size_arg ? ")" : "",
                  cfg.hugepages == GM_HUGE_ON ? ", cache-hugepages=on" : "",
                  err);
    return -1;
  }
  return 0;
}

static int
cache_setup (nbdkit_backend *backend)
{
  char err[256], a[32], b[32];

  if (cfg.mode == MODE_BYPASS)
    return 0;
  if (gm_trial_open_below (CNAME, backend, 0) == -1 ||
      lower_open (backend) == -1)
    return -1;
  if (!cfg.block_size_set) {
    cfg.block_size = DEFAULT_BS;
    if (lower.bpref > DEFAULT_BS && gm_is_power_of_2 (lower.bpref) &&
        lower.bpref <= MAX_BS && cfg.size / lower.bpref >= MIN_BLOCKS)
      cfg.block_size = lower.bpref;
  }
  /* A fill and a write-back are one request of a whole block below:
   * never larger than the layer below takes (0: it set no limit).
   */
  if (lower.bmax && cfg.block_size > lower.bmax) {
    uint64_t bs = gm_prev_power_of_2 (lower.bmax);
    if (cfg.block_size_set) {
      nbdkit_error (CNAME ": cache-block-size=%s is larger than the largest "
                    "request the layer below takes (%s): lower it",
                    gm_format_size (cfg.block_size, a, sizeof a),
                    gm_format_size (lower.bmax, b, sizeof b));
      return -1;
    }
    if (bs < MIN_BS) {
      nbdkit_error (CNAME ": the layer below takes requests of %s at most: "
                    "the cache needs blocks of 4K at least",
                    gm_format_size (lower.bmax, b, sizeof b));
      return -1;
    }
    nbdkit_debug (CNAME ": blocks of %s: the layer below takes requests "
                  "of %s at most", gm_format_size (bs, a, sizeof a),
                  gm_format_size (lower.bmax, b, sizeof b));
    cfg.block_size = bs;
  }
  stripe_wb_geometry ();
  if (cfg.block_size < lower.bmin) {
    nbdkit_error (CNAME ": %s%s is smaller than the smallest request the "
                  "layer below takes (%s): %s cache-block-size",
                  cfg.block_size_set ? "cache-block-size=" : "a cache block of ",
                  gm_format_size (cfg.block_size, a, sizeof a),
                  gm_format_size (lower.bmin, b, sizeof b),
                  cfg.block_size_set ? "raise" : "set");
    return -1;
  }
  if (lower.size == 0) {
    nbdkit_error (CNAME ": the export is empty: nothing to cache");
    return -1;
  }
  if (blocks_init (err, sizeof err) == -1) {
    nbdkit_error (CNAME ": %s", err);
    return -1;
  }
  if (stripe_wb_start () == -1 || writeback_start () == -1)
    return -1;
  nbdkit_debug (CNAME ": mode %s%s, %u blocks of %s (%s) in %u shards, "
                "%s, export %llu bytes",
                mode_names[cfg.mode],
                cfg.mode == MODE_ADAPTIVE && cfg.writes_back ?
                " (writes back)" : "",
                tbl.nslots, gm_format_size (tbl.bs, a, sizeof a),
                gm_format_size ((uint64_t) tbl.nslots * tbl.bs, b, sizeof b),
                tbl.nshards, tbl.pool->mem.backing,
                (unsigned long long) lower.size);
  return 0;
}

static int
cache_after_fork (nbdkit_backend *backend)
{
  /* The statistics thread last: it prints the table's geometry (tbl,
   * swb) without a lock, and its pthread_create is what publishes them.
   */
  if (cache_setup (backend) == -1)
    return -1;
  return gm_stats_start (&cstats_out);
}

/* Dirty blocks that could not be written back at shutdown: nbdkit must
 * not report success.  Filters cannot set nbdkit's exit status, so an
 * exit handler does, after every module has been unloaded (nbdkit
 * calls exit (EXIT_SUCCESS) last).  The handler's code must still be
 * mapped then: nbdkit dlclose()s filters, so this object pins itself
 * with RTLD_NODELETE first.
 */
static void
exit_lost (void)
{
  fflush (NULL);
  _exit (EXIT_FAILURE);
}

static void
fail_exit_status (void)
{
  char why[256] = "atexit failed";

  if (gm_pin_module ((const void *) exit_lost, why, sizeof why) == -1 ||
      atexit (exit_lost) != 0) {
    nbdkit_error (CNAME ": cannot set a failing exit status (%s): exiting "
                  "now", why);
    exit_lost ();
  }
}

/* All clients are gone: write back what is dirty, then flush below.
 * The flusher is stopped first so that this pass is the last word.
 */
static void
cache_cleanup (nbdkit_backend *backend)
{
  int err = 0;

  gm_stats_stop (&cstats_out);
  if (lower.next == NULL)
    return;
  writeback_stop_flusher ();
  if (tbl.slots && lower.can_write) {
    if (writeback_range (0, UINT64_MAX, &err) == -1 || lower_flush (&err) == -1) {
      uint64_t n = atomic_load (&tbl.ndirty);
      char sz[32];
      errno = err;
      nbdkit_error (CNAME ": write-back at shutdown failed: %m: "
                    "%llu dirty blocks (%s) are lost; nbdkit will exit "
                    "with status 1", (unsigned long long) n,
                    gm_format_size (n * tbl.bs, sz, sizeof sz));
      fail_exit_status ();
    }
  }
  writeback_stop ();
  lower_close ();
}

static void
cache_unload (void)
{
  gm_stats_final (&cstats_out);
  blocks_free ();
}

/* Every client shares one cache, filled and written back through one
 * context below opened with no client, hence with no export name: the
 * plugin's default export.  A client naming another export of a plugin
 * that serves several would be served the default's blocks, so only the
 * default is listed and taken (bypass mode has no shared context) --
 * unless the stack below is gmblock's alone, whose plugin serves one
 * disk under any name.
 */
static int
cache_list_exports (nbdkit_next_list_exports *next, nbdkit_backend *nxdata,
                    int readonly, int is_tls, struct nbdkit_exports *exports)
{
  if (cfg.mode == MODE_BYPASS)
    return next (nxdata, readonly, exports);
  return nbdkit_use_default_export (exports);
}

static const char *
cache_default_export (nbdkit_next_default_export *next,
                      nbdkit_backend *nxdata, int readonly, int is_tls)
{
  return cfg.mode == MODE_BYPASS ? next (nxdata, readonly) : "";
}

static void *
cache_open (nbdkit_next_open *next, nbdkit_context *ctx, int readonly,
            const char *exportname, int is_tls)
{
  struct conn *c;

  if (cfg.mode != MODE_BYPASS && *exportname && !any_export_name) {
    nbdkit_error (CNAME ": export \"%s\" refused: the cache serves only the "
                  "default export (\"\"), which every client shares",
                  exportname);
    return NULL;
  }
  if (next (ctx, readonly, exportname) == -1)
    return NULL;
  c = malloc (sizeof *c);
  if (c == NULL) {
    nbdkit_error (CNAME ": malloc: %m");
    return NULL;
  }
  conn_init (c);
  c->id = policy_new_conn ();
  /* Not what failed before it opened: those were reported then. */
  atomic_store (&c->flush_failures_seen, atomic_load (&lower_flush_failures));
  return c;
}

static void
cache_close (void *handle)
{
  conn_destroy (handle);
  free (handle);
}

/* Every read, write and write-back goes through the shared context,
 * whose size was fixed in .after_fork.  A plugin that sizes each
 * connection anew (nbdkit's file plugin after the file grew) would let
 * a client reach past it, and nbdkit aborts on a call out of range.
 * Extents still use the client's own context: never show more than it
 * has either (the file shrank).
 */
static int64_t
cache_get_size (nbdkit_next *next, void *handle)
{
  int64_t r = next->get_size (next);

  if (cfg.mode == MODE_BYPASS || r == -1 || lower.next == NULL)
    return r;
  return (uint64_t) r < lower.size ? r : (int64_t) lower.size;
}

static int
cache_block_size (nbdkit_next *next, void *handle, uint32_t *minimum,
                  uint32_t *preferred, uint32_t *maximum)
{
  if (next->block_size (next, minimum, preferred, maximum) == -1)
    return -1;
  if (cfg.mode == MODE_BYPASS)
    return 0;
  gm_block_size_unsaid (minimum, maximum);
  /* Whole blocks are what the cache handles best. */
  if (*preferred < tbl.bs)
    *preferred = tbl.bs;
  if (*maximum < *preferred)
    *preferred = *maximum;
  return 0;
}

static int
cache_can_flush (nbdkit_next *next, void *handle)
{
  return cfg.mode == MODE_BYPASS ? next->can_flush (next) : 1;
}

static int
cache_can_fua (nbdkit_next *next, void *handle)
{
  int r = next->can_fua (next);
  /* We honour FUA ourselves: write-back of the block, or a flush. */
  if (cfg.mode == MODE_BYPASS || r == -1)
    return r;
  return NBDKIT_FUA_NATIVE;
}

static int
cache_can_multi_conn (nbdkit_next *next, void *handle)
{
  /* One cache and one context below for every connection: a flush on
   * any of them writes back and flushes everything.
   */
  return cfg.mode == MODE_BYPASS ? next->can_multi_conn (next) : 1;
}

static int
cache_can_cache (nbdkit_next *next, void *handle)
{
  /* bypass answers honestly: whatever the layer below does. */
  return cfg.mode == MODE_BYPASS ? next->can_cache (next) :
    NBDKIT_CACHE_NATIVE;
}

static int
cache_can_zero (nbdkit_next *next, void *handle)
{
  int r = next->can_zero (next);
  if (cfg.mode == MODE_BYPASS || r <= NBDKIT_ZERO_NONE)
    return r;
  return NBDKIT_ZERO_NATIVE;
}

static struct nbdkit_filter filter = {
  .name = CNAME,
  .longname = "gmblock server-side cache",
  .config = cache_config,
  .config_complete = cache_config_complete,
  .config_help = CACHE_CONFIG_HELP,
  .get_ready = cache_get_ready,
  .after_fork = cache_after_fork,
  .cleanup = cache_cleanup,
  .unload = cache_unload,
  .list_exports = cache_list_exports,
  .default_export = cache_default_export,
  .open = cache_open,
  .close = cache_close,
  .get_size = cache_get_size,
  .block_size = cache_block_size,
  .can_flush = cache_can_flush,
  .can_fua = cache_can_fua,
  .can_multi_conn = cache_can_multi_conn,
  .can_cache = cache_can_cache,
  .can_zero = cache_can_zero,
  .pread = cache_pread,
  .pwrite = cache_pwrite,
  .flush = cache_flush,
  .trim = cache_trim,
  .zero = cache_zero,
  .cache = cache_cache,
  .extents = cache_extents,
};

NBDKIT_REGISTER_FILTER (filter)

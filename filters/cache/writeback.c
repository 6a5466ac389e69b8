/* gmblock-cache filter: dirty blocks and how they reach the layer below.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A dirty block is written back whole, from its slot (no copy), under a
 * shared hold: readers may go on reading it, writers wait, so what goes
 * below is always one consistent version of the block.  The dirty flag
 * is cleared when the write starts and set again if it fails.
 *
 * Whole-cache passes (flush, the background flusher, shutdown) collect
 * the dirty blocks, sort them by offset and write them with WB_THREADS
 * threads in parallel, because the layer below is synchronous per call
 * and one write at a time would leave the disk idle.  Only one pass
 * runs at a time; a flush that arrives during a pass waits for it and
 * then makes its own, so it covers every write acknowledged before it.
 * When the RAID stripe is known (stripewb.c), a pass works a stripe
 * unit at a time instead of a block at a time; without one, a unit of
 * writeback-merge bytes, so dirty neighbours still go down together.
 *
 * On parity RAID the background flusher also waits for stripes: a
 * partly dirty stripe written now costs the array a read-modify-write,
 * and written once its other blocks are dirty too, none; a whole one
 * written early is written again if it is dirtied again.  So writers
 * wake the flusher only when three quarters of the cache are dirty
 * (not one quarter), and its passes write whole dirty stripes and leave
 * a partial one until its oldest block has been dirty writeback-hold
 * seconds, or until the cache is nearly all dirty.  Flushes, FUA and
 * shutdown still write everything.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "overlap.h"

#define WB_THREADS 8            /* parallel writers in a pass, incl. caller */

uint32_t
dirty_clock (void)
{
  return gm_now_ns () / 1000000000;
}

void
slot_wb_hold (struct shard *sh, struct slot *sl)
{
  sl->shared++;
  sl->wb = true;
  sl->dirty = false;
  sh->nwb++;
  sh->ndirty--;
  atomic_fetch_sub (&tbl.ndirty, 1);
}

void
slot_wb_release (struct shard *sh, struct slot *sl, bool failed)
{
  sl->shared--;
  sl->wb = false;
  sh->nwb--;
  /* Written again meanwhile, it is dirty already. */
  if (failed && !sl->dirty) {
    sl->dirty = true;
    sh->ndirty++;
    atomic_fetch_add (&tbl.ndirty, 1);
  }
  shard_wake (sh);
}

int
slot_write_back (struct shard *sh, uint32_t s, int *err)
{
  struct slot *sl = &tbl.slots[s];
  uint64_t b = sl->blk;
  int r;

  slot_wb_hold (sh, sl);
  pthread_mutex_unlock (&sh->lock);
  r = lower_pwrite (slot_mem (s), blk_len (b), blk_off (b), 0, err);
  pthread_mutex_lock (&sh->lock);
  slot_wb_release (sh, sl, r == -1);
  if (r == -1)
    CCOUNT (CS_ERRORS, 1);
  else {
    CCOUNT (CS_WRITEBACKS, 1);
    CCOUNT (CS_WRITEBACK_BYTES, blk_len (b));
    CCOUNT (CS_WRITEBACK_WRITES, 1);
  }
  return r;
}

struct wb_result {
  _Atomic int err;              /* first error, 0 if none */
};

/* Write back one resident block if dirty; wait for one in flight. */
static bool
wb_one (struct shard *sh, uint32_t s, void *opaque)
{
  struct wb_result *res = opaque;
  struct slot *sl = &tbl.slots[s];
  int err = 0, zero = 0;

  if (!sl->dirty && !sl->wb)
    return true;
  if (sl->wb || sl->excl) {
    shard_wait (sh);
    return false;
  }
  if (slot_write_back (sh, s, &err) == -1)
    atomic_compare_exchange_strong (&res->err, &zero, err ? err : EIO);
  return true;
}

/* ---- whole-cache passes ---- */
/* Everything dirty (flush, shutdown), or only what is ripe: whole
 * dirty stripes and stripes dirty long enough (the flusher's passes
 * under a stripe held for parity).
 */
enum pass_kind { PASS_ALL, PASS_RIPE };

struct pass_ent {
  uint64_t blk;
  uint32_t dirtied;
};
static pthread_mutex_t pass_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pass_ent *pass_ents;
static uint64_t *pass_blocks;   /* what the pass writes: blocks, or units */
static uint32_t pass_n;
static _Atomic uint32_t pass_next;
static struct wb_result pass_res;

static pthread_mutex_t hlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hwork = PTHREAD_COND_INITIALIZER;
static pthread_cond_t hdone = PTHREAD_COND_INITIALIZER;
static unsigned pass_gen, helpers_busy, nhelpers;
/* Two stops, in this order: the flusher first, then (after the final
 * pass, which needs them) the helpers.  A helper never leaves while a
 * pass it was given is unfinished.
 */
static bool flusher_stop, helpers_stop, kicked;
static pthread_t helpers[WB_THREADS - 1], flusher;
static bool flusher_running;
static pthread_cond_t fcond = PTHREAD_COND_INITIALIZER;

static int
cmp_ent (const void *a, const void *b)
{
  uint64_t x = ((const struct pass_ent *) a)->blk;
  uint64_t y = ((const struct pass_ent *) b)->blk;
  return x < y ? -1 : x > y;
}

/* The units of the sorted dirty blocks ents[0, n) that the pass writes. */
static void
pick_units (const struct pass_ent *ents, uint32_t n, enum pass_kind kind)
{
  uint32_t now = dirty_clock (), held = 0;

  pass_n = 0;
  for (uint32_t i = 0, j; i < n; i = j) {
    uint64_t u = stripe_wb_unit_of (ents[i].blk);
    uint32_t oldest = ents[i].dirtied;
    for (j = i + 1; j < n && stripe_wb_unit_of (ents[j].blk) == u; j++)
      if ((int32_t) (ents[j].dirtied - oldest) < 0)
        oldest = ents[j].dirtied;
    if (kind == PASS_ALL ||
        (j - i == swb.bpg && stripe_wb_unit_whole (u)) ||
        now - oldest >= cfg.hold_s)
      pass_blocks[pass_n++] = u;
    else
      held++;
  }
  if (held)
    CCOUNT (CS_WB_HELD, held);
}

static void
pass_work (void)
{
  uint32_t i;
  int err, zero = 0;

  while ((i = atomic_fetch_add (&pass_next, 1)) < pass_n)
    if (!swb.on)
      visit_range (pass_blocks[i], pass_blocks[i], wb_one, &pass_res);
    else if (stripe_wb_unit (pass_blocks[i], &err) == -1)
      atomic_compare_exchange_strong (&pass_res.err, &zero, err ? err : EIO);
}

static void *
helper_main (void *arg)
{
  unsigned seen = 0;

  pthread_mutex_lock (&hlock);
  for (;;) {
    while (!helpers_stop && pass_gen == seen)
      pthread_cond_wait (&hwork, &hlock);
    if (pass_gen == seen)
      break;                    /* stopping, and no pass counts on us */
    seen = pass_gen;
    pthread_mutex_unlock (&hlock);
    pass_work ();
    pthread_mutex_lock (&hlock);
    if (--helpers_busy == 0)
      pthread_cond_broadcast (&hdone);
  }
  pthread_mutex_unlock (&hlock);
  return NULL;
}

/* Write back what is dirty in the cache (kind).  Returns 0 or -1, *err. */
static int
writeback_all (enum pass_kind kind, int *err)
{
  uint32_t n = 0;
  int e;

  pthread_mutex_lock (&pass_lock);
  for (uint32_t k = 0; k < tbl.nshards; k++) {
    struct shard *sh = &tbl.shards[k];
    pthread_mutex_lock (&sh->lock);
    /* A shard with nothing dirty and no write-back in flight has
     * nothing to give: a flush used to look at every slot, so that with
     * 2G of 4K blocks the server answered some 1000 flushes a second
     * in all, dirty or not (a review finding).
     */
    for (uint32_t s = sh->base;
         (sh->ndirty || sh->nwb) && s < sh->base + sh->nslots; s++)
      if (tbl.slots[s].dirty || tbl.slots[s].wb)
        pass_ents[n++] = (struct pass_ent) { tbl.slots[s].blk,
                                             tbl.slots[s].dirtied };
    pthread_mutex_unlock (&sh->lock);
  }
  qsort (pass_ents, n, sizeof *pass_ents, cmp_ent);
  if (swb.on)
    /* Work a stripe unit at a time: the sorted blocks become units. */
    pick_units (pass_ents, n, kind);
  else {
    for (uint32_t i = 0; i < n; i++)
      pass_blocks[i] = pass_ents[i].blk;
    pass_n = n;
  }
  atomic_store (&pass_next, 0);
  atomic_store (&pass_res.err, 0);

  if (pass_n > 1 && nhelpers > 0) {
    pthread_mutex_lock (&hlock);
    helpers_busy = nhelpers;
    pass_gen++;
    pthread_cond_broadcast (&hwork);
    pthread_mutex_unlock (&hlock);
    pass_work ();
    pthread_mutex_lock (&hlock);
    while (helpers_busy > 0)
      pthread_cond_wait (&hdone, &hlock);
    pthread_mutex_unlock (&hlock);
  }
  else
    pass_work ();
  e = atomic_load (&pass_res.err);
  pthread_mutex_unlock (&pass_lock);
  if (e) {
    *err = e;
    return -1;
  }
  return 0;
}

int
writeback_range (uint64_t b0, uint64_t b1, int *err)
{
  struct wb_result res = { 0 };

  if (tbl.slots == NULL)
    return 0;
  if (b0 == 0 && b1 == UINT64_MAX)
    return writeback_all (PASS_ALL, err);
  visit_range (b0, b1, wb_one, &res);
  if (res.err) {
    *err = res.err;
    return -1;
  }
  return 0;
}

/* The background flusher: every flush interval, or sooner when writers
 * say enough of the cache is dirty (kick_at: a quarter, three quarters
 * when stripes are held, or more after a pass that left stripes
 * waiting), write back what is dirty.  It keeps clean blocks available
 * for eviction and bounds what an unsafe-mode crash can lose.
 */
static _Atomic uint32_t kick_at;

static bool
holding (void)
{
  return swb.on && swb.hold && cfg.hold_s > 0;
}

static uint32_t
kick_base (void)
{
  return holding () ? tbl.nslots - tbl.nslots / 4 : tbl.nslots / 4;
}

/* Above this many dirty blocks, partial stripes are written too. */
static uint32_t
pressure_level (void)
{
  return tbl.nslots - tbl.nslots / 8;
}

static enum pass_kind
background_kind (void)
{
  if (!holding ())
    return PASS_ALL;
  if (atomic_load (&tbl.ndirty) > pressure_level ()) {
    CCOUNT (CS_WB_PRESSURE, 1);
    return PASS_ALL;
  }
  return PASS_RIPE;
}

static void *
flusher_main (void *arg)
{
  pthread_mutex_lock (&hlock);
  while (!flusher_stop) {
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    ts.tv_sec += cfg.flush_interval_ms / 1000;
    ts.tv_nsec += (long) (cfg.flush_interval_ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    if (!kicked)
      pthread_cond_timedwait (&fcond, &hlock, &ts);
    kicked = false;
    if (flusher_stop)
      break;
    pthread_mutex_unlock (&hlock);
    if (atomic_load (&tbl.ndirty) > 0) {
      enum pass_kind kind = background_kind ();
      uint64_t left;
      int err;
      if (writeback_all (kind, &err) == -1)
        nbdkit_debug (CNAME ": background write-back failed: %s "
                      "(the blocks stay dirty)", strerror (err));
      /* Stripes left waiting must not make every write kick again:
       * the next kick comes once a sixteenth more of the cache is dirty.
       */
      left = atomic_load (&tbl.ndirty) + tbl.nslots / 16;
      if (kind == PASS_ALL || left <= kick_base ())
        atomic_store (&kick_at, kick_base ());
      else
        atomic_store (&kick_at, left < pressure_level () ? left
                      : pressure_level ());
    }
    pthread_mutex_lock (&hlock);
  }
  pthread_mutex_unlock (&hlock);
  return NULL;
}

static void
writeback_kick (void)
{
  pthread_mutex_lock (&hlock);
  kicked = true;
  pthread_cond_signal (&fcond);
  pthread_mutex_unlock (&hlock);
}

void
writeback_note_dirty (void)
{
  if (atomic_load (&tbl.ndirty) > atomic_load (&kick_at))
    writeback_kick ();
}

int
writeback_start (void)
{
  int e;

  pass_blocks = malloc (sizeof *pass_blocks * (tbl.nslots ? tbl.nslots : 1));
  pass_ents = malloc (sizeof *pass_ents * (tbl.nslots ? tbl.nslots : 1));
  atomic_store (&kick_at, kick_base ());
  if (pass_blocks == NULL || pass_ents == NULL) {
    nbdkit_error (CNAME ": out of memory");
    return -1;
  }
  for (nhelpers = 0; nhelpers < WB_THREADS - 1; nhelpers++)
    if ((e = pthread_create (&helpers[nhelpers], NULL, helper_main, NULL))) {
      nbdkit_error (CNAME ": pthread_create: %s", strerror (e));
      return -1;
    }
  if (cfg.writes_back) {
    /* The flusher's sleep is timed on the monotonic clock: a wall clock
     * set back would hold dirty data longer than writeback-interval.
     */
    pthread_condattr_t ca;
    pthread_condattr_init (&ca);
    pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
    pthread_cond_init (&fcond, &ca);
    pthread_condattr_destroy (&ca);
    if ((e = pthread_create (&flusher, NULL, flusher_main, NULL))) {
      nbdkit_error (CNAME ": pthread_create: %s", strerror (e));
      return -1;
    }
    flusher_running = true;
  }
  return 0;
}

void
writeback_stop_flusher (void)
{
  pthread_mutex_lock (&hlock);
  flusher_stop = true;
  pthread_cond_broadcast (&fcond);
  pthread_mutex_unlock (&hlock);
  if (flusher_running)
    pthread_join (flusher, NULL);
  flusher_running = false;
}

void
writeback_stop (void)
{
  writeback_stop_flusher ();
  pthread_mutex_lock (&hlock);
  helpers_stop = true;
  pthread_cond_broadcast (&hwork);
  pthread_mutex_unlock (&hlock);
  for (unsigned i = 0; i < nhelpers; i++)
    pthread_join (helpers[i], NULL);
  nhelpers = 0;
  free (pass_blocks);
  free (pass_ents);
  pass_blocks = NULL;
  pass_ents = NULL;
  stripe_wb_stop ();
}

/* gmblock-cache filter: write-back in whole RAID stripes.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * On parity RAID a write that covers part of a stripe costs md a
 * read-modify-write (old data and parity read before the new parity
 * can be written); a write of a whole aligned stripe costs none.  So
 * when the stripe is known, write-back passes and dirty evictions work
 * a stripe at a time: every dirty block of a complete stripe goes down
 * as one aligned write, adjacent dirty blocks of a partial stripe as
 * one write each run, and nothing crosses a stripe boundary.
 *
 * The geometry comes from gmblock-stripe through the registry (exact,
 * even for stripes that are not a power of two), else from the
 * preferred block size below.  The unit handled here is the smallest
 * length made of whole stripes and whole cache blocks (the stripe
 * itself when the block size divides it; one block when the block is
 * whole stripes, then only counted).  With no stripe, the same code
 * merges runs of dirty neighbours in units of writeback-merge bytes
 * (nothing held back, evictions alone): one large write costs a plain
 * disk less than many.
 *
 * Slots of neighbouring blocks are rarely neighbours in memory, so a
 * merged write is gathered into a buffer from a small pool allocated
 * at start-up (never per write); its count bounds the merged writes
 * in flight.  The rules of writeback.c hold: a shared hold on every
 * block while it is written, dirty cleared at the start and set again
 * on failure.  A pass never waits for a busy block while holding
 * others (zero and trim take several blocks exclusively in order, and
 * would wait for ours): it writes what it holds, lets go, waits, then
 * goes on from the busy block.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "registry.h"
#include "stripegeo.h"
#include "sizes.h"

#define NONE GM_2Q_NONE
#define POOL_BYTES (64u << 20)    /* all gather buffers together, at most */
#define POOL_MAX 10               /* one per pass thread, and two for evictions */

struct stripe_wb swb;

struct gather {
  char *buf;                    /* unit bytes, aligned for O_DIRECT */
  uint32_t *slot;               /* per block of the unit: slot held, or NONE */
  struct gather *next;
};
static struct gather *pool, *pool_free;
static unsigned pool_n;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cond = PTHREAD_COND_INITIALIZER;

static uint64_t
gcd (uint64_t a, uint64_t b)
{
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* The geometry gmblock-stripe published (common/stripegeo.c). */
static bool
from_registry (uint64_t *width, uint64_t *offset, bool *parity)
{
  struct gm_stripe g;
  char why[256];
  int r = gm_stripe_from_registry (&g, why, sizeof why);

  if (r == -1)
    nbdkit_debug (CNAME ": ignoring it: %s", why);
  if (r != 1)
    return false;
  *width = gm_stripe_width (&g);
  *offset = g.offset;
  *parity = g.parity > 0 || !g.parity_known;
  snprintf (swb.source, sizeof swb.source, "%.*s",
            (int) sizeof swb.source - 1, g.source);
  return true;
}

/* No stripe below: runs of dirty neighbours still go down as one write
 * each, up to writeback-merge bytes (and what the layer below takes),
 * in units aligned to that length.  Nothing is held back for them.
 */
static void
merge_geometry (void)
{
  uint64_t m = cfg.merge_bytes;
  char a[32];

  if (lower.bmax && m > lower.bmax)
    m = lower.bmax;
  m -= m % cfg.block_size;
  if (m < 2 * cfg.block_size)
    return;
  swb.width = m;
  swb.hold = false;
  snprintf (swb.source, sizeof swb.source, "writeback-merge=%s, no stripe "
            "known below", gm_format_size (m, a, sizeof a));
}

void
stripe_wb_geometry (void)
{
  swb.width = 0;
  swb.offset = 0;
  /* Without a word on parity (a preferred block size, io_opt), assume
   * it may be there: holding a partly dirty stripe costs only time.
   */
  swb.hold = true;
  if (!from_registry (&swb.width, &swb.offset, &swb.hold) &&
      lower.bpref > cfg.block_size) {
    swb.width = lower.bpref;
    snprintf (swb.source, sizeof swb.source, "preferred block size below");
  }
  /* A block size chosen by us that does not divide the stripe (128K
   * blocks on a 192K stripe): the largest power of two that does.
   */
  if (swb.width && !cfg.block_size_set && swb.width % cfg.block_size &&
      cfg.block_size % swb.width && (swb.width & -swb.width) >= 4096)
    cfg.block_size = swb.width & -swb.width;
  swb.geometry = swb.width != 0;
  if (!swb.geometry && cfg.writes_back)
    merge_geometry ();
}

int
stripe_wb_start (void)
{
  char a[32], b[32];
  uint64_t bs = tbl.bs;

  swb.on = swb.used = false;
  if (swb.width == 0)
    return 0;
  swb.unit = swb.width / gcd (swb.width, bs) * bs;
  /* A merged run is one write below, up to a unit long. */
  if (swb.unit > WB_MAX_UNIT || (lower.bmax && swb.unit > lower.bmax) ||
      swb.offset % bs) {
    nbdkit_debug (CNAME ": stripe %s (%s): write-back block by block (%s)",
                  gm_format_size (swb.width, a, sizeof a), swb.source,
                  swb.unit > WB_MAX_UNIT ? "stripes and blocks meet above 32M" :
                  swb.offset % bs == 0 ?
                  "stripes and blocks meet above the largest request below" :
                  "the export does not start on a block of the array");
    return 0;
  }
  swb.bpg = swb.unit / bs;
  swb.phase = (swb.offset / bs) % swb.bpg;
  pool_n = POOL_BYTES / swb.unit;
  if (pool_n > POOL_MAX)
    pool_n = POOL_MAX;
  if (pool_n == 0)
    pool_n = 1;
  pool = calloc (pool_n, sizeof *pool);
  if (pool == NULL)
    goto oom;
  for (unsigned i = 0; i < pool_n; i++) {
    struct gather *g = &pool[i];
    if (posix_memalign ((void **) &g->buf, 4096, swb.unit) != 0 ||
        (g->slot = malloc (sizeof *g->slot * swb.bpg)) == NULL)
      goto oom;
    g->next = pool_free;
    pool_free = g;
  }
  swb.on = swb.used = true;
  nbdkit_debug (CNAME ": write-back in %s of %s (%s): units of %s = "
                "%u blocks, %u gather buffers",
                swb.geometry ? "stripes" : "runs",
                gm_format_size (swb.width, a, sizeof a),
                swb.source, gm_format_size (swb.unit, b, sizeof b), swb.bpg,
                pool_n);
  return 0;
 oom:
  nbdkit_error (CNAME ": out of memory for the stripe write-back buffers");
  return -1;
}

void
stripe_wb_stop (void)
{
  for (unsigned i = 0; pool && i < pool_n; i++) {
    free (pool[i].buf);
    free (pool[i].slot);
  }
  free (pool);
  pool = pool_free = NULL;
  swb.on = false;
}

static struct gather *
gather_take (bool wait)
{
  struct gather *g;

  pthread_mutex_lock (&pool_lock);
  while ((g = pool_free) == NULL && wait)
    pthread_cond_wait (&pool_cond, &pool_lock);
  if (g)
    pool_free = g->next;
  pthread_mutex_unlock (&pool_lock);
  return g;
}

static void
gather_give (struct gather *g)
{
  pthread_mutex_lock (&pool_lock);
  g->next = pool_free;
  pool_free = g;
  pthread_cond_signal (&pool_cond);
  pthread_mutex_unlock (&pool_lock);
}

/* Blocks [*first, *last] of unit u, clipped to the export. */
static void
unit_blocks (uint64_t u, uint64_t *first, uint64_t *last)
{
  uint64_t f = u * swb.bpg, l = f + swb.bpg - 1;

  *first = f > swb.phase ? f - swb.phase : 0;
  *last = l - swb.phase < tbl.nblocks ? l - swb.phase : tbl.nblocks - 1;
}

static void
release (uint64_t b, uint32_t s, bool failed)
{
  struct shard *sh = shard_of (b);
  struct slot *sl = &tbl.slots[s];

  pthread_mutex_lock (&sh->lock);
  slot_wb_release (sh, sl, failed);
  pthread_mutex_unlock (&sh->lock);
}

/* One write below: held blocks [b, b+n) (slots in g->slot from index
 * i), full = they are exactly one unit.  Returns 0 or -1, *err.
 */
static int
write_run (struct gather *g, uint32_t i, uint64_t b, uint32_t n, bool full,
           int *err)
{
  uint64_t len = (uint64_t) (n - 1) * tbl.bs + blk_len (b + n - 1);
  const char *src = slot_mem (g->slot[i]);
  bool failed;
  int r;

  for (uint32_t k = 1; k < n; k++)
    if (g->slot[i + k] != g->slot[i] + k) {
      /* Not neighbours in memory: gather. */
      for (uint32_t j = 0; j < n; j++)
        memcpy (g->buf + (uint64_t) j * tbl.bs, slot_mem (g->slot[i + j]),
                blk_len (b + j));
      src = g->buf;
      break;
    }
  r = lower_pwrite (src, len, blk_off (b), 0, err);
  failed = r == -1;
  for (uint32_t k = 0; k < n; k++)
    release (b + k, g->slot[i + k], failed);
  if (failed) {
    errno = *err;
    nbdkit_error (CNAME ": write-back: pwrite of %llu bytes at offset %llu: "
                  "%m (the blocks stay dirty)", (unsigned long long) len,
                  (unsigned long long) blk_off (b));
    CCOUNT (CS_ERRORS, 1);
    return -1;
  }
  CCOUNT (CS_WRITEBACKS, n);
  CCOUNT (CS_WRITEBACK_BYTES, len);
  CCOUNT (CS_WRITEBACK_WRITES, 1);
  CCOUNT (CS_WB_BLOCKS, n);
  if (swb.geometry)
    CCOUNT (full ? CS_WB_FULL_STRIPE : CS_WB_PARTIAL_STRIPE, 1);
  if (n > 1)
    CCOUNT (CS_WB_MERGED, 1);
  return 0;
}

/* Write the held blocks of [from, to) (indices into the unit starting
 * at block first) as runs of neighbours.  Returns the first error.
 */
static int
write_held (struct gather *g, uint64_t first, uint32_t from, uint32_t to,
            bool whole, int *err)
{
  int r = 0, e = EIO;

  for (uint32_t i = from; i < to; ) {
    uint32_t n = 0;
    if (g->slot[i] == NONE) {
      i++;
      continue;
    }
    while (i + n < to && g->slot[i + n] != NONE)
      n++;
    if (write_run (g, i, first + i, n, whole && n == swb.bpg, &e) == -1 &&
        r == 0) {
      r = -1;
      *err = e;
    }
    i += n;
  }
  return r;
}

/* Write back the dirty blocks of unit u.  pre_b/pre_s: a block already
 * held by the caller (an eviction), else UINT64_MAX.  An eviction
 * skips busy blocks (it holds one, so it must not wait); a pass waits
 * for them, holding nothing, so that it covers every block.  Returns 0
 * or -1 with *err: for an eviction, the result of pre_b's write.
 */
static int
unit_write_back (uint64_t u, uint64_t pre_b, uint32_t pre_s,
                 struct gather *g, int *err)
{
  bool evicting = pre_b != UINT64_MAX;
  uint64_t first, last, b;
  /* A unit cut by the end of the export is never a whole stripe. */
  bool whole = stripe_wb_unit_whole (u);
  int r = 0, e = EIO;

  unit_blocks (u, &first, &last);
  for (b = first; b <= last; ) {
    uint32_t from = b - first;
    uint64_t busy = UINT64_MAX;

    for (; b <= last; b++) {
      struct shard *sh;
      struct slot *sl;
      uint32_t s;

      g->slot[b - first] = NONE;
      if (b == pre_b) {
        g->slot[b - first] = pre_s;
        continue;
      }
      sh = shard_of (b);
      pthread_mutex_lock (&sh->lock);
      s = find_slot (sh, b);
      sl = s == NONE ? NULL : &tbl.slots[s];
      if (sl && (sl->dirty || sl->wb)) {
        if (!sl->wb && !sl->excl) {
          slot_wb_hold (sh, sl);
          g->slot[b - first] = s;
        }
        else if (!evicting)
          busy = b;
      }
      pthread_mutex_unlock (&sh->lock);
      if (busy != UINT64_MAX)
        break;
    }
    if (write_held (g, first, from, b - first, whole && from == 0, &e) == -1) {
      if (r == 0)
        *err = e;
      /* An eviction answers for its victim only. */
      if (!evicting || (pre_b >= first + from && pre_b < b))
        r = -1;
    }
    if (busy != UINT64_MAX) {
      struct shard *sh = shard_of (busy);
      uint32_t s;
      pthread_mutex_lock (&sh->lock);
      while ((s = find_slot (sh, busy)) != NONE &&
             (tbl.slots[s].wb || tbl.slots[s].excl))
        shard_wait (sh);
      pthread_mutex_unlock (&sh->lock);
    }
  }
  return r;
}

bool
stripe_wb_unit_whole (uint64_t u)
{
  uint64_t first, last;

  unit_blocks (u, &first, &last);
  return last - first + 1 == swb.bpg && blk_len (last) == tbl.bs;
}

uint64_t
stripe_wb_unit_of (uint64_t b)
{
  return (b + swb.phase) / swb.bpg;
}

int
stripe_wb_unit (uint64_t u, int *err)
{
  struct gather *g = gather_take (true);
  int r = unit_write_back (u, UINT64_MAX, 0, g, err);
  gather_give (g);
  return r;
}

int
stripe_wb_evict (struct shard *sh, uint32_t s, int *err)
{
  struct slot *sl = &tbl.slots[s];
  uint64_t b = sl->blk;
  struct gather *g;
  int r;

  /* With no buffer to be had at once, the victim goes alone: we hold
   * its shard's lock, and waiting here could keep a buffer's owner
   * from letting go of its blocks.
   */
  if (!swb.on || !swb.geometry || (g = gather_take (false)) == NULL)
    return slot_write_back (sh, s, err);
  slot_wb_hold (sh, sl);
  pthread_mutex_unlock (&sh->lock);
  r = unit_write_back (stripe_wb_unit_of (b), b, s, g, err);
  gather_give (g);
  pthread_mutex_lock (&sh->lock);
  return r;
}

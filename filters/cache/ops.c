/* gmblock-cache filter: reads, writes, zero, trim, flush, prefetch.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * In bypass mode every call goes to the connection's own next context
 * untouched.  In the caching modes requests are cut at block
 * boundaries and each piece goes through the block table; all I/O
 * below uses the one shared context.
 *
 * Writes, zeros and trims hold an exclusive range lock over the whole
 * blocks they touch, so that operations changing the same block never
 * interleave their "below" and "in the cache" steps.  Reads take no
 * range lock: a fill racing with a write is marked stale by the writer
 * and not kept.
 */
#include <errno.h>
#include <string.h>

#include "ops.h"
#include "sizes.h"

static struct gm_rangelock wlocks = {
  .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* The piece of [offset, offset+count) inside block b. */
static inline void
piece (uint64_t b, uint64_t offset, uint64_t end, uint32_t *from,
       uint32_t *to)
{
  uint64_t s = blk_off (b), e = s + blk_len (b);
  *from = (offset > s ? offset : s) - s;
  *to = (end < e ? end : e) - s;
}

static int
read_below (char *buf, uint64_t len, uint64_t off, int *err)
{
  if (len == 0)
    return 0;
  CCOUNT (CS_BYPASS_BYTES, len);
  return lower_pread (buf, len, off, err);
}

int
cache_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count,
             uint64_t offset, uint32_t flags, int *err)
{
  struct conn *c = handle;
  uint64_t end = offset + count, b0, b1;
  uint64_t run_off = 0, run_len = 0;    /* pending bypassed bytes */
  bool scan = false;

  if (cfg.mode == MODE_BYPASS)
    return next->pread (next, buf, count, offset, flags, err);

  CCOUNT (CS_READS, 1);
  CCOUNT (CS_READ_BYTES, count);
  policy_note_read (c, offset, count, &scan);
  b0 = offset >> tbl.shift;
  b1 = (end - 1) >> tbl.shift;
  for (uint64_t b = b0; b <= b1; b++) {
    uint32_t from, to;
    char *dst;
    int r;

    piece (b, offset, end, &from, &to);
    dst = (char *) buf + (blk_off (b) + from - offset);
    r = block_read (c, b, from, to, dst, false, scan, err);
    if (r == -1)
      return -1;
    if (r == 0) {
      /* Bypassed: gather consecutive pieces into one read below. */
      if (run_len == 0)
        run_off = blk_off (b) + from;
      run_len += to - from;
      continue;
    }
    if (read_below ((char *) buf + (run_off - offset), run_len, run_off,
                    err) == -1)
      return -1;
    run_len = 0;
  }
  return read_below ((char *) buf + (run_off - offset), run_len, run_off,
                     err);
}

static inline void
lock_blocks (struct gm_range *r, uint64_t offset, uint64_t count)
{
  gm_range_lock (&wlocks, r, gm_round_down (offset, tbl.bs),
                 gm_round_up (offset + count, tbl.bs), true);
}

static int fua_flush (int *err);
static int flush_report (struct conn *c, int r, int *err);

int
cache_pwrite (nbdkit_next *next, void *handle, const void *buf,
              uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  uint64_t end = offset + count, b0, b1;
  bool fua = flags & NBDKIT_FLAG_FUA;
  struct gm_range rl;
  int r = 0;

  if (cfg.mode == MODE_BYPASS)
    return next->pwrite (next, buf, count, offset, flags, err);

  CCOUNT (CS_WRITES, 1);
  CCOUNT (CS_WRITE_BYTES, count);
  if (fua)
    CCOUNT (CS_FUA, 1);
  b0 = offset >> tbl.shift;
  b1 = (end - 1) >> tbl.shift;
  lock_blocks (&rl, offset, count);
  if (cfg.writes_back) {
    /* With FUA the blocks go to the cache like any write and the flush
     * below (fua_flush) takes them down with every other dirty block.
     */
    for (uint64_t b = b0; b <= b1 && r == 0; b++) {
      uint32_t from, to;
      piece (b, offset, end, &from, &to);
      r = block_write_back (b, from, to,
                            (const char *) buf + (blk_off (b) + from - offset),
                            err);
    }
  }
  else {
    r = lower_pwrite (buf, count, offset, fua ? NBDKIT_FLAG_FUA : 0, err);
    if (r == -1)
      blocks_forget_range (b0, b1);
    for (uint64_t b = b0; b <= b1 && r == 0; b++) {
      uint32_t from, to;
      piece (b, offset, end, &from, &to);
      block_update (b, from, to,
                    (const char *) buf + (blk_off (b) + from - offset),
                    cfg.mode == MODE_WRITETHROUGH && to - from == blk_len (b));
    }
  }
  gm_range_unlock (&wlocks, &rl);
  if (r == 0 && cfg.writes_back)
    writeback_note_dirty ();
  if (r == 0 && fua)
    r = fua_flush (err);
  return fua ? flush_report (handle, r, err) : r;
}

/* Every dirty block down, then a flush below. */
static int
flush_all (int *err)
{
  if (cfg.writes_back && writeback_range (0, UINT64_MAX, err) == -1)
    return -1;
  return lower_flush (err);
}

/* After a FUA request in a write-back mode.  A FUA reply covers every
 * write acknowledged before it (README), and those may still be dirty
 * here: so it is a flush.  In the other modes every write went below
 * at once and the request's FUA, passed down, is enough (the gmblock
 * plugin syncs what earlier writes left unsynced).
 */
static int
fua_flush (int *err)
{
  if (!cfg.writes_back || cfg.unsafe)
    return 0;
  CCOUNT (CS_FUA_FLUSHES, 1);
  return flush_all (err);
}

/* The end of a flush or FUA request on c, r its result so far.  All
 * connections share the context below, so a flush below that failed
 * (the disk lost what it had not written yet) was told to the one
 * request that met it, and a later flush below may well succeed
 * (Linux reports a write-back error once per open file): every other
 * connection's next flush or FUA reply fails once with EIO, as it
 * would with a context of its own (a review finding: it succeeded
 * while that connection's acknowledged writes were lost).  In unsafe
 * mode a flush promises nothing.
 */
static int
flush_report (struct conn *c, int r, int *err)
{
  uint64_t now = atomic_load (&lower_flush_failures);

  /* Only an EIO reply tells the client its writes may be lost; another
   * error (a fast zero refused with ENOTSUP: nothing was done, zero
   * slowly) leaves the news for its next flush. */
  if (cfg.unsafe || (r == -1 && *err != EIO) ||
      atomic_exchange (&c->flush_failures_seen, now) == now)
    return r;
  if (r == 0) {
    CCOUNT (CS_FLUSH_FAILURES_REPORTED, 1);
    *err = EIO;
    r = -1;
  }
  return r;
}

int
cache_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
  if (cfg.mode == MODE_BYPASS)
    return next->flush (next, flags, err);
  CCOUNT (CS_FLUSHES, 1);
  if (cfg.unsafe)
    return 0;
  return flush_report (handle, flush_all (err), err);
}

enum change { TRIM, ZERO };

/* Zero or trim: below first, for the whole range, while the resident
 * blocks it touches are held; then those are dropped (or, when dirty
 * and only partly covered, zeroed in place).
 */
static int
change_range (struct conn *c, enum change what, uint32_t count,
              uint64_t offset, uint32_t flags, int *err)
{
  uint64_t b0 = offset >> tbl.shift, b1 = (offset + count - 1) >> tbl.shift;
  bool fua = flags & NBDKIT_FLAG_FUA;
  struct gm_range rl;
  int r;

  /* In write-back modes FUA becomes a flush after (fua_flush). */
  if (cfg.unsafe || cfg.writes_back)
    flags &= ~NBDKIT_FLAG_FUA;
  else if (fua && lower.can_fua == NBDKIT_FUA_NONE)
    flags &= ~NBDKIT_FLAG_FUA;
  lock_blocks (&rl, offset, count);
  blocks_hold_range (b0, b1);
  if (what == TRIM)
    r = lower_trim (count, offset, flags, err);
  else
    r = lower_zero (count, offset, flags, err);
  if (r == 0 && fua && !cfg.unsafe && !cfg.writes_back &&
      lower.can_fua == NBDKIT_FUA_NONE)
    r = lower_flush (err);
  blocks_release_range (b0, b1, offset, count, r == 0, what == TRIM);
  gm_range_unlock (&wlocks, &rl);
  if (r == 0 && fua)
    r = fua_flush (err);
  return fua ? flush_report (c, r, err) : r;
}

int
cache_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
            uint32_t flags, int *err)
{
  if (cfg.mode == MODE_BYPASS)
    return next->trim (next, count, offset, flags, err);
  CCOUNT (CS_TRIMS, 1);
  return change_range (handle, TRIM, count, offset, flags, err);
}

int
cache_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
            uint32_t flags, int *err)
{
  if (cfg.mode == MODE_BYPASS)
    return next->zero (next, count, offset, flags, err);
  CCOUNT (CS_ZEROS, 1);
  return change_range (handle, ZERO, count, offset, flags, err);
}

int
cache_cache (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
             uint32_t flags, int *err)
{
  struct conn *c = handle;

  if (cfg.mode == MODE_BYPASS)
    return next->cache (next, count, offset, flags, err);
  CCOUNT (CS_PREFETCHES, 1);
  for (uint64_t b = offset >> tbl.shift;
       b <= (offset + count - 1) >> tbl.shift; b++)
    if (block_read (c, b, 0, 0, NULL, true, false, err) == -1)
      return -1;
  return 0;
}

int
cache_extents (nbdkit_next *next, void *handle, uint32_t count,
               uint64_t offset, uint32_t flags,
               struct nbdkit_extents *extents, int *err)
{
  if (cfg.mode == MODE_BYPASS)
    return next->extents (next, count, offset, flags, extents, err);
  /* Dirty blocks exist only here: write them back first so that the
   * layer below describes the range truthfully.
   */
  if (cfg.writes_back &&
      writeback_range (offset >> tbl.shift,
                       (offset + count - 1) >> tbl.shift, err) == -1)
    return -1;
  return lower_extents (next, count, offset, flags, extents, err);
}

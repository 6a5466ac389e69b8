/* gmblock plugin: flush, trim, zero, extents, cache.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/falloc.h>
#include <linux/fs.h>

#include "gmblock.h"
#include "sizes.h"

/* A FUA reply covers every write acknowledged before it, not only its
 * own (README): RWF_DSYNC alone makes only that write durable (a FUA
 * bio, or a sync of its own range in the page cache).  So: count the
 * writes completed (written_gen) and, at each fdatasync, how many of
 * them it covers (synced_gen); a FUA request that finds writes not yet
 * covered when it starts syncs them too.
 */
static _Atomic uint64_t written_gen, synced_gen;

void
gm_write_done (void)
{
  atomic_fetch_add (&written_gen, 1);
}

bool
gm_unsynced_writes (void)
{
  return atomic_load (&synced_gen) < atomic_load (&written_gen);
}

/* A failed fdatasync means written data may be lost, and Linux reports
 * that once only: remember it (failstop.c).
 *
 * Linux hands a write-back error to the first fsync-type call only.
 * Whoever takes it must have put the plugin in fail-stop before another
 * flush can report success: else that flush (sent after the lost write
 * was acknowledged) answers "durable" for data that is gone.  So a
 * fdatasync runs alone (exclusive), and RWF_DSYNC writes, which take
 * such errors too, hold the lock shared until they have published
 * theirs (gm_sync_lock_shared).  The level is read again under the lock.
 */
/* -D gmblock.failstop_delay_ms=N: a test widens the window between a
 * sync taking a write-back error and fail-stop being published.
 */
NBDKIT_DLL_PUBLIC int gmblock_debug_failstop_delay_ms = 0;

static pthread_rwlock_t sync_lock =
  PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;  /* flushes do not starve */

void
gm_sync_lock_shared (void)
{
  pthread_rwlock_rdlock (&sync_lock);
}

void
gm_sync_unlock (void)
{
  pthread_rwlock_unlock (&sync_lock);
}

int
gm_datasync (void)
{
  uint64_t g = atomic_load (&written_gen), s;
  int r;

  pthread_rwlock_wrlock (&sync_lock);
  if (gm_failstop_level () >= GM_FAILSTOP_WRITES)
    r = -EIO;
  else if (atomic_load (&synced_gen) >= g) {
    /* While this one waited, another fdatasync ran that began after the
     * first g writes had completed: it covers them all.
     */
    COUNT (ST_SYNCS_SHARED, 1);
    r = 0;
  }
  else if ((r = gm_engine_fdatasync (gm.fd)) < 0) {
    if (gmblock_debug_failstop_delay_ms > 0)
      usleep (gmblock_debug_failstop_delay_ms * 1000);
    gm_failstop (GM_FAILSTOP_WRITES, "fdatasync", -r);
  }
  else {
    /* Published before the next one looks (under the lock). */
    s = atomic_load (&synced_gen);
    while (s < g && !atomic_compare_exchange_weak (&synced_gen, &s, g))
      ;
  }
  pthread_rwlock_unlock (&sync_lock);
  return r < 0 ? -r : 0;
}

int
gm_flush (void *handle, uint32_t flags)
{
  int err;

  COUNT (ST_FLUSHES, 1);
  if (gm_failstop_refuse (GM_FAILSTOP_WRITES, "flush", 0, gm.size) == -1)
    return -1;
  if ((err = gm_datasync ()) != 0) {
    gm_io_error ("flush", 0, gm.size, err);
    return -1;
  }
  return 0;
}

/* fallocate under an exclusive lock of the blocks it touches, so it
 * cannot interleave with a read-modify-write of the same block.
 */
static int
locked_fallocate (int mode, uint64_t offset, uint64_t count)
{
  struct gm_range r;
  int err = 0;

  gm_range_lock (&gm.locks, &r, gm_round_down (offset, gm.align),
                 gm_round_up (offset + count, gm.align), true);
  if (fallocate (gm.fd, mode, offset, count) == -1)
    err = errno;
  gm_range_unlock (&gm.locks, &r);
  return err;
}

static int
discard_device (uint64_t offset, uint64_t count)
{
  uint64_t range[2] = { offset, count };
  struct gm_range r;
  int err = 0;

  gm_range_lock (&gm.locks, &r, offset, offset + count, true);
  if (ioctl (gm.fd, BLKDISCARD, range) == -1)
    err = errno;
  gm_range_unlock (&gm.locks, &r);
  return err;
}

/* Unmap [offset, offset+count) as discard=unmap asks.  Returns 0 or an
 * errno; a medium that cannot discard is not an error for an advisory
 * trim.
 */
static int
unmap_range (uint64_t offset, uint32_t count)
{
  int err = 0;

  if (!gm.geo.is_block)
    err = locked_fallocate (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                            offset, count);
  else {
    /* A device can only discard whole blocks; trim is advisory, so the
     * partial blocks at the edges are simply left alone.
     */
    uint64_t lo = gm_round_up (offset, gm.geo.logical_block);
    uint64_t hi = gm_round_down (offset + count, gm.geo.logical_block);
    if (lo < hi && gm.geo.discard_max > 0)
      err = discard_device (lo, hi - lo);
  }
  return err == EOPNOTSUPP || err == ENOTTY || err == ENODEV ? 0 : err;
}

int
gm_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  int err = 0;

  COUNT (ST_TRIMS, 1);
  COUNT (ST_TRIM_BYTES, count);
  if (gm_failstop_refuse (GM_FAILSTOP_WRITES, "trim", offset, count) == -1)
    return -1;
  /* Ignored (discard=ignore), a FUA trim still covers the writes
   * acknowledged before it. */
  if (gm.discard != GM_DISCARD_IGNORE &&
      (err = unmap_range (offset, count)) == 0)
    gm_write_done ();
  if (err == 0 && (flags & NBDKIT_FLAG_FUA))
    err = gm_datasync ();
  if (err) {
    gm_io_error ("trim", offset, count, err);
    return -1;
  }
  return 0;
}

/* Whether ZERO_RANGE is fast.  On a device without a write-zeroes
 * offload it quietly writes zeros itself: correct but not fast.  The
 * kernel also turns the offload off at run time when the device
 * refuses it (sd after a failed WRITE SAME, md when a member lacks
 * it), so a FAST_ZERO reads the queue's limit again (a FAST_ZERO is
 * rare: a client asks it once before copying an image).
 */
static bool
zero_range_is_fast (void)
{
  uint64_t now;

  if (!gm.geo.is_block)
    return true;
  if (gm.geo.write_zeroes_max == 0)
    return false;
  if (gm_sysfs_block_u64 (gm.geo.major, gm.geo.minor,
                          "queue/write_zeroes_max_bytes", &now) == 0)
    return now > 0;
  return true;
}

/* The fast ways to zero, most preferred first.  Returns 0, or an errno
 * (EOPNOTSUPP when the medium has no fast way).
 */
static int
zero_fast (uint64_t offset, uint64_t count, bool may_trim, bool must_be_fast)
{
  int err = EOPNOTSUPP;

  if (may_trim && gm.discard == GM_DISCARD_UNMAP) {
    /* On a block device PUNCH_HOLE means "zero by unmapping, never by
     * writing", so it is fast whenever it succeeds.
     */
    err = locked_fallocate (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                            offset, count);
    if (err == 0)
      return 0;
  }
  if (!must_be_fast || zero_range_is_fast ())
    err = locked_fallocate (FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                            offset, count);
  if (err == EOPNOTSUPP || err == ENODEV || err == EINVAL || err == ENOTTY)
    err = EOPNOTSUPP;
  return err;
}

int
gm_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  bool may_trim = flags & NBDKIT_FLAG_MAY_TRIM;
  bool fast = flags & NBDKIT_FLAG_FAST_ZERO;
  bool fua = flags & NBDKIT_FLAG_FUA;
  uint64_t end = offset + count, lo = offset, hi = end;
  int err = 0;

  COUNT (ST_ZEROS, 1);
  COUNT (ST_ZERO_BYTES, count);
  if (gm_failstop_refuse (GM_FAILSTOP_WRITES, "zero", offset, count) == -1)
    return -1;

  if (gm.geo.is_block) {
    /* Devices zero whole logical blocks only; the edges are written. */
    lo = gm_round_up (offset, gm.geo.logical_block);
    hi = gm_round_down (end, gm.geo.logical_block);
    if (lo >= hi)
      lo = hi = end;
  }
  if (lo < hi)
    err = zero_fast (lo, hi - lo, may_trim, fast);

  if (err == EOPNOTSUPP) {
    if (fast) {
      COUNT (ST_FAST_ZERO_REFUSED, 1);
      nbdkit_debug (GM_NAME ": fast zero refused at offset %" PRIu64
                    ": no fast zeroing on this medium", offset);
      nbdkit_set_error (ENOTSUP);
      return -1;
    }
    /* nbdkit falls back to writing zeros itself. */
    nbdkit_set_error (EOPNOTSUPP);
    return -1;
  }
  /* Plain edges: with FUA the fdatasync after covers them and the rest. */
  if (err == 0 && offset < lo)
    err = gm_write_zeros (offset, lo - offset);
  if (err == 0 && hi < end)
    err = gm_write_zeros (hi, end - hi);
  if (err == 0)
    gm_write_done ();
  if (err == 0 && fua)
    err = gm_datasync ();
  if (err) {
    gm_io_error ("zero", offset, count, err);
    return -1;
  }
  return 0;
}

int
gm_extents (void *handle, uint32_t count, uint64_t offset, uint32_t flags,
            struct nbdkit_extents *extents)
{
  uint64_t end = offset + count;
  bool req_one = flags & NBDKIT_FLAG_REQ_ONE;

  COUNT (ST_EXTENTS, 1);
  if (gm.geo.is_block)
    return nbdkit_add_extent (extents, offset, count, 0);

  while (offset < end) {
    off_t data = lseek (gm.fd, offset, SEEK_DATA);
    off_t hole;

    if (data == -1 && errno == ENXIO)
      data = end;               /* only a hole until end of file */
    else if (data == -1) {
      gm_io_error ("lseek SEEK_DATA", offset, count, errno);
      return -1;
    }
    if ((uint64_t) data > end)
      data = end;
    if ((uint64_t) data > offset) {
      if (nbdkit_add_extent (extents, offset, data - offset,
                             NBDKIT_EXTENT_HOLE | NBDKIT_EXTENT_ZERO) == -1)
        return -1;
      if (req_one)
        return 0;
      offset = data;
      if (offset >= end)
        break;
    }
    hole = lseek (gm.fd, offset, SEEK_HOLE);
    if (hole == -1) {
      gm_io_error ("lseek SEEK_HOLE", offset, count, errno);
      return -1;
    }
    if ((uint64_t) hole > end)
      hole = end;
    /* Data at offset, and a hole there by the time of the second lseek:
     * a trim or zero punched it in between.  Look again: a zero-length
     * extent is no extent, and with REQ_ONE nbdkit then failed the
     * request with EINVAL (found by the stress harness). */
    if ((uint64_t) hole == offset)
      continue;
    if (nbdkit_add_extent (extents, offset, hole - offset, 0) == -1)
      return -1;
    if (req_one)
      return 0;
    offset = hole;
  }
  return 0;
}

/* Only page-cache mode advertises cache: there the kernel really
 * prefetches.  (In direct mode there is nothing to prefetch into; stack
 * the gmblock-cache filter above for real caching.)
 */
int
gm_cache (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  int r;

  COUNT (ST_CACHES, 1);
  COUNT (ST_CACHE_BYTES, count);
  r = posix_fadvise (gm.fd, offset, count, POSIX_FADV_WILLNEED);
  if (r != 0) {
    gm_io_error ("posix_fadvise WILLNEED", offset, count, r);
    return -1;
  }
  return 0;
}

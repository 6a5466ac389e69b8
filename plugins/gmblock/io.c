/* gmblock plugin: reads and writes.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Direct mode: the file is open with O_DIRECT, so every transfer must
 * start and end on gm.align and use a buffer aligned to gm.mem_align.
 * nbdkit's buffer is malloc'd (never page-aligned), so data normally
 * lands by DMA in a pool buffer and is copied once into nbdkit's
 * buffer.  Requests that do not start or end on a block are widened
 * (reads) or done as read-modify-write (writes).  Writes hold an
 * exclusive range lock on the blocks they touch so that two
 * read-modify-writes of one block cannot lose each other's bytes;
 * reads need no lock because a block is only ever written whole.
 *
 * A file whose size is not a multiple of the block size has a partial
 * last block, which O_DIRECT cannot write without extending the file.
 * Everything from the 64K boundary before it (gm.direct_end) to the end
 * of the file is read and written through a second, buffered
 * descriptor.  A whole 64K, not just the block: an O_DIRECT write to a
 * page (or filesystem block) that buffered writes keep dirtying races
 * with the kernel's page invalidation, failing or being undone by later
 * writeback (found by tests/test-concurrency-rmw.sh), so the two paths
 * never share a page or a filesystem block.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gmblock.h"
#include "sizes.h"

void
gm_io_error (const char *op, uint64_t offset, uint64_t count, int err)
{
  COUNT (ST_ERRORS, 1);
  errno = err;
  nbdkit_error (GM_NAME ": %s: %s at offset %" PRIu64 " length %" PRIu64
                ": %m", gm.file, op, offset, count);
  nbdkit_set_error (err);
}

static inline bool
is_aligned (uint64_t v)
{
  return v % gm.align == 0;
}

/* Whether the disk may DMA straight to or from nbdkit's buffer. */
static inline bool
buf_aligned (const void *buf)
{
  return (uintptr_t) buf % gm.client_align == 0;
}

/* Read exactly len bytes or fail; short reads inside the export mean
 * the file shrank underneath us.
 */
static int
read_full (int fd, void *buf, size_t len, uint64_t off, size_t need)
{
  ssize_t r = gm_engine_rw (GM_READ, fd, buf, len, off, 0);
  if (r < 0)
    return -r;
  if ((size_t) r < need)
    return EIO;
  return 0;
}

/* Write all of buf or fail. */
static int
write_full (int fd, const void *buf, size_t len, uint64_t off, int rwf)
{
  ssize_t r = gm_engine_rw (GM_WRITE, fd, (void *) buf, len, off, rwf);
  if (r < 0)
    return -r;
  return (size_t) r == len ? 0 : EIO;
}

/* One O_DIRECT transfer of gm.fd, timed: dma_ops and dma_ns give the
 * mean completion time, whichever memory takes the DMA.
 */
static int
dma_rw (enum gm_rw op, char *b, size_t len, uint64_t off, size_t need,
        int rwf)
{
  struct timespec t0, t1;
  int err;

  clock_gettime (CLOCK_MONOTONIC, &t0);
  err = op == GM_READ ? read_full (gm.fd, b, len, off, need)
    : write_full (gm.fd, b, len, off, rwf);
  clock_gettime (CLOCK_MONOTONIC, &t1);
  COUNT (ST_DMA_OPS, 1);
  COUNT (ST_DMA_NS, (t1.tv_sec - t0.tv_sec) * UINT64_C (1000000000) +
         t1.tv_nsec - t0.tv_nsec);
  return err;
}

/* I/O on the caller's memory (nbdkit's buffer, a cache slot above)
 * failed: if the ring abandoned it, it may still land in memory the
 * caller frees and reuses (a DMA, or the kernel's copy of a buffered
 * read or write run late by io-wq), which the plugin cannot keep out
 * of use as it does its pool's (pool_release): the server, in
 * fail-stop and refusing everything by then, exits at once rather
 * than let it corrupt another request or nbdkit's heap, or write
 * another request's bytes.
 */
static void
exit_if_abandoned (enum gm_rw op, uint64_t off, size_t len)
{
  if (!gm_engine_lost ())
    return;
  nbdkit_error (GM_NAME ": %s: %s at offset %" PRIu64 " length %zu: "
                "io_uring abandoned it in flight, in memory the plugin "
                "does not own: exiting before it can land in memory in "
                "use again", gm.file, op == GM_READ ? "pread" : "pwrite",
                off, len);
  _exit (EXIT_FAILURE);
}

/* DMA straight to or from the caller's memory. */
static int
caller_dma (enum gm_rw op, char *buf, size_t len, uint64_t off, int rwf)
{
  int err = dma_rw (op, buf, len, off, len, rwf);

  if (err == 0)
    COUNT (ST_DMA_CLIENT_BYTES, len);
  else
    exit_if_abandoned (op, off, len);
  return err;
}

/* Buffered I/O (fd through the page cache) on the caller's memory. */
static int
caller_buffered (enum gm_rw op, int fd, char *buf, size_t len, uint64_t off,
                 int rwf)
{
  int err = op == GM_READ ? read_full (fd, buf, len, off, len)
    : write_full (fd, buf, len, off, rwf);

  if (err == 0)
    COUNT (ST_BUFFERED_BYTES, len);
  else
    exit_if_abandoned (op, off, len);
  return err;
}

/* A pool buffer, or NULL with the reason logged once pool memory lost
 * to abandoned requests leaves none of len bytes (gm_pool_get).
 */
static char *
pool_get (struct gm_pool *pool, size_t len)
{
  char *b = gm_pool_get (pool, len);

  if (b == NULL)
    nbdkit_error (GM_NAME ": no %zu-byte pool buffer can be had: the pool "
                  "lost memory to io_uring requests abandoned in flight "
                  "(fail-stop)", len);
  return b;
}

/* Give back a pool buffer after a transfer that ended with err, unless
 * the ring abandoned that transfer (engine.c): its DMA may still land in
 * the buffer (or read it, and write another request's data to disk), so
 * the buffer is never handed out again.
 */
static void
pool_release (struct gm_pool *pool, char *b, size_t len, int err)
{
  if (err && gm_engine_lost ())
    gm_pool_quarantine (pool, b, len);
  else
    gm_pool_put (pool, b, len);
}

/* Give back a buffer of gm.pool after pool_rw with it ended with err.
 * Staged, the DMA went to the stage buffer (pool_rw released that),
 * never to b.
 */
static void
pool_done (char *b, size_t len, int err)
{
  pool_release (gm.pool, b, len, gm.stage_pool ? 0 : err);
}

/* O_DIRECT between the disk and a pool buffer, wherever the pool lives.
 * Device memory that cannot take DMA (buffer-fallback=stage) gets its
 * data through a host buffer and a CPU copy, counted.
 */
static int
pool_rw (enum gm_rw op, char *b, size_t len, uint64_t off, size_t need,
         int rwf)
{
  char *s = b;
  int err;

  if (gm.stage_pool) {
    if ((s = pool_get (gm.stage_pool, len)) == NULL)
      return EIO;
    if (op == GM_WRITE) {
      memcpy (s, b, len);
      COUNT (ST_COPY_FROM_DEVICE_BYTES, len);
    }
  }
  err = dma_rw (op, s, len, off, need, rwf);
  if (err == 0) {
    COUNT (gm.pool_device && s == b ? ST_DMA_DEVICE_BYTES : ST_DMA_POOL_BYTES,
           len);
    if (s != b && op == GM_READ) {
      memcpy (b, s, len);
      COUNT (ST_COPY_TO_DEVICE_BYTES, len);
    }
    if (s != b)
      COUNT (ST_STAGED_BYTES, len);
  }
  if (s != b)
    pool_release (gm.stage_pool, s, len, err);
  return err;
}

static inline int
pool_read (char *b, size_t len, uint64_t off, size_t need)
{
  return pool_rw (GM_READ, b, len, off, need, 0);
}

static inline int
pool_write (char *b, size_t len, uint64_t off, int rwf)
{
  return pool_rw (GM_WRITE, b, len, off, len, rwf);
}

/* O_DIRECT read of [offset, offset+count), below gm.direct_end. */
static int
direct_read_aligned (char *buf, uint32_t count, uint64_t offset)
{
  uint64_t end = offset + count;
  uint64_t lo = gm_round_down (offset, gm.align);
  uint64_t hi = gm_round_up (end, gm.align);
  int err;

  /* The lucky case: DMA straight into nbdkit's buffer.  Not with
   * buffer=p2pmem or bar: there the user asked for the data to land in
   * device memory, so it always does.
   */
  if (lo == offset && hi == end && buf_aligned (buf) && !gm.pool_device)
    return caller_dma (GM_READ, buf, count, offset, 0);

  for (uint64_t wl = lo; wl < hi; ) {
    uint64_t wh = hi - wl > gm.batch_max ? wl + gm.batch_max : hi;
    uint64_t from = offset > wl ? offset : wl;
    uint64_t to = end < wh ? end : wh;
    char *b = pool_get (gm.pool, wh - wl);

    if (b == NULL)
      return EIO;
    /* Only the bytes the client asked for have to be there: a file
     * shrunk underneath us still serves whatever lies below its end.
     */
    err = pool_read (b, wh - wl, wl, to - wl);
    if (err == 0) {
      memcpy (buf + (from - offset), b + (from - wl), to - from);
      COUNT (ST_MEMCPY_READ_BYTES, to - from);
      if (gm.pool_device)
        COUNT (ST_COPY_FROM_DEVICE_BYTES, to - from);
      COUNT (ST_WIDEN_BYTES, (wh - wl) - (to - from));
    }
    pool_done (b, wh - wl, err);
    if (err)
      return err;
    wl = wh;
  }
  return 0;
}

/* Direct-mode read of [offset, offset+count) into buf. */
static int
direct_read (char *buf, uint32_t count, uint64_t offset)
{
  uint64_t end = offset + count;
  int err;

  if (end > gm.direct_end) {
    /* The tail page of a file: through the page cache. */
    uint64_t from = offset > gm.direct_end ? offset : gm.direct_end;
    err = caller_buffered (GM_READ, gm.fd_buffered, buf + (from - offset),
                           end - from, from, 0);
    if (err)
      return err;
    if (offset >= gm.direct_end)
      return 0;
    end = gm.direct_end;
    count = end - offset;
  }
  return direct_read_aligned (buf, count, offset);
}

int
gm_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
          uint32_t flags)
{
  int err;

  COUNT (ST_READS, 1);
  COUNT (ST_READ_BYTES, count);
  if (gm_failstop_refuse (GM_FAILSTOP_ALL, "pread", offset, count) == -1)
    return -1;
  if (gm.direct)
    err = direct_read (buf, count, offset);
  else
    err = caller_buffered (GM_READ, gm.fd, buf, count, offset, 0);
  if (err) {
    gm_io_error ("pread", offset, count, err);
    return -1;
  }
  COUNT (ST_SERVED_BYTES, count);
  return 0;
}

/* Direct-mode write of [offset, offset+count) below gm.direct_end.
 * The caller holds the exclusive range lock on the covering blocks.
 */
static int
direct_write (const char *buf, uint64_t count, uint64_t offset, int rwf)
{
  uint64_t end = offset + count;
  uint64_t lo = gm_round_down (offset, gm.align);
  uint64_t hi = gm_round_up (end, gm.align);
  int err = 0;

  if (lo == offset && hi == end && buf_aligned (buf) && !gm.pool_device)
    return caller_dma (GM_WRITE, (char *) buf, count, offset, rwf);

  for (uint64_t wl = lo; wl < hi && err == 0; ) {
    uint64_t wh = hi - wl > gm.batch_max ? wl + gm.batch_max : hi;
    uint64_t from = offset > wl ? offset : wl;
    uint64_t to = end < wh ? end : wh;
    char *b = pool_get (gm.pool, wh - wl);

    if (b == NULL)
      return EIO;
    /* Partial first or last block: fetch its old contents first. */
    if (from > wl) {
      err = pool_read (b, gm.align, wl, gm.align);
      COUNT (ST_RMW_BYTES, gm.align);
    }
    if (err == 0 && to < wh && (wh - gm.align > wl || from == wl)) {
      err = pool_read (b + (wh - gm.align - wl), gm.align, wh - gm.align,
                       gm.align);
      COUNT (ST_RMW_BYTES, gm.align);
    }
    if (err == 0) {
      memcpy (b + (from - wl), buf + (from - offset), to - from);
      COUNT (ST_MEMCPY_WRITE_BYTES, to - from);
      if (gm.pool_device)
        COUNT (ST_COPY_TO_DEVICE_BYTES, to - from);
      err = pool_write (b, wh - wl, wl, rwf);
    }
    pool_done (b, wh - wl, err);
    wl = wh;
  }
  return err;
}

/* Write [offset, offset+count) from buf in whatever way the mode and
 * the region need.  Returns 0 or an errno.
 */
static int
write_range (const char *buf, uint64_t count, uint64_t offset, int rwf)
{
  uint64_t end = offset + count;
  uint64_t split = end < gm.direct_end ? end : gm.direct_end;
  struct gm_range r;
  int err = 0;

  if (!gm.direct)
    return caller_buffered (GM_WRITE, gm.fd, (char *) buf, count, offset,
                            rwf);

  gm_range_lock (&gm.locks, &r, gm_round_down (offset, gm.align),
                 gm_round_up (end, gm.align), true);
  if (offset < split)
    err = direct_write (buf, split - offset, offset, rwf);
  if (err == 0 && end > split) {
    /* The tail region of an odd-sized file, through the page cache. */
    uint64_t from = offset > split ? offset : split;
    err = caller_buffered (GM_WRITE, gm.fd_buffered,
                           (char *) buf + (from - offset), end - from, from,
                           rwf);
  }
  gm_range_unlock (&gm.locks, &r);
  return err;
}

int
gm_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
           uint32_t flags)
{
  int rwf = flags & NBDKIT_FLAG_FUA ? RWF_DSYNC : 0;
  bool sync_all = false;
  int err;

  COUNT (ST_WRITES, 1);
  COUNT (ST_WRITE_BYTES, count);
  if (rwf)
    COUNT (ST_FUA_WRITES, 1);
  if (gm_failstop_refuse (GM_FAILSTOP_WRITES, "pwrite", offset, count) == -1)
    return -1;
  /* FUA with earlier writes not yet synced: one fdatasync after the
   * write covers them and it; else RWF_DSYNC makes it durable alone.
   */
  if (rwf && gm_unsynced_writes ()) {
    sync_all = true;
    rwf = 0;
  }
  if (rwf) {
    /* RWF_DSYNC can take a write-back error: publish it before any flush
     * may answer (ops.c, gm_datasync).
     */
    gm_sync_lock_shared ();
    if (gm_failstop_level () >= GM_FAILSTOP_WRITES)
      err = EIO;
    else {
      err = write_range (buf, count, offset, rwf);
      if (err)
        gm_failstop_sync_failed ("FUA write", err);
    }
    gm_sync_unlock ();
  }
  else
    err = write_range (buf, count, offset, rwf);
  if (err == 0)
    gm_write_done ();
  if (err == 0 && sync_all) {
    COUNT (ST_FUA_SYNCS, 1);
    err = gm_datasync ();
  }
  if (err) {
    gm_io_error ("pwrite", offset, count, err);
    return -1;
  }
  return 0;
}

/* Zeros for the unaligned edges of zero requests on block devices. */
static const char zero_block[64 * 1024];

int
gm_write_zeros (uint64_t offset, uint64_t count)
{
  while (count > 0) {
    uint64_t n = count < sizeof zero_block ? count : sizeof zero_block;
    int err = write_range (zero_block, n, offset, 0);
    if (err)
      return err;
    offset += n;
    count -= n;
  }
  return 0;
}

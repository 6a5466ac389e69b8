/* gmblock plugin: an io_uring, O_DIRECT NBD server for files and block
 * devices.  This file holds the life cycle and what clients negotiate.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/fs.h>

#include "gmblock.h"
#include "registry.h"
#include "sizes.h"
#include "version.h"

#define DEFAULT_POOL (32u * 1024 * 1024)
#define BATCH_MAX (8u * 1024 * 1024)
#define TAIL_GRAIN (64u * 1024)        /* >= any page or fs block size */

struct gmblock gm = {
  .direct = true,
  .pool_size = DEFAULT_POOL,
  .hugepages = GM_HUGE_AUTO,
  .discard = GM_DISCARD_UNMAP,
  .fd = -1,
  .fd_buffered = -1,
};

static void
warn (const char *fmt, const char *a, const char *b)
{
  fprintf (stderr, "nbdkit: " GM_NAME ": warning: ");
  fprintf (stderr, fmt, a, b);
  fputc ('\n', stderr);
}

static bool
is_read_only_device (int fd)
{
  struct stat st;
  int ro = 0;

  return fstat (fd, &st) == 0 && S_ISBLK (st.st_mode) &&
    ioctl (fd, BLKROGET, &ro) == 0 && ro;
}

static int
open_file (void)
{
  int base = O_CLOEXEC | (gm.direct ? O_DIRECT : 0);
  struct stat st;

  /* Say what is wrong with a directory or a character device before
   * open's errors (EISDIR, or EINVAL from O_DIRECT) say it less well.
   */
  if (stat (gm.file, &st) == 0 && !S_ISREG (st.st_mode) &&
      !S_ISBLK (st.st_mode)) {
    nbdkit_error (GM_NAME ": file=%s %s: expected a regular file or a "
                  "block device", gm.file,
                  S_ISDIR (st.st_mode) ? "is a directory" :
                  S_ISCHR (st.st_mode) ? "is a character device" :
                  "is not a regular file");
    return -1;
  }

  gm.fd = open (gm.file, O_RDWR | base);
  gm.writable = gm.fd >= 0;
  if (gm.fd >= 0 && is_read_only_device (gm.fd)) {
    /* Linux opens a read-only block device (losetup -r, BLKROSET) for
     * writing without complaint; only the writes fail, with EPERM.
     */
    close (gm.fd);
    gm.writable = false;
    gm.fd = open (gm.file, O_RDONLY | base);
    if (gm.fd >= 0)
      warn ("%s is not writable (%s): serving it read-only", gm.file,
            "a read-only block device");
  }
  if (gm.fd == -1 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
    char why[64];
    snprintf (why, sizeof why, "%s", strerror (errno));
    gm.fd = open (gm.file, O_RDONLY | base);
    if (gm.fd >= 0)
      warn ("%s is not writable (%s): serving it read-only", gm.file, why);
  }
  if (gm.fd == -1 && errno == EINVAL && gm.direct) {
    nbdkit_error (GM_NAME ": %s: the filesystem refuses O_DIRECT (open: %m); "
                  "use direct=false to serve it through the page cache",
                  gm.file);
    return -1;
  }
  if (gm.fd == -1) {
    nbdkit_error (GM_NAME ": file=%s: cannot open it: %m", gm.file);
    return -1;
  }
  return 0;
}

/* Work out alignment and sizes from the geometry. */
static int
setup_alignment (void)
{
  if (!gm.direct) {
    gm.align = gm.mem_align = gm.client_align = 1;
    gm.direct_end = gm.size;
    return 0;
  }
  if (gm.geo.dio_known && gm.geo.dio_offset_align == 0) {
    nbdkit_error (GM_NAME ": %s: the filesystem does not support O_DIRECT; "
                  "use direct=false to serve it through the page cache",
                  gm.file);
    return -1;
  }
  gm.align = gm.geo.dio_known ? gm.geo.dio_offset_align : gm.geo.logical_block;
  /* Unknown to statx (a block device before Linux 6.11): the queue's
   * DMA alignment, which geometry.c read instead; 512 when neither. */
  gm.mem_align = gm.geo.dio_known || gm.geo.dio_mem_align ?
    gm.geo.dio_mem_align : 512;
  if (gm.align == 0)
    gm.align = 512;
  if (gm.mem_align == 0)
    gm.mem_align = 1;
  if (!gm_is_power_of_2 (gm.align) || gm.align > 64 * 1024 ||
      gm.mem_align > GM_POOL_UNIT) {
    nbdkit_error (GM_NAME ": %s: unsupported O_DIRECT alignment (offset %u, "
                  "memory %u); use direct=false", gm.file, gm.align,
                  gm.mem_align);
    return -1;
  }
  /* A read-modify-write reads the partial last block into its pool
   * buffer at a multiple of gm.align from the buffer's start: with a
   * memory alignment larger than that (a disk whose DMA alignment
   * exceeds its logical block), that address would be refused.  Whole
   * blocks of the memory alignment then, at some read-modify-write.
   */
  if (gm.align < gm.mem_align)
    gm.align = gm.mem_align;
  /* DMA straight into nbdkit's buffer only when it starts on a page
   * (or when the file takes any address: no DMA at all, as tmpfs).
   * Not every driver keeps to the dma_alignment it advertises: zram on
   * Linux 6.18 (512) writes whole pages on an O_DIRECT read into a
   * buffer that starts inside one, over the memory beside the buffer.
   * Pool buffers always start on a page.
   */
  gm.client_align = gm.mem_align == 1 ? 1 : (uint32_t) sysconf (_SC_PAGESIZE);
  if (gm.client_align < gm.mem_align)
    gm.client_align = gm.mem_align;
  gm.direct_end = gm_round_down (gm.size, gm.align);
  if (gm.direct_end < gm.size) {
    /* A partial last block: the 64K holding it is served buffered, so
     * no page or filesystem block mixes O_DIRECT and buffered writes
     * (see io.c).
     */
    gm.direct_end = gm_round_down (gm.size, TAIL_GRAIN);
    gm.fd_buffered = open (gm.file, (gm.writable ? O_RDWR : O_RDONLY) |
                           O_CLOEXEC);
    if (gm.fd_buffered == -1) {
      nbdkit_error (GM_NAME ": open (for the partial last block): %s: %m",
                    gm.file);
      return -1;
    }
  }
  return 0;
}

/* Can the pool be registered with io_uring?  Try once with a scratch
 * ring so the outcome is reported now, where the user sees it.
 */
static void
probe_fixed_buffers (void)
{
  struct gm_uring u;
  char lim[32], size[32];
  int r;

  if (gm_uring_init (&u, 4, 0) < 0)
    return;
  r = gm_uring_register_buffer (&u, gm.pool->mem.addr, gm.pool->mem.len);
  gm_uring_exit (&u);
  gm.fixed_ok = r == 0;
  if (r == 0)
    return;
  if (gm.pool_device) {
    /* Expected: the kernel pins only ordinary pages for fixed buffers. */
    nbdkit_debug (GM_NAME ": %s cannot be registered with io_uring (%s): "
                  "plain buffers", gm.buffer_desc, strerror (-r));
    return;
  }
  gm_engine_pool_and_memlock (size, lim);
  fprintf (stderr, "nbdkit: " GM_NAME ": warning: cannot register the %s "
           "buffer pool with io_uring (%s; RLIMIT_MEMLOCK is %s): using "
           "plain buffers, which costs a little CPU per request; raise the "
           "memlock limit, run as root or lower pool-size to avoid this\n",
           size, strerror (-r), lim);
}

static bool engine_started;     /* gm_engine_init succeeded */

/* Each worker thread's io_uring is a descriptor (engine.c): raise the
 * soft limit on them to the hard one, as a program that never uses
 * select(2) may (systemd gives services 1024, hard 524288).  nbdkit
 * and its filters use poll.
 */
static void
raise_fd_limit (void)
{
  struct rlimit rl;
  rlim_t want;

  if (getrlimit (RLIMIT_NOFILE, &rl) == -1 || rl.rlim_cur >= rl.rlim_max)
    return;
  /* An unlimited hard limit is still capped by fs.nr_open (1M by default). */
  want = rl.rlim_max == RLIM_INFINITY ? 1 << 20 : rl.rlim_max;
  if (want <= rl.rlim_cur)
    return;
  nbdkit_debug (GM_NAME ": raising the descriptor limit from %llu to %llu "
                "(one io_uring per worker thread)",
                (unsigned long long) rl.rlim_cur, (unsigned long long) want);
  rl.rlim_cur = want;
  if (setrlimit (RLIMIT_NOFILE, &rl) == -1)
    nbdkit_debug (GM_NAME ": setrlimit (RLIMIT_NOFILE): %m");
}

static int
gm_get_ready (void)
{
  char err[256], size[32];

  if (gm_stats_ready (&gm_stats_out) == -1)
    return -1;
  if (gm.ring == GM_RING_PER_THREAD)
    raise_fd_limit ();
  if (open_file () == -1 || gm_failstop_open () == -1)
    return -1;
  if (gm_geometry_probe (gm.fd, &gm.geo, err, sizeof err) == -1) {
    nbdkit_error (GM_NAME ": %s: %s", gm.file, err);
    return -1;
  }
  gm.size = gm.geo.size;
  /* A block device that ends inside a logical block (a loop device with
   * 4K sectors over a file that is not whole 4K) takes no I/O past its
   * last whole block, from anyone: every client reading the whole
   * export would fail at the end.  Serve what can be served.
   */
  if (gm.geo.is_block && gm.geo.logical_block > 1 &&
      gm.size % gm.geo.logical_block) {
    uint64_t whole = gm_round_down (gm.size, gm.geo.logical_block);
    fprintf (stderr, "nbdkit: " GM_NAME ": warning: %s: its size, %" PRIu64
             " bytes, ends inside a %u-byte logical block, whose last %"
             PRIu64 " bytes the kernel cannot read or write: serving %"
             PRIu64 " bytes\n", gm.file, gm.size, gm.geo.logical_block,
             gm.size - whole, whole);
    gm.size = whole;
  }
  /* For the filters above, whose .get_ready runs next: what they can
   * only refuse before nbdkit forks (an empty export under the cache, a
   * stripe chunk larger than it).
   */
  snprintf (size, sizeof size, "%" PRIu64, gm.size);
  if (gm_registry_publish (GM_REG_SERVED_SIZE, size) == -1) {
    nbdkit_error (GM_NAME ": publishing the size of %s: %m", gm.file);
    return -1;
  }
  if (setup_alignment () == -1)
    return -1;
  gm_rangelock_init (&gm.locks);
  if (gm_engine_init () == -1)
    return -1;
  engine_started = true;

  gm_buffer_report ();
  if (gm.direct) {
    size_t quarter;
    if (gm_buffer_setup () == -1)
      return -1;
    /* A quarter of the pool per request at most, so four always fit. */
    quarter = gm.pool->mem.len / 4;
    gm.batch_max = gm_round_down (quarter < BATCH_MAX ? quarter : BATCH_MAX,
                                  gm.align);
    probe_fixed_buffers ();
  }

  nbdkit_debug (GM_NAME ": %s: %s, %" PRIu64 " bytes, logical block %u, "
                "io_min %u, io_opt %u, dio align offset %u memory %u, "
                "rotational %d, %s, %s",
                gm.file, gm.geo.is_block ? "block device" : "regular file",
                gm.size, gm.geo.logical_block, gm.geo.io_min, gm.geo.io_opt,
                gm.align, gm.mem_align, gm.geo.rotational,
                gm.direct ? "O_DIRECT" : "page cache",
                gm.writable ? "read-write" : "read-only");
  if (gm.pool)
    nbdkit_debug (GM_NAME ": pool %s in %s, %s, batches up to %zu bytes",
                  gm_format_size (gm.pool->mem.len, size, sizeof size),
                  gm.buffer_desc,
                  gm.fixed_ok ? "registered as fixed buffers" : "plain buffers",
                  gm.batch_max);
  return 0;
}

static int
gm_after_fork (void)
{
  if (gm_engine_start () == -1)
    return -1;
  return gm_stats_start (&gm_stats_out);
}

static void
gm_cleanup (void)
{
  gm_stats_stop (&gm_stats_out);
}

static void
gm_unload (void)
{
  /* Not after a configuration error: nothing was served. */
  if (gm.fd >= 0)
    gm_stats_final (&gm_stats_out);
  else
    free (gm_stats_out.path);
  /* Not after a configuration error: the ring key was never created,
   * and deleting key 0 would delete somebody else's (nbdkit's).
   */
  if (engine_started)
    gm_engine_cleanup ();
  gm_pool_destroy (gm.pool);
  gm_pool_destroy (gm.stage_pool);
  if (gm.fd >= 0) {
    gm_rangelock_destroy (&gm.locks);
    close (gm.fd);
  }
  if (gm.fd_buffered >= 0)
    close (gm.fd_buffered);
  gm_failstop_close ();
  free (gm.file);
  free (gm.pci_path);
}

static void
gm_dump_plugin (void)
{
  gm_buffer_dump ();
}

static void *
gm_open (int readonly)
{
  return &gm;                   /* all state is shared by connections */
}

static int64_t
gm_get_size (void *handle)
{
  return gm.size;
}

static int
gm_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
               uint32_t *maximum)
{
  uint64_t pref = 4096;

  /* The minimum is what O_DIRECT needs; we handle anything smaller
   * correctly (by read-modify-write), so when the export size is not a
   * multiple of it we advertise 1 rather than a size clients reject.
   */
  *minimum = gm.size % gm.align == 0 ? gm.align : 1;
  if (gm.geo.io_min > pref)
    pref = gm.geo.io_min;
  if (gm.align > pref)
    pref = gm.align;
  pref = gm_next_power_of_2 (pref);
  if (pref > GM_MAX_REQUEST)
    pref = GM_MAX_REQUEST;
  *preferred = pref;
  *maximum = GM_MAX_REQUEST;
  return 0;
}

static int
gm_can_write (void *handle)
{
  return gm.writable;
}

static int
gm_can_flush (void *handle)
{
  return 1;
}

static int
gm_is_rotational (void *handle)
{
  return gm.geo.rotational == 1;
}

static int
gm_can_trim (void *handle)
{
  return gm.writable;
}

static int
gm_can_zero (void *handle)
{
  return gm.writable;
}

static int
gm_can_fast_zero (void *handle)
{
  return 1;
}

static int
gm_can_fua (void *handle)
{
  return NBDKIT_FUA_NATIVE;
}

static int
gm_can_multi_conn (void *handle)
{
  /* One descriptor, no per-connection state: a flush covers all. */
  return 1;
}

static int
gm_can_extents (void *handle)
{
  return 1;
}

static int
gm_can_cache (void *handle)
{
  return gm.direct ? NBDKIT_CACHE_NONE : NBDKIT_CACHE_NATIVE;
}

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

static struct nbdkit_plugin plugin = {
  .name = GM_NAME,
  .longname = "gmblock io_uring O_DIRECT block server",
  .version = GMBLOCK_VERSION,
  .description = "Serve a file or block device with io_uring and O_DIRECT.",
  .unload = gm_unload,
  .config = gm_config,
  .config_complete = gm_config_complete,
  .config_help = GM_CONFIG_HELP,
  .dump_plugin = gm_dump_plugin,
  .magic_config_key = "file",
  .get_ready = gm_get_ready,
  .after_fork = gm_after_fork,
  .cleanup = gm_cleanup,
  .open = gm_open,
  .get_size = gm_get_size,
  .block_size = gm_block_size,
  .can_write = gm_can_write,
  .can_flush = gm_can_flush,
  .is_rotational = gm_is_rotational,
  .can_trim = gm_can_trim,
  .can_zero = gm_can_zero,
  .can_fast_zero = gm_can_fast_zero,
  .can_fua = gm_can_fua,
  .can_multi_conn = gm_can_multi_conn,
  .can_extents = gm_can_extents,
  .can_cache = gm_can_cache,
  .pread = gm_pread,
  .pwrite = gm_pwrite,
  .flush = gm_flush,
  .trim = gm_trim,
  .zero = gm_zero,
  .extents = gm_extents,
  .cache = gm_cache,
  .errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN (plugin)

/* gmblock plugin: state shared by the plugin's files.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_PLUGIN_H
#define GMBLOCK_PLUGIN_H

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <stdbool.h>
#include <stdint.h>

#include "counters.h"
#include "statsout.h"
#include "geometry.h"
#include "hugemem.h"
#include "pool.h"
#include "rangelock.h"
#include "uring.h"

#define GM_NAME "gmblock"
#define GM_MAX_REQUEST (32u * 1024 * 1024)  /* advertised maximum */

enum gm_discard { GM_DISCARD_UNMAP, GM_DISCARD_IGNORE };
enum gm_ring_mode { GM_RING_PER_THREAD, GM_RING_SHARED, GM_RING_NONE };
enum gm_buffer_kind { GM_BUFFER_HOST, GM_BUFFER_P2PMEM, GM_BUFFER_BAR };

/* Where the pool lives (buffer= and buffer-fallback=, buffer.c). */
struct gm_buffer_opt {
  enum gm_buffer_kind kind;
  char bdf[16];                 /* "" with p2pmem: auto */
  int bar;
  bool stage;                   /* buffer-fallback=stage */
};

struct gmblock {
  /* Options (config.c). */
  char *file;
  bool direct;
  uint64_t pool_size;
  enum gm_huge_mode hugepages;
  enum gm_discard discard;
  enum gm_ring_mode ring;
  struct gm_buffer_opt buffer;
  char *pci_path;               /* sysfs.path=, libpci's parameter */

  /* The open export (gmblock.c). */
  int fd;                       /* O_DIRECT unless direct=false */
  int fd_buffered;              /* for the page holding a partial last block */
  bool writable;
  struct gm_geometry geo;
  uint64_t size;
  uint32_t align;               /* offset/length alignment of fd (1 if buffered) */
  uint32_t mem_align;           /* buffer address alignment of fd */
  uint32_t client_align;        /* nbdkit's buffer takes DMA at this */
  uint64_t direct_end;          /* O_DIRECT below, buffered from here to size */
  size_t batch_max;             /* largest pool buffer one request takes */
  struct gm_pool *pool;         /* NULL when direct=false */
  bool fixed_ok;                /* registering the pool with rings works */
  bool pool_device;             /* the pool is device memory */
  struct gm_pool *stage_pool;   /* host memory DMA lands in first, when
                                 * the device memory cannot take DMA */
  char buffer_desc[96];         /* "p2pmem of 0000:04:00.0" */
  struct gm_rangelock locks;    /* serialises writes to the same blocks */
};

extern struct gmblock gm;

/* config.c */
int gm_config (const char *key, const char *value);
int gm_config_complete (void);
#define GM_CONFIG_HELP \
  "file=<PATH>       (required) The file or block device to serve.\n" \
  "direct=true|false O_DIRECT through io_uring (default) or page cache.\n" \
  "pool-size=<SIZE>  I/O buffer pool shared by all connections (default 32M).\n" \
  "hugepages=auto|on|off  Back the pool with hugepages (default auto).\n" \
  "discard=unmap|ignore   What trim does (default unmap).\n" \
  "stats=<FILE>      Write counters to FILE at exit.\n" \
  "stats-interval=<SECONDS>  Also rewrite FILE every SECONDS, in the\n" \
  "                  Prometheus text format.\n" \
  "ring=per-thread|shared|none  I/O engine design (default per-thread).\n" \
  "buffer=host|p2pmem[:BDF|:auto]|bar:BDF:N  Where O_DIRECT data lands\n" \
  "                  (default host; see gmblock-topology).\n" \
  "buffer-fallback=refuse|stage  When device memory cannot take DMA:\n" \
  "                  refuse to start (default) or stage through host memory.\n" \
  "sysfs.path=<DIR>  libpci's PCI sysfs folder (default /sys/bus/pci)."

/* engine.c: transfers and syncs through the configured ring design.
 * gm_engine_rw continues short transfers (a read stops early only at end
 * of file) and returns bytes or -errno; gm_engine_fdatasync 0 or -errno.
 */
int gm_engine_init (void);
int gm_engine_start (void);
void gm_engine_cleanup (void);
ssize_t gm_engine_rw (enum gm_rw op, int fd, void *buf, size_t len,
                      uint64_t off, int rw_flags);
int gm_engine_fdatasync (int fd);
/* After gm_engine_rw failed: whether the ring abandoned the request (it
 * may still land in or read from its buffer; fail-stop is set). */
bool gm_engine_lost (void);
struct gm_uring *gm_engine_new_ring (unsigned depth, unsigned want);
/* The pool's size and RLIMIT_MEMLOCK ("unlimited"), for messages about
 * registering the pool with io_uring. */
void gm_engine_pool_and_memlock (char size[32], char lim[32]);
/* engine-shared.c, engine-sync.c */
int gm_shared_init (void);
void gm_shared_cleanup (void);
ssize_t gm_shared_once (void *ctx, enum gm_rw op, int fd, void *buf,
                        size_t len, uint64_t off, int rw_flags);
ssize_t gm_sync_once (void *ctx, enum gm_rw op, int fd, void *buf,
                      size_t len, uint64_t off, int rw_flags);

/* buffer.c: the buffer provider and the topology report. */
int gm_buffer_parse (const char *value);
int gm_buffer_check (void);
int gm_buffer_setup (void);
void gm_buffer_dump (void);
void gm_buffer_report (void);

/* io.c */
int gm_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
              uint32_t flags);
int gm_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
               uint32_t flags);
/* Write zeros to a range smaller than one aligned block, or anywhere
 * (plain writes: a FUA zero syncs after them). */
int gm_write_zeros (uint64_t offset, uint64_t count);

/* ops.c */
int gm_flush (void *handle, uint32_t flags);
int gm_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags);
int gm_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags);
int gm_extents (void *handle, uint32_t count, uint64_t offset, uint32_t flags,
                struct nbdkit_extents *extents);
int gm_cache (void *handle, uint32_t count, uint64_t offset, uint32_t flags);
/* A FUA request covers the writes completed before it: gm_write_done
 * counts each completed write, trim or zero; gm_unsynced_writes says
 * whether some are not yet covered by an fdatasync (then a FUA write
 * syncs after itself); gm_datasync syncs the file (fail-stop on
 * failure).
 */
void gm_write_done (void);
bool gm_unsynced_writes (void);
int gm_datasync (void);
void gm_sync_lock_shared (void);
void gm_sync_unlock (void);

/* failstop.c: after a lost write-back, refuse what would promise more.
 * gm_failstop_refuse returns 0, or -1 with the error reported and EIO
 * set for the client when the plugin is stopped at level lv or above.
 * gm_failstop_sync_failed: an RWF_DSYNC write failed with err; stop if
 * it took a write-back error (or is EIO).
 */
enum gm_failstop { GM_FAILSTOP_NONE, GM_FAILSTOP_WRITES, GM_FAILSTOP_ALL };
int gm_failstop_open (void);
void gm_failstop_close (void);
void gm_failstop (enum gm_failstop lv, const char *op, int err);
void gm_failstop_sync_failed (const char *op, int err);
int gm_failstop_refuse (enum gm_failstop lv, const char *op, uint64_t offset,
                        uint64_t count);
int gm_failstop_level (void);

/* stats.c */
enum gm_stat {
  ST_READS, ST_READ_BYTES, ST_WRITES, ST_WRITE_BYTES, ST_FUA_WRITES,
  ST_FLUSHES, ST_TRIMS, ST_TRIM_BYTES, ST_ZEROS, ST_ZERO_BYTES,
  ST_FAST_ZERO_REFUSED, ST_EXTENTS, ST_CACHES, ST_CACHE_BYTES,
  ST_DMA_POOL_BYTES, ST_DMA_CLIENT_BYTES, ST_BUFFERED_BYTES,
  ST_MEMCPY_READ_BYTES, ST_MEMCPY_WRITE_BYTES, ST_RMW_BYTES,
  ST_WIDEN_BYTES, ST_SERVED_BYTES, ST_ERRORS,
  ST_DMA_DEVICE_BYTES, ST_COPY_FROM_DEVICE_BYTES, ST_COPY_TO_DEVICE_BYTES,
  ST_STAGED_BYTES, ST_DMA_OPS, ST_DMA_NS, ST_FUA_SYNCS, ST_SYNCS_SHARED,
  ST_POOL_GETS, ST_POOL_WAITS,
  ST_COUNT
};
extern struct gm_counter gm_stats[ST_COUNT];
#define COUNT(which, n) gm_count (&gm_stats[which], (n))
extern struct gm_stats_out gm_stats_out;

/* Report an I/O error the way every callback does: module, operation,
 * offset and the error text; errno is set for the client.
 */
void gm_io_error (const char *op, uint64_t offset, uint64_t count, int err);

#endif /* GMBLOCK_PLUGIN_H */

/* gmblock-cache filter: shared declarations.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * One cache for the whole server, in fixed-size blocks held in a
 * hugepage-backed pool.  The block table is split into shards, each
 * with its own lock, hash, 2Q lists and free slots; a lock is never
 * held across I/O.  All I/O to the layer below goes through one shared
 * context (opened in .after_fork), so fills, write-backs and flushes do
 * not depend on any client connection.
 */
#ifndef GMBLOCK_CACHE_H
#define GMBLOCK_CACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-filter.h>

#include "counters.h"
#include "statsout.h"
#include "pool.h"
#include "rangelock.h"
#include "twoq.h"

#define CNAME "gmblock-cache"

enum cache_mode {
  MODE_BYPASS, MODE_READ, MODE_WRITETHROUGH, MODE_WRITEBACK, MODE_UNSAFE,
  MODE_ADAPTIVE,
};

struct cache_config {
  enum cache_mode mode;
  bool writes_back;             /* writeback, unsafe, adaptive-writes=back */
  bool unsafe;                  /* flush and FUA are not waited for */
  uint64_t size;                /* cache-size in bytes */
  uint64_t block_size;          /* 0 until resolved in .after_fork */
  bool block_size_set;
  uint64_t scan_bytes;          /* adaptive: a run this long is a scan */
  unsigned flush_interval_ms;   /* background write-back period */
  unsigned hold_s;              /* parity RAID: how long a background pass
                                 * leaves a partly dirty stripe for its
                                 * other blocks (0: never) */
  uint64_t merge_bytes;         /* no stripe below: dirty neighbours go
                                 * down together in runs up to this long
                                 * (0: block by block) */
  enum gm_huge_mode hugepages;
};
extern struct cache_config cfg;

/* What the shared context below can do (asked once in .after_fork). */
struct lower {
  nbdkit_next *next;
  uint64_t size;
  int can_write, can_flush, can_trim, can_zero, can_fast_zero, can_fua;
  int can_cache, can_extents;
  uint32_t bmin, bpref, bmax;
};
extern struct lower lower;
/* Flushes below that failed (a FUA request below too): counted so that
 * every connection hears of each (ops.c, flush_report). */
extern _Atomic uint64_t lower_flush_failures;

/* Per-connection state (the .open handle). */
#define STREAMS 4
struct conn {
  uint32_t id;
  pthread_mutex_t lock;         /* the streams: requests run in parallel */
  struct { uint64_t next, run; } stream[STREAMS];
  unsigned stream_victim;
  _Atomic uint64_t flush_failures_seen; /* lower_flush_failures reported */
};

/* ---- blocks.c: the sharded block table ---- */
enum slot_state { S_FREE, S_FILLING, S_VALID };

struct slot {
  uint64_t blk;
  uint32_t hnext;
  uint32_t filler;              /* connection id that admitted it */
  uint8_t state;
  bool excl;                    /* exclusive hold (filling, writing) */
  bool dirty;
  bool stale;                   /* invalidated while filling: drop at the end */
  bool wb;                      /* a write-back of it is in flight */
  bool held_by_range;           /* excl taken by blocks_hold_range */
  uint16_t shared;              /* shared holds (copy-out, write-back) */
  uint32_t dirtied;             /* when it last became dirty (dirty_clock) */
};

struct shard {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned waiters;
  uint32_t nslots, base;        /* global slot numbers [base, base+nslots) */
  uint32_t *bucket, mask;
  uint32_t free_head;
  uint32_t ndirty, nwb;         /* slots dirty, and with a write-back in
                                 * flight: a flush skips a shard with
                                 * neither (writeback.c) */
  struct gm_2q q;               /* local slot numbers */
} __attribute__ ((aligned (64)));

struct table {
  struct gm_pool *pool;
  char *mem;                    /* slot i at mem + i * block_size */
  uint64_t bs;                  /* block size */
  unsigned shift;               /* log2 (bs) */
  uint64_t nblocks;             /* blocks in the export (last may be short) */
  uint32_t nslots, nshards;
  struct slot *slots;
  struct shard *shards;
  _Atomic uint64_t ndirty;
};
extern struct table tbl;

int blocks_init (char *err, size_t errlen);
void blocks_free (void);

static inline uint64_t
blk_off (uint64_t b)
{
  return b << tbl.shift;
}

/* Bytes of block b inside the export (the last block may be short). */
static inline uint32_t
blk_len (uint64_t b)
{
  uint64_t off = blk_off (b);
  return lower.size - off < tbl.bs ? lower.size - off : tbl.bs;
}

static inline char *
slot_mem (uint32_t s)
{
  return tbl.mem + (uint64_t) s * tbl.bs;
}

struct shard *shard_of (uint64_t b);
uint32_t find_slot (struct shard *sh, uint64_t b);
void shard_wait (struct shard *sh);
void shard_wake (struct shard *sh);

/* How a missing block is brought in. */
enum admit { ADMIT_NO, ADMIT_A1IN, ADMIT_AM };

/* Read [from, to) of block b (offsets inside the block) into dst.
 * Returns 1 if served from the cache (hit or fill), 0 if the caller
 * must read it from below itself (adaptive bypass, or no clean slot to
 * be had; nothing copied), or -1 with *err set.  With dst == NULL only
 * makes the block resident.
 */
int block_read (struct conn *c, uint64_t b, uint32_t from, uint32_t to,
                char *dst, bool prefetch, bool scan, int *err);
/* Store [from, to) of block b from src into the cache, marking it dirty
 * (write-back modes), filling it first if the write is partial.  If the
 * block is not resident and no slot can be freed, the piece is written
 * below instead.  (FUA is a flush after it: ops.c fua_flush.)
 */
int block_write_back (uint64_t b, uint32_t from, uint32_t to,
                      const char *src, int *err);
/* After a write went below: update a resident copy of block b, or
 * (allocate, when whole and 'allocate') keep the new data; a fill in
 * progress is marked stale.
 */
void block_update (uint64_t b, uint32_t from, uint32_t to, const char *src,
                   bool allocate);
void visit_range (uint64_t b0, uint64_t b1,
                  bool (*visit) (struct shard *sh, uint32_t s, void *opaque),
                  void *opaque);

/* Exclusive holds on every resident block of [b0, b1], for zero and
 * trim; release_zeroed then drops clean or whole blocks and zeroes
 * [off, off+len) in dirty partial ones (ok = the op succeeded below).
 */
void blocks_hold_range (uint64_t b0, uint64_t b1);
void blocks_release_range (uint64_t b0, uint64_t b1, uint64_t off,
                           uint64_t len, bool ok,
                           bool keep_dirty);

/* After a write that failed below, part of it may be on the disk all
 * the same: drop every clean copy of [b0, b1] (and fills in flight), so
 * that reads agree with the disk.  Dirty blocks stay (they are newer).
 */
void blocks_forget_range (uint64_t b0, uint64_t b1);

/* ---- lower.c: every call to the layer below ---- */
int lower_open (nbdkit_backend *backend);
void lower_close (void);
/* Below a plugin that is not fully parallel, the filter's own threads
 * must take turns: every call below is then serialised.
 */
void lower_set_thread_model (int thread_model);
int lower_pread (void *buf, uint32_t count, uint64_t off, int *err);
/* FUA is emulated with a flush when the layer below has none. */
int lower_pwrite (const void *buf, uint32_t count, uint64_t off,
                  uint32_t flags, int *err);
int lower_flush (int *err);
int lower_trim (uint32_t count, uint64_t off, uint32_t flags, int *err);
int lower_zero (uint32_t count, uint64_t off, uint32_t flags, int *err);
/* Extents through the connection's own context (next). */
int lower_extents (nbdkit_next *next, uint32_t count, uint64_t off,
                   uint32_t flags, struct nbdkit_extents *extents, int *err);

/* ---- writeback.c ---- */
/* Seconds on the monotonic clock: when a block became dirty. */
uint32_t dirty_clock (void);
/* A write-back's hold on dirty slot sl, caller holding sh->lock: the
 * block stays readable and counts as clean until written again.  Its
 * release makes the block dirty again if the write failed, and wakes
 * the shard's waiters.
 */
void slot_wb_hold (struct shard *sh, struct slot *sl);
void slot_wb_release (struct shard *sh, struct slot *sl, bool failed);
/* Write back one resident dirty slot.  Caller holds sh->lock; it is
 * dropped and retaken around the I/O.  Returns 0 or -1 with *err.
 */
int slot_write_back (struct shard *sh, uint32_t s, int *err);
/* Write back every dirty block in [b0, b1] (whole cache: 0, UINT64_MAX);
 * waits for write-backs already in flight.
 */
int writeback_range (uint64_t b0, uint64_t b1, int *err);
int writeback_start (void);
/* Stop the background flusher (a whole-cache pass can still be made),
 * then everything.
 */
void writeback_stop_flusher (void);
void writeback_stop (void);
/* After a write: wake the flusher if enough of the cache is dirty. */
void writeback_note_dirty (void);

/* ---- stripewb.c: write-back in whole RAID stripes ---- */
#define WB_MAX_UNIT (32u << 20)  /* the longest write-back write */
struct stripe_wb {
  bool on;                      /* write-back works a unit at a time */
  bool geometry;                /* the unit is a RAID stripe (else it is
                                 * writeback-merge's plain run length) */
  bool used;                    /* it did (kept after stop, for the counters) */
  uint64_t width;               /* one full data stripe, bytes (0: none) */
  uint64_t offset;              /* where the export starts in the array */
  uint64_t unit;                /* whole stripes and whole blocks, bytes */
  uint32_t bpg;                 /* blocks per unit */
  uint32_t phase;               /* blocks of unit 0 before the export */
  bool hold;                    /* parity is not known to be absent: partly
                                 * dirty stripes are worth waiting for */
  char source[96];
};
extern struct stripe_wb swb;
/* Learn the stripe (registry, else the preferred block size below);
 * may lower a block size we chose so that it divides the stripe.
 * Without one, writing back, the unit is writeback-merge's length.
 * Before blocks_init.
 */
void stripe_wb_geometry (void);
/* After blocks_init: the units and the gather buffers. */
int stripe_wb_start (void);
/* Unit u is whole stripes, all inside the export. */
bool stripe_wb_unit_whole (uint64_t u);
void stripe_wb_stop (void);
uint64_t stripe_wb_unit_of (uint64_t b);
/* Write back every dirty block of unit u (a pass). */
int stripe_wb_unit (uint64_t u, int *err);
/* Evict dirty slot s (shard locked; dropped and retaken) together with
 * the dirty blocks of its stripe; alone without a stripe geometry.
 */
int stripe_wb_evict (struct shard *sh, uint32_t s, int *err);

/* ---- policy.c: adaptive admission ---- */
void policy_note_read (struct conn *c, uint64_t offset, uint32_t count,
                       bool *scan);
enum admit policy_admit (struct conn *c, uint64_t b, bool scan, bool prefetch,
                         struct shard *sh);
void policy_hit (struct conn *c, struct slot *sl, bool scan);
uint32_t policy_new_conn (void);
void conn_init (struct conn *c);
void conn_destroy (struct conn *c);

/* ---- stats.c ---- */
enum {
  CS_READS, CS_READ_BYTES, CS_HITS, CS_MISSES, CS_HIT_BYTES,
  CS_SCAN_HITS, CS_SCAN_MISSES, CS_FILLS, CS_FILL_BYTES, CS_FILL_WAITS,
  CS_BYPASS_BYTES, CS_ADMIT_REPEAT, CS_ADMIT_SHARED, CS_ADMIT_FOLLOWED,
  CS_ADMIT_PREFETCH, CS_EVICTIONS, CS_DIRTY_EVICTIONS, CS_STALE_FILLS,
  CS_WRITES, CS_WRITE_BYTES, CS_WRITE_FILLS, CS_WRITEBACKS, CS_WRITEBACK_BYTES,
  CS_WRITEBACK_WRITES,
  CS_FLUSHES, CS_FUA, CS_TRIMS, CS_ZEROS, CS_INVALIDATIONS, CS_PREFETCHES,
  CS_MEMCPY_READ_BYTES, CS_MEMCPY_WRITE_BYTES, CS_ERRORS, CS_NO_SLOT,
  CS_WB_FULL_STRIPE, CS_WB_PARTIAL_STRIPE, CS_WB_MERGED, CS_WB_BLOCKS,
  CS_WB_HELD, CS_WB_PRESSURE, CS_FUA_FLUSHES, CS_FLUSH_FAILURES_REPORTED,
  CS_COUNT
};
extern struct gm_counter cstats[CS_COUNT];
#define CCOUNT(id, n) gm_count (&cstats[id], (n))
extern struct gm_stats_out cstats_out;

#endif /* GMBLOCK_CACHE_H */

/* gmblock: the bounded buffer pool shared by every connection and thread.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * One mapping, cut into 4K units.  A buffer is a contiguous run of
 * units, handed out first-fit (low addresses first, so a light load
 * touches few pages) and never shared while in use.  When the pool is
 * full, callers wait, served in the order they came: memory is bounded
 * whatever the number of connections, and a large request is not
 * starved by small ones.  Only the first in line is woken when memory
 * comes back: each waiter sleeps on its own condition variable.  The
 * lock is held only to find or release a run, never across I/O.
 */
#ifndef GMBLOCK_POOL_H
#define GMBLOCK_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hugemem.h"

#define GM_POOL_UNIT 4096

/* A caller waiting for memory, on its own stack. */
struct gm_pool_waiter {
  pthread_cond_t cond;
  struct gm_pool_waiter *next;
};

struct gm_pool {
  struct gm_mem mem;
  size_t nunits;
  uint64_t *bitmap;             /* 1 = unit in use */
  uint64_t *lost_map;           /* 1 = unit quarantined (never free again) */
  size_t lost;                  /* units quarantined */
  size_t first_free;            /* no free unit below this index */
  pthread_mutex_t lock;
  struct gm_pool_waiter *head, *tail; /* waiters, first come first served */
  size_t in_use;                /* units */
  size_t peak;                  /* units */
  uint64_t gets, waits;
};

struct gm_pool_stats {
  size_t size, in_use, peak;    /* bytes */
  size_t quarantined;           /* bytes, counted in in_use too */
  uint64_t gets, waits;
};

/* Create a pool of 'size' bytes (rounded up to whole units).  Returns
 * NULL with errno set and a message in err on failure.
 */
struct gm_pool *gm_pool_create (size_t size, enum gm_huge_mode mode,
                                char *err, size_t errlen);
/* A pool on memory mapped elsewhere (device memory: devmem.h); the
 * pool owns it from now on and unmaps it when destroyed.  mem->len
 * must be at least one unit.
 */
struct gm_pool *gm_pool_create_on (struct gm_mem *mem, char *err,
                                   size_t errlen);
void gm_pool_destroy (struct gm_pool *pool);

/* Get a buffer of at least len bytes (len <= pool size), aligned to
 * GM_POOL_UNIT.  Waits while the pool is full.  Returns NULL if len is
 * 0 or larger than the pool (errno = EINVAL), or if quarantined buffers
 * leave no run of len bytes that could ever be free (errno = EIO).
 */
void *gm_pool_get (struct gm_pool *pool, size_t len);
void gm_pool_put (struct gm_pool *pool, void *buf, size_t len);

/* Like gm_pool_get, but a waiter whose *cancel has become true leaves
 * the line once woken, and returns NULL (errno = ECANCELED).  Whoever
 * sets a flag calls gm_pool_wake after it: the memory a waiter waits
 * for may never come back (the RDMA server's workers of a client that
 * ended: a buffer the NIC may still use is held until its queue pair
 * is destroyed, which waits for those workers).
 */
void *gm_pool_get_cancellable (struct gm_pool *pool, size_t len,
                               const _Atomic bool *cancel);
void gm_pool_wake (struct gm_pool *pool);

/* Instead of gm_pool_put, for a buffer that I/O abandoned by the kernel
 * may still land in (or be read from): it is never handed out again
 * (its memory stays mapped), and waiters it leaves without a chance
 * fail with EIO rather than wait for ever.
 */
void gm_pool_quarantine (struct gm_pool *pool, void *buf, size_t len);

/* Like gm_pool_get but never waits: NULL (errno = EAGAIN) when full or
 * when others wait (it does not overtake them). */
void *gm_pool_tryget (struct gm_pool *pool, size_t len);

static inline int
gm_pool_contains (const struct gm_pool *pool, const void *p, size_t len)
{
  const char *b = pool->mem.addr;
  return (const char *) p >= b && (const char *) p + len <= b + pool->mem.len;
}

void gm_pool_get_stats (struct gm_pool *pool, struct gm_pool_stats *s);

#endif /* GMBLOCK_POOL_H */

/* gmblock-cache filter: every call to the layer below.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The cache does its I/O through one shared context (opened in
 * .after_fork), from client threads and from its own write-back
 * threads at once, outside nbdkit's request locks.  That is right for
 * a parallel plugin.  A plugin that declares a stricter thread model
 * relies on nbdkit never calling it concurrently (on one handle, or at
 * all), so below such a plugin every call here takes one lock: the
 * filter's threads take turns, as nbdkit's own would.  Connection
 * contexts (extents) go through the same lock, because with
 * serialize_all_requests no two calls may overlap anywhere.
 */
#include <errno.h>
#include <pthread.h>

#include "cache.h"

struct lower lower;
_Atomic uint64_t lower_flush_failures;

/* A flush below failed, or a FUA request (which may have failed its
 * flush): what earlier writes left below unflushed may be lost, on any
 * connection, though only this request hears of it. */
static inline int
flush_failed (int r)
{
  if (r == -1)
    atomic_fetch_add (&lower_flush_failures, 1);
  return r;
}

/* Flushes below run one at a time, and none while a FUA request below
 * is in flight: each failure is counted before the next flush starts.
 * The layer below may report a lost write-back to one flush or FUA
 * request only (Linux does, once per open file), so a flush that
 * started meanwhile would succeed unseen (ops.c, flush_report; a FUA
 * request's failure counted after a concurrent flush had succeeded was
 * a review finding).  FUA requests share the lock among themselves;
 * flushes are whole-disk syncs, which the gmblock plugin runs one at a
 * time anyway.  Writers first, so a stream of FUA writes cannot starve
 * a flush. */
static pthread_rwlock_t flush_lock =
  PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

static bool serial;
static pthread_mutex_t serial_lock = PTHREAD_MUTEX_INITIALIZER;

void
lower_set_thread_model (int thread_model)
{
  serial = thread_model < NBDKIT_THREAD_MODEL_PARALLEL;
  if (serial)
    nbdkit_debug (CNAME ": the thread model below is not parallel: "
                  "calls below are serialised");
}

/* Around every call below; flags are the call's: a FUA request holds
 * off flushes below until its failure is counted (flush_lock). */
static inline void
enter (uint32_t flags)
{
  if (flags & NBDKIT_FLAG_FUA)
    pthread_rwlock_rdlock (&flush_lock);
  if (serial)
    pthread_mutex_lock (&serial_lock);
}

static inline int
leave (uint32_t flags, int r)
{
  if (serial)
    pthread_mutex_unlock (&serial_lock);
  if (flags & NBDKIT_FLAG_FUA) {
    flush_failed (r);
    pthread_rwlock_unlock (&flush_lock);
  }
  return r;
}

/* Open the shared context that all cache I/O uses, and learn once what
 * the layer below can do (nbdkit asserts these were asked before use).
 */
int
lower_open (nbdkit_backend *backend)
{
  nbdkit_next *n;
  int64_t size;

  n = nbdkit_next_context_open (backend, 0, "", 1);
  if (n == NULL) {
    nbdkit_error (CNAME ": cannot open a shared context to the plugin");
    return -1;
  }
  if (n->prepare (n) == -1) {
    nbdkit_next_context_close (n);
    return -1;
  }
  lower.next = n;
  size = n->get_size (n);
  if (size == -1)
    return -1;
  lower.size = size;
  lower.can_write = n->can_write (n);
  lower.can_flush = n->can_flush (n);
  lower.can_trim = n->can_trim (n);
  lower.can_zero = n->can_zero (n);
  lower.can_fast_zero = n->can_fast_zero (n);
  lower.can_fua = n->can_fua (n);
  lower.can_cache = n->can_cache (n);
  lower.can_extents = n->can_extents (n);
  if (lower.can_write < 0 || lower.can_flush < 0 || lower.can_trim < 0 ||
      lower.can_zero < 0 || lower.can_fast_zero < 0 || lower.can_fua < 0 ||
      lower.can_cache < 0 || lower.can_extents < 0 ||
      n->block_size (n, &lower.bmin, &lower.bpref, &lower.bmax) == -1)
    return -1;
  return 0;
}

void
lower_close (void)
{
  lower.next->finalize (lower.next);
  nbdkit_next_context_close (lower.next);
  lower.next = NULL;
}

int
lower_pread (void *buf, uint32_t count, uint64_t off, int *err)
{
  enter (0);
  return leave (0, lower.next->pread (lower.next, buf, count, off, 0, err));
}

int
lower_pwrite (const void *buf, uint32_t count, uint64_t off, uint32_t flags,
              int *err)
{
  bool fua = flags & NBDKIT_FLAG_FUA;
  int r;

  if (fua && lower.can_fua == NBDKIT_FUA_NONE)
    flags &= ~NBDKIT_FLAG_FUA;
  enter (flags);
  r = leave (flags, lower.next->pwrite (lower.next, buf, count, off, flags,
                                        err));
  if (r == 0 && fua && !(flags & NBDKIT_FLAG_FUA))
    return lower_flush (err);
  return r;
}

int
lower_flush (int *err)
{
  int r;

  if (!lower.can_flush)
    return 0;
  pthread_rwlock_wrlock (&flush_lock);
  enter (0);
  r = leave (0, lower.next->flush (lower.next, 0, err));
  flush_failed (r);
  pthread_rwlock_unlock (&flush_lock);
  return r;
}

int
lower_trim (uint32_t count, uint64_t off, uint32_t flags, int *err)
{
  enter (flags);
  return leave (flags, lower.next->trim (lower.next, count, off, flags, err));
}

int
lower_zero (uint32_t count, uint64_t off, uint32_t flags, int *err)
{
  int r;

  enter (flags);
  r = lower.next->zero (lower.next, count, off, flags, err);
  /* A fast zero refused as not fast did nothing and synced nothing:
   * not a failed flush. */
  if (r == -1 && (flags & NBDKIT_FLAG_FAST_ZERO) && *err == ENOTSUP) {
    leave (flags, 0);
    return -1;
  }
  return leave (flags, r);
}

int
lower_extents (nbdkit_next *next, uint32_t count, uint64_t off,
               uint32_t flags, struct nbdkit_extents *extents, int *err)
{
  enter (0);
  return leave (0, next->extents (next, count, off, flags, extents, err));
}

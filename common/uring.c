/* gmblock: io_uring helpers.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "uring.h"

#ifndef IORING_SETUP_SINGLE_ISSUER
#define IORING_SETUP_SINGLE_ISSUER (1U << 12)
#endif
#ifndef IORING_SETUP_DEFER_TASKRUN
#define IORING_SETUP_DEFER_TASKRUN (1U << 13)
#endif

static unsigned
setup_flags (unsigned want)
{
  unsigned f = 0;
  if (want & GM_URING_SINGLE_ISSUER)
    f |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  if (want & GM_URING_COOP_TASKRUN)
    f |= IORING_SETUP_COOP_TASKRUN;
  return f;
}

int
gm_uring_init (struct gm_uring *u, unsigned entries, unsigned want)
{
  /* Try the full set first, then drop features one at a time: older
   * kernels refuse flags they do not know with EINVAL.
   */
  static const unsigned drop[] = {
    0, GM_URING_SINGLE_ISSUER, GM_URING_SINGLE_ISSUER | GM_URING_COOP_TASKRUN,
  };
  int r = -EINVAL;

  memset (u, 0, sizeof *u);
  for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) {
    unsigned w = want & ~drop[i];
    r = io_uring_queue_init (entries, &u->ring, setup_flags (w));
    if (r == 0) {
      u->features = w & (GM_URING_SINGLE_ISSUER | GM_URING_COOP_TASKRUN);
      break;
    }
    if (r != -EINVAL)
      return r;
  }
  if (r != 0)
    return r;
  if ((want & GM_URING_REGISTER_FD) && io_uring_register_ring_fd (&u->ring) == 1)
    u->features |= GM_URING_REGISTER_FD;
  return 0;
}

#ifdef __SANITIZE_THREAD__
void __tsan_ignore_thread_begin (void);
void __tsan_ignore_thread_end (void);

static void
tsan_forget (void *p, size_t len)
{
  if (p && len)
    (void) mmap (p, len, PROT_READ | PROT_WRITE,
                 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

/* liburing maps and unmaps a ring with raw system calls, which
 * ThreadSanitizer does not see: the next ring mapped at the same
 * address (another nbdkit thread's, plugins/gmblock/engine.c) kept this
 * one's access history, and its owner's SQE and CQ accesses were
 * reported as races with a thread long gone.  So the ring's mappings
 * are first replaced through the intercepted mmap, with this thread's
 * accesses ignored, which TSan takes for new memory without history;
 * liburing then unmaps them as before.
 */
static void
tsan_forget_ring (struct io_uring *r)
{
  size_t sqe = sizeof (struct io_uring_sqe) << !!(r->flags & IORING_SETUP_SQE128);

  __tsan_ignore_thread_begin ();
  tsan_forget (r->sq.sqes, r->sq.ring_entries * sqe);
  if (r->cq.ring_ptr != r->sq.ring_ptr)
    tsan_forget (r->cq.ring_ptr, r->cq.ring_sz);
  tsan_forget (r->sq.ring_ptr, r->sq.ring_sz);
  __tsan_ignore_thread_end ();
}
#else
#define tsan_forget_ring(r) ((void) 0)
#endif

void
gm_uring_exit (struct gm_uring *u)
{
  tsan_forget_ring (&u->ring);
  io_uring_queue_exit (&u->ring);
  u->fixed_base = NULL;
}

int
gm_uring_register_buffer (struct gm_uring *u, void *base, size_t len)
{
  struct iovec iov = { .iov_base = base, .iov_len = len };
  int r = io_uring_register_buffers (&u->ring, &iov, 1);
  if (r == 0) {
    u->fixed_base = base;
    u->fixed_len = len;
  }
  return r;
}

const char *
gm_uring_describe (const struct gm_uring *u, char *buf, size_t len)
{
  snprintf (buf, len, "%s%s%s%s",
            u->fixed_base ? "fixed buffers" : "plain buffers",
            u->features & GM_URING_SINGLE_ISSUER ? ", defer-taskrun" : "",
            u->features & GM_URING_COOP_TASKRUN ? ", coop-taskrun" : "",
            u->features & GM_URING_REGISTER_FD ? ", registered ring fd" : "");
  return buf;
}

#define SUBMIT_TRIES 1000       /* transient submit failures before giving up */

int
gm_uring_submit_all (struct gm_uring *u, unsigned wait_nr)
{
  unsigned tries = 0;
  int r;

  /* The SQ ring, not the return value, says what the kernel took: a
   * submission can fail after the kernel consumed the SQEs (interrupted
   * while waiting) and succeed having taken fewer than all of them.
   */
  for (;;) {
    r = io_uring_submit_and_wait (&u->ring, wait_nr);
    if (io_uring_sq_ready (&u->ring) == 0)
      return 0;
    if (r > 0)
      continue;                 /* a short submit: the rest go next */
    if (r == 0)
      r = -EAGAIN;
    if (!gm_uring_transient (r) || ++tries == SUBMIT_TRIES)
      return r;
  }
}

void
gm_uring_unqueue (struct gm_uring *u,
                  void (*drop) (uint64_t data, void *arg), void *arg)
{
  struct io_uring_sq *sq = &u->ring.sq;

  /* Those from the kernel's head on are unread, so still ours to change:
   * whenever they are submitted, nothing happens.
   */
  for (unsigned i = *sq->khead; i != sq->sqe_tail; i++) {
    struct io_uring_sqe *sqe = &sq->sqes[sq->array[i & sq->ring_mask]];
    uint64_t data = sqe->user_data;

    io_uring_prep_nop (sqe);
    io_uring_sqe_set_data64 (sqe, 0);
    if (drop && data != 0)
      drop (data, arg);
  }
}

unsigned gm_uring_reclaim_ms = 10000;

void
gm_uring_take_cqes (struct gm_uring *u,
                    void (*take) (uint64_t tag, int res, void *arg), void *arg)
{
  struct io_uring_cqe *cqe;
  unsigned head, n = 0;

  io_uring_for_each_cqe (&u->ring, head, cqe) {
    take (cqe->user_data, cqe->res, arg);
    n++;
  }
  io_uring_cq_advance (&u->ring, n);
}

void
gm_uring_reclaim (struct gm_uring *u, uint64_t cancel_tag, unsigned cancel_flags,
                  void (*take) (uint64_t tag, int res, void *arg), void *arg,
                  bool (*done) (void *arg))
{
  struct io_uring_sqe *sqe = io_uring_get_sqe (&u->ring);

  /* Cancelled, a request that has not reached the disk ends at once; one
   * that has (O_DIRECT block I/O cannot be cancelled) ends soon anyway.
   * If the cancel cannot be submitted either, there is still the wait.
   */
  if (sqe) {
    io_uring_prep_cancel64 (sqe, cancel_tag, cancel_flags);
    io_uring_sqe_set_data64 (sqe, 0);
    io_uring_submit (&u->ring);
  }
  for (unsigned ms = 0; ; ms++) {
    gm_uring_take_cqes (u, take, arg);
    if (done (arg) || ms >= gm_uring_reclaim_ms)
      return;
    /* Deferred completion work runs only when we enter the kernel. */
    io_uring_get_events (&u->ring);
    usleep (1000);
  }
}

struct reclaim_one {
  uint64_t tag;
  bool found;
  int res;
};

static void
take_one (uint64_t tag, int res, void *arg)
{
  struct reclaim_one *o = arg;

  if (tag == o->tag) {
    o->found = true;
    o->res = res;
  }
}

static bool
one_done (void *arg)
{
  return ((struct reclaim_one *) arg)->found;
}

/* Submit the one SQE the caller prepared and return exactly its result.
 *
 * Never return while that SQE is queued or in flight: its buffer is the
 * caller's, who will reuse it.  Once the kernel has it, wait for its
 * completion (never submit it again); if the kernel will not take it,
 * turn it into a no-op so that it never runs.  Each SQE carries a
 * sequence number, so a completion that is not ours (such a no-op's)
 * is never taken for ours.
 */
static int
submit_one (struct gm_uring *u, struct io_uring_sqe *sqe)
{
  struct io_uring_cqe *cqe;
  uint64_t tag = ++u->seq;
  int r, res;

  io_uring_sqe_set_data64 (sqe, tag);
  u->refused = false;
  if ((r = gm_uring_submit_all (u, 1)) < 0) {
    gm_uring_unqueue (u, NULL, NULL);
    u->refused = true;
    return r;
  }
  for (;;) {
    r = io_uring_wait_cqe (&u->ring, &cqe);
    if (r < 0) {
      if (gm_uring_transient (r))
        continue;
      /* The ring itself failed (not a "not now"): our request may be in
       * flight and its completion may never come by this wait.  Mark the
       * ring dead (every later request fails at once; the caller makes
       * a new one), but get the request back first: its buffer is the
       * caller's, who will reuse it.  Only if it is still in flight
       * after gm_uring_reclaim_ms is it abandoned (u->lost): it may
       * land later, and the caller must stop all I/O.
       */
      struct reclaim_one o = { .tag = tag };
      u->dead = true;
      gm_uring_reclaim (u, tag, 0, take_one, &o, one_done);
      if (!o.found) {
        u->lost = true;
        return -EIO;
      }
      /* Cancelled: it never ran, like a refused one (a syscall may do
       * it); otherwise what it did. */
      u->refused = o.res == -ECANCELED;
      return o.res;
    }
    if (cqe->user_data == tag) {
      res = cqe->res;
      io_uring_cqe_seen (&u->ring, cqe);
      return res;
    }
    io_uring_cqe_seen (&u->ring, cqe);  /* a no-op left behind */
  }
}

/* Returns 0 with *sqe set, or -errno. */
static int
get_sqe (struct gm_uring *u, struct io_uring_sqe **sqe)
{
  if (u->dead) {
    /* Nothing in flight unless it lost a request (fail-stop then): a
     * retry of the rest of a transfer, or of an interrupted fsync, is
     * done by the plain call (the engine makes a new ring after). */
    u->refused = !u->lost;
    return -EIO;
  }
  *sqe = io_uring_get_sqe (&u->ring);
  /* Only no-ops left by refused submissions can fill the SQ. */
  if (*sqe == NULL && gm_uring_submit_all (u, 0) == 0)
    *sqe = io_uring_get_sqe (&u->ring);
  if (*sqe == NULL) {
    u->refused = true;          /* never taken */
    return -EBUSY;
  }
  return 0;
}

void
gm_uring_prep_rw (struct gm_uring *u, struct io_uring_sqe *sqe, enum gm_rw op,
                  int fd, void *buf, size_t len, uint64_t off, int rw_flags)
{
  char *p = buf;
  bool fixed = u->fixed_base && p >= u->fixed_base &&
    p + len <= u->fixed_base + u->fixed_len;

  if (fixed && op == GM_READ)
    io_uring_prep_read_fixed (sqe, fd, p, len, off, 0);
  else if (fixed)
    io_uring_prep_write_fixed (sqe, fd, p, len, off, 0);
  else if (op == GM_READ)
    io_uring_prep_read (sqe, fd, p, len, off);
  else
    io_uring_prep_write (sqe, fd, p, len, off);
  sqe->rw_flags = rw_flags;
}

ssize_t
gm_rw_loop (gm_rw_once_fn once, void *ctx, enum gm_rw op, int fd,
            void *buf, size_t len, uint64_t off, int rw_flags)
{
  char *p = buf;
  size_t done = 0;

  while (done < len) {
    ssize_t res = once (ctx, op, fd, p + done, len - done, off + done,
                        rw_flags);
    if (res == -EINTR || res == -EAGAIN)
      continue;
    if (res < 0)
      return res;
    if (res == 0) {
      if (op == GM_READ)
        break;                  /* end of file */
      return -EIO;              /* a write that makes no progress */
    }
    done += res;
  }
  return done;
}

static ssize_t
uring_once (void *ctx, enum gm_rw op, int fd, void *buf, size_t len,
            uint64_t off, int rw_flags)
{
  struct gm_uring *u = ctx;
  struct io_uring_sqe *sqe;
  int r = get_sqe (u, &sqe);

  if (r < 0)
    return r;
  gm_uring_prep_rw (u, sqe, op, fd, buf, len, off, rw_flags);
  return submit_one (u, sqe);
}

ssize_t
gm_uring_rw (struct gm_uring *u, enum gm_rw op, int fd,
             void *buf, size_t len, uint64_t off, int rw_flags)
{
  return gm_rw_loop (uring_once, u, op, fd, buf, len, off, rw_flags);
}

int
gm_uring_fsync (struct gm_uring *u, int fd, bool datasync)
{
  struct io_uring_sqe *sqe;
  int r;

  /* An interrupted fsync is issued again, as a new SQE: the old one is
   * complete (its result was the interruption) or a no-op (refused).
   */
  do {
    if ((r = get_sqe (u, &sqe)) < 0)
      return r;
    io_uring_prep_fsync (sqe, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
    r = submit_one (u, sqe);
  } while (r == -EINTR || r == -EAGAIN);
  return r < 0 ? r : 0;
}

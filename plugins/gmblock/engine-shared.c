/* gmblock plugin: ring=shared, one ring for the whole process with
 * leader/follower flat combining.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A thread queues its SQE under the lock.  If no thread is waiting in
 * the kernel, it becomes the leader: it submits everything queued,
 * waits for completions without the lock, then hands each result to
 * its owner and wakes it.  Followers submit their own SQE (the leader
 * is asleep) and sleep on their own condition variable.  When the
 * leader's own request is done it passes the role to a waiting thread.
 * The waiter lives on the caller's stack: no allocation per request.
 *
 * Note io_uring completes reads by task work on the *submitting*
 * thread, so a sleeping follower is still woken once by the kernel to
 * post its completion: this design cannot save wake-ups, only
 * syscalls.  It is kept to be measured against per-thread rings.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "gmblock.h"

#define SHARED_DEPTH 256

struct waiter {
  int res;
  bool done;
  bool refused;                 /* the kernel never took it: it never ran */
  bool lost;                    /* abandoned in flight: may land later */
  pthread_cond_t cond;
  struct waiter *prev, *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gm_uring *ring;
static bool leader;                     /* a thread waits in the kernel */
static bool dead;                       /* the ring failed: never used again */
static struct waiter *waiting;          /* requests not yet completed */

int
gm_shared_init (void)
{
  /* Several threads submit: no SINGLE_ISSUER, no COOP_TASKRUN (so that
   * sleeping submitters are kicked to post their completions), and no
   * registered ring fd (the registration belongs to one thread).
   */
  ring = gm_engine_new_ring (SHARED_DEPTH, 0);
  if (ring == NULL) {
    nbdkit_error (GM_NAME ": ring=shared: io_uring_queue_init: %m");
    return -1;
  }
  return 0;
}

void
gm_shared_cleanup (void)
{
  if (ring) {
    gm_uring_exit (ring);
    free (ring);
    ring = NULL;
  }
  dead = false;
}

static void
unlink_waiter (struct waiter *w)
{
  if (w->prev)
    w->prev->next = w->next;
  else
    waiting = w->next;
  if (w->next)
    w->next->prev = w->prev;
}

/* Hand w its result and wake it.  Called with the lock. */
static void
finish (struct waiter *w, int res)
{
  w->res = res;
  w->done = true;
  unlink_waiter (w);
  pthread_cond_signal (&w->cond);
}

/* A completion: its owner gets the result.  reclaiming (arg non-NULL):
 * a request our cancel ended never ran, so its owner does it with the
 * plain call.
 */
static void
take_completion (uint64_t data, int res, void *reclaiming)
{
  struct waiter *w = (struct waiter *) (uintptr_t) data;

  if (w == NULL)                /* a cancel's own, or a refusal's no-op */
    return;
  w->refused = reclaiming && res == -ECANCELED;
  finish (w, res);
}

static bool
none_waiting (void *arg)
{
  return waiting == NULL;
}

/* The ring failed in a way that is not "not now": its completions may
 * never come through a wait, which could hang forever.  It is never used
 * again (requests go to the plain calls), but the requests in flight
 * are got back first (cancelled, or their completions read from the CQ
 * ring): their buffers are their owners', who will reuse them.  Only
 * those still out after gm_uring_reclaim_ms may land later: then the
 * plugin stops all I/O, and they fail.  The lock is held throughout, so
 * no waiter's stack frame is touched after it returns.
 */
static void
ring_failed (int r)
{
  dead = true;
  errno = -r;
  nbdkit_error (GM_NAME ": the shared io_uring failed: %m: requests are "
                "served with plain system calls from now on");
  gm_uring_reclaim (ring, 0, IORING_ASYNC_CANCEL_ANY, take_completion,
                    &dead, none_waiting);
  if (waiting)
    gm_failstop (GM_FAILSTOP_ALL, "the shared io_uring", -r);
  while (waiting) {
    waiting->lost = true;
    finish (waiting, -EIO);
  }
}

static void
fail_unsubmitted (uint64_t data, void *arg)
{
  struct waiter *w = (struct waiter *) (uintptr_t) data;

  w->refused = true;
  finish (w, *(int *) arg);
}

/* Submit what is queued.  Called with the lock held (only one thread
 * submits at a time).  Should the kernel refuse, exactly the requests
 * it did not take end as refused (their owners do them with the plain
 * call), and their SQEs become no-ops: those in flight keep waiting
 * for their completions.
 */
static void
submit_queued (void)
{
  int r = gm_uring_submit_all (ring, 0);
  if (r < 0)
    gm_uring_unqueue (ring, fail_unsubmitted, &r);
}

/* Leader: wait for at least one completion and dispatch all of them.
 * Called and returns with the lock held.  The leader never leaves while
 * its own request is in flight: a failed wait that means "not now" is
 * simply repeated.
 */
static void
lead (struct waiter *self)
{
  struct io_uring_cqe *cqe;
  int r;

  submit_queued ();
  if (self->done)               /* refused: it never reached the kernel */
    return;
  leader = true;
  pthread_mutex_unlock (&lock);
  do
    r = io_uring_wait_cqe (&ring->ring, &cqe);
  while (gm_uring_transient (r));
  pthread_mutex_lock (&lock);
  leader = false;
  if (r < 0) {
    ring_failed (r);
    return;
  }
  gm_uring_take_cqes (ring, take_completion, NULL);
}

/* A request the kernel would not take (ENOMEM, or a full SQ: memory
 * pressure) never ran, so the plain call does it, as the per-thread
 * engine does (engine.c): the error was not the disk's.  ctx (if not
 * NULL) is a bool set when the ring abandoned the request: its buffer
 * may still take its I/O.
 */
ssize_t
gm_shared_once (void *ctx, enum gm_rw op, int fd, void *buf, size_t len,
                uint64_t off, int rwf)
{
  struct waiter w = { .done = false, .refused = false, .lost = false,
                      .prev = NULL };
  struct io_uring_sqe *sqe = NULL;

  pthread_cond_init (&w.cond, NULL);
  pthread_mutex_lock (&lock);
  if (!dead && (sqe = io_uring_get_sqe (&ring->ring)) == NULL) {
    submit_queued ();           /* the SQ is full: make room */
    sqe = io_uring_get_sqe (&ring->ring);
  }
  if (dead || sqe == NULL) {     /* a dead ring, or a full SQ */
    pthread_mutex_unlock (&lock);
    pthread_cond_destroy (&w.cond);
    return gm_sync_once (ctx, op, fd, buf, len, off, rwf);
  }
  gm_uring_prep_rw (ring, sqe, op, fd, buf, len, off, rwf);
  io_uring_sqe_set_data (sqe, &w);
  w.next = waiting;
  if (waiting)
    waiting->prev = &w;
  waiting = &w;

  /* The leader sleeps in the kernel: submit our own. */
  if (leader)
    submit_queued ();
  while (!w.done) {
    if (!leader)
      lead (&w);
    else
      pthread_cond_wait (&w.cond, &lock);
  }
  /* Someone must keep reaping for the requests still in flight. */
  if (!leader && waiting)
    pthread_cond_signal (&waiting->cond);
  pthread_mutex_unlock (&lock);
  pthread_cond_destroy (&w.cond);
  if (w.refused)
    return gm_sync_once (ctx, op, fd, buf, len, off, rwf);
  if (w.lost && ctx)
    *(bool *) ctx = true;
  return w.res;
}

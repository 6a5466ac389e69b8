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
  pthread_cond_t cond;
  struct waiter *prev, *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gm_uring *ring;
static bool leader;                     /* a thread waits in the kernel */
static struct waiter *waiting;          /* requests not yet completed */

int
gm_shared_init (void)
{
  /* Several threads submit: no SINGLE_ISSUER, no COOP_TASKRUN (so that
   * sleeping submitters are kicked to post their completions), and no
   * registered ring fd (the registration belongs to one thread).
   */
  ring = gm_engine_new_ring (SHARED_DEPTH, 0);
  return ring ? 0 : -1;
}

void
gm_shared_cleanup (void)
{
  if (ring) {
    gm_uring_exit (ring);
    free (ring);
    ring = NULL;
  }
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

/* Leader: wait for at least one completion and dispatch all of them.
 * Called and returns with the lock held.
 */
static void
lead (struct waiter *self)
{
  struct io_uring_cqe *cqe;
  unsigned head, n = 0;
  int r;

  leader = true;
  io_uring_submit (&ring->ring);
  pthread_mutex_unlock (&lock);
  do
    r = io_uring_wait_cqe (&ring->ring, &cqe);
  while (r == -EINTR);
  pthread_mutex_lock (&lock);
  if (r < 0) {
    /* The ring itself failed: fail our own request. */
    self->res = r;
    self->done = true;
    unlink_waiter (self);
  }
  else {
    io_uring_for_each_cqe (&ring->ring, head, cqe) {
      struct waiter *w = io_uring_cqe_get_data (cqe);
      w->res = cqe->res;
      w->done = true;
      unlink_waiter (w);
      if (w != self)
        pthread_cond_signal (&w->cond);
      n++;
    }
    io_uring_cq_advance (&ring->ring, n);
  }
  leader = false;
}

ssize_t
gm_shared_once (void *ctx, enum gm_rw op, int fd, void *buf, size_t len,
                uint64_t off, int rwf)
{
  struct waiter w = { .done = false, .prev = NULL };
  struct io_uring_sqe *sqe;

  pthread_cond_init (&w.cond, NULL);
  pthread_mutex_lock (&lock);
  while ((sqe = io_uring_get_sqe (&ring->ring)) == NULL)
    io_uring_submit (&ring->ring);
  gm_uring_prep_rw (ring, sqe, op, fd, buf, len, off, rwf);
  io_uring_sqe_set_data (sqe, &w);
  w.next = waiting;
  if (waiting)
    waiting->prev = &w;
  waiting = &w;

  if (leader)
    io_uring_submit (&ring->ring);
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
  return w.res;
}

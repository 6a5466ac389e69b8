/* gmblock plugin: the I/O engine.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdkit calls the plugin synchronously from many worker threads.
 * Each worker gets its own small ring, created on first use, so a
 * request costs exactly one io_uring_enter (submit and wait together)
 * and no other thread is ever woken on its behalf.  The ring is
 * SINGLE_ISSUER + DEFER_TASKRUN where the kernel allows it (the
 * completion work then runs in our own io_uring_enter instead of
 * interrupting us), has its fd registered, and has the whole buffer
 * pool registered as fixed buffer 0 when RLIMIT_MEMLOCK allows.
 * Measured against a shared ring with flat combining: see
 * bench/RESULTS.md.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gmblock.h"

#define RING_DEPTH 8            /* one request in flight per thread */
#define RING_WANT (GM_URING_SINGLE_ISSUER | GM_URING_COOP_TASKRUN | \
                   GM_URING_REGISTER_FD)

static pthread_key_t ring_key;
static __thread struct gm_uring *thread_ring;

static void
ring_destroy (void *p)
{
  struct gm_uring *u = p;
  gm_uring_exit (u);
  free (u);
}

int
gm_engine_init (void)
{
  int r = pthread_key_create (&ring_key, ring_destroy);
  if (r != 0) {
    errno = r;
    nbdkit_error (GM_NAME ": pthread_key_create: %m");
    return -1;
  }
  return 0;
}

void
gm_engine_cleanup (void)
{
  /* Rings of worker threads were destroyed when they exited; this
   * thread's (if any) goes now.
   */
  if (thread_ring) {
    ring_destroy (thread_ring);
    thread_ring = NULL;
    pthread_setspecific (ring_key, NULL);
  }
  pthread_key_delete (ring_key);
}

struct gm_uring *
gm_ring (void)
{
  struct gm_uring *u = thread_ring;
  int r;

  if (u)
    return u;
  u = malloc (sizeof *u);
  if (u == NULL) {
    nbdkit_error (GM_NAME ": malloc: %m");
    return NULL;
  }
  r = gm_uring_init (u, RING_DEPTH, RING_WANT);
  if (r < 0) {
    errno = -r;
    nbdkit_error (GM_NAME ": io_uring_queue_init: %m");
    free (u);
    return NULL;
  }
  /* Start-up checked that registration works; should it fail here
   * anyway, this ring simply uses plain buffers.
   */
  if (gm.pool && gm.fixed_ok)
    gm_uring_register_buffer (u, gm.pool->mem.addr, gm.pool->mem.len);
  pthread_setspecific (ring_key, u);
  thread_ring = u;
  return u;
}

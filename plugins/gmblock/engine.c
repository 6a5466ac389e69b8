/* gmblock plugin: the I/O engine, and its default design.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdkit calls the plugin synchronously from many worker threads.
 * Three designs are built in (ring=), measured in bench/RESULTS.md:
 *
 *  - per-thread (default): each worker has its own small ring, made on
 *    first use.  A request costs one io_uring_enter that submits and
 *    waits, and no other thread is woken on its behalf.  The ring is
 *    SINGLE_ISSUER + DEFER_TASKRUN where the kernel allows (completion
 *    work runs inside our own wait instead of interrupting us), has its
 *    fd registered, and has the pool registered as fixed buffer 0.
 *  - shared (engine-shared.c): one ring for the process, flat combining.
 *  - none (engine-sync.c): preadv2/pwritev2, no io_uring, as a baseline.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "gmblock.h"
#include "overlap.h"            /* gm_now_ns */
#include "sizes.h"
#include "pin.h"

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

/* Each ring registers the whole pool, and without CAP_IPC_LOCK the
 * kernel counts every registration against RLIMIT_MEMLOCK on its own:
 * under a limit of 8M a 4M pool, which start-up's probe registers, is
 * registered by two worker threads' rings and no more.  Said once.
 */
void
gm_engine_pool_and_memlock (char size[32], char lim[32])
{
  struct rlimit rl;

  strcpy (lim, "unlimited");
  if (getrlimit (RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    gm_format_size (rl.rlim_cur, lim, 32);
  gm_format_size (gm.pool->mem.len, size, 32);
}

static void
say_unregistered (int err)
{
  static atomic_bool said;
  char size[32], lim[32];

  if (atomic_exchange (&said, true))
    return;
  gm_engine_pool_and_memlock (size, lim);
  fprintf (stderr, "nbdkit: " GM_NAME ": warning: a worker thread's io_uring "
           "cannot register the %s buffer pool (%s; RLIMIT_MEMLOCK is %s): "
           "every ring registers the whole pool and each registration counts "
           "against the limit, so N threads need N times the pool; this "
           "thread and any others past the limit use plain buffers, which "
           "costs a little CPU per request: raise the memlock limit, run as "
           "root or use ring=shared (one registration)\n",
           size, strerror (err), lim);
}

/* Make a ring and, if start-up found it works, register the pool.
 * NULL with errno set; the caller says why.
 */
struct gm_uring *
gm_engine_new_ring (unsigned depth, unsigned want)
{
  struct gm_uring *u = malloc (sizeof *u);
  int r;

  if (u == NULL)
    return NULL;
  r = gm_uring_init (u, depth, want);
  if (r < 0) {
    free (u);
    errno = -r;
    return NULL;
  }
  /* Should registration fail here anyway, the ring uses plain buffers. */
  if (gm.pool && gm.fixed_ok &&
      (r = gm_uring_register_buffer (u, gm.pool->mem.addr,
                                     gm.pool->mem.len)) < 0)
    say_unregistered (-r);
  return u;
}

/* io_uring refused for good: io_uring_setup fails with EPERM under a
 * seccomp profile that denies it (Docker's default since 25.0),
 * kernel.io_uring_disabled, or ENOSYS on a kernel built without it.
 * Every worker thread used to try again at each request and log an
 * error once per thread (hundreds of lines with many clients, and none
 * at start-up): now the first refusal says so once, as a warning, and
 * the plugin serves as ring=none from then on.
 */
static atomic_bool uring_refused;

static bool
refused_for_good (int err)
{
  return err == EPERM || err == ENOSYS || err == EACCES;
}

static void
say_refused (int err)
{
  if (!atomic_exchange (&uring_refused, true))
    fprintf (stderr, "nbdkit: " GM_NAME ": warning: io_uring cannot be used "
             "here (io_uring_setup: %s: a seccomp profile such as Docker's "
             "default, kernel.io_uring_disabled, or a kernel without "
             "io_uring): every request is served with "
             "preadv2/pwritev2/fdatasync, as with ring=none\n",
             strerror (err));
}

/* Each thread's ring is a descriptor, so a connection keeping nbdkit's
 * 16 threads busy holds about 20 (nbdkit's own take 4): at the usual
 * soft limit of 1024 some 50 such clients used them all, and nbdkit
 * then accepted no one (1.32's accept loop spins, logging each
 * EMFILE).  Rings therefore only take descriptors below three quarters
 * of the limit; the quarter above is left to nbdkit (sockets, pipes)
 * and the threads past it serve with plain system calls.  Returns the
 * descriptor a ring must stay below, or -1 for no bound.
 */
static long
ring_fd_bound (void)
{
  struct rlimit rl;

  if (getrlimit (RLIMIT_NOFILE, &rl) == -1 || rl.rlim_cur == RLIM_INFINITY ||
      rl.rlim_cur > 1 << 30)
    return -1;
  return rl.rlim_cur - rl.rlim_cur / 4;
}

/* Whether a new ring (the lowest free descriptor) stays below bound. */
static bool
ring_fd_free (long bound)
{
  int fd;

  if (bound < 0)
    return true;
  fd = fcntl (gm.fd, F_DUPFD_CLOEXEC, 0);       /* the lowest free one */
  if (fd == -1)
    return false;
  close (fd);
  return fd < bound;
}

static void
say_fds_short (long bound)
{
  static atomic_bool said;

  if (!atomic_exchange (&said, true))
    fprintf (stderr, "nbdkit: " GM_NAME ": warning: %ld descriptors are "
             "in use, three quarters of the limit (ulimit -n, LimitNOFILE=): "
             "threads without an io_uring now serve their requests with "
             "preadv2/pwritev2/fdatasync, leaving nbdkit the rest to accept "
             "clients with; raise the limit to give every thread a ring\n",
             bound);
}

#define RING_RETRY_NS 1000000000ull  /* a ringless thread's next try */

static struct gm_uring *
my_ring (void)
{
  /* A ring that failed for good (common/uring.c marks it dead) is
   * replaced.  If it lost a request the plugin is in fail-stop by then
   * (lost_if_dead), but the thread keeps a working ring for extents and
   * what follows.
   */
  if (thread_ring && thread_ring->dead) {
    nbdkit_error (GM_NAME ": this thread's io_uring failed: replacing it");
    pthread_setspecific (ring_key, NULL);
    ring_destroy (thread_ring);
    thread_ring = NULL;
  }
  if (thread_ring == NULL && !atomic_load (&uring_refused)) {
    /* Tried again (descriptors may be free again), but at most once a
     * second: each try costs three system calls (getrlimit, a dup and
     * its close), which every request of a ringless thread paid.  Said
     * once per thread.
     */
    static __thread bool said;
    static __thread uint64_t next_try;
    uint64_t now = gm_now_ns ();
    long bound;

    if (now < next_try)
      return NULL;
    next_try = now + RING_RETRY_NS;     /* cleared below if one is made */
    bound = ring_fd_bound ();
    if (!ring_fd_free (bound)) {
      say_fds_short (bound);
      return NULL;
    }
    thread_ring = gm_engine_new_ring (RING_DEPTH, RING_WANT);
    if (thread_ring && bound >= 0 && thread_ring->ring.ring_fd >= bound) {
      /* Another thread took the descriptor we saw free. */
      ring_destroy (thread_ring);
      thread_ring = NULL;
      say_fds_short (bound);
      return NULL;
    }
    if (thread_ring) {
      pthread_setspecific (ring_key, thread_ring);
      next_try = 0;             /* a ring that dies is replaced at once */
    }
    else if (refused_for_good (errno))
      say_refused (errno);
    else if (!said) {
      said = true;
      nbdkit_error (GM_NAME ": io_uring_queue_init: %m: this thread "
                    "serves its requests with preadv2/pwritev2/fdatasync "
                    "until a ring can be made");
    }
  }
  return thread_ring;
}

/* Whether this thread's last gm_engine_rw abandoned its request. */
static __thread bool last_lost;

/* A ring that died under a request and could not get it back (cancel,
 * completion) within gm_uring_reclaim_ms lost track of its I/O, which
 * may still land later: fail-stop (failstop.c), reads included.  One
 * that got it back returns its result; the ring is replaced.
 */
static ssize_t
lost_if_dead (struct gm_uring *u, ssize_t r)
{
  if (r < 0 && u->lost)
    gm_failstop (GM_FAILSTOP_ALL, "io_uring", (int) -r);
  return r;
}

bool
gm_engine_lost (void)
{
  return last_lost;
}

int
gm_engine_init (void)
{
  char why[256];
  int r;

  /* A detached nbdkit connection thread (it serves requests itself
   * with --threads=1) runs ring_destroy as it ends, which may be after
   * nbdkit stopped waiting for it, unloaded and dlclose()d us: a
   * review finding, SIGSEGV at exit about once in 200 runs. */
  if (gm_pin_module ((const void *) ring_destroy, why, sizeof why) == -1) {
    nbdkit_error (GM_NAME ": cannot stay loaded for the threads' rings: %s",
                  why);
    return -1;
  }
  r = pthread_key_create (&ring_key, ring_destroy);
  if (r != 0) {
    errno = r;
    nbdkit_error (GM_NAME ": pthread_key_create: %m");
    return -1;
  }
  /* Said at start-up, where it is seen, if io_uring is refused here. */
  if (gm.ring == GM_RING_PER_THREAD) {
    struct gm_uring u;
    if ((r = gm_uring_init (&u, 4, 0)) == 0)
      gm_uring_exit (&u);
    else if (refused_for_good (-r))
      say_refused (-r);
  }
  return 0;
}

/* After nbdkit forked (rings must belong to the serving process) and
 * after the pool exists (so the shared ring can register it).
 */
int
gm_engine_start (void)
{
  return gm.ring == GM_RING_SHARED ? gm_shared_init () : 0;
}

void
gm_engine_cleanup (void)
{
  /* Worker threads' rings went when they exited; this thread's goes now. */
  if (thread_ring) {
    ring_destroy (thread_ring);
    thread_ring = NULL;
    pthread_setspecific (ring_key, NULL);
  }
  pthread_key_delete (ring_key);
  if (gm.ring == GM_RING_SHARED)
    gm_shared_cleanup ();
}

ssize_t
gm_engine_rw (enum gm_rw op, int fd, void *buf, size_t len, uint64_t off,
              int rwf)
{
  struct gm_uring *u;
  ssize_t r;

  last_lost = false;
  switch (gm.ring) {
  case GM_RING_SHARED:
    return gm_rw_loop (gm_shared_once, &last_lost, op, fd, buf, len, off, rwf);
  case GM_RING_NONE:
    return gm_rw_loop (gm_sync_once, NULL, op, fd, buf, len, off, rwf);
  default:
    /* No ring for this thread (EMFILE, ENOMEM: each worker thread's ring
     * is one more descriptor): the request is still served, by plain
     * preadv2/pwritev2, rather than failed with an error that is not the
     * disk's.
     */
    if ((u = my_ring ()) == NULL)
      return gm_rw_loop (gm_sync_once, NULL, op, fd, buf, len, off, rwf);
    r = gm_uring_rw (u, op, fd, buf, len, off, rwf);
    /* The kernel would not take it (ENOMEM, or "not now" a thousand
     * times): it never ran, so the plain call does it.
     */
    if (r < 0 && u->refused)
      return gm_rw_loop (gm_sync_once, NULL, op, fd, buf, len, off, rwf);
    last_lost = r < 0 && u->lost;
    return lost_if_dead (u, r);
  }
}

int
gm_engine_fdatasync (int fd)
{
  struct gm_uring *u;
  int r;

  /* Flushes are rare: the shared design sends them through this
   * thread's own ring too rather than complicating the combiner.
   *
   * gm_datasync takes every error for a lost write-back and stops the
   * server for good, so never report as the sync's failure the ring's
   * absence (none configured, or none could be made for this thread:
   * EMFILE, ENOMEM) nor a sync the kernel would not take (it never
   * ran): fdatasync(2) itself then.
   */
  if (gm.ring == GM_RING_NONE || (u = my_ring ()) == NULL ||
      ((r = gm_uring_fsync (u, fd, true)) < 0 && u->refused))
    return fdatasync (fd) == -1 ? -errno : 0;
  return lost_if_dead (u, r);
}

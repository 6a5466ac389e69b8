/* A request an io_uring abandoned in flight (it died and could not get
 * the request back within gm_uring_reclaim_ms: fail-stop) may still DMA
 * into its pool buffer.  That buffer must never go to another request:
 * one that passed the fail-stop check before the loss and waits for
 * pool memory.  It used to get that very buffer, and the late DMA
 * landed in it: a write was acknowledged with the lost read's bytes
 * on disk, a read returned them.  Nor may that waiter hang when what is
 * left of the pool can never serve it: it fails with EIO.
 *
 * The plugin's io.c and engines are built in.  Request A (this thread)
 * reads a pipe through a ring whose wait fails (EBADF) and whose cancel
 * is refused, so its read stays armed: writing to the pipe later is its
 * late DMA.  Request B (another thread) waits in the pool meanwhile;
 * its disk I/O is a wrapped preadv2/pwritev2 (its ring refuses it, as
 * the kernel may), which stops midway so that the test can land A's
 * DMA at the worst moment: after B's data is in its buffer, before it
 * is written out or copied to the client.  Linked with
 *   -Wl,--wrap=io_uring_submit_and_wait -Wl,--wrap=io_uring_submit
 *   -Wl,--wrap=__io_uring_get_cqe -Wl,--wrap=preadv2 -Wl,--wrap=pwritev2
 *
 *   test-lost-buffer [CASE...]     run the named cases (default: all)
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "uring.h"
#include "unit.h"
#include "uring-wrap.h"

#include "../../plugins/gmblock/io.c"
#include "../../plugins/gmblock/engine.c"
#include "../../plugins/gmblock/engine-shared.c"
#include "../../plugins/gmblock/engine-sync.c"

struct gmblock gm;
struct gm_counter gm_stats[ST_COUNT];

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[8192];     /* every nbdkit_error of the case */
static __thread int last_error;

void
nbdkit_error (const char *fs, ...)
{
  char line[512];
  va_list ap;

  va_start (ap, fs);
  vsnprintf (line, sizeof line, fs, ap);
  va_end (ap);
  fprintf (stderr, "%s\n", line);
  pthread_mutex_lock (&log_lock);
  if (strlen (log_text) + strlen (line) + 2 < sizeof log_text) {
    strcat (log_text, line);
    strcat (log_text, "\n");
  }
  pthread_mutex_unlock (&log_lock);
}

void
nbdkit_set_error (int err)
{
  last_error = err;
}

/* The plugin's fail-stop (failstop.c) and flush bookkeeping (ops.c),
 * as io.c and the engines use them.
 */
static _Atomic int failstop_level;

void
gm_failstop (enum gm_failstop lv, const char *op, int err)
{
  if ((int) lv > atomic_load (&failstop_level))
    atomic_store (&failstop_level, (int) lv);
}

int
gm_failstop_refuse (enum gm_failstop lv, const char *op, uint64_t offset,
                    uint64_t count)
{
  if (atomic_load (&failstop_level) < (int) lv)
    return 0;
  nbdkit_error ("%s refused: fail-stop", op);
  nbdkit_set_error (EIO);
  return -1;
}

int gm_failstop_level (void) { return atomic_load (&failstop_level); }
void gm_failstop_sync_failed (const char *op, int err) { }
void gm_write_done (void) { }
bool gm_unsynced_writes (void) { return false; }
int gm_datasync (void) { return 0; }
void gm_sync_lock_shared (void) { }
void gm_sync_unlock (void) { }

/* ---- the injected faults, per thread ---- */
enum role {
  NORMAL,
  LOSE,         /* A: the first submission goes in, then the ring's wait
                   fails and every submission (the cancel) is refused */
  LATE,         /* B: ring submissions refused; the plain call pauses
                   for A's DMA to land */
};
static __thread enum role role;
static __thread bool submitted, wait_failed;

ssize_t __real_preadv2 (int fd, const struct iovec *iov, int n, off_t off,
                        int flags);
ssize_t __real_pwritev2 (int fd, const struct iovec *iov, int n, off_t off,
                         int flags);

int
__wrap_io_uring_submit_and_wait (struct io_uring *ring, unsigned wait_nr)
{
  if (role == LATE || (role == LOSE && submitted))
    return -ENOMEM;
  if (role == LOSE) {
    submitted = true;
    return __real_io_uring_submit_and_wait (ring, 0);
  }
  return __real_io_uring_submit_and_wait (ring, wait_nr);
}

int
__wrap___io_uring_get_cqe (struct io_uring *ring,
                           struct io_uring_cqe **cqe_ptr, unsigned submit,
                           unsigned wait_nr, sigset_t *sigmask)
{
  if (role == LOSE && !wait_failed) {
    wait_failed = true;
    return -EBADF;
  }
  return __real___io_uring_get_cqe (ring, cqe_ptr, submit, wait_nr, sigmask);
}

#define LEN 8192
static _Atomic bool at_pause, landed, b_done;
static char disk[LEN];          /* what B's pwritev2 wrote */

/* B's I/O has its data in the buffer: let A's late DMA land now. */
static void
pause_for_dma (void)
{
  atomic_store (&at_pause, true);
  for (int ms = 0; !atomic_load (&landed) && ms < 5000; ms++)
    usleep (1000);
}

ssize_t
__wrap_preadv2 (int fd, const struct iovec *iov, int n, off_t off, int flags)
{
  if (role != LATE)
    return __real_preadv2 (fd, iov, n, off, flags);
  CHECK (n == 1 && iov[0].iov_len == LEN);
  memset (iov[0].iov_base, 'B', LEN);     /* the disk's data */
  pause_for_dma ();
  return LEN;
}

ssize_t
__wrap_pwritev2 (int fd, const struct iovec *iov, int n, off_t off, int flags)
{
  if (role != LATE)
    return __real_pwritev2 (fd, iov, n, off, flags);
  CHECK (n == 1 && iov[0].iov_len == LEN);
  pause_for_dma ();
  memcpy (disk, iov[0].iov_base, LEN);
  return LEN;
}

/* ---- the cases ---- */
static int pipefd[2];
static char bclient[LEN + 1];   /* B's client buffer, never page-aligned */
static bool b_reads;
static int b_r, b_err;

static void *
request_b (void *arg)
{
  struct gm_pool_stats s;

  role = LATE;
  /* Start once A holds its buffer: the pool is full, so B waits. */
  do {
    usleep (100);
    gm_pool_get_stats (gm.pool, &s);
  } while (s.in_use < s.size);
  if (b_reads)
    b_r = gm_pread (NULL, bclient + 1, LEN, 0, 0);
  else {
    memset (bclient + 1, 'B', LEN);
    b_r = gm_pwrite (NULL, bclient + 1, LEN, 0, 0);
  }
  b_err = last_error;
  atomic_store (&b_done, true);
  return NULL;
}

static bool
wait_for (_Atomic bool *a, _Atomic bool *b, int ms)
{
  for (; ms > 0 && !atomic_load (a) && !atomic_load (b); ms--)
    usleep (1000);
  return atomic_load (a) || atomic_load (b);
}

/* A's read is still armed on the pipe: feed it, and wait until it has
 * landed (its completion is posted).
 */
static void
land_dma (void)
{
  struct io_uring *r = gm.ring == GM_RING_SHARED ? &ring->ring
    : &thread_ring->ring;
  char x[LEN];
  int ms;

  memset (x, 'X', LEN);
  CHECK (write (pipefd[1], x, LEN) == LEN);
  for (ms = 0; io_uring_cq_ready (r) == 0 && ms < 2000; ms++) {
    if (gm.ring != GM_RING_SHARED)
      io_uring_get_events (r);  /* DEFER_TASKRUN: the read runs here */
    usleep (1000);
  }
  CHECK (io_uring_cq_ready (r) > 0);
}

/* pool_units: the pool's size; held: units the test holds meanwhile
 * (and gives back once A has failed), so that B can be served from
 * clean memory.  B must then get its own data; without them it can
 * only fail, with EIO.
 */
static void
lost_request (enum gm_ring_mode mode, bool reads, size_t pool_units,
              size_t held)
{
  char err[256], a[LEN + 1];
  struct gm_pool_stats s;
  void *hold = NULL;
  pthread_t t;

  gm.ring = mode;
  gm.pool = gm_pool_create (pool_units * GM_POOL_UNIT, GM_HUGE_OFF, err,
                            sizeof err);
  CHECK (gm.pool != NULL);
  if (held)
    CHECK ((hold = gm_pool_get (gm.pool, held * GM_POOL_UNIT)) != NULL);
  if (mode == GM_RING_SHARED)
    CHECK (gm_shared_init () == 0);
  atomic_store (&failstop_level, GM_FAILSTOP_NONE);
  atomic_store (&at_pause, false);
  atomic_store (&landed, false);
  atomic_store (&b_done, false);
  memset (disk, 0, LEN);
  memset (bclient, 0, sizeof bclient);
  log_text[0] = '\0';
  b_reads = reads;
  CHECK (pthread_create (&t, NULL, request_b, NULL) == 0);

  /* A: lost; this thread's (or the shared) ring keeps its read armed. */
  role = LOSE;
  submitted = wait_failed = false;
  CHECK (gm_pread (NULL, a + 1, LEN, 0, 0) == -1 && last_error == EIO);
  role = NORMAL;
  CHECK (atomic_load (&failstop_level) == GM_FAILSTOP_ALL);

  if (!wait_for (&at_pause, &b_done, 300) && hold) {
    /* Not before B waits in the pool (a loaded machine may not have
     * run it that far yet): then it is served past the check. */
    for (int ms = 0; ms < 10000; ms++) {
      gm_pool_get_stats (gm.pool, &s);
      if (s.waits >= 1)
        break;
      usleep (1000);
    }
    gm_pool_put (gm.pool, hold, held * GM_POOL_UNIT);
    hold = NULL;
  }
  if (!wait_for (&at_pause, &b_done, 2000))
    fprintf (stderr, "request B hangs waiting for pool memory\n");
  CHECK (atomic_load (&at_pause) || atomic_load (&b_done));
  land_dma ();
  atomic_store (&landed, true);
  pthread_join (t, NULL);

  gm_pool_get_stats (gm.pool, &s);
  CHECK (s.waits >= 1);         /* B waited in the pool, past the check */
  CHECK (s.quarantined == LEN); /* A's buffer, kept out of use */
  if (b_r == 0) {
    const char *got = reads ? bclient + 1 : disk;
    for (size_t i = 0; i < LEN; i++)
      if (got[i] != 'B') {
        fprintf (stderr, "request B %s '%c' at byte %zu: the lost read's "
                 "DMA landed in its buffer\n",
                 reads ? "returned" : "wrote to disk", got[i], i);
        CHECK (got[i] == 'B');
      }
    CHECK (held > 0);
  }
  else {
    /* Only when nothing clean is left, with a message that says why. */
    CHECK (held == 0);
    CHECK (b_r == -1 && b_err == EIO);
    CHECK (strstr (log_text, "no 8192-byte pool buffer") != NULL);
    CHECK (strstr (log_text, reads ? "pread at offset 0"
                   : "pwrite at offset 0") != NULL);
  }

  /* Tear the lost ring down (its read ends) before the pool goes. */
  if (mode == GM_RING_SHARED)
    gm_shared_cleanup ();
  else {
    ring_destroy (thread_ring);
    thread_ring = NULL;
  }
  if (hold)
    gm_pool_put (gm.pool, hold, held * GM_POOL_UNIT);
  gm_pool_destroy (gm.pool);
  gm.pool = NULL;
}

static void lost_write (void) { lost_request (GM_RING_PER_THREAD, false, 2, 0); }
static void lost_read (void) { lost_request (GM_RING_PER_THREAD, true, 2, 0); }
static void lost_served (void) { lost_request (GM_RING_PER_THREAD, false, 4, 2); }
static void shared_lost_write (void) { lost_request (GM_RING_SHARED, false, 2, 0); }
static void shared_lost_served (void) { lost_request (GM_RING_SHARED, true, 4, 2); }

/* A's I/O straight on the caller's buffer (no pool buffer): the plugin
 * cannot keep that memory out of use, so the process must exit (status
 * 1, saying why) before the late I/O can land in memory reused, or
 * write what reuses it.  Each way the plugin does I/O on the caller's
 * memory: O_DIRECT into a page-aligned buffer; through the page cache
 * (direct=false; a review found these unguarded: the kernel's copy,
 * run late by io-wq, lands all the same), and the buffered tail of an
 * odd-sized file; a read armed on an empty pipe, a write on a full
 * one.  In a child process, whose stderr is read.
 */
enum caller_io { DIRECT_READ, PAGECACHE_READ, TAIL_READ, PAGECACHE_WRITE,
                 TAIL_WRITE };

static void
lost_caller_io (enum caller_io how)
{
  static char abuf[LEN] __attribute__ ((aligned (4096)));
  bool writes = how == PAGECACHE_WRITE || how == TAIL_WRITE;
  char out[1024];
  int errpipe[2], st;
  ssize_t n;
  size_t got = 0;
  pid_t pid;

  CHECK (pipe (errpipe) == 0);
  pid = fork ();
  CHECK (pid != -1);
  if (pid == 0) {
    int own[2], fd;             /* the other cases' pipe stays untouched */
    CHECK (pipe (own) == 0);
    fd = own[0];
    if (writes) {
      /* Full, so the write waits in the ring. */
      char fill[4096] = { 0 };
      fd = own[1];
      CHECK (fcntl (fd, F_SETFL, O_NONBLOCK) == 0);
      while (write (fd, fill, sizeof fill) > 0)
        ;
      CHECK (fcntl (fd, F_SETFL, 0) == 0);
    }
    if (how == TAIL_READ || how == TAIL_WRITE) {
      gm.fd_buffered = fd;
      gm.direct_end = 0;
    }
    else {
      gm.fd = fd;
      gm.direct = how == DIRECT_READ;
    }
    dup2 (errpipe[1], 2);
    gm.ring = GM_RING_PER_THREAD;
    role = LOSE;
    submitted = wait_failed = false;
    if (writes)
      gm_pwrite (NULL, abuf, LEN, 0, 0);
    else
      gm_pread (NULL, abuf, LEN, 0, 0);
    _exit (3);                  /* it returned: the memory may be reused */
  }
  close (errpipe[1]);
  while (got < sizeof out - 1 &&
         (n = read (errpipe[0], out + got, sizeof out - 1 - got)) > 0)
    got += n;
  out[got] = '\0';
  close (errpipe[0]);
  CHECK (waitpid (pid, &st, 0) == pid);
  if (!WIFEXITED (st) || WEXITSTATUS (st) != 1)
    fprintf (stderr, "the lost %s on the caller's memory returned "
             "(status 0x%x): %s\n", writes ? "write" : "read", st, out);
  CHECK (WIFEXITED (st) && WEXITSTATUS (st) == 1);
  CHECK (strstr (out, writes ? "pwrite at offset 0 length 8192: io_uring "
                 "abandoned it in flight, in memory the plugin does not own"
                 : "pread at offset 0 length 8192: io_uring abandoned it "
                 "in flight, in memory the plugin does not own") != NULL);
}

static void lost_caller (void) { lost_caller_io (DIRECT_READ); }
static void lost_caller_pagecache_read (void) { lost_caller_io (PAGECACHE_READ); }
static void lost_caller_tail_read (void) { lost_caller_io (TAIL_READ); }
static void lost_caller_pagecache_write (void) { lost_caller_io (PAGECACHE_WRITE); }
static void lost_caller_tail_write (void) { lost_caller_io (TAIL_WRITE); }

static const struct unit_case cases[] = {
  { "lost-caller", lost_caller },
  { "lost-caller-pagecache-read", lost_caller_pagecache_read },
  { "lost-caller-tail-read", lost_caller_tail_read },
  { "lost-caller-pagecache-write", lost_caller_pagecache_write },
  { "lost-caller-tail-write", lost_caller_tail_write },
  { "lost-write", lost_write },
  { "lost-read", lost_read },
  { "lost-served", lost_served },
  { "shared-lost-write", shared_lost_write },
  { "shared-lost-served", shared_lost_served },
};

int
main (int argc, char *argv[])
{
  alarm (30);                   /* a hang is a failure */
  CHECK (pipe (pipefd) == 0);
  gm_uring_reclaim_ms = 300;
  gm.file = (char *) "test-disk";
  gm.direct = true;
  gm.writable = true;
  gm.fd = pipefd[0];
  gm.fd_buffered = -1;
  gm.align = gm.mem_align = 4096;
  gm.client_align = 4096;       /* bclient + 1 never is: the pool path */
  gm.direct_end = gm.size = UINT64_C (1) << 40;
  gm.batch_max = LEN;
  gm_rangelock_init (&gm.locks);
  CHECK (gm_engine_init () == 0);
  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

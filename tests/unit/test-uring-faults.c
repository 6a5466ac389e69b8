/* Fault injection into io_uring's error paths (common/uring.c and the
 * plugin's shared-ring engine).  Linked with
 *   -Wl,--wrap=io_uring_submit_and_wait -Wl,--wrap=io_uring_submit
 *   -Wl,--wrap=__io_uring_get_cqe
 * so that the calls common/uring.c and engine-shared.c make into
 * liburing come here first, where a test can make them fail the ways
 * the kernel can.  Reads come from pipes, so a request stays in flight
 * until the test writes: a request that returns early, a duplicate
 * submission or a completion handed to the wrong request shows up as a
 * wrong result or wrong data.  alarm() turns a hang into a failure.
 *
 *   test-uring-faults [CASE...]     run the named cases (default: all)
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "uring.h"
#include "unit.h"
#include "uring-wrap.h"

/* ---- the engine under test, built in with a stand-in ring factory ---- */
#include "../../plugins/gmblock/engine-shared.c"
#include "../../plugins/gmblock/engine-sync.c"    /* its fallback */

struct gmblock gm;

void
nbdkit_error (const char *fs, ...)
{
  va_list ap;
  va_start (ap, fs);
  vfprintf (stderr, fs, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

/* The plugin's fail-stop (failstop.c), as the engine reports to it. */
static enum gm_failstop failstop_level;

void
gm_failstop (enum gm_failstop lv, const char *op, int err)
{
  if (lv > failstop_level)
    failstop_level = lv;
}

struct gm_uring *
gm_engine_new_ring (unsigned depth, unsigned want)
{
  struct gm_uring *u = malloc (sizeof *u);
  if (u == NULL || gm_uring_init (u, depth, want) < 0) {
    free (u);
    return NULL;
  }
  return u;
}

/* ---- the injected faults ---- */
enum submit_fault {
  SF_NONE,
  SF_EAGAIN_QUEUED,     /* fail before submitting: the SQE stays queued */
  SF_REFUSED,           /* the same with an error that is not "not now" */
  SF_SHORT,             /* succeed having submitted nothing (short submit) */
  SF_EINTR_SUBMITTED,   /* submit, then report an interrupted wait */
  SF_RES_EINTR,         /* submit and wait, then the op's result is -EINTR */
  SF_NO_WAIT,           /* submit only: the caller's wait_cqe then waits */
  SF_NO_WAIT_THEN_REFUSED, /* that once, then refuse (a cancel after it) */
};
#define REFUSED_ERR (-ENOMEM)
#define FOREVER (1 << 30)
static _Atomic int submit_fault, submit_fault_times;
static _Atomic int get_cqe_fault, get_cqe_fault_times;


int
__wrap_io_uring_submit_and_wait (struct io_uring *ring, unsigned wait_nr)
{
  int f = atomic_load (&submit_fault), r;
  struct io_uring_cqe *cqe;

  if (f == SF_NONE || atomic_fetch_sub (&submit_fault_times, 1) <= 0)
    return __real_io_uring_submit_and_wait (ring, wait_nr);
  switch (f) {
  case SF_EAGAIN_QUEUED:
    return -EAGAIN;
  case SF_REFUSED:
    return REFUSED_ERR;
  case SF_SHORT:
    return 0;
  case SF_EINTR_SUBMITTED:
    r = __real_io_uring_submit_and_wait (ring, 0);
    return r < 0 ? r : -EINTR;
  case SF_NO_WAIT:
    return __real_io_uring_submit_and_wait (ring, 0);
  case SF_NO_WAIT_THEN_REFUSED:
    if (atomic_load (&submit_fault_times) == FOREVER - 1)
      return __real_io_uring_submit_and_wait (ring, 0);
    return REFUSED_ERR;
  default:                      /* SF_RES_EINTR */
    r = __real_io_uring_submit_and_wait (ring, wait_nr);
    if (r >= 0 && io_uring_peek_cqe (ring, &cqe) == 0)
      cqe->res = -EINTR;        /* the CQ ring is mapped writable */
    return r;
  }
}

int
__wrap___io_uring_get_cqe (struct io_uring *ring,
                           struct io_uring_cqe **cqe_ptr, unsigned submit,
                           unsigned wait_nr, sigset_t *sigmask)
{
  int e = atomic_load (&get_cqe_fault);
  if (e && atomic_fetch_sub (&get_cqe_fault_times, 1) > 0)
    return e;
  return __real___io_uring_get_cqe (ring, cqe_ptr, submit, wait_nr, sigmask);
}

static void
inject_submit (int fault, int times)
{
  atomic_store (&submit_fault_times, times);
  atomic_store (&submit_fault, fault);
}

static void
inject_get_cqe (int err, int times)
{
  atomic_store (&get_cqe_fault_times, times);
  atomic_store (&get_cqe_fault, err);
}

static int pipefd[2], pipe2fd[2];
static struct gm_uring u;       /* the per-thread engine's ring */

static void
put (int fd, const char *s)
{
  CHECK (write (fd, s, strlen (s)) == (ssize_t) strlen (s));
}

/* ---- per-thread ring (common/uring.c) ---- */

/* No request of ours may still be in flight: write to the pipe, enter
 * the ring (a stray read would run now and eat the data), and the data
 * must still be in the pipe.
 */
static void
nothing_in_flight (void)
{
  int avail = 0;

  put (pipefd[1], "probe");
  CHECK (gm_uring_fsync (&u, pipefd[1], false) <= 0);
  usleep (10 * 1000);
  CHECK (gm_uring_fsync (&u, pipefd[1], false) <= 0);
  CHECK (ioctl (pipefd[0], FIONREAD, &avail) == 0);
  if (avail != 5)
    fprintf (stderr, "a stray request consumed %d bytes from the pipe\n",
             5 - avail);
  CHECK (avail == 5);
  CHECK (read (pipefd[0], (char[8]) { 0 }, 5) == 5);
  CHECK (io_uring_cq_ready (&u.ring) == 0);
}

/* A read whose submission fails once in the given way must return its
 * data and leave nothing in flight.  SF_EAGAIN_QUEUED: the retry used
 * to queue a second read and both went in; one completion was taken
 * and the other read stayed in flight into the caller's buffer
 * (already returned), eating later data.  SF_EINTR_SUBMITTED: the SQE
 * was consumed, so it must not be submitted again.  SF_SHORT: the
 * kernel took nothing, so there is nothing to wait for yet.
 */
static void
read_with_submit_fault (int fault)
{
  char a[6] = "";

  inject_submit (fault, 1);
  put (pipefd[1], "hello");
  CHECK (gm_uring_rw (&u, GM_READ, pipefd[0], a, 5, 0, 0) == 5);
  CHECK (memcmp (a, "hello", 5) == 0);
  nothing_in_flight ();
  CHECK (memcmp (a, "hello", 5) == 0);
}

static void
queued_retry (void)
{
  read_with_submit_fault (SF_EAGAIN_QUEUED);
}

static void
consumed (void)
{
  read_with_submit_fault (SF_EINTR_SUBMITTED);
}

static void
short_submit (void)
{
  read_with_submit_fault (SF_SHORT);
}

/* The kernel refuses the submission for good: the request fails with
 * that error and its SQE never runs (it stayed queued: it becomes a
 * no-op), and the ring keeps working.
 */
static void
refused (void)
{
  char a[8] = "";

  inject_submit (SF_REFUSED, FOREVER);
  put (pipefd[1], "first");
  CHECK (gm_uring_rw (&u, GM_READ, pipefd[0], a, 5, 0, 0) == REFUSED_ERR);
  CHECK (u.refused);            /* never ran: the plugin does it itself */
  inject_submit (SF_NONE, 0);
  CHECK (gm_uring_rw (&u, GM_READ, pipefd[0], a, 5, 0, 0) == 5);
  CHECK (!u.refused);
  CHECK (memcmp (a, "first", 5) == 0);
  nothing_in_flight ();
}

/* A file to fsync, already unlinked. */
static int
temp_fd (void)
{
  char path[] = "/tmp/gmblock-uring-faults.XXXXXX";
  int fd = mkstemp (path);

  CHECK (fd >= 0);
  unlink (path);
  return fd;
}

/* An fsync the kernel refuses never ran (refused: the plugin calls
 * fdatasync(2) rather than take it for a lost write-back); one that
 * ran and failed is not refused.
 */
static void
fsync_refused (void)
{
  int fd = temp_fd ();

  inject_submit (SF_REFUSED, FOREVER);
  CHECK (gm_uring_fsync (&u, fd, true) == REFUSED_ERR);
  CHECK (u.refused);
  inject_submit (SF_NONE, 0);
  CHECK (gm_uring_fsync (&u, fd, true) == 0);
  CHECK (!u.refused);
  CHECK (gm_uring_fsync (&u, -1, true) == -EBADF);   /* ran, failed */
  CHECK (!u.refused);
  close (fd);
  nothing_in_flight ();
}

/* An fsync whose result is -EINTR is issued again (it used to wait
 * forever for a completion of nothing).
 */
static void
fsync_eintr (void)
{
  int fd = temp_fd ();

  CHECK (write (fd, "data", 4) == 4);
  inject_submit (SF_RES_EINTR, 1);
  CHECK (gm_uring_fsync (&u, fd, true) == 0);
  CHECK (atomic_load (&submit_fault_times) <= 0);
  CHECK (io_uring_cq_ready (&u.ring) == 0);
  close (fd);
}

static void *
put_later (void *s)
{
  usleep (100 * 1000);
  put (pipefd[1], s);
  return NULL;
}

/* Waiting fails with the read in flight: keep waiting for it.  The
 * data comes later, so that the wait really enters the kernel.
 */
static void
wait_fails (void)
{
  char a[6] = "";
  pthread_t t;

  inject_submit (SF_NO_WAIT, 1);
  inject_get_cqe (-ETIME, 3);
  CHECK (pthread_create (&t, NULL, put_later, "12345") == 0);
  CHECK (gm_uring_rw (&u, GM_READ, pipefd[0], a, 5, 0, 0) == 5);
  CHECK (memcmp (a, "12345", 5) == 0);
  CHECK (atomic_load (&get_cqe_fault_times) <= 0);
  pthread_join (t, NULL);
  inject_get_cqe (0, 0);
  nothing_in_flight ();
}

/* ---- shared ring (plugins/gmblock/engine-shared.c) ---- */
struct reader {
  int fd;
  char buf[8];
  ssize_t r;
  _Atomic bool done;
  pthread_t t;
};

static void *
shared_reader (void *arg)
{
  struct reader *rd = arg;
  rd->r = gm_shared_once (NULL, GM_READ, rd->fd, rd->buf, 5, 0, 0);
  atomic_store (&rd->done, true);
  return NULL;
}

static void
start_reader (struct reader *rd, int fd)
{
  rd->fd = fd;
  rd->r = -999;
  CHECK (pthread_create (&rd->t, NULL, shared_reader, rd) == 0);
}

/* Requests not yet completed, and whether a leader waits in the kernel. */
static unsigned
shared_waiters (bool *lead)
{
  unsigned n = 0;

  pthread_mutex_lock (&lock);
  for (struct waiter *w = waiting; w; w = w->next)
    n++;
  *lead = leader;
  pthread_mutex_unlock (&lock);
  return n;
}

/* Until the shared ring is dead. */
static void
await_dead (void)
{
  bool d = false;
  while (!d) {
    pthread_mutex_lock (&lock);
    d = dead;
    pthread_mutex_unlock (&lock);
    usleep (1000);
  }
}

static void
await_waiters (unsigned n)
{
  bool l;
  while (shared_waiters (&l) != n || !l)
    usleep (1000);
}

/* The ring still works and nothing stray is in flight on it: a stray
 * read would eat the data.
 */
static void
shared_still_works (void)
{
  char b[8] = "";

  put (pipefd[1], "after");
  CHECK (gm_shared_once (NULL, GM_READ, pipefd[0], b, 5, 0, 0) == 5);
  CHECK (memcmp (b, "after", 5) == 0);
}

/* The leader's wait fails while its read is in flight.  It used to
 * unlink its stack waiter and return the error while the read was
 * still pending: the read later completed into a dead stack frame and
 * the next request on the ring took its completion.
 */
static void
shared_wait_fails (void)
{
  struct reader rd = { 0 };

  CHECK (gm_shared_init () == 0);
  inject_get_cqe (-ETIME, 1);
  start_reader (&rd, pipefd[0]);
  usleep (200 * 1000);
  /* Nothing written yet: the read cannot have finished. */
  CHECK (!atomic_load (&rd.done));
  put (pipefd[1], "shard");
  pthread_join (rd.t, NULL);
  inject_get_cqe (0, 0);
  CHECK (rd.r == 5 && memcmp (rd.buf, "shard", 5) == 0);
  shared_still_works ();
  gm_shared_cleanup ();
}

/* Submission is refused for good while another request is in flight.
 * A leads (its read waits in the kernel), C's read is submitted too,
 * then B's submission is refused.  B never ran, so it must be done by
 * the plain call (a file here: preadv2 gets its data; it used to fail
 * with the kernel's ENOMEM).  C, in flight, must keep waiting and get
 * its own data.  It used to be failed with EIO along with B, its read
 * left in flight into C's buffer, and the ring declared dead.
 */
static void
shared_refused (void)
{
  struct reader a = { 0 }, b = { 0 }, c = { 0 };
  char path[] = "/tmp/test-uring-faults.XXXXXX";
  int file = mkstemp (path);
  bool l;

  CHECK (file >= 0 && unlink (path) == 0);
  put (file, "BBBBB");
  CHECK (gm_shared_init () == 0);
  start_reader (&a, pipefd[0]);
  await_waiters (1);
  start_reader (&c, pipe2fd[0]);
  await_waiters (2);
  inject_submit (SF_REFUSED, FOREVER);
  start_reader (&b, file);
  pthread_join (b.t, NULL);
  CHECK (b.r == 5 && memcmp (b.buf, "BBBBB", 5) == 0);
  /* A and C are still waiting for their reads, in the kernel. */
  CHECK (shared_waiters (&l) == 2 && !atomic_load (&a.done) &&
         !atomic_load (&c.done));
  put (pipefd[1], "AAAAA");
  pthread_join (a.t, NULL);
  CHECK (a.r == 5 && memcmp (a.buf, "AAAAA", 5) == 0);
  CHECK (shared_waiters (&l) == 1 && !atomic_load (&c.done));
  inject_submit (SF_NONE, 0);
  put (pipe2fd[1], "CCCCC");
  pthread_join (c.t, NULL);
  CHECK (c.r == 5 && memcmp (c.buf, "CCCCC", 5) == 0);
  shared_still_works ();
  gm_shared_cleanup ();
  close (file);
}

/* A reader whose offset is -1 (the pipe's position), so that the plain
 * preadv2 a cancelled request turns into works on a pipe too. */
static void *
shared_reader_pos (void *arg)
{
  struct reader *rd = arg;
  rd->r = gm_shared_once (NULL, GM_READ, rd->fd, rd->buf, 5, (uint64_t) -1, 0);
  atomic_store (&rd->done, true);
  return NULL;
}

/* A wait failure that is not "not now" (here EBADF) while a read is in
 * flight.  The ring is dead, but the read is got back before returning
 * (cancelled: it never ran, so the plain call does it, as for a refused
 * one), nothing is left in flight, and nothing stops: the plugin used to
 * go to fail-stop for good, and the read stayed armed on the pipe, into
 * a buffer already returned.
 */
static void
ring_dies (void)
{
  struct gm_uring d;
  char a[8] = "";
  int avail = 0;

  CHECK (gm_uring_init (&d, 8, GM_URING_SINGLE_ISSUER) == 0);
  inject_submit (SF_NO_WAIT, 1);
  inject_get_cqe (-EBADF, 1);
  CHECK (gm_uring_rw (&d, GM_READ, pipefd[0], a, 5, 0, 0) == -ECANCELED);
  CHECK (d.dead && d.refused && !d.lost);
  /* Nothing is left to eat this: */
  put (pipefd[1], "still");
  usleep (10 * 1000);
  CHECK (ioctl (pipefd[0], FIONREAD, &avail) == 0 && avail == 5);
  CHECK (read (pipefd[0], a, 5) == 5 && memcmp (a, "still", 5) == 0);
  /* The dead ring takes nothing more; as nothing was lost, the caller
   * may do it with the plain call (the rest of a short transfer). */
  CHECK (gm_uring_rw (&d, GM_READ, pipefd[0], a, 5, 0, 0) == -EIO);
  CHECK (d.refused);
  gm_uring_exit (&d);
  inject_get_cqe (0, 0);
}

static void
shared_ring_dies (void)
{
  struct reader rd = { .fd = pipefd[0], .r = -999 };
  char b[8] = "";

  CHECK (gm_shared_init () == 0);
  inject_get_cqe (-EBADF, 1);
  CHECK (pthread_create (&rd.t, NULL, shared_reader_pos, &rd) == 0);
  await_dead ();
  /* Cancelled, then done by preadv2, which waits for the data. */
  put (pipefd[1], "plain");
  pthread_join (rd.t, NULL);
  CHECK (rd.r == 5 && memcmp (rd.buf, "plain", 5) == 0);
  CHECK (failstop_level == GM_FAILSTOP_NONE);
  /* Later requests: the plain calls. */
  put (pipefd[1], "later");
  CHECK (gm_shared_once (NULL, GM_READ, pipefd[0], b, 5, (uint64_t) -1, 0) == 5);
  CHECK (memcmp (b, "later", 5) == 0);
  inject_get_cqe (0, 0);
  gm_shared_cleanup ();
}

/* The same, but the cancel cannot be submitted and the read never ends
 * (nothing is written) within gm_uring_reclaim_ms: it is lost, may land
 * later, so it fails and (the shared engine; the per-thread engine's
 * caller, from u->lost) stops all I/O.  Both engines.  Run last: the
 * abandoned reads stay armed on the pipe until the rings are torn down.
 */
static void
ring_lost (void)
{
  struct gm_uring d;
  struct reader rd = { 0 };
  char a[8];

  gm_uring_reclaim_ms = 100;
  CHECK (gm_uring_init (&d, 8, GM_URING_SINGLE_ISSUER) == 0);
  /* The read goes in; the second submission, the cancel, is refused. */
  inject_submit (SF_NO_WAIT_THEN_REFUSED, FOREVER);
  inject_get_cqe (-EBADF, 1);
  CHECK (gm_uring_rw (&d, GM_READ, pipe2fd[0], a, 5, 0, 0) == -EIO);
  CHECK (d.dead && d.lost);
  inject_submit (SF_NONE, 0);
  gm_uring_exit (&d);

  CHECK (gm_shared_init () == 0);
  CHECK (failstop_level == GM_FAILSTOP_NONE);
  inject_submit (SF_NO_WAIT_THEN_REFUSED, FOREVER);
  inject_get_cqe (-EBADF, 1);
  start_reader (&rd, pipe2fd[0]);
  pthread_join (rd.t, NULL);
  CHECK (rd.r == -EIO);
  CHECK (failstop_level == GM_FAILSTOP_ALL);
  inject_submit (SF_NONE, 0);
  inject_get_cqe (0, 0);
  gm_shared_cleanup ();
}

static const struct unit_case cases[] = {
  { "queued-retry", queued_retry },
  { "consumed", consumed },
  { "short-submit", short_submit },
  { "refused", refused },
  { "fsync-eintr", fsync_eintr },
  { "fsync-refused", fsync_refused },
  { "wait-fails", wait_fails },
  { "shared-wait-fails", shared_wait_fails },
  { "shared-refused", shared_refused },
  { "ring-dies", ring_dies },
  { "shared-ring-dies", shared_ring_dies },
  { "ring-lost", ring_lost },   /* last: see there */
};

int
main (int argc, char *argv[])
{
  alarm (20);                   /* a hang is a failure */
  CHECK (pipe (pipefd) == 0 && pipe (pipe2fd) == 0);
  CHECK (gm_uring_init (&u, 8, GM_URING_SINGLE_ISSUER |
                        GM_URING_COOP_TASKRUN) == 0);
  UNIT_RUN_CASES (cases, argc, argv);
  gm_uring_exit (&u);
  UNIT_DONE ();
}

/* Fault injection into io_uring's error paths (common/uring.c and the
 * plugin's shared-ring engine).  Linked with
 *   -Wl,--wrap=io_uring_submit_and_wait -Wl,--wrap=__io_uring_get_cqe
 * so that the calls common/uring.c and engine-shared.c make into
 * liburing come here first, where a test can make them fail the ways
 * the kernel can.  Reads come from a pipe, so a request stays in flight
 * until the test writes: a request that returns early, a duplicate
 * submission or a completion handed to the wrong request shows up as a
 * wrong result or wrong data.  alarm() turns a hang into a failure.
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

/* ---- the engine under test, built in with a stand-in ring factory ---- */
#include "../../plugins/gmblock/engine-shared.c"

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
  SF_EINTR_SUBMITTED,   /* submit, then report an interrupted wait */
  SF_RES_EINTR,         /* submit and wait, then the op's result is -EINTR */
  SF_NO_WAIT,           /* submit only: the caller's wait_cqe then waits */
};
static _Atomic int submit_fault, submit_fault_times;
static _Atomic int get_cqe_fault, get_cqe_fault_times;

int __real_io_uring_submit_and_wait (struct io_uring *ring, unsigned wait_nr);
int __real___io_uring_get_cqe (struct io_uring *ring,
                               struct io_uring_cqe **cqe_ptr,
                               unsigned submit, unsigned wait_nr,
                               sigset_t *sigmask);

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
  case SF_EINTR_SUBMITTED:
    r = io_uring_submit (ring);
    return r < 0 ? r : -EINTR;
  case SF_NO_WAIT:
    return io_uring_submit (ring);
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

static int pipefd[2];

static void
put (const char *s)
{
  CHECK (write (pipefd[1], s, strlen (s)) == (ssize_t) strlen (s));
}

/* ---- per-thread ring (common/uring.c) ---- */

/* No request of ours may still be in flight: write to the pipe, enter
 * the ring (a stray read would run now and eat the data), and the data
 * must still be in the pipe.
 */
static void
nothing_in_flight (struct gm_uring *u)
{
  int avail = 0;

  put ("probe");
  CHECK (gm_uring_fsync (u, pipefd[1], false) <= 0);
  usleep (10 * 1000);
  CHECK (gm_uring_fsync (u, pipefd[1], false) <= 0);
  CHECK (ioctl (pipefd[0], FIONREAD, &avail) == 0);
  if (avail != 5)
    fprintf (stderr, "a stray request consumed %d bytes from the pipe\n",
             5 - avail);
  CHECK (avail == 5);
  CHECK (read (pipefd[0], (char[8]) { 0 }, 5) == 5);
  CHECK (io_uring_cq_ready (&u->ring) == 0);
}

/* A read whose submission fails once in the given way must return its
 * data and leave nothing in flight.  SF_EAGAIN_QUEUED: before the fix
 * the retry queued a second read and both went in; one completion was
 * taken and the other read stayed in flight into the caller's buffer
 * (already returned), eating later data.  SF_EINTR_SUBMITTED: the SQE
 * was consumed, so it must not be submitted again.
 */
static void
read_with_submit_fault (struct gm_uring *u, int fault)
{
  char a[6] = "";

  inject_submit (fault, 1);
  put ("hello");
  CHECK (gm_uring_rw (u, GM_READ, pipefd[0], a, 5, 0, 0) == 5);
  CHECK (memcmp (a, "hello", 5) == 0);
  nothing_in_flight (u);
  CHECK (memcmp (a, "hello", 5) == 0);
}

/* An fsync whose result is -EINTR is issued again (it used to wait
 * forever for a completion of nothing).
 */
static void
fsync_interrupted (struct gm_uring *u, int fd)
{
  inject_submit (SF_RES_EINTR, 1);
  CHECK (gm_uring_fsync (u, fd, true) == 0);
  CHECK (atomic_load (&submit_fault_times) <= 0);
  CHECK (io_uring_cq_ready (&u->ring) == 0);
}

/* Waiting fails with the read in flight: keep waiting for it. */
static void
wait_fails (struct gm_uring *u)
{
  char a[6] = "";

  atomic_store (&get_cqe_fault_times, 3);
  atomic_store (&get_cqe_fault, -ETIME);
  put ("12345");
  CHECK (gm_uring_rw (u, GM_READ, pipefd[0], a, 5, 0, 0) == 5);
  CHECK (memcmp (a, "12345", 5) == 0);
  atomic_store (&get_cqe_fault, 0);
}

/* ---- shared ring (plugins/gmblock/engine-shared.c) ---- */
struct reader {
  char buf[8];
  ssize_t r;
  _Atomic bool done;
};

static void *
shared_reader (void *arg)
{
  struct reader *rd = arg;
  rd->r = gm_shared_once (NULL, GM_READ, pipefd[0], rd->buf, 5, 0, 0);
  atomic_store (&rd->done, true);
  return NULL;
}

/* The leader's wait fails while its read is in flight.  Before the fix
 * it unlinked its stack waiter and returned the error while the read
 * was still pending: the read later completed into a dead stack frame
 * and the next request on the ring took its completion.
 */
static void
shared_wait_fails (void)
{
  struct reader rd = { .r = -999 };
  pthread_t t;
  char b[8] = "";

  CHECK (gm_shared_init () == 0);
  atomic_store (&get_cqe_fault_times, 1);
  atomic_store (&get_cqe_fault, -ETIME);
  CHECK (pthread_create (&t, NULL, shared_reader, &rd) == 0);
  usleep (200 * 1000);
  /* Nothing written yet: the read cannot have finished. */
  CHECK (!atomic_load (&rd.done));
  put ("shard");
  pthread_join (t, NULL);
  atomic_store (&get_cqe_fault, 0);
  CHECK (rd.r == 5 && memcmp (rd.buf, "shard", 5) == 0);
  put ("after");
  CHECK (gm_shared_once (NULL, GM_READ, pipefd[0], b, 5, 0, 0) == 5);
  CHECK (memcmp (b, "after", 5) == 0);
  gm_shared_cleanup ();
}

/* A wait failure that is not "not now" (here EBADF): the request fails
 * with EIO instead of hanging, the ring is not used again, and later
 * requests fail at once.  Both engines.  Run last: the abandoned reads
 * stay armed on the pipe until the rings are torn down.
 */
static void
ring_dies (void)
{
  struct gm_uring u;
  struct reader rd = { .r = -999 };
  pthread_t t;
  char a[8];

  CHECK (gm_uring_init (&u, 8, GM_URING_SINGLE_ISSUER) == 0);
  inject_submit (SF_NO_WAIT, 1);
  atomic_store (&get_cqe_fault_times, 1);
  atomic_store (&get_cqe_fault, -EBADF);
  CHECK (gm_uring_rw (&u, GM_READ, pipefd[0], a, 5, 0, 0) == -EIO);
  CHECK (u.dead);
  CHECK (gm_uring_rw (&u, GM_READ, pipefd[0], a, 5, 0, 0) == -EIO);
  gm_uring_exit (&u);

  CHECK (gm_shared_init () == 0);
  atomic_store (&get_cqe_fault_times, 1);
  CHECK (pthread_create (&t, NULL, shared_reader, &rd) == 0);
  pthread_join (t, NULL);
  CHECK (rd.r == -EIO);
  CHECK (gm_shared_once (NULL, GM_READ, pipefd[0], a, 5, 0, 0) == -EIO);
  atomic_store (&get_cqe_fault, 0);
  gm_shared_cleanup ();
}

int
main (void)
{
  struct gm_uring u;
  char path[] = "/tmp/gmblock-uring-faults.XXXXXX";
  int fd;

  alarm (20);                   /* a hang is a failure */
  CHECK (pipe (pipefd) == 0);
  fd = mkstemp (path);
  CHECK (fd >= 0);
  unlink (path);
  CHECK (write (fd, "data", 4) == 4);

  CHECK (gm_uring_init (&u, 8, GM_URING_SINGLE_ISSUER |
                        GM_URING_COOP_TASKRUN) == 0);
  read_with_submit_fault (&u, SF_EAGAIN_QUEUED);
  read_with_submit_fault (&u, SF_EINTR_SUBMITTED);
  fsync_interrupted (&u, fd);
  wait_fails (&u);
  gm_uring_exit (&u);

  shared_wait_fails ();
  ring_dies ();
  close (fd);
  UNIT_DONE ();
}

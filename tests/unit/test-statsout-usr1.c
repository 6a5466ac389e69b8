/* The SIGUSR1 summary's handler (common/statsout.c) at shutdown: once
 * gm_stats_stop has returned, the handler writes to no descriptor of
 * the module's, and in particular not to the number its wake pipe had,
 * which the process may have reused (a client's socket, a file).
 *
 * Deterministic: the handler runs in a thread of ours (raise), and
 * write is wrapped (-Wl,--wrap=write) so that the handler's write
 * stops just before the system call, with the descriptor already
 * chosen, until the main thread has stopped the module and opened a
 * pipe (which takes the freed numbers) -- or for at most one second,
 * the time a stop that waits for the handler keeps the main thread.
 * The pipe must then hold nothing.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "statsout.h"
#include "unit.h"

ssize_t __real_write (int fd, const void *buf, size_t n);

static pthread_t signalled;             /* the thread the handler runs in */
static atomic_bool armed;
static atomic_int target = -1;          /* the handler's chosen descriptor */
static sem_t go, in_write, reused;

ssize_t
__wrap_write (int fd, const void *buf, size_t n)
{
  struct timespec t;

  if (pthread_equal (pthread_self (), signalled) && n == 1 &&
      *(const char *) buf == 'u' && atomic_exchange (&armed, false)) {
    atomic_store (&target, fd);
    sem_post (&in_write);
    clock_gettime (CLOCK_REALTIME, &t);
    t.tv_sec += 1;
    while (sem_timedwait (&reused, &t) == -1 && errno == EINTR)
      ;
  }
  return __real_write (fd, buf, n);
}

/* Nothing here may fail: an error fails the test, with its message. */
static void
fail_error (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  exit (1);
}

static struct gm_counter table[1] = { { "reads", "read requests", 0 } };
static const int flag = 1;

static struct gm_stats_out out = {
  .module = "test", .prefix = "t", .option = "t-stats",
  .c = table, .n = 1, .to_stderr = &flag, .error = fail_error,
};

static void *
raiser (void *arg)
{
  sigset_t usr1;

  sigemptyset (&usr1);
  sigaddset (&usr1, SIGUSR1);
  pthread_sigmask (SIG_UNBLOCK, &usr1, NULL);
  sem_wait (&go);               /* signalled is set */
  raise (SIGUSR1);              /* the handler runs here, now */
  return NULL;
}

static void
stop_while_handler_runs (void)
{
  sigset_t usr1;
  int victim[2], e;
  char b;
  pthread_t t;

  /* Only the raiser takes the signal (the statistics thread inherits
   * this mask). */
  sigemptyset (&usr1);
  sigaddset (&usr1, SIGUSR1);
  pthread_sigmask (SIG_BLOCK, &usr1, NULL);
  sem_init (&go, 0, 0);
  sem_init (&in_write, 0, 0);
  sem_init (&reused, 0, 0);

  CHECK (gm_stats_start (&out) == 0);
  atomic_store (&armed, true);
  CHECK (pthread_create (&t, NULL, raiser, NULL) == 0);
  signalled = t;
  sem_post (&go);
  sem_wait (&in_write);         /* the handler has chosen its descriptor */

  gm_stats_stop (&out);
  CHECK (pipe2 (victim, O_CLOEXEC | O_NONBLOCK) == 0);
  /* The stop closed the wake pipe: the lowest free numbers, its own. */
  CHECK (victim[1] == atomic_load (&target));
  sem_post (&reused);
  CHECK (pthread_join (t, NULL) == 0);

  errno = 0;
  e = read (victim[0], &b, 1) == 1 ? 0 : errno;
  if (e != EAGAIN)
    fprintf (stderr, "the SIGUSR1 handler wrote '%c' into descriptor %d "
             "after gm_stats_stop had closed it and it was reused\n",
             e == 0 ? b : '?', victim[1]);
  CHECK (e == EAGAIN);
  close (victim[0]);
  close (victim[1]);
  pthread_sigmask (SIG_UNBLOCK, &usr1, NULL);
}

int
main (int argc, char *argv[])
{
  static const struct unit_case cases[] = {
    { "stop_while_handler_runs", stop_while_handler_runs },
  };

  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

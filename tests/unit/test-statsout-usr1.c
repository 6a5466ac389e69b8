/* The SIGUSR1 summary's handler (common/statsout.c) as it goes on and
 * comes off, the signal raised in a thread of ours at the moment that
 * matters; deterministic.
 *
 * stop_while_handler_runs: once gm_stats_stop has returned, the
 * handler writes to no descriptor of the module's, in particular not
 * to the number its wake pipe had, which the process may have reused
 * (a client's socket, a file).  write is wrapped (-Wl,--wrap=write) so
 * that the handler's write stops just before the system call, the
 * descriptor chosen, until the main thread has stopped the module and
 * opened a pipe (which takes the freed numbers) -- or for at most one
 * second, the time a stop that waits for the handler keeps the main
 * thread.  The pipe must then hold nothing.
 *
 * link_set_before_handler_live: a signal that comes as the handler
 * goes on still reaches the handler below (another module's).  glibc's
 * sigaction fills in the old action after the system call has
 * installed the new one; sigaction is wrapped (-Wl,--wrap=sigaction)
 * to raise the signal there.
 *
 * ignored_after_stop: once the last module's handler is off, SIGUSR1
 * is ignored, not fatal again: nbdkit's shutdown goes on after
 * .cleanup (the cache's write-back of dirty blocks, the reports at
 * exit), and a signal meant for a summary must not end it.
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
int __real_sigaction (int sig, const struct sigaction *act,
                      struct sigaction *old);

static pthread_t signalled;             /* the thread the handler runs in */
static atomic_bool armed;
static atomic_int target = -1;          /* the handler's chosen descriptor */
static atomic_bool install_armed;
static sem_t go, done, in_write, reused;

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

int
__wrap_sigaction (int sig, const struct sigaction *act,
                  struct sigaction *old)
{
  struct sigaction was;
  int r;

  if (sig != SIGUSR1 || act == NULL || !atomic_exchange (&install_armed, false))
    return __real_sigaction (sig, act, old);
  r = __real_sigaction (sig, act, &was);
  sem_post (&go);               /* the raiser raises now, and waits */
  sem_wait (&done);
  if (r == 0 && old)
    *old = was;
  return r;
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
  sem_post (&done);
  return NULL;
}

static void
init_sems (void)
{
  sem_init (&go, 0, 0);
  sem_init (&done, 0, 0);
  sem_init (&in_write, 0, 0);
  sem_init (&reused, 0, 0);
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
  init_sems ();

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

static atomic_int lower_calls;

static void
lower (int sig, siginfo_t *info, void *ctx)
{
  atomic_fetch_add (&lower_calls, 1);
}

static void
link_set_before_handler_live (void)
{
  struct sigaction sa = { .sa_sigaction = lower, .sa_flags = SA_SIGINFO };
  struct sigaction now;
  pthread_t t;

  init_sems ();
  sigemptyset (&sa.sa_mask);
  CHECK (sigaction (SIGUSR1, &sa, NULL) == 0);  /* the module below */
  CHECK (pthread_create (&t, NULL, raiser, NULL) == 0);
  atomic_store (&install_armed, true);
  CHECK (gm_stats_start (&out) == 0);
  CHECK (!atomic_load (&install_armed));        /* the signal came */
  CHECK (pthread_join (t, NULL) == 0);
  if (atomic_load (&lower_calls) != 1)
    fprintf (stderr, "a SIGUSR1 that came as the module's handler went "
             "on did not reach the handler below it\n");
  CHECK (atomic_load (&lower_calls) == 1);

  gm_stats_stop (&out);
  CHECK (sigaction (SIGUSR1, NULL, &now) == 0);
  CHECK ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == lower);
  sa.sa_handler = SIG_DFL;
  sa.sa_flags = 0;
  CHECK (sigaction (SIGUSR1, &sa, NULL) == 0);
}

static void
ignored_after_stop (void)
{
  struct sigaction dfl = { .sa_handler = SIG_DFL }, now;

  sigemptyset (&dfl.sa_mask);
  CHECK (sigaction (SIGUSR1, &dfl, NULL) == 0);       /* nbdkit's */
  CHECK (gm_stats_start (&out) == 0);
  gm_stats_stop (&out);
  CHECK (sigaction (SIGUSR1, NULL, &now) == 0);
  if (now.sa_handler != SIG_IGN)
    fprintf (stderr, "after gm_stats_stop a SIGUSR1 ends the process\n");
  CHECK (!(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_IGN);
  raise (SIGUSR1);
  CHECK (sigaction (SIGUSR1, &dfl, NULL) == 0);
}

int
main (int argc, char *argv[])
{
  static const struct unit_case cases[] = {
    { "stop_while_handler_runs", stop_while_handler_runs },
    { "link_set_before_handler_live", link_set_before_handler_live },
    { "ignored_after_stop", ignored_after_stop },
  };

  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

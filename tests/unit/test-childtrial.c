/* Unit test: common/childtrial (run a function in a child process and
 * tell how it ended, with what it said last). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "childtrial.h"
#include "unit.h"

static int opens (void *arg) { (void) arg; return 0; }

static int
refuses (void *arg)
{
  (void) arg;
  fprintf (stderr, "nbdkit: error: open: refused on purpose\n");
  return -1;
}

/* As nbdkit's file plugin with dir= does: an error, then NULL used. */
static int
crashes (void *arg)
{
  (void) arg;
  fprintf (stderr, "nbdkit: debug: file: open readonly=0\n"
           "nbdkit: error: no connection in this thread\n"
           "nbdkit: debug: file: after the error: more\n");
  raise (SIGSEGV);
  return 0;
}

static int exits (void *arg) { (void) arg; _exit (1); }
static int __attribute__ ((noreturn)) hangs (void *arg) { (void) arg; for (;;) pause (); }

/* More than a pipe holds, then an error line: the parent must drain
 * the pipe while it waits, or the child blocks and the trial times
 * out, and it must keep the last error, not the first. */
static int
chatters (void *arg)
{
  (void) arg;
  fprintf (stderr, "nbdkit: error: an early error\n");
  for (int i = 0; i < 20000; i++)
    fprintf (stderr, "nbdkit: debug: line %d of chatter\n", i);
  fprintf (stderr, "nbdkit: error: the last error\n");
  abort ();
}

/* Writes to stdout go nowhere: the server's stdout may be a client's
 * pipe (nbdkit -s). */
static int
prints (void *arg)
{
  (void) arg;
  for (int i = 0; i < 20000; i++)
    printf ("stdout line %d of chatter\n", i);
  fflush (stdout);
  return 0;
}

/* Says its pid on the pipe *arg, then hangs: a trial whose server
 * dies under it (SIGKILL, a crash, the OOM killer) must not leave it
 * hanging for ever, holding nbdkit's sockets. */
static int __attribute__ ((noreturn))
hangs_said (void *arg)
{
  pid_t me = getpid ();

  if (write (*(int *) arg, &me, sizeof me) != sizeof me)
    _exit (2);
  for (;;)
    pause ();
}

/* Starts a process of its own (as nbdkit's sh plugin runs its script,
 * or the nbd plugin a server with command=), says its pid, hangs. */
static int __attribute__ ((noreturn))
hangs_with_helper (void *arg)
{
  pid_t helper = fork ();

  if (helper == 0)
    for (;;)
      pause ();
  if (helper == -1 ||
      write (*(int *) arg, &helper, sizeof helper) != sizeof helper)
    _exit (2);
  for (;;)
    pause ();
}

/* Whether PID, a child of this process (a subreaper), ends within
 * about MS milliseconds; it is reaped either way. */
static bool
ends_within (pid_t pid, int ms)
{
  for (int i = 0; i < ms / 10; i++) {
    if (waitpid (pid, NULL, WNOHANG) == pid)
      return true;
    usleep (10000);
  }
  kill (pid, SIGKILL);
  waitpid (pid, NULL, 0);
  return false;
}

static pid_t
read_pid (int fd)
{
  pid_t pid = -1;

  CHECK (read (fd, &pid, sizeof pid) == sizeof pid);
  return pid;
}

static double
elapsed (const struct timespec *a)
{
  struct timespec b;

  clock_gettime (CLOCK_MONOTONIC, &b);
  return (b.tv_sec - a->tv_sec) + (b.tv_nsec - a->tv_nsec) / 1e9;
}

int
main (void)
{
  struct gm_trial t;
  struct timespec start;
  char how[96];

  gm_child_trial (opens, NULL, 5000, &t);
  CHECK (t.end == GM_TRIAL_OK);
  CHECK (strcmp (t.said, "") == 0);
  CHECK (strcmp (gm_trial_describe (&t, how, sizeof how), "opened it") == 0);

  gm_child_trial (refuses, NULL, 5000, &t);
  CHECK (t.end == GM_TRIAL_FAILED);
  CHECK (strcmp (t.said, "nbdkit: error: open: refused on purpose") == 0);

  gm_child_trial (crashes, NULL, 5000, &t);
  CHECK (t.end == GM_TRIAL_CRASHED);
  CHECK (t.signal == SIGSEGV);
  CHECK (strcmp (t.said, "nbdkit: error: no connection in this thread") == 0);
  gm_trial_describe (&t, how, sizeof how);
  CHECK (strncmp (how, "was killed by signal 11 (", 25) == 0);

  gm_child_trial (exits, NULL, 5000, &t);
  CHECK (t.end == GM_TRIAL_CRASHED);
  CHECK (t.signal == 0 && t.status == 1);
  CHECK (strcmp (gm_trial_describe (&t, how, sizeof how),
                 "exited with status 1") == 0);

  clock_gettime (CLOCK_MONOTONIC, &start);
  gm_child_trial (hangs, NULL, 300, &t);
  CHECK (t.end == GM_TRIAL_UNKNOWN);
  CHECK (elapsed (&start) >= 0.29 && elapsed (&start) < 5);

  clock_gettime (CLOCK_MONOTONIC, &start);
  gm_child_trial (chatters, NULL, 20000, &t);
  CHECK (t.end == GM_TRIAL_CRASHED && t.signal == SIGABRT);
  CHECK (strcmp (t.said, "nbdkit: error: the last error") == 0);
  CHECK (elapsed (&start) < 15);

  gm_child_trial (prints, NULL, 20000, &t);
  CHECK (t.end == GM_TRIAL_OK);

  /* The processes of a trial are reparented to this one when they
   * outlive their parent, to be reaped here. */
  CHECK (prctl (PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0);
  int fds[2];
  CHECK (pipe (fds) == 0);

  /* The server dies during a trial: its child goes with it. */
  pid_t server = fork ();
  CHECK (server != -1);
  if (server == 0) {
    gm_child_trial (hangs_said, &fds[1], 60000, &t);
    _exit (0);
  }
  pid_t trial = read_pid (fds[0]);
  kill (server, SIGKILL);
  CHECK (waitpid (server, NULL, 0) == server);
  CHECK (ends_within (trial, 3000));

  /* A trial cut at its timeout takes what it started along. */
  gm_child_trial (hangs_with_helper, &fds[1], 300, &t);
  CHECK (t.end == GM_TRIAL_UNKNOWN);
  CHECK (ends_within (read_pid (fds[0]), 3000));
  close (fds[0]);
  close (fds[1]);

  /* No child is left behind. */
  CHECK (waitpid (-1, NULL, WNOHANG) == -1);
  UNIT_DONE ();
}

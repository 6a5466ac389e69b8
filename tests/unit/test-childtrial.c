/* Unit test: common/childtrial (run a function in a child process and
 * tell how it ended, with what it said last). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
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

  /* No child is left behind. */
  CHECK (waitpid (-1, NULL, WNOHANG) == -1);
  UNIT_DONE ();
}

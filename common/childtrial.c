/* gmblock: run a function once in a child process (see childtrial.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "childtrial.h"

/* How a child that ran fn to its end exits: 0 when fn returned 0, this
 * when it returned anything else.  Every other end is a crash. */
#define REFUSED_CODE 97

/* What the parent keeps of the child's stderr: the last bytes only. */
#define TAIL_CAP 4096

struct tail {
  char buf[TAIL_CAP];
  size_t len;
};

static void
tail_add (struct tail *t, const char *p, size_t n)
{
  if (n >= TAIL_CAP) {
    p += n - TAIL_CAP;
    n = TAIL_CAP;
  }
  if (t->len + n > TAIL_CAP) {
    size_t drop = t->len + n - TAIL_CAP;
    memmove (t->buf, t->buf + drop, t->len - drop);
    t->len -= drop;
  }
  memcpy (t->buf + t->len, p, n);
  t->len += n;
}

/* Read what is there without waiting; false at end of file. */
static bool
tail_read (struct tail *t, int fd)
{
  char b[1024];
  ssize_t r;

  for (;;) {
    r = read (fd, b, sizeof b);
    if (r > 0)
      tail_add (t, b, r);
    else if (r == -1 && errno == EINTR)
      continue;
    else
      return r == -1 && errno == EAGAIN;
  }
}

/* The last line of the tail that nbdkit_error wrote ("nbdkit: error:
 * ...", "nbdkit: file[1]: error: ..."), so that -v's debug lines around
 * it do not hide it. */
static void
tail_said (struct tail *t, char *out, size_t len)
{
  char *line, *save;

  out[0] = '\0';
  if (t->len == TAIL_CAP)
    t->len--;
  t->buf[t->len] = '\0';
  for (line = strtok_r (t->buf, "\n", &save); line;
       line = strtok_r (NULL, "\n", &save))
    if (strstr (line, "error: ") && !strstr (line, "debug: "))
      snprintf (out, len, "%s", line);
}

static long long
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void __attribute__ ((noreturn))
child_run (int (*fn) (void *), void *arg, int err_fd, pid_t parent)
{
  int null;

  /* Only the server reaps or kills the child: should it die first (a
   * SIGKILL, the OOM killer), a child that hangs would hang for ever,
   * holding nbdkit's listening sockets, -s's client and whatever the
   * open took.  The signal comes when the forking thread ends (it waits
   * for the child in gm_child_trial); it may have ended before this. */
  if (prctl (PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid () != parent)
    _exit (REFUSED_CODE);
  /* A group of its own, which a timeout kills whole: what the open
   * started (nbdkit's sh plugin's script, the nbd plugin's command=)
   * may hang too.  Out of the terminal's foreground group too: its
   * ^C is the server's to handle (stdin is /dev/null in nbdkit). */
  setpgid (0, 0);
  null = open ("/dev/null", O_WRONLY);
  if (null >= 0)
    dup2 (null, STDOUT_FILENO);
  dup2 (err_fd, STDERR_FILENO);
  /* A crash is the answer sought, not a finding: a sanitizer's handler
   * (the test suite preloads ASan into nbdkit) would report it as one
   * and end the child another way. */
  signal (SIGSEGV, SIG_DFL);
  signal (SIGBUS, SIG_DFL);
  signal (SIGILL, SIG_DFL);
  signal (SIGFPE, SIG_DFL);
  _exit (fn (arg) == 0 ? 0 : REFUSED_CODE);
}

static void
judge (int status, struct gm_trial *t)
{
  if (WIFSIGNALED (status)) {
    t->end = GM_TRIAL_CRASHED;
    t->signal = WTERMSIG (status);
  }
  else if (WEXITSTATUS (status) == 0)
    t->end = GM_TRIAL_OK;
  else if (WEXITSTATUS (status) == REFUSED_CODE)
    t->end = GM_TRIAL_FAILED;
  else {                        /* exit () in fn, or a sanitizer's report */
    t->end = GM_TRIAL_CRASHED;
    t->status = WEXITSTATUS (status);
  }
}

void
gm_child_trial (int (*fn) (void *), void *arg, unsigned timeout_ms,
                struct gm_trial *t)
{
  struct tail tail;
  long long deadline = now_ms () + timeout_ms;
  int fds[2], status;
  bool open_pipe = true;
  pid_t pid, w, self = getpid ();

  *t = (struct gm_trial) { .end = GM_TRIAL_UNKNOWN };
  tail.len = 0;
  if (pipe2 (fds, O_CLOEXEC) == -1)
    return;
  pid = fork ();
  if (pid == 0) {
    close (fds[0]);
    child_run (fn, arg, fds[1], self);
  }
  close (fds[1]);
  if (pid == -1) {
    close (fds[0]);
    return;
  }
  setpgid (pid, pid);           /* as the child does: whichever is first */
  fcntl (fds[0], F_SETFL, O_NONBLOCK);
  for (;;) {
    w = waitpid (pid, &status, WNOHANG);
    if (w == pid || (w == -1 && errno != EINTR))
      break;
    long long left = deadline - now_ms ();
    if (left <= 0) {
      kill (-pid, SIGKILL);     /* not yet reaped: pid is still its */
      kill (pid, SIGKILL);
      while (waitpid (pid, &status, 0) == -1 && errno == EINTR)
        ;
      w = 0;                    /* no verdict */
      break;
    }
    if (open_pipe) {
      struct pollfd p = { .fd = fds[0], .events = POLLIN };
      if (poll (&p, 1, left < 20 ? left : 20) > 0)
        open_pipe = tail_read (&tail, fds[0]);
    }
    else
      usleep (left < 20 ? left * 1000 : 20000);
  }
  if (open_pipe)
    tail_read (&tail, fds[0]);  /* all it wrote before it ended */
  close (fds[0]);
  if (w == pid) {
    judge (status, t);
    tail_said (&tail, t->said, sizeof t->said);
  }
}

const char *
gm_trial_describe (const struct gm_trial *t, char *buf, size_t len)
{
  switch (t->end) {
  case GM_TRIAL_OK: snprintf (buf, len, "opened it"); break;
  case GM_TRIAL_FAILED: snprintf (buf, len, "was refused"); break;
  case GM_TRIAL_UNKNOWN:
    snprintf (buf, len, "gave no verdict (no fork, or no end in time)");
    break;
  case GM_TRIAL_CRASHED:
    if (t->signal)
      snprintf (buf, len, "was killed by signal %d (%s)", t->signal,
                strsignal (t->signal));
    else
      snprintf (buf, len, "exited with status %d", t->status);
    break;
  }
  return buf;
}

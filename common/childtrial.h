/* gmblock: run a function once in a child process, to learn whether it
 * would take the process down.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A gmblock filter opens contexts of its own below at start-up, before
 * any client has connected.  A plugin that needs a client to name its
 * export crashes there (nbdkit 1.32's file plugin with dir= passes the
 * NULL that nbdkit_export_name returns to strchr), and takes nbdkit
 * with it.  The same open, tried first in a forked child, costs only
 * the child when it crashes, and the filter can refuse with an error.
 */
#ifndef GMBLOCK_CHILDTRIAL_H
#define GMBLOCK_CHILDTRIAL_H

#include <stdbool.h>
#include <stddef.h>

enum gm_trial_end {
  GM_TRIAL_OK,          /* fn returned 0 */
  GM_TRIAL_FAILED,      /* fn returned non-zero: a clean refusal */
  GM_TRIAL_CRASHED,     /* killed by a signal, or exited on its own */
  GM_TRIAL_UNKNOWN,     /* no fork, no verdict in time (killed) */
};

struct gm_trial {
  enum gm_trial_end end;
  int signal;           /* GM_TRIAL_CRASHED: the signal, or 0 */
  int status;           /* GM_TRIAL_CRASHED without a signal: exit code */
  /* The last error line the child wrote to stderr, e.g. nbdkit's
   * "nbdkit: error: no connection in this thread"; or "". */
  char said[256];
};

/* Fork; in the child, stdout goes to /dev/null and stderr to a pipe,
 * then fn (arg) runs and the child _exits.  The parent waits at most
 * timeout_ms for it (then kills it, and the processes it started, in
 * its process group: GM_TRIAL_UNKNOWN), keeping the tail of what it
 * wrote.  The child dies with the calling thread.  Only the calling
 * thread exists in the child: fn must not need a lock another thread
 * may hold, or it runs into the timeout.
 */
void gm_child_trial (int (*fn) (void *), void *arg, unsigned timeout_ms,
                     struct gm_trial *t);

/* How the child ended, for a message about it: "was killed by signal
 * 11 (Segmentation fault)", "exited with status 1", "opened it", ... */
const char *gm_trial_describe (const struct gm_trial *t, char *buf,
                               size_t len);

#endif /* GMBLOCK_CHILDTRIAL_H */

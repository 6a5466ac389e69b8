/* The plugin's fail-stop levels (plugins/gmblock/failstop.c), built in:
 *  - a lost write-back (level 1) refuses writes, trims, zeros and
 *    flushes with EIO and lets reads go on; a ring that lost a request
 *    (level 2) refuses reads too; a level never goes down, and the
 *    refusal names the first stop's reason;
 *  - a failed RWF_DSYNC write stops the plugin when its error is EIO,
 *    or when the watching descriptor's fdatasync says a write-back was
 *    lost (it failed with ENOSPC after taking an older write's error),
 *    but not for an error of its own (ENOSPC, the watcher clean).
 * The shell tests reach level 1 only: no host test can make a ring
 * lose a request, so a level 2 that stopped writes alone (reads going
 * on while a lost DMA may still land) passed them all.  Linked with
 * -Wl,--wrap=fdatasync (the watcher's sync fails on cue).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "unit.h"

#include "../../plugins/gmblock/failstop.c"

struct gmblock gm;
struct gm_counter gm_stats[ST_COUNT];

static char last_msg[512];
static int last_err;

void
nbdkit_error (const char *fs, ...)
{
  va_list ap;

  va_start (ap, fs);
  vsnprintf (last_msg, sizeof last_msg, fs, ap);
  va_end (ap);
}

void
nbdkit_set_error (int err)
{
  last_err = err;
}

int __real_fdatasync (int fd);
static int watcher_fails;         /* the watcher's fdatasync: -errno or 0 */

int
__wrap_fdatasync (int fd)
{
  if (fd == probe_fd && watcher_fails) {
    errno = -watcher_fails;
    return -1;
  }
  return __real_fdatasync (fd);
}

/* gm_failstop_refuse at level lv: whether it refused, with EIO. */
static int
refused (enum gm_failstop lv)
{
  last_err = 0;
  if (gm_failstop_refuse (lv, "op", 0, 512) == 0)
    return 0;
  CHECK (last_err == EIO);
  return 1;
}

int
main (void)
{
  char path[] = "/tmp/test-failstop.XXXXXX";
  int fd = mkstemp (path), status;
  pid_t pid;

  CHECK (fd >= 0);
  close (fd);
  gm.file = path;
  gm.writable = true;
  CHECK (gm_failstop_open () == 0);
  CHECK (probe_fd >= 0);

  /* Healthy: nothing refused. */
  CHECK (gm_failstop_level () == GM_FAILSTOP_NONE);
  CHECK (!refused (GM_FAILSTOP_WRITES) && !refused (GM_FAILSTOP_ALL));

  /* A FUA write's own ENOSPC, the watcher clean: no stop. */
  gm_failstop_sync_failed ("FUA write", ENOSPC);
  CHECK (gm_failstop_level () == GM_FAILSTOP_NONE);
  /* EIO: a lost write-back whatever the watcher says (in a child: the
   * level never goes down). */
  pid = fork ();
  CHECK (pid >= 0);
  if (pid == 0) {
    gm_failstop_sync_failed ("FUA write", EIO);
    CHECK (gm_failstop_level () == GM_FAILSTOP_WRITES);
    CHECK (refused (GM_FAILSTOP_WRITES) && !refused (GM_FAILSTOP_ALL));
    exit (0);
  }
  CHECK (waitpid (pid, &status, 0) == pid);
  CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
  CHECK (gm_failstop_level () == GM_FAILSTOP_NONE);
  /* ENOSPC while the watcher reports a lost write-back: stop. */
  watcher_fails = -EIO;
  gm_failstop_sync_failed ("FUA write", ENOSPC);
  CHECK (gm_failstop_level () == GM_FAILSTOP_WRITES);
  watcher_fails = 0;
  CHECK (refused (GM_FAILSTOP_WRITES));
  CHECK (strstr (last_msg, "FUA write failed") != NULL);
  CHECK (!refused (GM_FAILSTOP_ALL));             /* reads go on */

  /* A ring that lost a request: reads refused too; the first reason
   * is kept; a later, lesser stop does not lower the level. */
  gm_failstop (GM_FAILSTOP_ALL, "io_uring", EBADF);
  CHECK (gm_failstop_level () == GM_FAILSTOP_ALL);
  CHECK (refused (GM_FAILSTOP_WRITES) && refused (GM_FAILSTOP_ALL));
  CHECK (strstr (last_msg, "FUA write failed") != NULL);
  gm_failstop (GM_FAILSTOP_WRITES, "fdatasync", EIO);
  CHECK (gm_failstop_level () == GM_FAILSTOP_ALL);
  CHECK (refused (GM_FAILSTOP_ALL));

  gm_failstop_close ();
  unlink (path);
  UNIT_DONE ();
}

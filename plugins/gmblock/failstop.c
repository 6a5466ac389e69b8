/* gmblock plugin: stop promising durability once data may be lost.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Linux reports a failed write-back (a page the page cache could not
 * write, or a device cache flush that failed) once to each open file
 * description, at its next fsync-type call, and then forgets it.  All
 * connections share the plugin's descriptor, so without a memory of its
 * own the first caller (a FUA write anywhere, one connection's flush)
 * would take the error and every later flush would report success for
 * data that is gone.  So the first such error puts the plugin in
 * fail-stop: every later write, trim, zero and flush fails with EIO,
 * on every connection; reads go on, so what survived can be copied off.
 * Only a restart clears it (after the disk has been looked at).
 *
 * A failed FUA write may have failed for its own reasons (ENOSPC while
 * allocating its blocks) or by taking a write-back error of older data.
 * A second descriptor, opened at start-up and used for nothing else,
 * tells the two apart: its own fdatasync reports every write-back error
 * since it was opened, whoever took it on the main descriptor.
 *
 * An io_uring that fails while a request is in flight, and cannot get
 * it back (cancelled, or its completion) within 10 s (common/uring.c
 * marks it lost), is worse: that request's I/O may still happen, later.
 * Then reads are refused too, and its pool buffer is quarantined
 * (io.c) so that requests already past the refusal never get it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "gmblock.h"

static atomic_int level;              /* enum gm_failstop; read lock-free */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char reason[160];              /* under lock: the first stop's */
static int probe_fd = -1;

int
gm_failstop_open (void)
{
  if (!gm.writable)
    return 0;
  probe_fd = open (gm.file, O_RDONLY | O_CLOEXEC);
  if (probe_fd == -1) {
    nbdkit_error (GM_NAME ": open (to watch for lost write-backs): %s: %m",
                  gm.file);
    return -1;
  }
  return 0;
}

void
gm_failstop_close (void)
{
  if (probe_fd >= 0)
    close (probe_fd);
  probe_fd = -1;
}

void
gm_failstop (enum gm_failstop lv, const char *op, int err)
{
  bool raised = false;

  pthread_mutex_lock (&lock);
  if (atomic_load (&level) < (int) lv) {
    if (reason[0] == '\0')
      snprintf (reason, sizeof reason, "%s failed: %s", op, strerror (err));
    atomic_store (&level, (int) lv);
    raised = true;
  }
  pthread_mutex_unlock (&lock);
  if (!raised)
    return;
  nbdkit_error (GM_NAME ": %s: %s failed (%s): acknowledged data may be "
                "lost, so from now on every %s fails with EIO; check the "
                "disk, then restart the server", gm.file, op, strerror (err),
                lv == GM_FAILSTOP_ALL ? "request" :
                "write, trim, zero and flush");
}

void
gm_failstop_sync_failed (const char *op, int err)
{
  bool lost = err == EIO;

  if (!lost && probe_fd >= 0 && fdatasync (probe_fd) == -1)
    lost = true, err = errno;
  if (lost)
    gm_failstop (GM_FAILSTOP_WRITES, op, err);
}

int
gm_failstop_level (void)
{
  return atomic_load (&level);
}

int
gm_failstop_refuse (enum gm_failstop lv, const char *op, uint64_t offset,
                    uint64_t count)
{
  char why[sizeof reason];

  if (atomic_load (&level) < (int) lv)
    return 0;
  pthread_mutex_lock (&lock);
  memcpy (why, reason, sizeof why);
  pthread_mutex_unlock (&lock);
  COUNT (ST_ERRORS, 1);
  nbdkit_error (GM_NAME ": %s: %s at offset %" PRIu64 " length %" PRIu64
                " refused: fail-stop since %s (restart the server)",
                gm.file, op, offset, count, why);
  nbdkit_set_error (EIO);
  return -1;
}

/* gmblock: preloaded into nbdkit only in the sanitizer run.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * With libasan preloaded, any nbdkit process that has formatted an error
 * (strerror, %m) hangs at exit: libp11-kit's destructor calls
 * freelocale(), which waits forever on glibc's setlocale lock (nbdkit's
 * own file plugin hangs the same way; not our code).  Freeing a locale
 * at exit does not matter, so this makes it a no-op.
 *
 * nbdkit dlclose()s its plugin and filters before exit, and LeakSanitizer
 * runs after that: a leak allocated by a module would be reported from
 * an "<unknown module>" with no way to tell which.  Keeping the modules
 * mapped costs nothing at exit and keeps their frames symbolized.
 *
 * The sanitizers are for nbdkit only: once nbdkit has them, the
 * libraries of GMBLOCK_PRELOAD are taken out of its environment (what
 * else LD_PRELOAD held, a test's fault shim, stays), and its children
 * start without them.  With libtsan a shell crashes at start (SIGSEGV),
 * so nbdkit's --run command could never run; with libasan every child
 * (an sh plugin's call, a --run command's client) paid the runtime's
 * start-up and was leak-checked though it is not ours.  A ./nbdkit they
 * start preloads again, from GMBLOCK_PRELOAD.
 */
#include <dlfcn.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>

__attribute__((visibility ("default"))) void
freelocale (locale_t loc)
{
  (void) loc;
}

__attribute__((visibility ("default"))) int
dlclose (void *handle)
{
  (void) handle;
  return 0;
}

/* ./nbdkit sets LD_PRELOAD to GMBLOCK_PRELOAD, then ':' and what it
 * held before, if anything. */
__attribute__((constructor)) static void
unpreload_children (void)
{
  const char *ours = getenv ("GMBLOCK_PRELOAD");
  const char *all = getenv ("LD_PRELOAD");
  size_t n;
  char *rest;

  if (ours == NULL || *ours == '\0' || all == NULL)
    return;
  n = strlen (ours);
  if (strncmp (all, ours, n) != 0)
    return;
  if (all[n] == '\0')
    unsetenv ("LD_PRELOAD");
  else if (all[n] == ':' && (rest = strdup (all + n + 1)) != NULL) {
    setenv ("LD_PRELOAD", rest, 1);
    free (rest);
  }
}

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
 * With libtsan preloaded, a shell crashes at start (SIGSEGV in its
 * start-up), so nbdkit's --run command could never run: under TSan the
 * preload is taken out of nbdkit's environment once nbdkit has it, and
 * its children start clean (a ./nbdkit they start preloads again, from
 * GMBLOCK_PRELOAD).
 */
#include <dlfcn.h>
#include <locale.h>
#include <stdlib.h>

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

__attribute__((constructor)) static void
unpreload_children (void)
{
  if (dlsym (RTLD_DEFAULT, "__tsan_init") != NULL)
    unsetenv ("LD_PRELOAD");
}

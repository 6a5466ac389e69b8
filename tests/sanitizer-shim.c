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
 */
#include <locale.h>

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

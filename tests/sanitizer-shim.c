/* gmblock: preloaded into nbdkit only in the sanitizer run.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * With libasan preloaded, any nbdkit process that has formatted an error
 * (strerror, %m) hangs at exit: libp11-kit's destructor calls
 * freelocale(), which waits forever on glibc's setlocale lock (nbdkit's
 * own file plugin hangs the same way; not our code).  Freeing a locale
 * at exit does not matter, so this makes it a no-op.
 */
#include <locale.h>

__attribute__((visibility ("default"))) void
freelocale (locale_t loc)
{
  (void) loc;
}

/* gmblock: keep a module mapped until the process exits (pin.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#include "pin.h"

int
gm_pin_module (const void *addr, char *why, size_t whylen)
{
  Dl_info self;

  if (dladdr (addr, &self) == 0 || self.dli_fname == NULL) {
    snprintf (why, whylen, "dladdr: the module of %p is not known", addr);
    return -1;
  }
  /* A second reference, never dropped: NODELETE outlives every close. */
  if (dlopen (self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) ==
      NULL) {
    snprintf (why, whylen, "dlopen %s: %s", self.dli_fname, dlerror ());
    return -1;
  }
  return 0;
}

/* gmblock: keep a module mapped until the process exits (pin.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>

#include "pin.h"

int
gm_pin_module (const void *addr, char *why, size_t whylen)
{
  struct link_map *lm = NULL;
  Dl_info self;

  if (dladdr1 (addr, &self, (void **) &lm, RTLD_DL_LINKMAP) == 0 ||
      self.dli_fname == NULL || lm == NULL) {
    snprintf (why, whylen, "dladdr: the module of %p is not known", addr);
    return -1;
  }
  if (lm->l_name[0] == '\0')
    return 0;                   /* the program itself (a unit test) */
  /* A second reference, never dropped: NODELETE outlives every close. */
  if (dlopen (self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) ==
      NULL) {
    snprintf (why, whylen, "dlopen %s: %s", self.dli_fname, dlerror ());
    return -1;
  }
  return 0;
}

/* gmblock: a filter named twice in one stack (see once.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdatomic.h>

#include "once.h"

/* Per module: each shared object links its own copy of common/. */
static atomic_uint instances;

bool
gm_first_instance (void)
{
  return atomic_fetch_add (&instances, 1) == 0;
}

/* gmblock: a filter named twice in one stack.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdkit loads a filter given twice (--filter=gmblock-cache twice) from
 * one shared object, so both instances share its process-wide state:
 * one cache pool, one set of prefetch workers, one RDMA listener.  Each
 * gmblock filter calls this from its .config_complete, which nbdkit
 * runs once per instance, and refuses the second.
 */
#ifndef GMBLOCK_ONCE_H
#define GMBLOCK_ONCE_H

#include <stdbool.h>

/* True at the first call in this module, false at every later one. */
bool gm_first_instance (void);

#endif /* GMBLOCK_ONCE_H */

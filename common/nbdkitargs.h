/* gmblock: what nbdkit's own command line says, where nbdkit tells no
 * module.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdkit -r makes the contexts nbdkit opens for its clients read-only,
 * but a filter that opens contexts of its own for clients nbdkit does
 * not see (gmblock-rdma) is told nothing: nbdkit 1.32 has no call for
 * it.  So its command line is read again, with getopt_long and
 * nbdkit's own options, which parses it as nbdkit did (options after
 * the plugin name, bundled short options, long ones abbreviated).
 */
#ifndef GMBLOCK_NBDKITARGS_H
#define GMBLOCK_NBDKITARGS_H

#include <stdbool.h>

/* Whether argv (nbdkit's) asks for a read-only server.  Uses getopt's
 * global state: call only while nothing else parses options.
 */
bool gm_nbdkit_args_readonly (int argc, char **argv);

/* The same for this process, from /proc/self/cmdline; false when it
 * cannot be read.
 */
bool gm_nbdkit_readonly (void);

/* Whether every --filter in argv (nbdkit's) is one of gmblock's
 * (gmblock-NAME, or a path to nbdkit-gmblock-NAME-filter.so).  None of
 * them changes the export's size, so a gmblock filter then sees the
 * size the plugin serves (common/registry.h, GM_REG_SERVED_SIZE)
 * before nbdkit forks, when it can still refuse it with an error and a
 * non-zero exit.  Uses getopt's global state, like the above.
 */
bool gm_nbdkit_args_gmblock_filters_only (int argc, char **argv);

/* The same for this process; false when its command line cannot be
 * read.
 */
bool gm_nbdkit_gmblock_filters_only (void);

#endif /* GMBLOCK_NBDKITARGS_H */

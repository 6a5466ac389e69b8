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
 * The same holds for nbdkit's access controls (--tls=require, the ip
 * filter): they guard only the clients nbdkit accepts.
 */
#ifndef GMBLOCK_NBDKITARGS_H
#define GMBLOCK_NBDKITARGS_H

#include <stdbool.h>

struct gm_nbdkit_args {
  /* -r: a read-only server. */
  bool readonly;
  /* Every --filter is one of gmblock's (gmblock-NAME, or a path to
   * nbdkit-gmblock-NAME-filter.so).  None of them changes the export's
   * size, so a gmblock filter then sees the size the plugin serves
   * (common/registry.h, GM_REG_SERVED_SIZE) before nbdkit forks, when
   * it can still refuse it with an error and a non-zero exit.
   */
  bool gmblock_filters_only;
  /* NULL, or what makes nbdkit turn TCP clients away that a listener of
   * a filter's own would not: "--tls=require" (no client without TLS)
   * or "--filter=ip" (clients by address).
   */
  const char *access;
  /* The plugin is one of gmblock's (gmblock, gmblock-rdma, or a path to
   * nbdkit-gmblock[-NAME]-plugin.so): its .open needs no client, so a
   * filter need not try its contexts first (common/trialopen.h). */
  bool gmblock_plugin;
};

/* Parse argv (nbdkit's) into *a.  Uses getopt's global state: call
 * only while nothing else parses options.
 */
void gm_nbdkit_args_parse (int argc, char **argv, struct gm_nbdkit_args *a);

/* The same for this process, from /proc/self/cmdline; all false and
 * NULL when it cannot be read.
 */
void gm_nbdkit_self (struct gm_nbdkit_args *a);

#endif /* GMBLOCK_NBDKITARGS_H */

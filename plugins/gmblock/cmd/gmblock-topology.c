/* gmblock-topology: show, before choosing buffer= and rdma= options,
 * where the storage behind a file sits on PCI and which device memory
 * and RDMA NICs can reach it peer to peer.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   gmblock-topology [-O sysfs.path=DIR] [--keys] [FILE|BLOCKDEV-NAME]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology.h"
#include "version.h"

static void
usage (FILE *fp)
{
  fprintf (fp,
           "usage: gmblock-topology [-O sysfs.path=DIR] [--keys] [FILE]\n"
           "  FILE    the file or block device gmblock would serve, or the\n"
           "          name of a block device (md0, nvme0n1); none: list the\n"
           "          machine's device memory and RDMA NICs only\n"
           "  -O sysfs.path=DIR  libpci's parameter: read the PCI tree from\n"
           "          DIR (default " GM_TOPO_DEFAULT_SYSFS "); the sysfs root\n"
           "          is DIR without /bus/pci\n"
           "  --keys  print gmblock_*=VALUE lines, as nbdkit gmblock\n"
           "          --dump-plugin does\n"
           "  --version  print gmblock's version\n");
}

int
main (int argc, char **argv)
{
  static const struct option longopts[] = {
    { "keys", no_argument, NULL, 'k' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
  };
  const char *pci_path = NULL;
  bool keys = false;
  struct gm_topology t;
  char err[512];
  int c;

  while ((c = getopt_long (argc, argv, "O:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'O':
      if (strncmp (optarg, "sysfs.path=", 11) != 0) {
        fprintf (stderr, "gmblock-topology: -O %s: the only parameter "
                 "accepted is sysfs.path=DIR\n", optarg);
        return 2;
      }
      pci_path = optarg + 11;
      break;
    case 'k':
      keys = true;
      break;
    case 'h':
      usage (stdout);
      return 0;
    case 'V':
      printf ("gmblock-topology %s\n", GMBLOCK_VERSION);
      return 0;
    default:
      usage (stderr);
      return 2;
    }
  }
  if (argc - optind > 1) {
    usage (stderr);
    return 2;
  }
  if (gm_topology_scan (&t, pci_path, argv[optind], err, sizeof err) == -1) {
    fprintf (stderr, "gmblock-topology: %s\n", err);
    return 1;
  }
  if (keys)
    gm_topology_keys (&t, stdout);
  else
    gm_topology_print (&t, stdout);
  gm_topology_free (&t);
  return 0;
}

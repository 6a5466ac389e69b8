/* gmblock: where the storage behind a file sits on PCI, and what device
 * memory and RDMA NICs are near it.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * PCI functions, their BARs and the bridge tree come from libpci (its
 * sysfs back end, so libpci's "sysfs.path" parameter points the whole
 * scan at another tree: tests use a fake one).  The block layer part
 * (partitions, md and dm members, loop backing files, NVMe namespaces
 * down to their controllers), p2pmem and /sys/class/infiniband are read
 * from the same sysfs root.
 *
 * Peer-to-peer DMA between two functions works when the lowest bridge
 * they share is a switch port, a conventional PCI bridge or a root port
 * (functions of one device behind it: Linux allows that too); when they
 * share none, the traffic crosses the host bridge, which Linux allows
 * only for a few whitelisted chipsets and which is slow where it works
 * (the thesis measured 380 -> 80 MB/s).
 */
#ifndef GMBLOCK_TOPOLOGY_H
#define GMBLOCK_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GM_TOPO_DEFAULT_SYSFS "/sys/bus/pci"    /* libpci's default */

enum gm_port {
  GM_PORT_ENDPOINT,
  GM_PORT_ROOT,                 /* PCIe root port */
  GM_PORT_SWITCH_UP,            /* switch upstream port */
  GM_PORT_SWITCH_DOWN,          /* switch downstream port */
  GM_PORT_BRIDGE,               /* other PCI/PCIe bridge */
};

struct gm_pci_bar {
  uint64_t size;                /* 0: unused */
  bool io, prefetch, mem64;
};

struct gm_pci_fn {
  char bdf[16];                 /* "0000:02:00.0" */
  int domain, bus, dev, func;
  unsigned vendor, device, class;      /* class: base and sub, e.g. 0x0108 */
  char name[160];               /* from pci.ids */
  char driver[32];
  int parent;                   /* index of the upstream bridge, -1 on a root bus */
  enum gm_port port;
  struct gm_pci_bar bar[6];
  bool p2pmem;                  /* publishes memory for P2PDMA */
  uint64_t p2p_size, p2p_available;
  bool p2p_published;
  bool storage;                 /* behind the file */
};

struct gm_rdma_dev {
  char name[64];                /* rxe0, mlx5_0 */
  char netdev[32];              /* soft-RoCE: the Ethernet device under it */
  int fn;                       /* PCI function, -1 when software */
};

#define GM_TOPO_MAX_RDMA 16

struct gm_topology {
  char sysfs_root[256];         /* "/sys", or the fake tree's root */
  char pci_path[280];           /* libpci's sysfs.path */
  struct gm_pci_fn *fn;
  size_t nfn;
  /* The file: its chain of block devices and the functions under it. */
  char file[256];
  char chain[512];              /* "md0 <- nvme0n1 nvme1n1" */
  char storage_note[512];       /* why a layer has no PCI function */
  int *storage;                 /* one slot per function (nfn) */
  size_t nstorage;
  unsigned walks;               /* block directories visited (a budget) */
  bool walk_cut;                /* the budget or the depth ran out */
  struct gm_rdma_dev rdma[GM_TOPO_MAX_RDMA];
  size_t nrdma;
  const char *p2pdma_kernel;    /* "yes", "no" or "unknown" */
};

enum gm_path {
  GM_PATH_SAME_DEVICE,          /* functions of one device */
  GM_PATH_SWITCH,               /* lowest common bridge is a switch port */
  GM_PATH_ROOT_PORT,            /* they meet at a root port */
  GM_PATH_HOST_BRIDGE,          /* no common bridge */
};

/* Scan.  pci_path is libpci's sysfs.path (NULL: the default); it must
 * end in "/bus/pci", the rest is taken as the sysfs root.  file may be
 * NULL (machine-wide listing), a path, or the name of a block device
 * under <root>/class/block.  Returns 0, or -1 with a message in err.
 * A file with no PCI device below it is not an error: storage_note
 * says why.
 */
int gm_topology_scan (struct gm_topology *t, const char *pci_path,
                      const char *file, char *err, size_t errlen);
void gm_topology_free (struct gm_topology *t);

/* The path between two functions; *via is the common bridge or -1. */
enum gm_path gm_topology_path (const struct gm_topology *t, int a, int b,
                               int *via);
const char *gm_path_name (enum gm_path p);      /* "switch", ... */
bool gm_path_p2p_ok (enum gm_path p);

/* "DDDD:BB:DD.F" or "BB:DD.F" (len bytes of s) into lower-case
 * "DDDD:BB:DD.F" in out.  Returns 0, or -1 if it is not a PCI address.
 */
int gm_parse_bdf (const char *s, size_t len, char *out, size_t outlen);

/* Index of a function by "DDDD:BB:DD.F" (or "BB:DD.F"), -1 if none. */
int gm_topology_find (const struct gm_topology *t, const char *bdf);

/* The p2pmem provider buffer=p2pmem:auto would use: one with memory
 * available whose path to every storage function allows P2P, nearest
 * first.  -1 when none, with the reason in why.
 */
int gm_topology_auto_p2pmem (const struct gm_topology *t,
                             char *why, size_t whylen);

/* Which p2pmem provider holds buffers for 'file': bdf when not empty,
 * else the automatic pick; into bdf_out.  paths gets " (path A -> B:
 * switch; ...)" from each storage function to it, to explain a refusal
 * by the kernel.  Returns 0, or -1 with a message in err that says
 * what is missing (no provider, the kernel option).  opt names the
 * option for messages ("buffer", "rdma-pool-memory").
 */
int gm_topology_p2pmem_for (const char *pci_path, const char *file,
                            const char *bdf, const char *opt,
                            char *bdf_out, size_t bdflen,
                            char *paths, size_t pathslen,
                            char *err, size_t errlen);

/* Human-readable report (the command, -D gmblock.topology=1) and
 * "gmblock_*=value" lines (--dump-plugin, the command's --keys).
 */
void gm_topology_print (const struct gm_topology *t, FILE *fp);
void gm_topology_keys (const struct gm_topology *t, FILE *fp);

#endif /* GMBLOCK_TOPOLOGY_H */

/* gmblock: device memory for I/O buffers (see devmem.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devmem.h"
#include "sizes.h"

#define UNIT 4096

/* A raw BAR is mapped from offset 0 by whoever maps it, so two
 * servers on one BAR would overwrite each other's buffers: the mapping
 * holds an exclusive flock on the resource file for as long as it
 * lives (gm_mem_unmap drops it).  p2pmem needs none: every mmap of
 * p2pmem/allocate is a piece of its own.
 */
static int
map_shared (struct gm_mem *m, const char *path, size_t len, const char *what,
            bool exclusive, char *err, size_t errlen)
{
  int fd = open (path, O_RDWR | O_CLOEXEC);
  void *p;
  int e;

  if (fd == -1) {
    e = errno;
    snprintf (err, errlen, "%s: open %s: %s%s", what, path, strerror (e),
              e == EACCES || e == EPERM ? " (needs root)" : "");
    errno = e;
    return -1;
  }
  if (exclusive && flock (fd, LOCK_EX | LOCK_NB) == -1) {
    e = errno;
    snprintf (err, errlen, "%s: %s is in use by another gmblock server "
              "(%s): two on one BAR would overwrite each other's buffers",
              what, path, e == EWOULDBLOCK ? "it holds the file's lock"
              : strerror (e));
    close (fd);
    errno = e == EWOULDBLOCK ? EBUSY : e;
    return -1;
  }
  p = mmap (NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  e = errno;
  if (p == MAP_FAILED) {
    close (fd);
    snprintf (err, errlen, "%s: mmap of %zu bytes of %s: %s%s", what, len,
              path, strerror (e),
              exclusive && (e == EPERM || e == EINVAL) ?
              " (a BAR claimed by its driver maps only with the kernel "
              "option iomem=relaxed, or after unbinding the driver)" : "");
    errno = e;
    return -1;
  }
  memset (m, 0, sizeof *m);
  m->addr = m->map = p;
  m->len = m->map_len = len;
  if (exclusive) {
    m->locked = true;
    m->lock_fd = fd;
  }
  else
    close (fd);                 /* the mapping keeps what it needs */
  return 0;
}

/* Lists in out the functions under pci_path that publish p2pmem;
 * returns whether there is any.
 */
static bool
other_providers (const char *pci_path, char *out, size_t len)
{
  char pattern[PATH_MAX];
  glob_t g;
  size_t used = 0;

  *out = '\0';
  snprintf (pattern, sizeof pattern, "%s/devices/*/p2pmem", pci_path);
  if (glob (pattern, GLOB_NOSORT, NULL, &g) != 0)
    return false;
  for (size_t i = 0; i < g.gl_pathc && used + 1 < len; i++) {
    const char *end = strrchr (g.gl_pathv[i], '/');
    const char *bdf = end;
    while (bdf > g.gl_pathv[i] && bdf[-1] != '/')
      bdf--;
    used += snprintf (out + used, len - used, "%s%.*s", i ? ", " : "",
                      (int) (end - bdf), bdf);
  }
  globfree (&g);
  return *out != '\0';
}

int
gm_devmem_map_p2pmem (struct gm_mem *m, const char *pci_path,
                      const char *bdf, size_t want, size_t least,
                      char *err, size_t errlen)
{
  char dir[PATH_MAX], path[PATH_MAX + 32], buf[32], buf2[256];
  uint64_t avail = 0;
  size_t len;
  FILE *f;
  struct stat st;

  snprintf (dir, sizeof dir, "%s/devices/%s", pci_path, bdf);
  if (stat (dir, &st) == -1) {
    snprintf (err, errlen, "p2pmem:%s: there is no PCI device %s (%s)", bdf,
              bdf, dir);
    errno = ENODEV;
    return -1;
  }
  snprintf (path, sizeof path, "%s/p2pmem/available", dir);
  if ((f = fopen (path, "r")) == NULL && other_providers (pci_path, buf2,
                                                          sizeof buf2)) {
    snprintf (err, errlen, "p2pmem:%s: the device publishes no p2pmem (no "
              "%s/p2pmem/), but the kernel has P2PDMA and these devices "
              "do: %s (gmblock-topology FILE tells which of them the disk "
              "can reach)", bdf, dir, buf2);
    errno = ENODEV;
    return -1;
  }
  if (f == NULL) {
    snprintf (err, errlen, "p2pmem:%s: the device publishes no p2pmem (no "
              "%s/p2pmem/): the kernel must be built with "
              "CONFIG_PCI_P2PDMA=y (Linux 6.2 or later; Debian 12's 6.1 and "
              "its 6.12 backport are not) and the device's driver must "
              "register its memory (nvme does for a controller memory "
              "buffer; 'failed to register the CMB' in dmesg means it could "
              "not)", bdf, dir);
    errno = ENODEV;
    return -1;
  }
  /* As the topology report reads it: junk is no memory. */
  if (fgets (buf, sizeof buf, f)) {
    buf[strcspn (buf, "\n")] = '\0';
    gm_parse_u64 (buf, 10, &avail);
  }
  fclose (f);
  len = gm_round_down (want < avail ? want : avail, UNIT);
  if (len < least) {
    snprintf (err, errlen, "p2pmem:%s: only %" PRIu64 " bytes of p2pmem are "
              "available, at least %zu are needed", bdf, avail, least);
    errno = ENOMEM;
    return -1;
  }
  snprintf (path, sizeof path, "%s/p2pmem/allocate", dir);
  if (map_shared (m, path, len, "p2pmem", false, err, errlen) == -1)
    return -1;
  m->backing = "p2pmem";
  return 0;
}

/* The flags of BAR n from BDF/resource ("start end flags" per line). */
static int
bar_flags (const char *pci_path, const char *bdf, int n, unsigned long long *fl,
           bool *unused)
{
  char path[PATH_MAX], line[128];
  unsigned long long start = 0, end = 0;
  FILE *f;
  int i = 0, r = -1;

  snprintf (path, sizeof path, "%s/devices/%s/resource", pci_path, bdf);
  if ((f = fopen (path, "r")) == NULL)
    return -1;
  while (fgets (line, sizeof line, f))
    if (i++ == n) {
      r = sscanf (line, "%llx %llx %llx", &start, &end, fl) == 3 ? 0 : -1;
      break;
    }
  fclose (f);
  *unused = r == 0 && start == 0 && end == 0 && *fl == 0;
  return r;
}

#define IORESOURCE_MEM 0x200
#define IORESOURCE_PREFETCH 0x2000

/* Prefetchable says little: a NIC's doorbell pages are prefetchable
 * (write-combined), and a CMB the kernel publishes as p2pmem holds the
 * NVMe driver's queues.  Mapped from offset 0, buffers would overwrite
 * them.  So: nothing that publishes p2pmem (the kernel hands it out;
 * buffer=p2pmem takes a piece properly), nothing a driver owns, except
 * an NVMe controller's BARs past its registers (BAR 0 and 1): a CMB the
 * driver cannot use, since without p2pmem it has no queues there.
 */
const char *
gm_devmem_bar_taken (const char *driver, bool p2pmem, int bar)
{
  if (p2pmem)
    return "the kernel publishes its memory as p2pmem and hands out pieces "
      "of it (an NVMe driver keeps its queues there)";
  if (*driver == '\0' || (strcmp (driver, "nvme") == 0 && bar >= 2))
    return NULL;
  return "its driver owns its BARs (registers, or memory the driver uses)";
}

/* The name of the driver bound to BDF, "" when none. */
static void
bound_driver (const char *pci_path, const char *bdf, char *name, size_t len)
{
  char path[PATH_MAX], target[PATH_MAX];
  ssize_t n;
  const char *slash, *base;
  size_t k;

  snprintf (path, sizeof path, "%s/devices/%s/driver", pci_path, bdf);
  *name = '\0';
  if ((n = readlink (path, target, sizeof target - 1)) <= 0)
    return;
  target[n] = '\0';
  slash = strrchr (target, '/');
  base = slash ? slash + 1 : target;
  k = strnlen (base, len - 1);  /* driver names are short */
  memcpy (name, base, k);
  name[k] = '\0';
}

int
gm_devmem_map_bar (struct gm_mem *m, const char *pci_path, const char *bdf,
                   int bar, size_t want, size_t least, char *err,
                   size_t errlen)
{
  char path[PATH_MAX], driver[64];
  const char *taken;
  struct stat st;
  unsigned long long fl;
  bool p2pmem, unused;
  size_t len;

  /* Registers sit in non-prefetchable BARs; writing buffers into them
   * would drive the device.  Memory (a CMB, GPU or FPGA memory) is
   * prefetchable.
   */
  if (bar_flags (pci_path, bdf, bar, &fl, &unused) == -1) {
    snprintf (err, errlen, "bar:%s:%d: there is no PCI device %s with a BAR "
              "%d (%s/devices/%s/resource)", bdf, bar, bdf, bar, pci_path, bdf);
    errno = ENODEV;
    return -1;
  }
  if (unused) {
    char half[64] = "";
    if (bar > 0)
      snprintf (half, sizeof half, ", or it is the upper half of 64-bit "
                "BAR %d", bar - 1);
    snprintf (err, errlen, "bar:%s:%d: BAR %d is not implemented: the "
              "device does not use this slot%s (gmblock-topology lists the "
              "memory BARs)", bdf, bar, bar, half);
    errno = ENODEV;
    return -1;
  }
  if (!(fl & IORESOURCE_MEM) || !(fl & IORESOURCE_PREFETCH)) {
    snprintf (err, errlen, "bar:%s:%d: BAR %d is not a prefetchable memory "
              "BAR: it holds the device's registers, not memory, and gmblock "
              "will not put buffers there (gmblock-topology lists the "
              "prefetchable ones)", bdf, bar, bar);
    errno = EINVAL;
    return -1;
  }
  snprintf (path, sizeof path, "%s/devices/%s/p2pmem", pci_path, bdf);
  p2pmem = stat (path, &st) == 0;
  bound_driver (pci_path, bdf, driver, sizeof driver);
  if ((taken = gm_devmem_bar_taken (driver, p2pmem, bar)) != NULL) {
    if (p2pmem)
      snprintf (err, errlen, "bar:%s:%d: gmblock will not put buffers in "
                "BAR %d of %s: %s: use buffer=p2pmem:%s", bdf, bar, bar, bdf,
                taken, bdf);
    else
      snprintf (err, errlen, "bar:%s:%d: gmblock will not put buffers in "
                "BAR %d of %s, bound to driver %s: %s: unbind it first (echo "
                "%s > /sys/bus/pci/drivers/%s/unbind) or use a device no "
                "driver owns", bdf, bar, bar, bdf, driver, taken, bdf, driver);
    errno = EBUSY;
    return -1;
  }
  snprintf (path, sizeof path, "%s/devices/%s/resource%d", pci_path, bdf, bar);
  if (stat (path, &st) == -1) {
    snprintf (err, errlen, "bar:%s:%d: %s: %s (is BAR %d a memory BAR of "
              "this device? gmblock-topology lists them)", bdf, bar, path,
              strerror (errno), bar);
    errno = ENODEV;
    return -1;
  }
  len = gm_round_down ((size_t) st.st_size < want ? (size_t) st.st_size : want,
                       UNIT);
  if (len < least) {
    snprintf (err, errlen, "bar:%s:%d: the BAR has %jd bytes, at least %zu "
              "are needed", bdf, bar, (intmax_t) st.st_size, least);
    errno = ENOMEM;
    return -1;
  }
  if (map_shared (m, path, len, "bar", true, err, errlen) == -1)
    return -1;
  m->backing = "PCI BAR";
  return 0;
}

const char *
gm_devmem_dma_error (int e, int is_bar)
{
  switch (e) {
  case EFAULT:
    return is_bar ?
      "the kernel has no struct pages for a raw BAR mapping, so O_DIRECT "
      "cannot DMA into it; device memory takes DMA only as p2pmem, which "
      "needs CONFIG_PCI_P2PDMA=y and a driver that publishes the memory"
      : "the kernel refused the pages (no P2PDMA support for them)";
  case EINVAL:
    return "the kernel refuses peer-to-peer DMA between the disk and the "
      "device: both must sit under one PCIe switch (or behind a host "
      "bridge the kernel whitelists); see gmblock-topology";
  case EREMOTEIO:
    /* get_user_pages refuses P2PDMA pages for a block device whose
     * queue does not take them (measured on 7.3: a loop device). */
    return "the kernel refused the device's pages for this I/O: the block "
      "device under the file does not take peer-to-peer pages (on Linux "
      "7.3 an NVMe namespace, md and a file on ext4 do, a loop device "
      "does not)";
  default:
    return "unexpected error";
  }
}

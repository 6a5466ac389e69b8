/* gmblock: device memory mapped for I/O buffers (PCI P2PDMA or a BAR).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * p2pmem: the kernel (CONFIG_PCI_P2PDMA) publishes part of a device's
 * BAR as memory with struct pages; mmap of BDF/p2pmem/allocate hands
 * out a piece of it, and O_DIRECT can DMA into it when the disk and the
 * device share a PCIe switch.  A raw BAR (BDF/resourceN) maps for CPU
 * access only: it has no struct pages, so O_DIRECT into it fails with
 * EFAULT; callers probe and explain.
 */
#ifndef GMBLOCK_DEVMEM_H
#define GMBLOCK_DEVMEM_H

#include <stdbool.h>
#include <stddef.h>

#include "hugemem.h"

/* The least device memory worth a pool (a few requests' worth). */
#define GM_DEVMEM_MIN (1024 * 1024)

/* Map up to 'want' bytes (at least 'least') into m.  pci_path is
 * libpci's sysfs.path (the folder holding devices/BDF).  Return 0, or
 * -1 with errno set and a message in err that names what is missing.
 */
int gm_devmem_map_p2pmem (struct gm_mem *m, const char *pci_path,
                          const char *bdf, size_t want, size_t least,
                          char *err, size_t errlen);
int gm_devmem_map_bar (struct gm_mem *m, const char *pci_path,
                       const char *bdf, int bar, size_t want, size_t least,
                       char *err, size_t errlen);

/* Whether BAR n of a function is free for gmblock's buffers, given its
 * driver ("" when none is bound) and whether it publishes p2pmem: NULL,
 * or why not (for messages and for gmblock-topology's list).
 */
const char *gm_devmem_bar_taken (const char *driver, bool p2pmem, int bar);

/* Why O_DIRECT into device memory failed with errno e, for messages. */
const char *gm_devmem_dma_error (int e, int is_bar);

#endif /* GMBLOCK_DEVMEM_H */

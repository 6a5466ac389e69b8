/* gmblock plugin: where O_DIRECT data lands (buffer=), and the PCI
 * topology report (-D gmblock.topology=1, --dump-plugin).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * host: the anonymous-memory pool (the default).  p2pmem: device memory
 * the kernel publishes for P2PDMA; reads and writes DMA straight between
 * the disk and the device.  bar: a raw BAR mapping, which O_DIRECT
 * cannot reach on mainline kernels; tried once at start-up, then
 * refused or, with buffer-fallback=stage, staged through host memory.
 * Over NBD/TCP nbdkit's buffer is host memory, so device memory costs a
 * CPU copy out of it (slow: uncached PCI reads); it is for consumers
 * that hand device memory on (see README), never chosen unasked.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gmblock.h"
#include "devmem.h"
#include "sizes.h"
#include "topology.h"

/* -D gmblock.topology=1 prints the topology at start-up. */
NBDKIT_DLL_PUBLIC int gmblock_debug_topology = 0;

int
gm_buffer_parse (const char *value)
{
  struct gm_buffer_opt *o = &gm.buffer;
  const char *arg;

  memset (o->bdf, 0, sizeof o->bdf);
  if (strcmp (value, "host") == 0) {
    o->kind = GM_BUFFER_HOST;
    return 0;
  }
  if (strcmp (value, "p2pmem") == 0 || strcmp (value, "p2pmem:auto") == 0) {
    o->kind = GM_BUFFER_P2PMEM;
    return 0;
  }
  if (strncmp (value, "p2pmem:", 7) == 0) {
    arg = value + 7;
    if (gm_parse_bdf (arg, strlen (arg), o->bdf, sizeof o->bdf) == -1)
      goto bad;
    o->kind = GM_BUFFER_P2PMEM;
    return 0;
  }
  if (strncmp (value, "bar:", 4) == 0) {
    const char *colon = strrchr (value + 4, ':');
    const char *why;
    unsigned n;
    if (colon == NULL ||
        gm_parse_bdf (value + 4, colon - (value + 4), o->bdf, sizeof o->bdf) == -1)
      goto bad;
    if (gm_parse_count (colon + 1, 0, 5, &n, &why)) {
      nbdkit_error (GM_NAME ": buffer=%s: the BAR number must be 0 to 5",
                    value);
      return -1;
    }
    o->bar = n;
    o->kind = GM_BUFFER_BAR;
    return 0;
  }
 bad:
  nbdkit_error (GM_NAME ": buffer=%s: expected host, p2pmem, p2pmem:auto, "
                "p2pmem:BDF or bar:BDF:N, where BDF is a PCI address such as "
                "0000:04:00.0 (gmblock-topology lists them)", value);
  return -1;
}

int
gm_buffer_check (void)
{
  if (gm.buffer.kind != GM_BUFFER_HOST && !gm.direct) {
    nbdkit_error (GM_NAME ": buffer=%s needs direct=true: only O_DIRECT "
                  "moves data by DMA into device memory",
                  gm.buffer.kind == GM_BUFFER_P2PMEM ? "p2pmem" : "bar");
    return -1;
  }
  /* A sysfs.path= that cannot be read says so now, whatever buffer=. */
  if (gm.pci_path) {
    struct gm_topology t;
    char err[512];
    if (gm_topology_scan (&t, gm.pci_path, NULL, err, sizeof err) == -1) {
      nbdkit_error (GM_NAME ": %s", err);
      return -1;
    }
    gm_topology_free (&t);
  }
  return 0;
}

static const char *
pci_path (void)
{
  return gm.pci_path ? gm.pci_path : GM_TOPO_DEFAULT_SYSFS;
}

/* O_DIRECT read of the first block into the device memory: the only
 * honest test of whether the kernel lets this disk DMA there.
 */
static int
probe_dma (void *mem)
{
  ssize_t r;

  if (gm.direct_end < gm.align)
    return 0;                   /* nothing O_DIRECT would ever read */
  r = pread (gm.fd, mem, gm.align, 0);
  if (r < 0)
    return errno;
  return 0;
}

int
gm_buffer_setup (void)
{
  const struct gm_buffer_opt *o = &gm.buffer;
  struct gm_mem mem;
  char err[1024], paths[512], bdf[16];
  int e;

  if (o->kind == GM_BUFFER_HOST) {
    gm.pool = gm_pool_create (gm.pool_size, gm.hugepages, err, sizeof err);
    if (gm.pool == NULL) {
      char size[32];
      nbdkit_error (GM_NAME ": pool-size=%s%s: %s",
                    gm_format_size (gm.pool_size, size, sizeof size),
                    gm.hugepages == GM_HUGE_ON ? ", hugepages=on" : "", err);
      return -1;
    }
    snprintf (gm.buffer_desc, sizeof gm.buffer_desc, "host memory (%s)",
              gm.pool->mem.backing);
    return 0;
  }

  if (o->kind == GM_BUFFER_P2PMEM) {
    if (gm_topology_p2pmem_for (pci_path (), gm.file, o->bdf, "buffer",
                                bdf, sizeof bdf, paths, sizeof paths,
                                err, sizeof err) == -1) {
      nbdkit_error (GM_NAME ": %s", err);
      return -1;
    }
  }
  else {
    snprintf (bdf, sizeof bdf, "%s", o->bdf);
    *paths = '\0';
  }

  if (o->kind == GM_BUFFER_P2PMEM)
    e = gm_devmem_map_p2pmem (&mem, pci_path (), bdf, gm.pool_size,
                              GM_DEVMEM_MIN, err, sizeof err);
  else
    e = gm_devmem_map_bar (&mem, pci_path (), bdf, o->bar, gm.pool_size,
                           GM_DEVMEM_MIN, err, sizeof err);
  if (e == -1) {
    nbdkit_error (GM_NAME ": buffer=%s", err);
    return -1;
  }
  if ((gm.pool = gm_pool_create_on (&mem, err, sizeof err)) == NULL) {
    gm_mem_unmap (&mem);
    nbdkit_error (GM_NAME ": buffer=%s (%s): %s",
                  o->kind == GM_BUFFER_BAR ? "bar" : "p2pmem", bdf, err);
    return -1;
  }
  gm.pool_device = true;
  if (o->kind == GM_BUFFER_P2PMEM)
    snprintf (gm.buffer_desc, sizeof gm.buffer_desc, "p2pmem of %s", bdf);
  else
    snprintf (gm.buffer_desc, sizeof gm.buffer_desc, "BAR %d of %s", o->bar,
              bdf);

  if ((e = probe_dma (gm.pool->mem.addr)) == 0)
    return 0;
  if (o->kind == GM_BUFFER_BAR && o->stage) {
    errno = e;
    nbdkit_debug (GM_NAME ": O_DIRECT into %s fails (%m): %s; staging through "
                  "host memory as buffer-fallback=stage asks (counted as "
                  "staged_bytes)", gm.buffer_desc,
                  gm_devmem_dma_error (e, 1));
    fprintf (stderr, "nbdkit: " GM_NAME ": warning: %s cannot take DMA "
             "(%s): every byte is staged through host memory and copied by "
             "the CPU\n", gm.buffer_desc, strerror (e));
    gm.stage_pool = gm_pool_create (gm.pool->mem.len, gm.hugepages, err,
                                    sizeof err);
    if (gm.stage_pool == NULL) {
      nbdkit_error (GM_NAME ": buffer-fallback=stage: %s", err);
      return -1;
    }
    strncat (gm.buffer_desc, ", staged through host memory",
             sizeof gm.buffer_desc - strlen (gm.buffer_desc) - 1);
    return 0;
  }
  errno = e;
  nbdkit_error (GM_NAME ": buffer=%s%s: O_DIRECT from %s into %s fails "
                "(%m): %s%s%s",
                o->kind == GM_BUFFER_P2PMEM ? "p2pmem:" : "bar:", bdf,
                gm.file, gm.buffer_desc,
                gm_devmem_dma_error (e, o->kind == GM_BUFFER_BAR), paths,
                o->kind == GM_BUFFER_BAR ?
                "; buffer-fallback=stage serves anyway, staging every byte "
                "through host memory" : "");
  return -1;
}

/* Each line of the report through nbdkit_debug. */
static void
debug_topology (void)
{
  struct gm_topology t;
  char err[512], *text = NULL, *line, *save = NULL;
  size_t len = 0;
  FILE *fp;

  if (gm_topology_scan (&t, pci_path (), gm.file, err, sizeof err) == -1) {
    nbdkit_debug (GM_NAME ": topology: %s", err);
    return;
  }
  if ((fp = open_memstream (&text, &len)) != NULL) {
    gm_topology_print (&t, fp);
    fclose (fp);
    for (line = strtok_r (text, "\n", &save); line;
         line = strtok_r (NULL, "\n", &save))
      nbdkit_debug (GM_NAME ": topology: %s", line);
    free (text);
  }
  gm_topology_free (&t);
}

void
gm_buffer_report (void)
{
  if (gmblock_debug_topology)
    debug_topology ();
}

void
gm_buffer_dump (void)
{
  struct gm_topology t;
  char err[512];

  printf ("gmblock_buffer_providers=host p2pmem bar\n");
  if (gm_topology_scan (&t, pci_path (), gm.file, err, sizeof err) == -1) {
    printf ("gmblock_topology_error=%s\n", err);
    return;
  }
  gm_topology_keys (&t, stdout);
  gm_topology_free (&t);
}

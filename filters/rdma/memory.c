/* gmblock-rdma filter: where request data lives (rdma-pool=,
 * rdma-pool-memory=, rdma-pool-fallback=).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * host (the default): one pool of host memory, registered with the NIC;
 * the stack below reads into it (with the gmblock plugin: O_DIRECT DMA)
 * and the NIC sends from it: no copy.
 *
 * p2pmem: the pool is PCI device memory (an NVMe controller memory
 * buffer, published by the kernel for P2PDMA), so the disk DMAs into
 * the device, and the NIC would send from there: disk to NIC without
 * host RAM.  That needs the NIC to register device memory: ibv_reg_mr
 * of a P2PDMA mapping fails on mainline kernels (the RDMA core pins
 * user pages without FOLL_PCI_P2PDMA), and ibv_reg_dmabuf_mr needs a
 * dma-buf, which p2pmem does not export.  So it is tried once at
 * start-up; when it fails, the data is staged through a second pool of
 * registered host memory, copied by the CPU, and counted (staged_bytes),
 * unless rdma-pool-fallback=refuse.  Both pools are bounded, and each
 * request takes from them in the same order, so they cannot deadlock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma.h"
#include "devmem.h"
#include "registry.h"
#include "topology.h"

struct gm_pool *gm_rdma_pool;           /* where the stack reads into */
static struct gm_pool *send_pool;       /* staging: what the NIC sends */
struct ibv_mr *gm_rdma_pool_mr;         /* of send_pool, else gm_rdma_pool */
static char desc[160];

static int
register_host (struct ibv_pd *pd, struct gm_pool *p)
{
  gm_rdma_pool_mr = ibv_reg_mr (pd, p->mem.addr, p->mem.len,
                                IBV_ACCESS_LOCAL_WRITE);
  if (gm_rdma_pool_mr == NULL) {
    nbdkit_error (NAME ": ibv_reg_mr of the %zu MiB pool: %m (raise "
                  "ulimit -l, the locked memory limit)", p->mem.len >> 20);
    return -1;
  }
  return 0;
}

static struct gm_pool *
host_pool (uint64_t size)
{
  char err[256];
  struct gm_pool *p = gm_pool_create (size, GM_HUGE_AUTO, err, sizeof err);

  if (p == NULL)
    nbdkit_error (NAME ": rdma-pool=%" PRIu64 ": %s", size, err);
  return p;
}

/* Device memory for the pool, from the provider nearest the served
 * file (the gmblock plugin names it in the registry).
 */
static int
device_pool (uint64_t size)
{
  char *file = gm_registry_lookup (GM_REG_SERVED_FILE);
  /* The plugin's sysfs.path=, so both read one PCI tree. */
  char *sysfs = gm_registry_lookup (GM_REG_SYSFS_PATH);
  const char *pci = sysfs ? sysfs : GM_TOPO_DEFAULT_SYSFS;
  char bdf[16], paths[512], err[1024];
  struct gm_mem mem;
  int r = -1;

  if (file == NULL) {
    nbdkit_error (NAME ": rdma-pool-memory=p2pmem needs the gmblock plugin "
                  "below (it names the file it serves, whose disk must "
                  "reach the device memory)");
    goto out;
  }
  if (gm_topology_p2pmem_for (pci, file, gm_rdma_set.pool_bdf,
                              "rdma-pool-memory", bdf, sizeof bdf,
                              paths, sizeof paths, err, sizeof err) == -1 ||
      gm_devmem_map_p2pmem (&mem, pci, bdf, size, GM_DEVMEM_MIN,
                            err, sizeof err) == -1) {
    nbdkit_error (NAME ": %s", err);
    goto out;
  }
  gm_rdma_pool = gm_pool_create_on (&mem, err, sizeof err);
  if (gm_rdma_pool == NULL) {
    gm_mem_unmap (&mem);
    nbdkit_error (NAME ": rdma-pool-memory=p2pmem (%s): %s", bdf, err);
    goto out;
  }
  snprintf (gm_rdma_set.pool_paths, sizeof gm_rdma_set.pool_paths, "%s",
            paths);
  snprintf (desc, sizeof desc, "p2pmem of %s", bdf);
  r = 0;
 out:
  free (file);
  free (sysfs);
  return r;
}

int
gm_rdma_memory_setup (struct ibv_pd *pd, uint64_t size)
{
  int e;

  if (!gm_rdma_set.pool_device) {
    if ((gm_rdma_pool = host_pool (size)) == NULL)
      return -1;
    snprintf (desc, sizeof desc, "host memory (%s)",
              gm_rdma_pool->mem.backing);
    return register_host (pd, gm_rdma_pool);
  }
  if (device_pool (size) == -1)
    return -1;
  gm_rdma_pool_mr = ibv_reg_mr (pd, gm_rdma_pool->mem.addr,
                                gm_rdma_pool->mem.len,
                                IBV_ACCESS_LOCAL_WRITE);
  if (gm_rdma_pool_mr) {
    COUNT (RC_DEVICE_MR, 1);
    nbdkit_debug (NAME ": %s registered with the NIC: data goes from the "
                  "disk to the NIC without host memory", desc);
    return 0;
  }
  e = errno;
  if (!gm_rdma_set.pool_stage) {
    errno = e;
    nbdkit_error (NAME ": rdma-pool-memory: the NIC cannot register %s "
                  "(ibv_reg_mr: %m; mainline kernels pin P2PDMA memory for "
                  "RDMA only through a dma-buf, which p2pmem does not "
                  "export); rdma-pool-fallback=stage serves anyway, "
                  "staging every byte through registered host memory", desc);
    return -1;
  }
  errno = e;
  nbdkit_debug (NAME ": ibv_reg_mr of %s: %m; staging through host memory",
                desc);
  fprintf (stderr, "nbdkit: " NAME ": warning: the NIC cannot register %s "
           "(%s): every byte is staged through registered host memory and "
           "copied by the CPU (staged_bytes)\n", desc, strerror (e));
  if ((send_pool = host_pool (gm_rdma_pool->mem.len)) == NULL)
    return -1;
  strncat (desc, ", staged through host memory",
           sizeof desc - strlen (desc) - 1);
  return register_host (pd, send_pool);
}

const char *
gm_rdma_memory_desc (void)
{
  return desc;
}

/* pool_waits: of the registered pool and, when staging, of the
 * staging pool too (a request can wait for either).  The value stays
 * after the pools are gone.
 */
void
gm_rdma_memory_stats (void)
{
  struct gm_pool_stats ps, ss = { 0 };

  if (gm_rdma_pool == NULL)
    return;
  gm_pool_get_stats (gm_rdma_pool, &ps);
  if (send_pool)
    gm_pool_get_stats (send_pool, &ss);
  atomic_store (&gm_rdma_stats[RC_POOL_WAITS].value, ps.waits + ss.waits);
}

void
gm_rdma_memory_free (void)
{
  if (gm_rdma_pool_mr)
    ibv_dereg_mr (gm_rdma_pool_mr);
  gm_rdma_pool_mr = NULL;
  gm_rdma_memory_stats ();
  if (gm_rdma_pool)
    gm_pool_destroy (gm_rdma_pool);
  if (send_pool)
    gm_pool_destroy (send_pool);
  gm_rdma_pool = send_pool = NULL;
}

int
gm_rdma_mem_get (struct req *q, const _Atomic bool *cancel)
{
  return gm_rdma_mem_get_len (q, q->r.length, cancel);
}

int
gm_rdma_mem_get_len (struct req *q, size_t len, const _Atomic bool *cancel)
{
  q->buflen = (len + GM_POOL_UNIT - 1) & ~(size_t) (GM_POOL_UNIT - 1);
  q->buf = gm_pool_get_cancellable (gm_rdma_pool, q->buflen, cancel);
  if (q->buf == NULL) {
    q->sbuf = NULL;
    return -1;
  }
  if (send_pool == NULL) {
    q->sbuf = q->buf;
    return 0;
  }
  q->sbuf = gm_pool_get_cancellable (send_pool, q->buflen, cancel);
  if (q->sbuf == NULL) {
    int e = errno;
    gm_pool_put (gm_rdma_pool, q->buf, q->buflen);
    q->buf = NULL;
    errno = e;
    return -1;
  }
  return 0;
}

void
gm_rdma_mem_wake (void)
{
  if (gm_rdma_pool)
    gm_pool_wake (gm_rdma_pool);
  if (send_pool)
    gm_pool_wake (send_pool);
}

void
gm_rdma_mem_put (struct req *q)
{
  if (q->buf == NULL)
    return;
  if (q->sbuf != q->buf)
    gm_pool_put (send_pool, q->sbuf, q->buflen);
  gm_pool_put (gm_rdma_pool, q->buf, q->buflen);
  q->buf = q->sbuf = NULL;
}

/* Staging: the bytes [off, off+len) between the two buffers. */
void
gm_rdma_mem_stage (struct req *q, uint32_t off, uint32_t len, bool to_send)
{
  if (q->sbuf == q->buf)
    return;
  if (to_send)
    memcpy ((uint8_t *) q->sbuf + off, (uint8_t *) q->buf + off, len);
  else
    memcpy ((uint8_t *) q->buf + off, (uint8_t *) q->sbuf + off, len);
  COUNT (RC_STAGED_BYTES, len);
}

/* One read through the stack into the device memory: the only honest
 * test of whether the kernel lets the disk DMA there.  Returns 0 or -1.
 */
int
gm_rdma_memory_probe (nbdkit_backend *b)
{
  nbdkit_next *n;
  struct req q = { .r = { .length = 4096 } };
  int err = 0, r = -1;
  int64_t size;

  if (!gm_rdma_set.pool_device)
    return 0;
  n = nbdkit_next_context_open (b, 1, "", 1);
  if (n == NULL)
    return 0;                   /* nothing to probe with: the first read will say */
  if (n->prepare (n) == 0 && (size = n->get_size (n)) >= 4096) {
    if (gm_rdma_mem_get (&q, NULL) == 0) {
      r = n->pread (n, q.buf, 4096, 0, 0, &err);
      gm_rdma_mem_put (&q);
    }
    else
      err = errno;
  }
  else
    r = 0;
  n->finalize (n);
  nbdkit_next_context_close (n);
  if (r == 0)
    return 0;
  errno = err;
  nbdkit_error (NAME ": rdma-pool-memory: a read into %s fails (%m): %s%s",
                desc, gm_devmem_dma_error (err, 0), gm_rdma_set.pool_paths);
  return -1;
}

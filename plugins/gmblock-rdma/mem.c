/* gmblock-rdma bridge: memory the server may RDMA to and from.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Process-wide, whatever the number of connections: one protection
 * domain (librdmacm keeps the device context open for the process), one
 * registered bounce pool (pool=, common/pool.c: 4K units, callers wait
 * when it is full), and, when the device pages on demand, zero copy.
 *
 * Zero copy: the request carries nbdkit's own buffer (addr, rkey) and
 * the server RDMA-WRITEs READ data into it, RDMA-READs WRITE data from
 * it.  Only with on-demand-paging (ODP) MRs: either one implicit ODP MR
 * over the whole address space, or per-range ODP MRs kept in a small
 * cache keyed by page-aligned range.  Why caching them is safe: an ODP
 * MR pins nothing.  The kernel mirrors the process's page tables into
 * the NIC and follows them with MMU notifiers: when a range is unmapped
 * or remapped (free, munmap, malloc reusing the addresses) the NIC's
 * translations are invalidated, and the next access faults in whatever
 * is mapped at that address then.  So a cached registration names
 * addresses, never pages: it always reaches the buffer that now lives
 * there (an unmapped range makes the access fail: EIO, not stale data).
 * A cache of ordinary (pinned) MRs would keep the old pages after a
 * free and reuse, so there is none: without ODP every byte goes through
 * the bounce pool, and is counted.
 *
 * Trust: an ODP MR lets the server reach the registered range; the
 * implicit one, the whole process.  The bridge trusts its server with
 * its memory as it trusts it with its data (zero-copy=off keeps the
 * server inside the pool).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "bridge.h"
#include "pool.h"

#define ASK_MAX_REQUEST (4u << 20)
#define SOFT_ROCE_VENDOR 0xffffffu /* rxe's vendor_id */
#define CACHE_SIZE 32            /* per-range ODP MRs kept at most */
#define PAGE 4096u
#define ODP_RC_NEEDED (IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE)
#define REMOTE_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | \
                       IBV_ACCESS_REMOTE_WRITE)

/* Set once by the first mem_attach (under lock), read-only after. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct gm_pool *pool;
static struct ibv_mr *pool_mr;
static bool zero_copy;
static struct ibv_mr *implicit_mr;

/* The per-range cache, under lock: in use (refs) entries are never
 * deregistered; a miss replaces the least recently used idle one.
 */
static struct {
  uintptr_t start, end;         /* page-aligned, end exclusive */
  struct ibv_mr *mr;
  unsigned refs;
  uint64_t used;
  bool revoked;                 /* no new hits, deregistered once idle */
} cache[CACHE_SIZE];
static uint64_t tick;

/* ODP for RC READ and WRITE (the server's accesses), and implicit?
 * Soft-RoCE (rxe, vendor id 0xffffff) advertises ODP from Linux 6.15
 * but is not used: its copy loop (drivers/infiniband/sw/rxe/rxe_odp.c,
 * __rxe_odp_mr_copy) does not advance the packet's payload pointer
 * when a packet crosses a page, so data landing in an unaligned
 * buffer (nbdkit's are malloc'd) is wrong; in the lab (7.3.4) the
 * bridge's heap was corrupted within seconds of zero-copy reads.
 */
static int
odp_caps (struct ibv_context *v, bool *implicit, char *why, size_t whylen)
{
  struct ibv_device_attr_ex a;
  int e;

  memset (&a, 0, sizeof a);
  e = ibv_query_device_ex (v, NULL, &a);        /* returns the errno */
  if (e) {
    snprintf (why, whylen, "%s: ibv_query_device_ex: %s",
              ibv_get_device_name (v->device), strerror (e));
    return -1;
  }
  *implicit = a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT;
  if (a.orig_attr.vendor_id == SOFT_ROCE_VENDOR) {
    snprintf (why, whylen, "%s is soft-RoCE (rxe), whose on-demand paging "
              "corrupts data that crosses a page (Linux rxe_odp.c)",
              ibv_get_device_name (v->device));
    return -1;
  }
  if ((a.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
      (a.odp_caps.per_transport_caps.rc_odp_caps & ODP_RC_NEEDED)
      == ODP_RC_NEEDED)
    return 0;
  snprintf (why, whylen, "%s has no on-demand paging for RC READ and WRITE "
            "(ODP general caps 0x%llx, RC caps 0x%x)",
            ibv_get_device_name (v->device),
            (unsigned long long) a.odp_caps.general_caps,
            a.odp_caps.per_transport_caps.rc_odp_caps);
  return -1;
}

int
mem_check_odp (char *why, size_t whylen)
{
  struct ibv_device **list;
  int n = 0, r = -1;
  bool implicit;

  snprintf (why, whylen, "no RDMA device");
  list = ibv_get_device_list (&n);
  for (int i = 0; list && i < n && r == -1; i++) {
    struct ibv_context *v = ibv_open_device (list[i]);
    if (v) {
      r = odp_caps (v, &implicit, why, whylen);
      ibv_close_device (v);
    }
  }
  if (list)
    ibv_free_device_list (list);
  return r;
}

int
mem_attach (struct ibv_context *verbs, char *why, size_t whylen)
{
  char err[160];
  bool implicit = false;
  int r = -1;

  pthread_mutex_lock (&lock);
  if (ctx) {
    r = 0;
    if (verbs != ctx) {
      snprintf (why, whylen, "the server is reached through %s, but the "
                "bridge's memory is registered with %s: one device only",
                ibv_get_device_name (verbs->device),
                ibv_get_device_name (ctx->device));
      r = -1;
    }
    goto out;
  }
  if (odp_caps (verbs, &implicit, err, sizeof err) == 0)
    zero_copy = opt_zero_copy != ZC_OFF;
  else if (opt_zero_copy == ZC_ON) {
    snprintf (why, whylen, "zero-copy=on: %s", err);
    goto out;
  }
  else
    nbdkit_debug (NAME ": no zero copy: %s", err);
  pd = ibv_alloc_pd (verbs);
  if (pd == NULL) {
    snprintf (why, whylen, "ibv_alloc_pd: %s", strerror (errno));
    goto out;
  }
  pool = gm_pool_create (opt_pool, GM_HUGE_OFF, err, sizeof err);
  if (pool == NULL) {
    snprintf (why, whylen, "pool=%llu: %s", (unsigned long long) opt_pool, err);
    goto drop_pd;
  }
  pool_mr = ibv_reg_mr (pd, pool->mem.addr, pool->mem.len, REMOTE_ACCESS);
  if (pool_mr == NULL) {
    snprintf (why, whylen, "ibv_reg_mr of the %llu byte pool: %s (raise "
              "ulimit -l, the locked memory limit)",
              (unsigned long long) pool->mem.len, strerror (errno));
    gm_pool_destroy (pool);
    pool = NULL;
    goto drop_pd;
  }
  if (zero_copy && implicit) {
    implicit_mr = ibv_reg_mr (pd, NULL, SIZE_MAX,
                              REMOTE_ACCESS | IBV_ACCESS_ON_DEMAND);
    if (implicit_mr == NULL)
      nbdkit_debug (NAME ": implicit ODP MR refused (%m): per-range MRs");
    else
      COUNT (BC_ODP_MISSES, 1);
  }
  nbdkit_debug (NAME ": %s, bounce pool %llu bytes",
                !zero_copy ? "zero copy off" :
                implicit_mr ? "zero copy by an implicit ODP MR" :
                "zero copy by per-range ODP MRs",
                (unsigned long long) pool->mem.len);
  ctx = verbs;
  r = 0;
  goto out;
 drop_pd:
  /* Not attached: the next connect starts again from nothing. */
  ibv_dealloc_pd (pd);
  pd = NULL;
 out:
  pthread_mutex_unlock (&lock);
  return r;
}

struct ibv_pd *
mem_pd (void)
{
  return pd;
}

uint32_t
mem_max_request (void)
{
  return opt_pool < ASK_MAX_REQUEST ? (uint32_t) opt_pool : ASK_MAX_REQUEST;
}

/* The cache entry holding [u, u+len) with a reference taken, else a
 * new registration of its pages in an idle entry; -1 when every entry
 * is in use or the registration failed.  Called under lock.
 */
static int
cache_get (uintptr_t u, uint32_t len)
{
  uintptr_t start = u & ~(uintptr_t) (PAGE - 1);
  uintptr_t end = (u + len + PAGE - 1) & ~(uintptr_t) (PAGE - 1);
  int victim = -1;

  for (int i = 0; i < CACHE_SIZE; i++) {
    if (cache[i].mr && !cache[i].revoked &&
        cache[i].start <= u && u + len <= cache[i].end) {
      cache[i].refs++;
      cache[i].used = ++tick;
      COUNT (BC_ODP_HITS, 1);
      return i;
    }
    if (cache[i].refs == 0 &&
        (victim == -1 || cache[i].mr == NULL ||
         (cache[victim].mr && cache[i].used < cache[victim].used)))
      victim = i;
  }
  if (victim == -1)
    return -1;
  if (cache[victim].mr)
    ibv_dereg_mr (cache[victim].mr);
  cache[victim].mr = ibv_reg_mr (pd, (void *) start, end - start,
                                 REMOTE_ACCESS | IBV_ACCESS_ON_DEMAND);
  if (cache[victim].mr == NULL) {
    nbdkit_debug (NAME ": ODP registration of %zu bytes failed: %m",
                  (size_t) (end - start));
    return -1;
  }
  COUNT (BC_ODP_MISSES, 1);
  cache[victim].start = start;
  cache[victim].end = end;
  cache[victim].refs = 1;
  cache[victim].used = ++tick;
  return victim;
}

int
mem_get (void *user, uint32_t len, bool wait, struct buf_ref *b)
{
  b->len = len;
  b->ent = -1;
  b->bounce = false;
  if (implicit_mr) {
    COUNT (BC_ODP_HITS, 1);
    b->addr = user;
    b->rkey = implicit_mr->rkey;
    return 0;
  }
  if (zero_copy) {
    pthread_mutex_lock (&lock);
    b->ent = cache_get ((uintptr_t) user, len);
    if (b->ent >= 0)
      b->rkey = cache[b->ent].mr->rkey;
    pthread_mutex_unlock (&lock);
    if (b->ent >= 0) {
      b->addr = user;
      return 0;
    }
  }
  return mem_get_bounce (len, wait, b);
}

int
mem_get_bounce (uint32_t len, bool wait, struct buf_ref *b)
{
  b->len = len;
  b->ent = -1;
  b->addr = wait ? gm_pool_get (pool, len) : gm_pool_tryget (pool, len);
  if (b->addr == NULL)
    return -1;
  b->bounce = true;
  b->rkey = pool_mr->rkey;
  return 0;
}

/* Drop b's reference; exposed: its entry is revoked first.  A revoked
 * entry is deregistered by its last user.  Called under lock. */
static void
cache_put (int ent, bool exposed)
{
  if (exposed)
    cache[ent].revoked = true;
  if (--cache[ent].refs == 0 && cache[ent].revoked) {
    ibv_dereg_mr (cache[ent].mr);
    cache[ent].mr = NULL;
    cache[ent].revoked = false;
  }
}

static void
put (struct buf_ref *b, bool exposed)
{
  if (exposed && (b->bounce || b->ent >= 0))
    COUNT (BC_EXPOSED, b->len);
  if (b->bounce && exposed)
    gm_pool_quarantine (pool, b->addr, b->len);
  else if (b->bounce)
    gm_pool_put (pool, b->addr, b->len);
  else if (b->ent >= 0) {
    pthread_mutex_lock (&lock);
    cache_put (b->ent, exposed);
    pthread_mutex_unlock (&lock);
  }
  else if (exposed)
    /* The implicit MR cannot be revoked for one range: every
     * connection's zero copy uses it.  Only a dead device fails both
     * qp_error's modify and disconnect, and a dead device reaches no
     * memory. */
    nbdkit_error (NAME ": the server may still reach the %" PRIu32
                  " bytes at %p through the implicit ODP MR", b->len,
                  b->addr);
  b->bounce = false;
  b->ent = -1;
}

void
mem_put (struct buf_ref *b)
{
  put (b, false);
}

void
mem_put_exposed (struct buf_ref *b)
{
  put (b, true);
}

void
mem_unload (void)
{
  for (int i = 0; i < CACHE_SIZE; i++)
    if (cache[i].mr)
      ibv_dereg_mr (cache[i].mr);
  if (implicit_mr)
    ibv_dereg_mr (implicit_mr);
  if (pool_mr)
    ibv_dereg_mr (pool_mr);
  if (pool)
    gm_pool_destroy (pool);
  if (pd)
    ibv_dealloc_pd (pd);
}

/* rdma-mwprobe: does this RDMA device support type-2 memory windows
 * the way the gmblock-rdma bridge would use them?  For the lab
 * scenario rdma-mwprobe (soft-RoCE).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   rdma-mwprobe ADDR PORT
 *
 * One process, two RC QPs on ADDR's device connected through the RDMA
 * CM (a listener and a client, as the filter and the bridge): the
 * "owner" registers a buffer with IBV_ACCESS_MW_BIND only (its MR's
 * rkey grants no remote access), allocates a type-2 MW, binds it with
 * IBV_WR_BIND_MW on its QP to a 4 KiB window of the buffer; the "peer"
 * (the server's role) RDMA-WRITEs and -READs through the MW's rkey.
 * Each check prints one line, "ok" or "FAIL" with the work completion
 * status or errno.  Exit 0 when all are as the bridge needs them; 4
 * when all are but the window's bounds (a WRITE past, straddling or
 * before the window lands: soft-RoCE checks an MW's rkey, access and
 * state, then the range of the MW's MR, never the window's own, on
 * 6.1 and 7.3 alike); 1 when anything else fails, 3 when a step hangs.
 *
 * A remote access error breaks both QPs, so every check that expects
 * one gets a connection of its own (PORT, PORT+1, ...).
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define WIN 4096u               /* the window: [mem + WIN, mem + 2 WIN) */
#define MEMSZ (4 * WIN)

static const char *addr;
static int port;
static int failures;
static int bounds_failures;     /* of those, the window's bounds */

/* One connected pair: owner (passive side, holds the MW) and peer. */
struct pair {
  struct rdma_cm_id *listen, *owner, *peer;
  struct ibv_pd *pd;            /* the owner's */
  struct ibv_cq *ocq;
  struct ibv_mr *mr;            /* the owner's buffer: MW_BIND, no remote */
  struct ibv_mr *pmr;           /* the peer's buffer */
  uint8_t *mem, *pmem;
};

/* Where it is, on stderr: a hang's last step is in the log. */
#define TRACE(...) (fprintf (stderr, "mwprobe: " __VA_ARGS__), \
                    fputc ('\n', stderr))

static void
die (const char *what)
{
  fprintf (stderr, "rdma-mwprobe: %s: %m\n", what);
  exit (2);
}

static void
check (bool ok, const char *what, const char *detail)
{
  printf ("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail ? ": " : "",
          detail ? detail : "");
  fflush (stdout);
  if (!ok)
    failures++;
}

static struct rdma_addrinfo *
resolve (int p, bool passive)
{
  struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP,
                                 .ai_flags = passive ? RAI_PASSIVE : 0 };
  struct rdma_addrinfo *ai;
  char ps[16];

  snprintf (ps, sizeof ps, "%d", p);
  if (rdma_getaddrinfo (addr, ps, &hints, &ai))
    die ("rdma_getaddrinfo");
  return ai;
}

static void *
connect_peer (void *arg)
{
  struct pair *P = arg;
  struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
    .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
             .max_recv_sge = 1 }, .sq_sig_all = 1 };
  struct rdma_conn_param cp = { .responder_resources = 1,
                                .initiator_depth = 1, .retry_count = 3 };
  struct rdma_addrinfo *ai = resolve (port, false);

  if (rdma_create_ep (&P->peer, ai, NULL, &qa))
    die ("peer rdma_create_ep");
  rdma_freeaddrinfo (ai);
  if (rdma_connect (P->peer, &cp))
    die ("peer rdma_connect");
  return NULL;
}

/* Wait up to 5 s for one completion on cq. */
static int
wait_wc (struct ibv_cq *cq, struct ibv_wc *wc)
{
  for (int i = 0; i < 5000; i++) {
    int n = ibv_poll_cq (cq, 1, wc);
    if (n < 0)
      die ("ibv_poll_cq");
    if (n == 1)
      return 0;
    usleep (1000);
  }
  return -1;
}

static void
pair_open (struct pair *P)
{
  struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
    .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
             .max_recv_sge = 1 } };
  struct rdma_conn_param cp = { .responder_resources = 1,
                                .initiator_depth = 1, .retry_count = 3 };
  struct rdma_addrinfo *ai = resolve (port, true);
  pthread_t t;

  memset (P, 0, sizeof *P);
  TRACE ("connect a pair on port %d", port);
  if (rdma_create_ep (&P->listen, ai, NULL, NULL))
    die ("rdma_create_ep (listen)");
  rdma_freeaddrinfo (ai);
  if (rdma_listen (P->listen, 1))
    die ("rdma_listen");
  pthread_create (&t, NULL, connect_peer, P);
  if (rdma_get_request (P->listen, &P->owner))
    die ("rdma_get_request");
  P->pd = ibv_alloc_pd (P->owner->verbs);
  P->ocq = P->pd ? ibv_create_cq (P->owner->verbs, 16, NULL, NULL, 0) : NULL;
  if (P->ocq == NULL)
    die ("owner pd/cq");
  qa.send_cq = qa.recv_cq = P->ocq;
  if (rdma_create_qp (P->owner, P->pd, &qa))
    die ("owner rdma_create_qp");
  if (rdma_accept (P->owner, &cp))
    die ("rdma_accept");
  pthread_join (t, NULL);
  P->mem = aligned_alloc (4096, MEMSZ);
  P->pmem = aligned_alloc (4096, MEMSZ);
  memset (P->mem, 0, MEMSZ);
  memset (P->pmem, 0xab, MEMSZ);
  /* What the bridge's pool would be: local write, MW bind, no remote
   * access through the MR's own rkey. */
  P->mr = ibv_reg_mr (P->pd, P->mem, MEMSZ,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  if (P->mr == NULL) {
    check (false, "ibv_reg_mr with IBV_ACCESS_MW_BIND", strerror (errno));
    exit (1);
  }
  P->pmr = rdma_reg_msgs (P->peer, P->pmem, MEMSZ);
  if (P->pmr == NULL)
    die ("peer rdma_reg_msgs");
  port++;
}

static void
pair_close (struct pair *P)
{
  TRACE ("close the pair");
  /* No rdma_disconnect: on these synchronous ids it waits for the
   * DISCONNECTED event, which a broken peer's CM may send only after
   * its timeouts; destroying the ids disconnects too. */
  rdma_dereg_mr (P->pmr);
  rdma_destroy_ep (P->peer);
  rdma_destroy_qp (P->owner);
  ibv_dereg_mr (P->mr);
  ibv_destroy_cq (P->ocq);
  rdma_destroy_id (P->owner);
  ibv_dealloc_pd (P->pd);
  rdma_destroy_ep (P->listen);
  free (P->mem);
  free (P->pmem);
}

/* Post wr on the owner's QP, signalled, and wait for its completion:
 * its status, or -1 (post failed: errno), -2 (no completion). */
static int
owner_post (struct pair *P, struct ibv_send_wr *wr)
{
  struct ibv_send_wr *bad;
  struct ibv_wc wc;
  int e;

  wr->send_flags |= IBV_SEND_SIGNALED;
  e = ibv_post_send (P->owner->qp, wr, &bad);
  if (e) {
    errno = e;
    return -1;
  }
  if (wait_wc (P->ocq, &wc))
    return -2;
  return wc.status;
}

static const char *
status_str (int s)
{
  static char b[120];
  if (s == -1)
    snprintf (b, sizeof b, "ibv_post_send: %s", strerror (errno));
  else if (s == -2)
    snprintf (b, sizeof b, "no completion within 5 s");
  else
    snprintf (b, sizeof b, "wc status %d (%s)", s,
              ibv_wc_status_str ((enum ibv_wc_status) s));
  return b;
}

/* Bind mw to [mem + off, + len) with access.  *rkey: the MW's current
 * rkey in (a type-2 bind by post_send need not update mw->rkey: the
 * caller keeps it), the bound one out. */
static int
mw_bind (struct pair *P, struct ibv_mw *mw, size_t off, size_t len,
      unsigned access, uint32_t *rkey)
{
  struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_BIND_MW };
  int s;

  *rkey = ibv_inc_rkey (*rkey);
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = *rkey;
  wr.bind_mw.bind_info.mr = P->mr;
  wr.bind_mw.bind_info.addr = (uintptr_t) P->mem + off;
  wr.bind_mw.bind_info.length = len;
  wr.bind_mw.bind_info.mw_access_flags = access;
  s = owner_post (P, &wr);
  /* The provider copies mw->rkey into the next bind as the window to
   * rebind (rxe: the kernel checks it against the bound rkey, and a
   * stale one fails that bind with IBV_WC_MW_BIND_ERR); a type-2 bind
   * by post_send leaves it to the caller, as ibv_bind_mw does it for
   * type 1. */
  if (s == IBV_WC_SUCCESS)
    mw->rkey = *rkey;
  return s;
}

static int
local_inv (struct pair *P, uint32_t rkey)
{
  struct ibv_send_wr wr = { .wr_id = 2, .opcode = IBV_WR_LOCAL_INV,
                            .invalidate_rkey = rkey };
  return owner_post (P, &wr);
}

/* The peer RDMA-WRITEs (or READs) len bytes at mem + off with rkey:
 * the completion's status, -1/-2 as owner_post. */
static int
peer_rdma (struct pair *P, bool write, size_t off, size_t len, uint32_t rkey)
{
  int r = write ? rdma_post_write (P->peer, NULL, P->pmem, len, P->pmr,
                                   IBV_SEND_SIGNALED,
                                   (uintptr_t) P->mem + off, rkey)
    : rdma_post_read (P->peer, NULL, P->pmem, len, P->pmr, IBV_SEND_SIGNALED,
                      (uintptr_t) P->mem + off, rkey);
  struct ibv_wc wc;

  if (r)
    return -1;
  if (wait_wc (P->peer->send_cq, &wc))
    return -2;
  return wc.status;
}

static bool
all (const uint8_t *p, size_t n, uint8_t v)
{
  for (size_t i = 0; i < n; i++)
    if (p[i] != v)
      return false;
  return true;
}

/* A fresh pair and MW bound to the window with access; NULL when the
 * allocation or the bind failed (reported). */
static struct ibv_mw *
bound_pair (struct pair *P, unsigned access, uint32_t *rkey)
{
  struct ibv_mw *mw;
  int s;

  pair_open (P);
  mw = ibv_alloc_mw (P->pd, IBV_MW_TYPE_2);
  if (mw == NULL) {
    check (false, "ibv_alloc_mw (IBV_MW_TYPE_2)", strerror (errno));
    return NULL;
  }
  *rkey = mw->rkey;
  s = mw_bind (P, mw, WIN, WIN, access, rkey);
  if (s != IBV_WC_SUCCESS) {
    check (false, "IBV_WR_BIND_MW", status_str (s));
    ibv_dealloc_mw (mw);
    return NULL;
  }
  return mw;
}

static void
hung (int sig)
{
  static const char m[] = "FAIL a step hung for 30 s (see the last mwprobe: "
    "line)\n";
  if (write (1, m, sizeof m - 1) < 0)
    _exit (3);
  _exit (3);
}

int
main (int argc, char **argv)
{
  struct ibv_device_attr da;
  struct pair P;
  struct ibv_mw *mw;
  uint32_t rkey, rkey2;
  char d[200];
  int s;

  if (argc != 3) {
    fprintf (stderr, "usage: rdma-mwprobe ADDR PORT\n");
    return 2;
  }
  addr = argv[1];
  port = atoi (argv[2]);
  setvbuf (stdout, NULL, _IOLBF, 0);
  signal (SIGALRM, hung);
  alarm (30);

  /* 1. What the device says. */
  pair_open (&P);
  if (ibv_query_device (P.owner->verbs, &da))
    die ("ibv_query_device");
  snprintf (d, sizeof d, "%s: device_cap_flags 0x%x, MEM_WINDOW %d, "
            "MEM_WINDOW_TYPE_2A %d, MEM_WINDOW_TYPE_2B %d, max_mw %d",
            ibv_get_device_name (P.owner->verbs->device), da.device_cap_flags,
            !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW),
            !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A),
            !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B),
            da.max_mw);
  check (da.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
                                IBV_DEVICE_MEM_WINDOW_TYPE_2B),
         "type-2 memory windows announced", d);
  mw = ibv_alloc_mw (P.pd, IBV_MW_TYPE_2);
  snprintf (d, sizeof d, "%s", mw ? "allocated" : strerror (errno));
  check (mw != NULL, "ibv_alloc_mw (IBV_MW_TYPE_2)", d);
  if (mw == NULL) {
    printf ("rdma-mwprobe: %d check(s) failed\n", failures);
    return 1;
  }

  /* 2. Bind, write and read inside, invalidate, rebind. */
  rkey = mw->rkey;
  s = mw_bind (&P, mw, WIN, WIN, IBV_ACCESS_REMOTE_WRITE, &rkey);
  snprintf (d, sizeof d, "new rkey 0x%x: %s", rkey, status_str (s));
  check (s == IBV_WC_SUCCESS, "mw_bind (remote write) to a 4 KiB window", d);
  if (s != IBV_WC_SUCCESS)
    return 1;
  s = peer_rdma (&P, true, WIN, WIN, rkey);
  check (s == IBV_WC_SUCCESS && all (P.mem + WIN, WIN, 0xab) &&
         all (P.mem, WIN, 0) && all (P.mem + 2 * WIN, 2 * WIN, 0),
         "RDMA WRITE of the whole window lands, nothing else",
         status_str (s));
  s = local_inv (&P, rkey);
  check (s == IBV_WC_SUCCESS, "IBV_WR_LOCAL_INV of the window",
         status_str (s));
  memset (P.pmem, 0xcd, MEMSZ);
  rkey2 = rkey;
  s = mw_bind (&P, mw, WIN, WIN, IBV_ACCESS_REMOTE_READ, &rkey2);
  snprintf (d, sizeof d, "rkey 0x%x: %s", rkey2, status_str (s));
  check (s == IBV_WC_SUCCESS && rkey2 != rkey,
         "rebind (remote read) after the invalidation, a new rkey", d);
  s = peer_rdma (&P, false, WIN, WIN, rkey2);
  check (s == IBV_WC_SUCCESS && all (P.pmem, WIN, 0xab),
         "RDMA READ through the rebound window", status_str (s));
  s = local_inv (&P, rkey2);
  check (s == IBV_WC_SUCCESS, "IBV_WR_LOCAL_INV again", status_str (s));
  rkey = rkey2;
  s = mw_bind (&P, mw, WIN, 512, IBV_ACCESS_REMOTE_WRITE, &rkey);
  check (s == IBV_WC_SUCCESS, "bind a third time (512 bytes)",
         status_str (s));
  s = peer_rdma (&P, true, WIN + 256, 256, rkey);
  check (s == IBV_WC_SUCCESS, "RDMA WRITE of the window's last 256 bytes",
         status_str (s));
  /* A bound window on a QP that ends: dealloc invalidates it. */
  ibv_dealloc_mw (mw);
  pair_close (&P);

  /* 3. Each of these must fail at the owner's NIC (remote access). */
  struct {
    const char *what;
    bool write;
    size_t off, len;
    unsigned access;
    bool inval, mr_rkey, dealloc;
  } bad[] = {
    /* The first three are the window's bounds (bounds_failures). */
    { "RDMA WRITE one byte past the window", true, 2 * WIN, 1,
      IBV_ACCESS_REMOTE_WRITE, false, false, false },
    { "RDMA WRITE straddling the window's end", true, 2 * WIN - 16, 32,
      IBV_ACCESS_REMOTE_WRITE, false, false, false },
    { "RDMA WRITE before the window", true, WIN - 8, 8,
      IBV_ACCESS_REMOTE_WRITE, false, false, false },
    { "RDMA WRITE to a window bound for remote read only", true, WIN, 16,
      IBV_ACCESS_REMOTE_READ, false, false, false },
    { "RDMA READ from a window bound for remote write only", false, WIN, 16,
      IBV_ACCESS_REMOTE_WRITE, false, false, false },
    { "RDMA WRITE inside the window after IBV_WR_LOCAL_INV", true, WIN, 16,
      IBV_ACCESS_REMOTE_WRITE, true, false, false },
    { "RDMA WRITE with the MR's own rkey (MW_BIND, no remote access)", true,
      WIN, 16, IBV_ACCESS_REMOTE_WRITE, false, true, false },
    { "RDMA WRITE inside the window after ibv_dealloc_mw", true, WIN, 16,
      IBV_ACCESS_REMOTE_WRITE, false, false, true },
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    alarm (30);                 /* a hang fails the check, not the run */
    TRACE ("case %zu: %s", i, bad[i].what);
    mw = bound_pair (&P, bad[i].access, &rkey);
    if (mw == NULL) {
      pair_close (&P);
      continue;
    }
    if (bad[i].inval && (s = local_inv (&P, rkey)) != IBV_WC_SUCCESS)
      check (false, "IBV_WR_LOCAL_INV", status_str (s));
    if (bad[i].dealloc) {
      ibv_dealloc_mw (mw);
      mw = NULL;
    }
    s = peer_rdma (&P, bad[i].write, bad[i].off, bad[i].len,
                   bad[i].mr_rkey ? P.mr->rkey : rkey);
    snprintf (d, sizeof d, "%s; owner's memory %s", status_str (s),
              all (P.mem, MEMSZ, 0) ? "untouched" : "CHANGED");
    check (s == IBV_WC_REM_ACCESS_ERR && all (P.mem, MEMSZ, 0), bad[i].what,
           d);
    /* The known outcome is a write that lands: completed, its bytes
     * there.  A post that failed, no completion or another error status
     * is no verdict on the bounds (exit 1, not 4). */
    if (i < 3 && s == IBV_WC_SUCCESS &&
        all (P.mem + bad[i].off, bad[i].len, 0xab))
      bounds_failures++;
    if (i == 0) {
      /* The owner's QP after the peer's violation: its next bind? */
      struct ibv_qp_attr qa;
      struct ibv_qp_init_attr qi;
      if (ibv_query_qp (P.owner->qp, &qa, IBV_QP_STATE, &qi) == 0)
        printf ("info owner's QP state after that write: %d "
                "(IBV_QPS_ERR is %d)\n", qa.qp_state, IBV_QPS_ERR);
      /* The bridge's recovery: a window bound on a dead QP is
       * deallocated and allocated anew. */
      ibv_dealloc_mw (mw);
      mw = ibv_alloc_mw (P.pd, IBV_MW_TYPE_2);
      check (mw != NULL, "dealloc + alloc of the MW after the QP broke",
             mw ? NULL : strerror (errno));
    }
    if (mw)
      ibv_dealloc_mw (mw);
    pair_close (&P);
  }
  alarm (30);

  /* 4. Many windows: one per request slot, 16 credits. */
  pair_open (&P);
  {
    struct ibv_mw *mws[64];
    int n = 0;
    for (; n < 64; n++)
      if ((mws[n] = ibv_alloc_mw (P.pd, IBV_MW_TYPE_2)) == NULL)
        break;
    snprintf (d, sizeof d, "%d allocated%s%s", n, n < 64 ? ": " : "",
              n < 64 ? strerror (errno) : "");
    check (n == 64, "64 MWs in one PD", d);
    while (n > 0)
      ibv_dealloc_mw (mws[--n]);
  }
  pair_close (&P);

  if (failures == 0) {
    printf ("rdma-mwprobe: type-2 memory windows work as the bridge needs\n");
    return 0;
  }
  if (failures == bounds_failures) {
    printf ("rdma-mwprobe: binds, access, invalidation and deallocation "
            "work, but the device does not check a window's bounds: a "
            "write anywhere in its MR lands\n");
    return 4;
  }
  printf ("rdma-mwprobe: %d check(s) failed\n", failures);
  return 1;
}

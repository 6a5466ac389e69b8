/* gmblock-rdma filter: serves the stack below it to RDMA clients.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A top filter: NBD/TCP clients pass through untouched, and RDMA
 * clients (the gmblock-rdma bridge, docs/rdma-protocol.md) get each a
 * context of their own on the same stack below (cache, readahead,
 * plugin), opened with nbdkit_next_context_open.  docs/rdma-design.md
 * says why and how.
 *
 * Threads: one listener (RDMA CM events: connect requests, disconnects)
 * and one per client, which serves that client's requests one at a
 * time from its completion queue.  Buffers come from one registered,
 * 4K-aligned pool shared by all clients (rdma-pool=), one slot of
 * max_request bytes per request being served.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-filter.h>

#include "counters.h"
#include "rdmaaddr.h"
#include "rdmaproto.h"
#include "sizes.h"

#define NAME "gmblock-rdma"

GM_DEBUG_FLAG (gmblock_rdma_debug_stats, "gmblock-rdma_debug_stats");

enum {
  RC_CLIENTS, RC_REFUSED, RC_DROPPED, RC_PROTO_ERRORS, RC_REQUESTS,
  RC_READ_BYTES, RC_WRITE_BYTES, RC_RDMA_WRITES, RC_RDMA_READS,
  RC_ERROR_REPLIES, RC_POOL_WAITS, RC_COUNT
};
static struct gm_counter rstats[RC_COUNT] = {
  GM_COUNTER (RC_CLIENTS, "clients_accepted", "RDMA clients accepted"),
  GM_COUNTER (RC_REFUSED, "clients_refused", "RDMA connect requests refused"),
  GM_COUNTER (RC_DROPPED, "clients_dropped", "RDMA clients dropped for a protocol or transport error"),
  GM_COUNTER (RC_PROTO_ERRORS, "protocol_errors", "malformed messages received"),
  GM_COUNTER (RC_REQUESTS, "requests", "requests served (with a reply)"),
  GM_COUNTER (RC_READ_BYTES, "read_bytes", "bytes sent to clients by RDMA WRITE"),
  GM_COUNTER (RC_WRITE_BYTES, "write_bytes", "bytes fetched from clients by RDMA READ"),
  GM_COUNTER (RC_RDMA_WRITES, "rdma_writes", "RDMA WRITEs posted"),
  GM_COUNTER (RC_RDMA_READS, "rdma_reads", "RDMA READs posted"),
  GM_COUNTER (RC_ERROR_REPLIES, "error_replies", "replies carrying an error"),
  GM_COUNTER (RC_POOL_WAITS, "pool_waits", "requests that waited for a free pool slot"),
};
#define COUNT(id, n) gm_count (&rstats[id], (n))

#define DEFAULT_POOL (32u << 20)
#define MIN_POOL (1u << 20)
#define MAX_POOL (4ull << 30)
#define SLOT_MAX (1u << 20)     /* largest READ/WRITE offered */
#define CREDITS 16              /* offered per client at most */

/* Configuration. */
static struct gm_rdma_addr listen_addr;
static bool have_addr;
static uint64_t pool_size = DEFAULT_POOL;
static char *stats_file;

/* Process-wide RDMA state, from .after_fork to .cleanup. */
static struct rdma_event_channel *cm_ch;
static struct rdma_cm_id *listen_id;
static struct ibv_pd *pd;
static nbdkit_backend *backend;
static pthread_t listener;
static bool listener_started;
static int wake_pipe[2] = { -1, -1 };

/* The pool: nslots slots of slot_size bytes, one MR. */
static void *pool_mem;
static struct ibv_mr *pool_mr;
static uint32_t slot_size;
static unsigned nslots;
static unsigned *free_slots, nfree;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cond = PTHREAD_COND_INITIALIZER;

struct client {
  struct client *next_client;
  struct rdma_cm_id *id;
  struct ibv_comp_channel *cc;
  struct ibv_cq *cq;
  struct ibv_mr *recv_mr;
  uint8_t *recv_buf;            /* credits * GM_RP_REQUEST_SIZE */
  nbdkit_next *next;
  struct gm_rp_conn rp;
  pthread_t tid;
  bool thread_started;
  bool gone;                    /* listener: its CM id saw the end */
  _Atomic bool finished;        /* its thread has returned */
  unsigned npending;            /* receives completed, not yet served */
  struct ibv_wc pending[GM_RP_MAX_CREDITS];
  char peer[64];
};

static struct client *clients;  /* under clients_lock */
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;

/* wr_id tags. */
#define WR_RECV   0x100000000ull
#define WR_REPLY  0x200000000ull
#define WR_RREAD  0x300000000ull

/* ---- Options. */

static int
rdma_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
             const char *key, const char *value)
{
  char why[160];

  if (strcmp (key, "rdma") == 0) {
    if (gm_rdma_addr_parse (value, &listen_addr, why, sizeof why) == -1) {
      nbdkit_error (NAME ": rdma=%s: %s", value, why);
      return -1;
    }
    have_addr = true;
    return 0;
  }
  if (strcmp (key, "rdma-pool") == 0) {
    const char *w = "out of range";
    char a[32], b[32];
    if (gm_parse_size (value, &pool_size, &w) == -1 ||
        pool_size < MIN_POOL || pool_size > MAX_POOL) {
      nbdkit_error (NAME ": rdma-pool=%s: %s (expected a size from %s to %s, "
                    "such as 32M)", value, w,
                    gm_format_size (MIN_POOL, a, sizeof a),
                    gm_format_size (MAX_POOL, b, sizeof b));
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "rdma-stats") == 0) {
    free (stats_file);
    stats_file = nbdkit_absolute_path (value);
    return stats_file ? 0 : -1;
  }
  return next (nxdata, key, value);
}

static int
rdma_config_complete (nbdkit_next_config_complete *next,
                      nbdkit_backend *nxdata)
{
  if (!have_addr) {
    nbdkit_error (NAME ": rdma=ADDR[:PORT] is required (the address to "
                  "listen on for RDMA clients, default port %d)",
                  GM_RDMA_DEFAULT_PORT);
    return -1;
  }
  return next (nxdata);
}

#define RDMA_CONFIG_HELP \
  "rdma=ADDR[:PORT]        Listen for RDMA clients there (port 10810).\n" \
  "rdma-pool=SIZE          Registered buffer pool shared by RDMA clients (32M).\n" \
  "rdma-stats=FILE         Write counters to FILE at exit."

static int
rdma_get_ready (int thread_model)
{
  char why[256];

  if (thread_model < NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS) {
    nbdkit_error (NAME ": the plugin serialises all requests, but RDMA "
                  "clients are served by threads of their own: use a plugin "
                  "that allows concurrent requests");
    return -1;
  }
  if (gm_rdma_have_device (why, sizeof why) == -1) {
    nbdkit_error (NAME ": rdma=%s:%s: %s", listen_addr.host, listen_addr.port,
                  why);
    return -1;
  }
  return 0;
}

/* ---- The pool. */

static int
pool_create (void)
{
  slot_size = SLOT_MAX;
  nslots = pool_size / slot_size;
  if (posix_memalign (&pool_mem, 4096, (size_t) nslots * slot_size)) {
    nbdkit_error (NAME ": cannot allocate the %u MiB pool", nslots);
    pool_mem = NULL;
    return -1;
  }
  memset (pool_mem, 0, (size_t) nslots * slot_size);
  pool_mr = ibv_reg_mr (pd, pool_mem, (size_t) nslots * slot_size,
                        IBV_ACCESS_LOCAL_WRITE);
  if (pool_mr == NULL) {
    nbdkit_error (NAME ": ibv_reg_mr of the %u MiB pool: %m (raise "
                  "ulimit -l, the locked memory limit)", nslots);
    return -1;
  }
  free_slots = malloc (nslots * sizeof *free_slots);
  if (free_slots == NULL)
    return -1;
  for (nfree = 0; nfree < nslots; nfree++)
    free_slots[nfree] = nslots - 1 - nfree;
  return 0;
}

static unsigned
slot_get (void)
{
  unsigned s;

  pthread_mutex_lock (&pool_lock);
  if (nfree == 0)
    COUNT (RC_POOL_WAITS, 1);
  while (nfree == 0)
    pthread_cond_wait (&pool_cond, &pool_lock);
  s = free_slots[--nfree];
  pthread_mutex_unlock (&pool_lock);
  return s;
}

static void
slot_put (unsigned s)
{
  pthread_mutex_lock (&pool_lock);
  free_slots[nfree++] = s;
  pthread_cond_signal (&pool_cond);
  pthread_mutex_unlock (&pool_lock);
}

static inline uint8_t *
slot_addr (unsigned s)
{
  return (uint8_t *) pool_mem + (size_t) s * slot_size;
}

/* ---- One client: its completions. */

/* The next work completion of c's CQ, blocking.  Returns 0, -1 on a
 * verbs failure.
 */
static int
cq_next (struct client *c, struct ibv_wc *wc)
{
  return gm_rdma_cq_wait (c->cq, c->cc, wc, -1, -1) == 1 ? 0 : -1;
}

/* Wait for the completion of wr_id; receives completed meanwhile are
 * kept for later.  Returns 0 when it succeeded, -1 otherwise.
 */
static int
wait_wr (struct client *c, uint64_t wr_id)
{
  struct ibv_wc wc;

  for (;;) {
    if (cq_next (c, &wc) == -1)
      return -1;
    if (wc.status != IBV_WC_SUCCESS) {
      if (wc.status != IBV_WC_WR_FLUSH_ERR)
        nbdkit_debug (NAME ": %s: %s", c->peer, ibv_wc_status_str (wc.status));
      return -1;
    }
    if ((wc.wr_id & ~0xffffffffull) == WR_RECV) {
      if (c->npending == GM_RP_MAX_CREDITS)
        return -1;
      c->pending[c->npending++] = wc;
    }
    else if (wc.wr_id == wr_id)
      return 0;
  }
}

static int
post_recv (struct client *c, unsigned slot)
{
  struct ibv_sge sge = {
    .addr = (uintptr_t) (c->recv_buf + slot * GM_RP_REQUEST_SIZE),
    .length = GM_RP_REQUEST_SIZE,
    .lkey = c->recv_mr->lkey,
  };
  struct ibv_recv_wr wr = { .wr_id = WR_RECV | slot, .sg_list = &sge,
                            .num_sge = 1 }, *bad;
  return ibv_post_recv (c->id->qp, &wr, &bad) ? -1 : 0;
}

/* Reply to req with error (wire value); for a successful READ, the
 * data in pool slot s is RDMA-WRITten first, on the same QP.  Waits
 * for the reply's completion.  Returns 0, or -1: drop the client.
 */
static int
reply (struct client *c, const struct gm_rp_request *req, uint32_t error,
       int s)
{
  struct gm_rp_reply rep = { .handle = req->handle, .error = error };
  uint8_t msg[GM_RP_REPLY_SIZE];
  struct ibv_sge data_sge, msg_sge;
  struct ibv_send_wr write_wr, send_wr, *bad;
  char why[128];

  gm_rp_encode_reply (&rep, msg);
  memset (&send_wr, 0, sizeof send_wr);
  msg_sge = (struct ibv_sge) { .addr = (uintptr_t) msg,
                               .length = sizeof msg };
  send_wr.wr_id = WR_REPLY;
  send_wr.sg_list = &msg_sge;
  send_wr.num_sge = 1;
  send_wr.opcode = IBV_WR_SEND;
  send_wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  if (req->op == GM_RP_READ && error == 0) {
    memset (&write_wr, 0, sizeof write_wr);
    data_sge = (struct ibv_sge) { .addr = (uintptr_t) slot_addr (s),
                                  .length = req->length,
                                  .lkey = pool_mr->lkey };
    write_wr.wr_id = WR_REPLY | 1;
    write_wr.sg_list = &data_sge;
    write_wr.num_sge = 1;
    write_wr.opcode = IBV_WR_RDMA_WRITE;
    write_wr.wr.rdma.remote_addr = req->addr;
    write_wr.wr.rdma.rkey = req->rkey;
    write_wr.next = &send_wr;
    COUNT (RC_RDMA_WRITES, 1);
    COUNT (RC_READ_BYTES, req->length);
    if (ibv_post_send (c->id->qp, &write_wr, &bad))
      return -1;
  }
  else if (ibv_post_send (c->id->qp, &send_wr, &bad))
    return -1;
  if (error)
    COUNT (RC_ERROR_REPLIES, 1);
  /* The reposted receive is ready: give the credit back. */
  if (gm_rp_conn_request_end (&c->rp, req->handle, NULL, why, sizeof why) == -1)
    return -1;
  COUNT (RC_REQUESTS, 1);
  return wait_wr (c, WR_REPLY);
}

/* Serve one valid request.  Returns 0, or -1: drop the client. */
static int
serve (struct client *c, const struct gm_rp_request *req)
{
  nbdkit_next *next = c->next;
  uint32_t fl = 0;
  int err = 0, r = 0, s = -1;

  if (req->flags & GM_RP_FLAG_FUA)
    fl |= NBDKIT_FLAG_FUA;
  switch (req->op) {
  case GM_RP_READ:
    s = slot_get ();
    r = next->pread (next, slot_addr (s), req->length, req->offset, 0, &err);
    break;
  case GM_RP_WRITE: {
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad;

    s = slot_get ();
    memset (&wr, 0, sizeof wr);
    sge = (struct ibv_sge) { .addr = (uintptr_t) slot_addr (s),
                             .length = req->length, .lkey = pool_mr->lkey };
    wr.wr_id = WR_RREAD;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = req->addr;
    wr.wr.rdma.rkey = req->rkey;
    COUNT (RC_RDMA_READS, 1);
    if (ibv_post_send (c->id->qp, &wr, &bad) || wait_wr (c, WR_RREAD)) {
      /* A bad rkey or address breaks this client's QP only. */
      slot_put (s);
      return -1;
    }
    COUNT (RC_WRITE_BYTES, req->length);
    r = next->pwrite (next, slot_addr (s), req->length, req->offset, fl, &err);
    break;
  }
  case GM_RP_FLUSH:
    r = next->flush (next, 0, &err);
    break;
  case GM_RP_TRIM:
    r = next->trim (next, req->length, req->offset, fl, &err);
    break;
  case GM_RP_ZERO:
    if (!(req->flags & GM_RP_FLAG_NO_HOLE))
      fl |= NBDKIT_FLAG_MAY_TRIM;
    if (req->flags & GM_RP_FLAG_FAST_ZERO)
      fl |= NBDKIT_FLAG_FAST_ZERO;
    r = next->zero (next, req->length, req->offset, fl, &err);
    break;
  case GM_RP_CACHE:
    r = next->cache (next, req->length, req->offset, 0, &err);
    break;
  default:                      /* not advertised: refused by the checks */
    r = -1;
    err = EINVAL;
  }
  if (r == -1 && err == 0)
    err = EIO;
  r = reply (c, req, r == -1 ? gm_rp_error_to_wire (err) : 0, s);
  if (s >= 0)
    slot_put (s);
  return r;
}

static void *
client_run (void *arg)
{
  struct client *c = arg;
  struct ibv_wc wc;
  char why[160];

  for (;;) {
    struct gm_rp_request req;
    unsigned slot;
    int r;

    if (c->npending) {
      wc = c->pending[0];
      memmove (c->pending, c->pending + 1,
               --c->npending * sizeof c->pending[0]);
    }
    else if (cq_next (c, &wc) == -1)
      break;
    if (wc.status != IBV_WC_SUCCESS) {
      if (wc.status != IBV_WC_WR_FLUSH_ERR) {
        nbdkit_debug (NAME ": %s: %s", c->peer, ibv_wc_status_str (wc.status));
        COUNT (RC_DROPPED, 1);
      }
      break;
    }
    if ((wc.wr_id & ~0xffffffffull) != WR_RECV)
      continue;
    slot = wc.wr_id & 0xffffffffu;
    r = gm_rp_conn_take_request (&c->rp,
                                 c->recv_buf + slot * GM_RP_REQUEST_SIZE,
                                 wc.byte_len, &req, why, sizeof why);
    if (r == -1) {
      nbdkit_error (NAME ": %s: protocol error, dropping the client: %s",
                    c->peer, why);
      COUNT (RC_PROTO_ERRORS, 1);
      COUNT (RC_DROPPED, 1);
      break;
    }
    if (req.op == GM_RP_DISCONNECT)
      break;
    if (post_recv (c, slot) == -1) {
      COUNT (RC_DROPPED, 1);
      break;
    }
    if (r > 0 ? reply (c, &req, r, -1) : serve (c, &req)) {
      COUNT (RC_DROPPED, 1);
      break;
    }
  }
  rdma_disconnect (c->id);
  atomic_store (&c->finished, true);
  return NULL;
}

/* ---- Accepting and freeing clients (listener thread). */

static void
client_free (struct client *c)
{
  if (c->thread_started)
    pthread_join (c->tid, NULL);
  if (c->id && c->id->qp)
    rdma_destroy_qp (c->id);
  if (c->cq)
    ibv_destroy_cq (c->cq);
  if (c->cc)
    ibv_destroy_comp_channel (c->cc);
  if (c->recv_mr)
    ibv_dereg_mr (c->recv_mr);
  free (c->recv_buf);
  if (c->next) {
    c->next->finalize (c->next);
    nbdkit_next_context_close (c->next);
  }
  if (c->id)
    rdma_destroy_id (c->id);
  free (c);
}

/* Open c's context on the stack below and learn what it offers. */
static int
open_below (struct client *c, struct gm_rp_limits *l)
{
  nbdkit_next *n;
  uint32_t bmin, bpref, bmax;
  int64_t size;
  int w, fl, fua, tr, z, fz, ca, mc, rot;

  n = nbdkit_next_context_open (backend, 0, "", 1);
  if (n == NULL)
    return -1;
  if (n->prepare (n) == -1) {
    nbdkit_next_context_close (n);
    return -1;
  }
  c->next = n;
  size = n->get_size (n);
  w = n->can_write (n);
  fl = n->can_flush (n);
  fua = n->can_fua (n);
  tr = n->can_trim (n);
  z = n->can_zero (n);
  fz = n->can_fast_zero (n);
  ca = n->can_cache (n);
  mc = n->can_multi_conn (n);
  rot = n->is_rotational (n);
  if (size < 0 || w < 0 || fl < 0 || fua < 0 || tr < 0 || z < 0 || fz < 0 ||
      ca < 0 || mc < 0 || rot < 0 ||
      n->block_size (n, &bmin, &bpref, &bmax) == -1)
    return -1;
  if (bmin == 0) {              /* no constraints */
    bmin = 1;
    bpref = 4096;
    bmax = 0xffffffff;
  }
  if (bpref < 512)
    bpref = 512;
  memset (l, 0, sizeof *l);
  l->size = size;
  l->min_block = bmin;
  l->pref_block = bpref;
  l->max_block = bmax;
  l->max_request = gm_round_down (bmax < slot_size ? bmax : slot_size, bmin);
  l->credits = CREDITS;
  if (!w)
    l->flags |= GM_RP_TF_READ_ONLY;
  if (fl)
    l->flags |= GM_RP_TF_FLUSH;
  if (w && fua != NBDKIT_FUA_NONE)
    l->flags |= GM_RP_TF_FUA;
  if (rot)
    l->flags |= GM_RP_TF_ROTATIONAL;
  if (w && tr)
    l->flags |= GM_RP_TF_TRIM;
  if (w && z != NBDKIT_ZERO_NONE) {
    l->flags |= GM_RP_TF_ZERO;
    if (fz)
      l->flags |= GM_RP_TF_FAST_ZERO;
  }
  if (mc)
    l->flags |= GM_RP_TF_MULTI_CONN;
  if (ca != NBDKIT_CACHE_NONE)
    l->flags |= GM_RP_TF_CACHE;
  return 0;
}

static void
refuse (struct rdma_cm_id *id, struct gm_rp_welcome *w, const char *peer)
{
  uint8_t msg[GM_RP_WELCOME_SIZE];

  nbdkit_debug (NAME ": refusing %s: %s", peer, w->reason);
  COUNT (RC_REFUSED, 1);
  gm_rp_encode_welcome (w, msg);
  rdma_reject (id, msg, sizeof msg);
  rdma_destroy_id (id);
}

static void
peer_name (struct rdma_cm_id *id, char *buf, size_t len)
{
  struct sockaddr *sa = rdma_get_peer_addr (id);
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";

  getnameinfo (sa, sa->sa_family == AF_INET6 ? sizeof (struct sockaddr_in6)
               : sizeof (struct sockaddr_in), host, sizeof host,
               port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
  snprintf (buf, len, "%s:%s", host, port);
}

/* A connect request on id (a new cm_id owned by us from now on). */
static void
on_connect_request (struct rdma_cm_id *id, const struct rdma_conn_param *cp)
{
  struct client *c;
  struct gm_rp_limits offer;
  struct gm_rp_welcome w;
  struct ibv_qp_init_attr qa;
  struct rdma_conn_param accept;
  uint8_t msg[GM_RP_WELCOME_SIZE];
  char why[160];
  char peer[64];
  unsigned i;

  peer_name (id, peer, sizeof peer);
  if (id->verbs != pd->context) {
    gm_rp_welcome_refusal (&w, GM_RP_ENOTSUP,
                           "connected through another RDMA device");
    refuse (id, &w, peer);
    return;
  }
  c = calloc (1, sizeof *c);
  if (c == NULL) {
    gm_rp_welcome_refusal (&w, GM_RP_ENOMEM, "out of memory");
    refuse (id, &w, peer);
    return;
  }
  strcpy (c->peer, peer);
  gm_rp_conn_init (&c->rp, GM_RP_SERVER);
  if (open_below (c, &offer) == -1) {
    gm_rp_welcome_refusal (&w, GM_RP_EIO, "cannot open the export");
    goto refused;
  }
  if (gm_rp_conn_accept_hello (&c->rp, cp->private_data,
                               cp->private_data_len, &offer, &w,
                               why, sizeof why) == -1) {
    nbdkit_error (NAME ": %s: bad hello: %s", peer, why);
    COUNT (RC_PROTO_ERRORS, 1);
    goto refused;
  }
  c->id = id;
  c->recv_buf = calloc (c->rp.lim.credits, GM_RP_REQUEST_SIZE);
  c->cc = ibv_create_comp_channel (id->verbs);
  if (c->recv_buf == NULL || c->cc == NULL)
    goto failed;
  c->cq = ibv_create_cq (id->verbs, 3 * c->rp.lim.credits + 8, c, c->cc, 0);
  c->recv_mr = ibv_reg_mr (pd, c->recv_buf,
                           c->rp.lim.credits * GM_RP_REQUEST_SIZE,
                           IBV_ACCESS_LOCAL_WRITE);
  if (c->cq == NULL || c->recv_mr == NULL)
    goto failed;
  memset (&qa, 0, sizeof qa);
  qa.send_cq = qa.recv_cq = c->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 8;
  qa.cap.max_recv_wr = c->rp.lim.credits;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = GM_RP_REPLY_SIZE;
  if (rdma_create_qp (id, pd, &qa))
    goto failed;
  for (i = 0; i < c->rp.lim.credits; i++)
    if (post_recv (c, i) == -1)
      goto failed;
  gm_rp_encode_welcome (&w, msg);
  memset (&accept, 0, sizeof accept);
  accept.private_data = msg;
  accept.private_data_len = sizeof msg;
  accept.initiator_depth = cp->responder_resources ? cp->responder_resources : 1;
  accept.responder_resources = cp->initiator_depth;
  accept.rnr_retry_count = 7;
  if (rdma_accept (id, &accept))
    goto failed;
  id->context = c;
  if (pthread_create (&c->tid, NULL, client_run, c)) {
    rdma_disconnect (id);
    c->thread_started = false;
  }
  else
    c->thread_started = true;
  pthread_mutex_lock (&clients_lock);
  c->next_client = clients;
  clients = c;
  pthread_mutex_unlock (&clients_lock);
  COUNT (RC_CLIENTS, 1);
  nbdkit_debug (NAME ": accepted %s: %u credits, max request %u",
                peer, c->rp.lim.credits, c->rp.lim.max_request);
  return;

 failed:
  nbdkit_error (NAME ": %s: cannot set up the connection: %m", peer);
  gm_rp_welcome_refusal (&w, GM_RP_ENOMEM, "out of resources");
 refused:
  {
    uint8_t m[GM_RP_WELCOME_SIZE];
    COUNT (RC_REFUSED, 1);
    gm_rp_encode_welcome (&w, m);
    rdma_reject (id, m, sizeof m);
    c->id = id;
    client_free (c);
  }
}

/* The client on id is gone (or never got established): disconnecting
 * flushes its QP, so its thread ends soon; reap frees it then.  The
 * listener never waits for a client's thread (which may be waiting for
 * a pool slot or the storage), so connects are always answered.
 */
static void
on_gone (struct rdma_cm_id *id)
{
  struct client *c = id->context;

  if (c == NULL)
    return;
  rdma_disconnect (id);
  c->gone = true;
  nbdkit_debug (NAME ": %s disconnected", c->peer);
}

/* Free the clients that are gone and whose threads have returned. */
static void
reap (void)
{
  struct client **p = &clients, *c;

  pthread_mutex_lock (&clients_lock);
  while ((c = *p) != NULL) {
    if (c->gone && (!c->thread_started || atomic_load (&c->finished))) {
      *p = c->next_client;
      pthread_mutex_unlock (&clients_lock);
      client_free (c);
      pthread_mutex_lock (&clients_lock);
    }
    else
      p = &c->next_client;
  }
  pthread_mutex_unlock (&clients_lock);
}

static void *
listener_run (void *arg)
{
  for (;;) {
    struct pollfd fds[2] = {
      { .fd = cm_ch->fd, .events = POLLIN },
      { .fd = wake_pipe[0], .events = POLLIN },
    };
    struct rdma_cm_event *ev;
    struct rdma_cm_id *id;
    enum rdma_cm_event_type type;

    int n = poll (fds, 2, 200);

    if (n == -1 && errno != EINTR)
      break;
    reap ();
    if (n <= 0)
      continue;
    if (fds[1].revents)
      break;
    if (rdma_get_cm_event (cm_ch, &ev)) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      break;
    }
    id = ev->id;
    type = ev->event;
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      struct rdma_conn_param cp = ev->param.conn;
      uint8_t hello[256];       /* private_data_len is a uint8_t */
      size_t len = cp.private_data_len;
      /* The private data lives in the event: copy it, ack, then act. */
      if (cp.private_data)
        memcpy (hello, cp.private_data, len);
      cp.private_data = hello;
      cp.private_data_len = len;
      rdma_ack_cm_event (ev);
      on_connect_request (id, &cp);
      continue;
    }
    rdma_ack_cm_event (ev);
    switch (type) {
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      if (id != listen_id)
        on_gone (id);
      break;
    default:
      break;
    }
  }
  return NULL;
}

/* ---- Life cycle. */

static void rdma_cleanup (nbdkit_backend *b);

static int
rdma_after_fork (nbdkit_backend *b)
{
  struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
                            .ai_flags = AI_PASSIVE }, *ai = NULL;
  int e;

  backend = b;
  e = getaddrinfo (listen_addr.host, listen_addr.port, &hints, &ai);
  if (e) {
    nbdkit_error (NAME ": rdma=%s:%s: %s", listen_addr.host, listen_addr.port,
                  gai_strerror (e));
    return -1;
  }
  cm_ch = rdma_create_event_channel ();
  if (cm_ch == NULL || rdma_create_id (cm_ch, &listen_id, NULL, RDMA_PS_TCP)) {
    nbdkit_error (NAME ": cannot create an RDMA CM id: %m");
    goto fail;
  }
  if (rdma_bind_addr (listen_id, ai->ai_addr)) {
    nbdkit_error (NAME ": rdma=%s:%s: cannot bind: %m (is the address one of "
                  "an RDMA device's network interfaces?)",
                  listen_addr.host, listen_addr.port);
    goto fail;
  }
  if (listen_id->verbs == NULL) {
    nbdkit_error (NAME ": rdma=%s:%s: the address belongs to no RDMA device "
                  "(give the address of an RDMA interface, not a wildcard)",
                  listen_addr.host, listen_addr.port);
    goto fail;
  }
  pd = ibv_alloc_pd (listen_id->verbs);
  if (pd == NULL) {
    nbdkit_error (NAME ": ibv_alloc_pd: %m");
    goto fail;
  }
  if (pool_create () == -1)
    goto fail;
  if (rdma_listen (listen_id, 64)) {
    nbdkit_error (NAME ": rdma_listen on %s:%s: %m", listen_addr.host,
                  listen_addr.port);
    goto fail;
  }
  if (pipe2 (wake_pipe, O_CLOEXEC) || pthread_create (&listener, NULL,
                                                      listener_run, NULL)) {
    nbdkit_error (NAME ": cannot start the listener: %m");
    goto fail;
  }
  listener_started = true;
  freeaddrinfo (ai);
  nbdkit_debug (NAME ": listening on %s:%s (device %s), pool %u x %u bytes",
                listen_addr.host, listen_addr.port,
                ibv_get_device_name (listen_id->verbs->device), nslots,
                slot_size);
  return 0;

 fail:
  freeaddrinfo (ai);
  rdma_cleanup (b);
  return -1;
}

static void
rdma_cleanup (nbdkit_backend *b)
{
  if (listener_started) {
    char x = 0;
    if (write (wake_pipe[1], &x, 1) != 1)
      nbdkit_debug (NAME ": wake the listener: %m");
    pthread_join (listener, NULL);
    listener_started = false;
  }
  while (clients) {
    struct client *c = clients;
    clients = c->next_client;
    rdma_disconnect (c->id);
    client_free (c);
  }
  if (listen_id) {
    rdma_destroy_id (listen_id);
    listen_id = NULL;
  }
  if (pool_mr) {
    ibv_dereg_mr (pool_mr);
    pool_mr = NULL;
  }
  free (pool_mem);
  pool_mem = NULL;
  free (free_slots);
  free_slots = NULL;
  if (pd) {
    ibv_dealloc_pd (pd);
    pd = NULL;
  }
  if (cm_ch) {
    rdma_destroy_event_channel (cm_ch);
    cm_ch = NULL;
  }
  for (int i = 0; i < 2; i++)
    if (wake_pipe[i] >= 0) {
      close (wake_pipe[i]);
      wake_pipe[i] = -1;
    }
}

static void
rdma_unload (void)
{
  if (gm_counters_report (gmblock_rdma_debug_stats, stats_file, NAME,
                          rstats, RC_COUNT, NULL, NULL) == -1)
    nbdkit_error (NAME ": rdma-stats=%s: %m", stats_file);
  free (stats_file);
}

static struct nbdkit_filter filter = {
  .name = NAME,
  .longname = "gmblock RDMA transport (server side)",
  .config = rdma_config,
  .config_complete = rdma_config_complete,
  .config_help = RDMA_CONFIG_HELP,
  .get_ready = rdma_get_ready,
  .after_fork = rdma_after_fork,
  .cleanup = rdma_cleanup,
  .unload = rdma_unload,
};

NBDKIT_REGISTER_FILTER (filter)

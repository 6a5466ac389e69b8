/* gmblock-rdma plugin: the client bridge.  Serves a gmblock RDMA
 * server (the gmblock-rdma filter, docs/rdma-protocol.md) as an
 * ordinary NBD export, for nbd-client, qemu-nbd, QEMU and libnbd tools.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * One RC connection per NBD connection, opened in .open; requests of a
 * connection are served one at a time (SERIALIZE_REQUESTS: nbdkit
 * serves connections in parallel, and the server advertises
 * multi-conn, so nbdcopy and friends open several).  The data moves
 * through one registered bounce buffer per connection (max_request
 * bytes): a READ's data is RDMA-WRITten there by the server and copied
 * to nbdkit's buffer, a WRITE's is copied there first (counted in
 * bytes_copied).  Avoiding that copy (on-demand-paging MRs, or a
 * registration cache) is later work: docs/rdma-design.md.
 *
 * When the server goes away, the request in flight fails with EIO and
 * the connection is marked dead; the next request reconnects (and a
 * READ, FLUSH or CACHE that failed for the transport is retried once
 * on the new connection).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "counters.h"
#include "rdmaaddr.h"
#include "rdmaproto.h"

#define NAME "gmblock-rdma"
#define THREAD_MODEL NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS
#define ASK_MAX_REQUEST (4u << 20)
#define TIMEOUT_MS 5000

GM_DEBUG_FLAG (gmblock_rdma_debug_stats, "gmblock-rdma_debug_stats");

enum {
  BC_CONNECTS, BC_RECONNECTS, BC_REQUESTS, BC_READ_BYTES, BC_WRITE_BYTES,
  BC_COPIED, BC_ERRORS, BC_TRANSPORT_ERRORS, BC_RETRIES, BC_COUNT
};
static struct gm_counter bstats[BC_COUNT] = {
  GM_COUNTER (BC_CONNECTS, "connects", "RDMA connections established"),
  GM_COUNTER (BC_RECONNECTS, "reconnects", "connections re-established after a failure"),
  GM_COUNTER (BC_REQUESTS, "requests", "requests sent to the server"),
  GM_COUNTER (BC_READ_BYTES, "read_bytes", "bytes read from the server"),
  GM_COUNTER (BC_WRITE_BYTES, "write_bytes", "bytes written to the server"),
  GM_COUNTER (BC_COPIED, "bytes_copied", "bytes copied through the bounce buffer"),
  GM_COUNTER (BC_ERRORS, "error_replies", "requests the server answered with an error"),
  GM_COUNTER (BC_TRANSPORT_ERRORS, "transport_errors", "requests failed with EIO because the connection broke"),
  GM_COUNTER (BC_RETRIES, "retries", "idempotent requests retried after a reconnect"),
};
#define COUNT(id, n) gm_count (&bstats[id], (n))

static struct gm_rdma_addr server;
static bool have_server;
static char *stats_file;

struct conn {
  struct rdma_event_channel *ch;
  struct rdma_cm_id *id;
  struct ibv_pd *pd;
  struct ibv_comp_channel *cc;
  struct ibv_cq *cq;
  struct ibv_mr *msg_mr, *buf_mr;
  uint8_t msg[GM_RP_REQUEST_SIZE + GM_RP_REPLY_SIZE]; /* request, reply */
  void *buf;                    /* bounce buffer, lim.max_request bytes */
  struct gm_rp_conn rp;
  bool dead;                    /* broken: reconnect before the next request */
  bool ever;                    /* was connected once */
  bool refused;                 /* the server answered with a refusal */
  char why[160];                /* why the last connect attempt failed */
  struct gm_rp_limits lim;      /* of the first connection: what nbdkit
                                 * was told; a reconnect must match */
  uint64_t next_handle;
};

static int
bridge_config (const char *key, const char *value)
{
  char why[160];

  if (strcmp (key, "server") == 0) {
    if (gm_rdma_addr_parse (value, &server, why, sizeof why) == -1) {
      nbdkit_error (NAME ": server=%s: %s", value, why);
      return -1;
    }
    have_server = true;
    return 0;
  }
  if (strcmp (key, "stats") == 0) {
    free (stats_file);
    stats_file = nbdkit_absolute_path (value);
    return stats_file ? 0 : -1;
  }
  nbdkit_error (NAME ": unknown parameter '%s' (expected server=HOST[:PORT] "
                "or stats=FILE)", key);
  return -1;
}

static int
bridge_config_complete (void)
{
  if (!have_server) {
    nbdkit_error (NAME ": server=HOST[:PORT] is required (the gmblock RDMA "
                  "server, default port %d)", GM_RDMA_DEFAULT_PORT);
    return -1;
  }
  return 0;
}

/* A bridge that cannot reach any server should say so at start-up. */
static int
bridge_get_ready (void)
{
  char why[256];

  if (gm_rdma_have_device (why, sizeof why) == -1) {
    nbdkit_error (NAME ": server=%s:%s: %s", server.host, server.port, why);
    return -1;
  }
  return 0;
}

#define BRIDGE_CONFIG_HELP \
  "server=HOST[:PORT]      The gmblock RDMA server (port 10810).\n" \
  "stats=FILE              Write counters to FILE at exit."

static void
bridge_unload (void)
{
  if (gm_counters_report (gmblock_rdma_debug_stats, stats_file, NAME,
                          bstats, BC_COUNT, NULL, NULL) == -1)
    nbdkit_error (NAME ": stats=%s: %m", stats_file);
  free (stats_file);
}

/* ---- Connection set-up and tear-down. */

static void
teardown (struct conn *c)
{
  if (c->id && c->id->qp)
    rdma_disconnect (c->id);
  if (c->id && c->id->qp)
    rdma_destroy_qp (c->id);
  if (c->cq)
    ibv_destroy_cq (c->cq);
  if (c->cc)
    ibv_destroy_comp_channel (c->cc);
  if (c->msg_mr)
    ibv_dereg_mr (c->msg_mr);
  if (c->buf_mr)
    ibv_dereg_mr (c->buf_mr);
  free (c->buf);
  if (c->pd)
    ibv_dealloc_pd (c->pd);
  if (c->id)
    rdma_destroy_id (c->id);
  if (c->ch)
    rdma_destroy_event_channel (c->ch);
  c->ch = NULL;
  c->id = NULL;
  c->pd = NULL;
  c->cc = NULL;
  c->cq = NULL;
  c->msg_mr = c->buf_mr = NULL;
  c->buf = NULL;
}

/* Wait (TIMEOUT_MS) for the next CM event on c, which must be want;
 * on success *ev is the event, to be acked by the caller.
 */
static int
cm_wait (struct conn *c, enum rdma_cm_event_type want,
         struct rdma_cm_event **ev)
{
  struct pollfd p = { .fd = c->ch->fd, .events = POLLIN };
  int r = poll (&p, 1, TIMEOUT_MS);

  if (r == 0) {
    nbdkit_error (NAME ": %s:%s: no answer within %d ms while waiting for %s",
                  server.host, server.port, TIMEOUT_MS, rdma_event_str (want));
    return -1;
  }
  if (r < 0 || rdma_get_cm_event (c->ch, ev)) {
    nbdkit_error (NAME ": rdma_get_cm_event: %m");
    return -1;
  }
  if ((*ev)->event == want)
    return 0;
  if ((*ev)->event == RDMA_CM_EVENT_REJECTED && want == RDMA_CM_EVENT_ESTABLISHED
      && (*ev)->param.conn.private_data_len) {
    struct gm_rp_welcome w;
    char why[160];
    if (gm_rp_decode_welcome ((*ev)->param.conn.private_data,
                              (*ev)->param.conn.private_data_len, &w,
                              why, sizeof why) == 0 && w.error) {
      nbdkit_error (NAME ": %s:%s refused the connection: %s (error %u)",
                    server.host, server.port, w.reason, w.error);
      c->refused = true;
      rdma_ack_cm_event (*ev);
      return -1;
    }
  }
  snprintf (c->why, sizeof c->why, "%s (status %d) while waiting for %s",
            rdma_event_str ((*ev)->event), (*ev)->status,
            rdma_event_str (want));
  nbdkit_debug (NAME ": %s:%s: %s", server.host, server.port, c->why);
  rdma_ack_cm_event (*ev);
  return -1;
}

static int
post_reply_recv (struct conn *c)
{
  struct ibv_sge sge = { .addr = (uintptr_t) (c->msg + GM_RP_REQUEST_SIZE),
                         .length = GM_RP_REPLY_SIZE, .lkey = c->msg_mr->lkey };
  struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
  return ibv_post_recv (c->id->qp, &wr, &bad) ? -1 : 0;
}

static int
connect_server (struct conn *c)
{
  struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
  struct rdma_cm_event *ev;
  struct ibv_qp_init_attr qa;
  struct rdma_conn_param cp;
  struct gm_rp_hello hello;
  uint8_t hmsg[GM_RP_HELLO_SIZE];
  char why[160];
  int e;

  gm_rp_conn_init (&c->rp, GM_RP_CLIENT);
  e = getaddrinfo (server.host, server.port, &hints, &ai);
  if (e) {
    nbdkit_error (NAME ": server=%s:%s: %s", server.host, server.port,
                  gai_strerror (e));
    return -1;
  }
  c->ch = rdma_create_event_channel ();
  if (c->ch == NULL || rdma_create_id (c->ch, &c->id, NULL, RDMA_PS_TCP)) {
    nbdkit_error (NAME ": cannot create an RDMA CM id: %m");
    goto fail;
  }
  if (rdma_resolve_addr (c->id, NULL, ai->ai_addr, TIMEOUT_MS)) {
    nbdkit_error (NAME ": server=%s:%s: rdma_resolve_addr: %m",
                  server.host, server.port);
    goto fail;
  }
  if (cm_wait (c, RDMA_CM_EVENT_ADDR_RESOLVED, &ev) == -1)
    goto fail;
  rdma_ack_cm_event (ev);
  if (rdma_resolve_route (c->id, TIMEOUT_MS)) {
    nbdkit_error (NAME ": rdma_resolve_route: %m");
    goto fail;
  }
  if (cm_wait (c, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev) == -1)
    goto fail;
  rdma_ack_cm_event (ev);
  c->pd = ibv_alloc_pd (c->id->verbs);
  c->cc = c->pd ? ibv_create_comp_channel (c->id->verbs) : NULL;
  c->cq = c->cc ? ibv_create_cq (c->id->verbs, 8, c, c->cc, 0) : NULL;
  c->msg_mr = c->pd ? ibv_reg_mr (c->pd, c->msg, sizeof c->msg,
                                  IBV_ACCESS_LOCAL_WRITE) : NULL;
  if (c->cq == NULL || c->msg_mr == NULL) {
    nbdkit_error (NAME ": cannot allocate verbs resources: %m");
    goto fail;
  }
  if (fcntl (c->cc->fd, F_SETFL, fcntl (c->cc->fd, F_GETFL) | O_NONBLOCK) ||
      fcntl (c->ch->fd, F_SETFL, fcntl (c->ch->fd, F_GETFL) | O_NONBLOCK))
    goto fail;
  memset (&qa, 0, sizeof qa);
  qa.send_cq = qa.recv_cq = c->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 2;
  qa.cap.max_recv_wr = 1;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (rdma_create_qp (c->id, c->pd, &qa)) {
    nbdkit_error (NAME ": rdma_create_qp: %m");
    goto fail;
  }
  /* One credit: this connection's requests are serialised. */
  if (gm_rp_conn_hello (&c->rp, 1, ASK_MAX_REQUEST, &hello,
                        why, sizeof why) == -1 ||
      post_reply_recv (c) == -1)
    goto fail;
  gm_rp_encode_hello (&hello, hmsg);
  memset (&cp, 0, sizeof cp);
  cp.private_data = hmsg;
  cp.private_data_len = sizeof hmsg;
  cp.responder_resources = 1;   /* the server RDMA-READs our writes */
  cp.initiator_depth = 1;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  if (rdma_connect (c->id, &cp)) {
    nbdkit_error (NAME ": rdma_connect: %m");
    goto fail;
  }
  if (cm_wait (c, RDMA_CM_EVENT_ESTABLISHED, &ev) == -1)
    goto fail;
  e = gm_rp_conn_take_welcome (&c->rp, ev->param.conn.private_data,
                               ev->param.conn.private_data_len,
                               why, sizeof why);
  rdma_ack_cm_event (ev);
  if (e == -1) {
    nbdkit_error (NAME ": %s:%s: bad welcome: %s", server.host, server.port,
                  why);
    goto fail;
  }
  if (posix_memalign (&c->buf, 4096, c->rp.lim.max_request)) {
    c->buf = NULL;
    goto fail;
  }
  c->buf_mr = ibv_reg_mr (c->pd, c->buf, c->rp.lim.max_request,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                          IBV_ACCESS_REMOTE_WRITE);
  if (c->buf_mr == NULL) {
    nbdkit_error (NAME ": ibv_reg_mr: %m");
    goto fail;
  }
  if (c->ever && (c->rp.lim.size != c->lim.size ||
                   c->rp.lim.flags != c->lim.flags ||
                   c->rp.lim.max_request != c->lim.max_request)) {
    nbdkit_error (NAME ": the export changed (size, flags or max request) "
                  "across a reconnect");
    goto fail;
  }
  freeaddrinfo (ai);
  COUNT (c->ever ? BC_RECONNECTS : BC_CONNECTS, 1);
  c->ever = true;
  c->lim = c->rp.lim;
  c->dead = false;
  nbdkit_debug (NAME ": connected to %s:%s: size %llu, max request %u, "
                "flags 0x%x", server.host, server.port,
                (unsigned long long) c->rp.lim.size, c->rp.lim.max_request,
                c->rp.lim.flags);
  return 0;

 fail:
  if (ai)
    freeaddrinfo (ai);
  teardown (c);
  return -1;
}

/* connect_server, tried 3 times over about a second unless the server
 * refused: a connect request can be rejected for want of a listener
 * while the server (re)starts, and soft-RoCE has been seen to reject
 * one now and then (status 8) with the server listening.
 */
static int
connect_retry (struct conn *c)
{
  for (int i = 0; i < 3; i++) {
    if (i)
      usleep (150000u << i);
    c->refused = false;
    strcpy (c->why, "see the messages above");
    if (connect_server (c) == 0)
      return 0;
    if (c->refused)
      break;
  }
  if (!c->refused)
    nbdkit_error (NAME ": cannot connect to %s:%s after 3 tries: %s",
                  server.host, server.port, c->why);
  return -1;
}

static void *
bridge_open (int readonly)
{
  struct conn *c = calloc (1, sizeof *c);

  if (c == NULL) {
    nbdkit_error (NAME ": calloc: %m");
    return NULL;
  }
  if (connect_retry (c) == -1) {
    free (c);
    return NULL;
  }
  return c;
}

static void
bridge_close (void *handle)
{
  struct conn *c = handle;

  if (!c->dead && c->id && gm_rp_conn_credits_free (&c->rp)) {
    /* Say goodbye; the server closes. */
    struct gm_rp_request r = { .op = GM_RP_DISCONNECT, .handle = ~0ull };
    struct ibv_sge sge = { .addr = (uintptr_t) c->msg,
                           .length = GM_RP_REQUEST_SIZE,
                           .lkey = c->msg_mr->lkey };
    struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
                              .opcode = IBV_WR_SEND }, *bad;
    char why[128];
    if (gm_rp_conn_request_begin (&c->rp, &r, why, sizeof why) == 0) {
      gm_rp_encode_request (&r, c->msg);
      ibv_post_send (c->id->qp, &wr, &bad);
    }
  }
  teardown (c);
  free (c);
}

/* ---- Requests. */

/* Wait for n completions (the SEND and the reply's receive).  Returns
 * 0, or -1 when the connection broke (or the server went silent).
 */
static int
wait_completions (struct conn *c, int n)
{
  while (n > 0) {
    struct ibv_wc wc;
    struct rdma_cm_event *ev;
    int r = gm_rdma_cq_wait (c->cq, c->cc, &wc, c->ch->fd, 60 * 1000);

    if (r == -1) {
      nbdkit_debug (NAME ": no completion (verbs error, or 60 s of silence)");
      return -1;
    }
    if (r == 1) {
      if (wc.status != IBV_WC_SUCCESS) {
        nbdkit_debug (NAME ": completion: %s", ibv_wc_status_str (wc.status));
        return -1;
      }
      n--;
    }
    else if (rdma_get_cm_event (c->ch, &ev) == 0) {
      enum rdma_cm_event_type t = ev->event;
      rdma_ack_cm_event (ev);
      nbdkit_debug (NAME ": %s", rdma_event_str (t));
      if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL)
        return -1;
    }
  }
  return 0;
}

/* One request on the wire.  Returns 0, a positive errno (the server's
 * or the checks' answer), or -1: the transport failed.
 */
static int
exchange (struct conn *c, uint8_t op, uint16_t flags, uint32_t len,
          uint64_t offset)
{
  struct gm_rp_request r = { .op = op, .flags = flags, .length = len,
                             .offset = offset };
  struct gm_rp_reply rep;
  struct ibv_sge sge;
  struct ibv_send_wr wr, *bad;
  char why[160];
  int e;

  if (c->dead || c->id == NULL) {
    teardown (c);
    if (connect_retry (c) == -1) {
      c->dead = true;
      return -1;
    }
  }
  r.handle = ++c->next_handle;
  if (op == GM_RP_READ || op == GM_RP_WRITE) {
    r.addr = (uintptr_t) c->buf;
    r.rkey = c->buf_mr->rkey;
    r.buf_len = c->rp.lim.max_request;
  }
  e = gm_rp_conn_request_begin (&c->rp, &r, why, sizeof why);
  if (e > 0) {
    nbdkit_debug (NAME ": refused locally: %s", why);
    return gm_rp_error_from_wire (e);
  }
  if (e == -1) {
    nbdkit_error (NAME ": %s", why);
    c->dead = true;
    return -1;
  }
  gm_rp_encode_request (&r, c->msg);
  sge = (struct ibv_sge) { .addr = (uintptr_t) c->msg,
                           .length = GM_RP_REQUEST_SIZE,
                           .lkey = c->msg_mr->lkey };
  memset (&wr, 0, sizeof wr);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  COUNT (BC_REQUESTS, 1);
  if (ibv_post_send (c->id->qp, &wr, &bad) || wait_completions (c, 2) == -1)
    goto broken;
  if (gm_rp_conn_take_reply (&c->rp, c->msg + GM_RP_REQUEST_SIZE,
                             GM_RP_REPLY_SIZE, &rep, &r, why, sizeof why)) {
    nbdkit_error (NAME ": protocol error from the server: %s", why);
    goto broken;
  }
  if (post_reply_recv (c) == -1)
    goto broken;
  if (rep.error) {
    COUNT (BC_ERRORS, 1);
    return gm_rp_error_from_wire (rep.error);
  }
  return 0;

 broken:
  COUNT (BC_TRANSPORT_ERRORS, 1);
  c->dead = true;
  return -1;
}

/* exchange, with one retry on a new connection for idempotent ops.
 * Returns 0 or -1 with the nbdkit error set.
 */
static int
request (struct conn *c, uint8_t op, uint16_t flags, uint32_t len,
         uint64_t offset, bool idempotent)
{
  int e = exchange (c, op, flags, len, offset);

  if (e == -1 && idempotent) {
    COUNT (BC_RETRIES, 1);
    e = exchange (c, op, flags, len, offset);
  }
  if (e == 0)
    return 0;
  nbdkit_set_error (e == -1 ? EIO : e);
  return -1;
}

static int64_t
bridge_get_size (void *handle)
{
  return ((struct conn *) handle)->lim.size;
}

static int
bridge_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                   uint32_t *maximum)
{
  struct conn *c = handle;

  *minimum = c->lim.min_block;
  *preferred = c->lim.pref_block;
  *maximum = c->lim.max_block;
  return 0;
}

#define FLAG(c, f) (((c)->lim.flags & (f)) != 0)

static int
bridge_can_write (void *handle)
{
  return !FLAG ((struct conn *) handle, GM_RP_TF_READ_ONLY);
}

static int
bridge_can_flush (void *handle)
{
  return FLAG ((struct conn *) handle, GM_RP_TF_FLUSH);
}

static int
bridge_can_fua (void *handle)
{
  return FLAG ((struct conn *) handle, GM_RP_TF_FUA) ? NBDKIT_FUA_NATIVE
    : NBDKIT_FUA_NONE;
}

static int
bridge_can_trim (void *handle)
{
  return FLAG ((struct conn *) handle, GM_RP_TF_TRIM);
}

static int
bridge_can_zero (void *handle)
{
  /* 0: nbdkit emulates ZERO with pwrite. */
  return FLAG ((struct conn *) handle, GM_RP_TF_ZERO);
}

static int
bridge_can_fast_zero (void *handle)
{
  return FLAG ((struct conn *) handle, GM_RP_TF_FAST_ZERO);
}

static int
bridge_can_cache (void *handle)
{
  return FLAG ((struct conn *) handle, GM_RP_TF_CACHE) ? NBDKIT_CACHE_NATIVE
    : NBDKIT_CACHE_NONE;
}

static int
bridge_can_multi_conn (void *handle)
{
  return FLAG ((struct conn *) handle, GM_RP_TF_MULTI_CONN);
}

static int
bridge_is_rotational (void *handle)
{
  return FLAG ((struct conn *) handle, GM_RP_TF_ROTATIONAL);
}

static int
bridge_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
              uint32_t flags)
{
  struct conn *c = handle;

  while (count > 0) {
    uint32_t n = count < c->lim.max_request ? count : c->lim.max_request;
    if (request (c, GM_RP_READ, 0, n, offset, true) == -1)
      return -1;
    memcpy (buf, c->buf, n);
    COUNT (BC_COPIED, n);
    COUNT (BC_READ_BYTES, n);
    buf = (char *) buf + n;
    count -= n;
    offset += n;
  }
  return 0;
}

static int
bridge_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
               uint32_t flags)
{
  struct conn *c = handle;
  uint16_t fl = (flags & NBDKIT_FLAG_FUA) ? GM_RP_FLAG_FUA : 0;

  while (count > 0) {
    uint32_t n = count < c->lim.max_request ? count : c->lim.max_request;
    /* Not retried: NBD clients retry failed writes themselves. */
    memcpy (c->buf, buf, n);
    COUNT (BC_COPIED, n);
    if (request (c, GM_RP_WRITE, fl, n, offset, false) == -1)
      return -1;
    COUNT (BC_WRITE_BYTES, n);
    buf = (const char *) buf + n;
    count -= n;
    offset += n;
  }
  return 0;
}

static int
bridge_flush (void *handle, uint32_t flags)
{
  return request (handle, GM_RP_FLUSH, 0, 0, 0, true);
}

static int
bridge_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  return request (handle, GM_RP_TRIM,
                  (flags & NBDKIT_FLAG_FUA) ? GM_RP_FLAG_FUA : 0,
                  count, offset, false);
}

static int
bridge_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  uint16_t fl = 0;

  if (flags & NBDKIT_FLAG_FUA)
    fl |= GM_RP_FLAG_FUA;
  if (!(flags & NBDKIT_FLAG_MAY_TRIM))
    fl |= GM_RP_FLAG_NO_HOLE;
  if (flags & NBDKIT_FLAG_FAST_ZERO)
    fl |= GM_RP_FLAG_FAST_ZERO;
  return request (handle, GM_RP_ZERO, fl, count, offset, false);
}

static int
bridge_cache (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  return request (handle, GM_RP_CACHE, 0, count, offset, true);
}

static struct nbdkit_plugin plugin = {
  .name = NAME,
  .longname = "gmblock RDMA client bridge",
  .config = bridge_config,
  .config_complete = bridge_config_complete,
  .config_help = BRIDGE_CONFIG_HELP,
  .get_ready = bridge_get_ready,
  .unload = bridge_unload,
  .open = bridge_open,
  .close = bridge_close,
  .get_size = bridge_get_size,
  .block_size = bridge_block_size,
  .can_write = bridge_can_write,
  .can_flush = bridge_can_flush,
  .can_fua = bridge_can_fua,
  .can_trim = bridge_can_trim,
  .can_zero = bridge_can_zero,
  .can_fast_zero = bridge_can_fast_zero,
  .can_cache = bridge_can_cache,
  .can_multi_conn = bridge_can_multi_conn,
  .is_rotational = bridge_is_rotational,
  .pread = bridge_pread,
  .pwrite = bridge_pwrite,
  .flush = bridge_flush,
  .trim = bridge_trim,
  .zero = bridge_zero,
  .cache = bridge_cache,
  .errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN (plugin)

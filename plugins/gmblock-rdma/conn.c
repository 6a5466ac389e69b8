/* gmblock-rdma bridge: one RC connection per NBD connection.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Pipelined: the bridge asks for credits= credits (16) and keeps one
 * request slot per credit, allocated with the connection (no malloc per
 * request).  A request reserves a slot (waiting while all are taken:
 * bounded, each one is in flight and ends with its reply or the
 * connection), posts its SEND and sleeps on the slot's condition.  One
 * completion thread per connection matches replies to slots through
 * gm_rp_conn_take_reply (any order) and wakes the waiters.
 *
 * When the connection breaks (a failed completion, a DISCONNECTED
 * event, a malformed reply, a liveness probe unanswered: see probe ()),
 * the thread first moves the QP to the error state, so the
 * server can no longer reach our buffers, then fails every request in
 * flight with EIO and ends.  On a DISCONNECTED event it first takes
 * what came before it (drain ()): the server's goodbye, which says
 * the requests still in flight were not served.  The next request with nothing in flight
 * reconnects once the others have collected their slots; the limits
 * must not change across a reconnect.
 *
 * Durability across a reconnect: a write the server acknowledged but
 * has not flushed may die with the server process (its caches:
 * gmblock-cache in write-back), and a FLUSH to a restarted server
 * cannot cover it; but a broken connection alone does not mean the
 * process died (it may have dropped only this client, or the network
 * failed), and a FLUSH to the same process still covers the writes.
 * common/unflushed.c keeps that rule for the whole bridge (with
 * multi-conn a FLUSH on any connection answers for the writes of all
 * of them, closed ones included): writes count as lost only when a
 * connection reaches a different server instance (every welcome names
 * it), and then each connection's next FLUSH fails once
 * (conn_flush_lost: the NBD client gets EIO, as from a disk that lost
 * its write cache).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "bridge.h"

#define TIMEOUT_MS 5000          /* connection set-up steps */
#define PROBE_S 10               /* requests in flight, no completion: probe */
#define SILENCE_S 60             /* a probe unanswered that long: broken */
#define LEAVE_S 10               /* an ESHUTDOWN reply, no goodbye: post again */
#define DRAIN_MS 2000            /* a disconnect: the completions before it */
#define QUIT_GRACE_MS 2000       /* nbdkit quits: requests in flight get this long */
#define WR_SEND 0
#define WR_PROBE 2
#define WR_RECV 1                /* + receive buffer index << 1 */
/* A receive takes a reply or the goodbye; one more receive than
 * credits, so the goodbye always finds one (docs/rdma-protocol.md). */
#define RECV_SIZE GM_RP_GOODBYE_SIZE
#define NRECV (opt_credits + 1)
/* Requests are signaled one in opt_credits (conn_post): up to that many
 * unsignaled ones wait for a signaled one to retire them, behind at
 * most opt_credits in flight, + the goodbye, the probe. */
#define NSEND (2 * opt_credits + 2)
_Static_assert (GM_RP_GOODBYE_SIZE > GM_RP_REPLY_SIZE, "a goodbye is no reply");

struct slot {
  pthread_cond_t done_cv;
  bool busy;                    /* reserved by a request */
  bool posted;                  /* its SEND went out, no answer yet */
  bool done;
  int result;                   /* 0, a positive errno, -1 transport,
                                 * CONN_UNSERVED, CONN_TIMEDOUT */
  uint32_t count;               /* BLOCK_STATUS: extents written */
  uint64_t handle;
  uint64_t flush_mark;          /* FLUSH: what it covers (gm_uf_flush_sent) */
  uint64_t posted_ms;           /* timeout= */
  uint8_t op;
  bool exposed;                 /* ended while the server could still
                                 * reach its buffer (qp_error failed) */
  struct gm_uf_ack *ack;        /* the request's replies that count */
};

struct conn {
  struct conn *next_open;       /* open_conns, under open_lock */
  pthread_mutex_t m;            /* everything below; never held across I/O */
  pthread_cond_t free_cv;       /* a slot was given back, or the link changed */
  struct rdma_event_channel *ch;
  struct rdma_cm_id *id;
  struct ibv_comp_channel *cc;
  struct ibv_cq *cq;
  struct ibv_mr *msg_mr;
  uint8_t *msgs;                /* opt_credits requests, NRECV receives,
                                 * our DISCONNECT */
  int stop_fd;                  /* eventfd: the completion thread ends */
  pthread_t thread;
  bool thread_on;
  struct gm_rp_conn rp;
  uint64_t conn_id;             /* names it to the server in every hello,
                                 * reconnects included: a server that
                                 * still holds the old connection drops
                                 * it, and lets what that one has in its
                                 * storage land first (protocol version 4) */
  unsigned nslots;              /* credits granted */
  unsigned busy;                /* slots reserved */
  bool dead;                    /* broken: reconnect first */
  bool qp_err;                  /* the QP was moved to the error state */
  bool unfenced;                /* ... and that failed, and the disconnect */
  bool draining;                /* disconnected: taking what came before */
  bool connecting;
  bool ever;                    /* was connected once */
  bool refused;                 /* the server answered with a refusal */
  char why[160];                /* why the last connect attempt failed */
  struct gm_rp_limits lim;      /* of the first connection */
  uint64_t seq;
  time_t progress;              /* last completion, or first post */
  bool probing;                 /* a liveness probe is posted */
  bool closing;                 /* said goodbye: the server's disconnect
                                 * that follows is no failure */
  bool server_left;             /* the server said goodbye: what it did not
                                 * answer it did not serve (CONN_UNSERVED) */
  bool leaving;                 /* an ESHUTDOWN reply: the server shuts
                                 * down, post nothing more on this one */
  time_t leaving_since;
  unsigned given_up;            /* reconnects that failed */
  time_t probe_sent;
  uint64_t timeout_checked;     /* timeout=: once a second (its s) */
  bool timed_out;               /* timeout= broke it */
  uint64_t quit_checked;        /* nbdkit quitting?  once a second (its s) */
  uint64_t quit_ms;             /* when this one saw nbdkit quit, or 0 */
  bool shut_down;               /* nbdkit's shutdown broke it */
  struct gm_unflushed uf;       /* its writes a FLUSH must still cover */
  struct gm_ab_node *ab;        /* listed while broken with writes in
                                 * flight the server may still hold */
  uint64_t instance;            /* the server process it talks to */
  struct slot slots[GM_RP_MAX_CREDITS];
};

/* c has just connected to a server instance: if it is a new one, the
 * writes the old one acknowledged and no FLUSH covered, on any
 * connection, may have died with it; if it is the same one without
 * multi-conn, c's old connection's can no longer be flushed.  Before
 * any request is posted on c, so every reply on it comes from this
 * instance.
 */
static void
check_instance (struct conn *c)
{
  uint64_t n = gm_uf_connected (&c->uf, c->rp.lim.instance,
                                c->rp.lim.flags & GM_RP_TF_MULTI_CONN);

  if (n)
    nbdkit_error (NAME ": %s:%s: up to %" PRIu64 " acknowledged writes no "
                  "flush covered may be lost (a new server instance, or a "
                  "reconnect to a server without multi-conn); the next "
                  "flush fails", server.host, server.port, n);
}

static uint8_t *
req_buf (struct conn *c, unsigned i)
{
  return c->msgs + i * GM_RP_REQUEST_SIZE;
}

static uint8_t *
recv_buf (struct conn *c, unsigned i)
{
  return c->msgs + opt_credits * GM_RP_REQUEST_SIZE + i * RECV_SIZE;
}

/* Our DISCONNECT request, after the receives. */
static uint8_t *
disconnect_buf (struct conn *c)
{
  return recv_buf (c, NRECV);
}

static size_t
msgs_size (void)
{
  return opt_credits * GM_RP_REQUEST_SIZE + NRECV * RECV_SIZE
    + GM_RP_REQUEST_SIZE;
}

static uint64_t
now_ms (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000ull + t.tv_nsec / 1000000;
}

static time_t
now (void)
{
  return now_ms () / 1000;
}

/* -D gmblock-rdma.silence_s=N: a probe unanswered for N s breaks the
 * connection instead of SILENCE_S (a test's network failure is found
 * sooner). */
GM_DEBUG_FLAG (gmblock_rdma_debug_silence_s, "gmblock-rdma_debug_silence_s");

static int
silence_s (void)
{
  return gmblock_rdma_debug_silence_s > 0 ? gmblock_rdma_debug_silence_s
    : SILENCE_S;
}

struct gm_ab_node *
conn_ab (struct conn *c, uint64_t *instance)
{
  pthread_mutex_lock (&c->m);
  *instance = c->instance;
  pthread_mutex_unlock (&c->m);
  return c->ab;
}

const struct gm_rp_limits *
conn_limits (const struct conn *c)
{
  return &c->lim;
}

unsigned
conn_credits (const struct conn *c)
{
  return c->nslots;
}

/* ---- Set-up and tear-down. */

static void
stop_thread (struct conn *c)
{
  uint64_t one = 1;

  if (!c->thread_on)
    return;
  if (write (c->stop_fd, &one, sizeof one) != sizeof one)
    nbdkit_debug (NAME ": eventfd write: %m");
  pthread_join (c->thread, NULL);
  c->thread_on = false;
}

static void
teardown (struct conn *c)
{
  uint64_t v;

  stop_thread (c);
  if (read (c->stop_fd, &v, sizeof v) < 0 && errno != EAGAIN)
    nbdkit_debug (NAME ": eventfd read: %m");
  if (c->id && c->id->qp)
    rdma_disconnect (c->id);
  gm_rdma_qp_destroy (c->id, &c->cq, &c->cc, &c->msg_mr);
  if (c->id)
    rdma_destroy_id (c->id);
  if (c->ch)
    rdma_destroy_event_channel (c->ch);
  c->ch = NULL;
  c->id = NULL;
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
    nbdkit_error (NAME ": %s:%s: %s while waiting for %s: %m", server.host,
                  server.port, r < 0 ? "poll" : "rdma_get_cm_event",
                  rdma_event_str (want));
    return -1;
  }
  if ((*ev)->event == want)
    return 0;
  if ((*ev)->event == RDMA_CM_EVENT_REJECTED && want == RDMA_CM_EVENT_ESTABLISHED
      && (*ev)->param.conn.private_data_len) {
    struct gm_rp_welcome w;
    char why[100];
    /* The reason is printed only once checked: it is the server's,
     * maybe without its NUL, maybe with a line of its own for our log. */
    if (gm_rp_take_refusal ((*ev)->param.conn.private_data,
                            (*ev)->param.conn.private_data_len, &w,
                            why, sizeof why) == 0) {
      nbdkit_error (NAME ": %s:%s refused the connection: %s (error %u)",
                    server.host, server.port, w.reason, w.error);
      c->refused = true;
      rdma_ack_cm_event (*ev);
      return -1;
    }
    snprintf (c->why, sizeof c->why, "rejected (status %d) with a malformed "
              "refusal: %s", (*ev)->status, why);
    nbdkit_debug (NAME ": %s:%s: %s", server.host, server.port, c->why);
    rdma_ack_cm_event (*ev);
    return -1;
  }
  snprintf (c->why, sizeof c->why, "%s (status %d) while waiting for %s",
            rdma_event_str ((*ev)->event), (*ev)->status,
            rdma_event_str (want));
  nbdkit_debug (NAME ": %s:%s: %s", server.host, server.port, c->why);
  rdma_ack_cm_event (*ev);
  return -1;
}

static int
post_recv (struct conn *c, unsigned i)
{
  struct ibv_sge sge = { .addr = (uintptr_t) recv_buf (c, i),
                         .length = RECV_SIZE, .lkey = c->msg_mr->lkey };
  struct ibv_recv_wr wr = { .wr_id = WR_RECV | (i << 1), .sg_list = &sge,
                            .num_sge = 1 }, *bad;
  int e = ibv_post_recv (c->id->qp, &wr, &bad);

  if (e)
    errno = e;                  /* returned, not set: for %m */
  return e ? -1 : 0;
}

static void *completion_thread (void *arg);
static void broken (struct conn *c, const char *why);

/* Verbs resources once the route is known: CQ, QP, registered
 * messages, a receive per credit asked and one for the goodbye.
 */
static int
make_qp (struct conn *c, struct rdma_conn_param *cp)
{
  struct ibv_context *v = c->id->verbs;
  struct ibv_qp_init_attr qa;
  struct ibv_device_attr da;
  char why[200];

  if (mem_attach (v, why, sizeof why) == -1) {
    nbdkit_error (NAME ": %s:%s: %s", server.host, server.port, why);
    return -1;
  }
  c->cc = ibv_create_comp_channel (v);
  /* Room for every work request: in the error state all complete. */
  c->cq = c->cc ? ibv_create_cq (v, NSEND + NRECV, c, c->cc, 0) : NULL;
  c->msg_mr = ibv_reg_mr (mem_pd (), c->msgs, msgs_size (),
                          IBV_ACCESS_LOCAL_WRITE);
  if (c->cq == NULL || c->msg_mr == NULL) {
    nbdkit_error (NAME ": %s:%s: cannot allocate verbs resources: %m",
                  server.host, server.port);
    return -1;
  }
  if (fcntl (c->cc->fd, F_SETFL, fcntl (c->cc->fd, F_GETFL) | O_NONBLOCK) ||
      fcntl (c->ch->fd, F_SETFL, fcntl (c->ch->fd, F_GETFL) | O_NONBLOCK)) {
    nbdkit_error (NAME ": %s:%s: fcntl O_NONBLOCK: %m", server.host,
                  server.port);
    return -1;
  }
  memset (&qa, 0, sizeof qa);
  qa.send_cq = qa.recv_cq = c->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = NSEND;
  qa.cap.max_recv_wr = NRECV;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (rdma_create_qp (c->id, mem_pd (), &qa)) {
    nbdkit_error (NAME ": %s:%s: rdma_create_qp: %m", server.host,
                  server.port);
    return -1;
  }
  for (unsigned i = 0; i < NRECV; i++)
    if (post_recv (c, i) == -1) {
      nbdkit_error (NAME ": %s:%s: ibv_post_recv: %m", server.host,
                    server.port);
      return -1;
    }
  /* The server RDMA-READs our writes, several at once when pipelined. */
  memset (cp, 0, sizeof *cp);
  cp->responder_resources = opt_credits;
  if (ibv_query_device (v, &da) == 0 &&
      cp->responder_resources > (unsigned) da.max_qp_rd_atom)
    cp->responder_resources = da.max_qp_rd_atom;
  if (cp->responder_resources == 0)
    cp->responder_resources = 1;
  cp->initiator_depth = 1;
  cp->retry_count = 7;
  cp->rnr_retry_count = 7;
  return 0;
}

static int
connect_server (struct conn *c)
{
  struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
  struct rdma_cm_event *ev;
  struct rdma_conn_param cp;
  struct gm_rp_hello hello;
  uint8_t hmsg[GM_RP_HELLO_SIZE];
  char why[160];
  int e;

  gm_rp_conn_init (&c->rp, GM_RP_CLIENT);
  c->rp.conn_id = c->conn_id;
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
    nbdkit_error (NAME ": %s:%s: rdma_resolve_route: %m", server.host,
                  server.port);
    goto fail;
  }
  if (cm_wait (c, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev) == -1)
    goto fail;
  rdma_ack_cm_event (ev);
  if (make_qp (c, &cp) == -1)
    goto fail;
  if (gm_rp_conn_hello (&c->rp, opt_credits, mem_max_request (), &hello,
                        why, sizeof why) == -1) {
    nbdkit_error (NAME ": %s:%s: hello: %s", server.host, server.port, why);
    goto fail;
  }
  gm_rp_encode_hello (&hello, hmsg);
  cp.private_data = hmsg;
  cp.private_data_len = sizeof hmsg;
  /* Not while another connection's ABANDON naming this one is out. */
  gm_ab_hello (c->ab);
  if (rdma_connect (c->id, &cp)) {
    nbdkit_error (NAME ": %s:%s: rdma_connect: %m", server.host, server.port);
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
  /* The NBD client negotiated these at the first connection; pieces
   * are cut on the minimum block (a larger one would make them
   * misaligned for the new server).
   */
  if (c->ever && (c->rp.lim.size != c->lim.size ||
                   c->rp.lim.flags != c->lim.flags ||
                   c->rp.lim.max_request != c->lim.max_request ||
                   c->rp.lim.min_block != c->lim.min_block)) {
    nbdkit_error (NAME ": %s:%s: the export changed across a reconnect: "
                  "size %" PRIu64 " -> %" PRIu64 ", flags 0x%x -> 0x%x, max "
                  "request %" PRIu32 " -> %" PRIu32 ", minimum block %"
                  PRIu32 " -> %" PRIu32, server.host, server.port,
                  c->lim.size, c->rp.lim.size, c->lim.flags, c->rp.lim.flags,
                  c->lim.max_request, c->rp.lim.max_request,
                  c->lim.min_block, c->rp.lim.min_block);
    c->refused = true;          /* trying again finds the same export */
    goto fail;
  }
  /* Before any request can be posted (a request that finds it not
   * dead posts at once). */
  check_instance (c);
  /* Its hello named it: the server replaced what it still held of it. */
  gm_ab_connected (c->ab, c->rp.lim.instance);
  /* Others read these under the lock (conn_reserve waits meanwhile).
   * Before the thread starts: what it finds broken stays broken. */
  pthread_mutex_lock (&c->m);
  c->nslots = c->rp.lim.credits;
  c->dead = false;
  c->timed_out = false;
  c->shut_down = false;
  c->qp_err = false;
  c->unfenced = false;
  c->server_left = false;
  c->leaving = false;
  c->probing = false;
  c->progress = now ();
  c->instance = c->rp.lim.instance;
  pthread_mutex_unlock (&c->m);
  if ((errno = pthread_create (&c->thread, NULL, completion_thread, c))) {
    nbdkit_error (NAME ": %s:%s: pthread_create: %m", server.host,
                  server.port);
    /* Requests may have been posted since the lock above: fail them
     * (review finding: they waited for ever for a thread that never
     * ran, and every later reconnect waited for them). */
    pthread_mutex_lock (&c->m);
    broken (c, "no completion thread");
    pthread_mutex_unlock (&c->m);
    goto fail;
  }
  c->thread_on = true;
  freeaddrinfo (ai);
  COUNT (c->ever ? BC_RECONNECTS : BC_CONNECTS, 1);
  c->ever = true;
  c->lim = c->rp.lim;
  nbdkit_debug (NAME ": connected to %s:%s: size %llu, max request %u, "
                "credits %u, flags 0x%x", server.host, server.port,
                (unsigned long long) c->rp.lim.size, c->rp.lim.max_request,
                c->rp.lim.credits, c->rp.lim.flags);
  return 0;

 fail:
  if (ai)
    freeaddrinfo (ai);
  teardown (c);
  gm_ab_hello_failed (c->ab);   /* if it was said: writers tell again */
  return -1;
}

/* connect_server, tried CONNECT_TRIES times over about 4.5 s unless
 * the server refused, or serves another export now: a connect request
 * is rejected (status 8) while nobody listens, when the server
 * (re)starts, and also while its listener is busy (freeing clients
 * that just left, under load).
 * After a shutdown the server is restarting, most likely (patient):
 * about 30 s.
 */
#define CONNECT_TRIES 6
#define CONNECT_TRIES_AFTER_GOODBYE 27
static int
connect_retry (struct conn *c, bool patient)
{
  int tries = patient ? CONNECT_TRIES_AFTER_GOODBYE : CONNECT_TRIES;

  for (int i = 0; i < tries; i++) {
    /* Nobody waits for it any more once nbdkit quits, or (on a
     * connection's thread) its NBD client has left: a server that is
     * down cost 27 tries, over 30 s, at every shutdown. */
    unsigned ms = i == 0 ? 0 : i < 4 ? 150u << i : 1200u;
    if (nbdkit_nanosleep (ms / 1000, ms % 1000 * 1000000u) == -1)
      return -1;
    c->refused = false;
    strcpy (c->why, "see the messages above");
    if (connect_server (c) == 0)
      return 0;
    if (c->refused)
      break;
  }
  if (!c->refused)
    nbdkit_error (NAME ": cannot connect to %s:%s after %d tries: %s",
                  server.host, server.port, tries, c->why);
  return -1;
}

/* Connections opened and not closed: nbdkit calls no .close once it
 * quits (it may be unloading us), so conn_stop_all joins their
 * completion threads at .cleanup: none may still run in this module
 * when nbdkit unloads it (nor end unjoined: ThreadSanitizer's thread
 * leak, in the lab's rdma-slow, once SIGTERM ended a connection). */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct conn *open_conns;

void
conn_stop_all (void)
{
  pthread_mutex_lock (&open_lock);
  for (struct conn *c = open_conns; c; c = c->next_open)
    stop_thread (c);
  pthread_mutex_unlock (&open_lock);
}

struct conn *
conn_open (void)
{
  struct conn *c = calloc (1, sizeof *c);
  bool taken = false;

  if (c == NULL || (c->msgs = calloc (1, msgs_size ())) == NULL) {
    nbdkit_error (NAME ": calloc: %m");
    free (c);
    return NULL;
  }
  c->stop_fd = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->stop_fd == -1) {
    nbdkit_error (NAME ": eventfd: %m");
    goto fail;
  }
  /* The name of a connection a killed bridge left open on the server
   * (state=), if one is left: the server replaces it.  Else a new one.
   * The node now, not when it breaks: then nothing may fail. */
  if ((c->ab = gm_ab_reuse (&c->conn_id)) != NULL)
    taken = true;
  else {
    if (gm_rp_random_id (&c->conn_id) == -1) {
      nbdkit_error (NAME ": getrandom: %m");
      goto fail;
    }
    if ((c->ab = gm_ab_open (c->conn_id)) == NULL) {
      nbdkit_error (NAME ": calloc: %m");
      goto fail;
    }
  }
  pthread_mutex_init (&c->m, NULL);
  pthread_cond_init (&c->free_cv, NULL);
  for (unsigned i = 0; i < GM_RP_MAX_CREDITS; i++)
    pthread_cond_init (&c->slots[i].done_cv, NULL);
  gm_uf_open (&c->uf);
  if (connect_retry (c, false) == -1) {
    conn_close (c);
    return NULL;
  }
  if (taken)
    COUNT (BC_NAMES_TAKEN, 1);
  pthread_mutex_lock (&open_lock);
  c->next_open = open_conns;
  open_conns = c;
  pthread_mutex_unlock (&open_lock);
  return c;

 fail:
  if (c->stop_fd != -1)
    close (c->stop_fd);
  free (c->msgs);
  free (c);
  return NULL;
}

void
conn_close (struct conn *c)
{
  pthread_mutex_lock (&open_lock);
  for (struct conn **p = &open_conns; *p; p = &(*p)->next_open)
    if (*p == c) {
      *p = c->next_open;
      break;
    }
  pthread_mutex_unlock (&open_lock);
  /* nbdkit sends no request during close: nothing is in flight.  The
   * completion thread may still take a goodbye: the lock. */
  if (c->thread_on) {
    /* Say goodbye; the server closes. */
    struct gm_rp_request r = { .op = GM_RP_DISCONNECT, .handle = ~0ull };
    uint8_t *m = disconnect_buf (c);
    struct ibv_sge sge = { .addr = (uintptr_t) m, .length = GM_RP_REQUEST_SIZE,
                           .lkey = c->msg_mr->lkey };
    struct ibv_send_wr wr = { .wr_id = WR_SEND, .sg_list = &sge, .num_sge = 1,
                              .opcode = IBV_WR_SEND }, *bad;
    char why[128];
    pthread_mutex_lock (&c->m);
    if (!c->dead && !c->qp_err && gm_rp_conn_credits_free (&c->rp) &&
        gm_rp_conn_request_begin (&c->rp, &r, why, sizeof why) == 0) {
      gm_rp_encode_request (&r, m);
      c->closing = true;
      ibv_post_send (c->id->qp, &wr, &bad);
    }
    pthread_mutex_unlock (&c->m);
  }
  teardown (c);
  gm_uf_close (&c->uf);
  gm_ab_close (c->ab);
  close (c->stop_fd);
  for (unsigned i = 0; i < GM_RP_MAX_CREDITS; i++)
    pthread_cond_destroy (&c->slots[i].done_cv);
  pthread_cond_destroy (&c->free_cv);
  pthread_mutex_destroy (&c->m);
  free (c->msgs);
  free (c);
}

/* ---- The completion thread. */

/* Shut the server out of our buffers: the QP to the error state (its
 * RDMA to us fails from now on, and every work request still posted
 * completes, flushed).  Once.  Called with c->m held.
 */
static void
qp_error (struct conn *c)
{
  struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
  int e;

  if (c->qp_err)
    return;
  c->qp_err = true;
  e = ibv_modify_qp (c->id->qp, &a, IBV_QP_STATE);
  if (e) {
    /* Requests' buffers go back to the pool soon; the server must not
     * reach them any more: a disconnect moves the QP to error too. */
    nbdkit_error (NAME ": %s:%s: cannot move the queue pair to the error "
                  "state: %s; disconnecting", server.host, server.port,
                  strerror (e));
    if (rdma_disconnect (c->id)) {
      /* The server may RDMA to and from what the requests in flight
       * lent it for as long as the QP lives: their buffers must never
       * be lent again (broken marks them exposed). */
      nbdkit_error (NAME ": %s:%s: rdma_disconnect: %m: the buffers of "
                    "the requests in flight are not used again",
                    server.host, server.port);
      c->unfenced = true;
    }
  }
}

/* Whether a WRITE, TRIM or ZERO is in flight: the server may still
 * have it in its storage.  Called with c->m held.
 */
static bool
writes_in_flight (const struct conn *c)
{
  for (unsigned i = 0; i < c->rp.in_use; i++)
    if (gm_rp_op_writes (c->rp.inflight[i].op))
      return true;
  return false;
}

/* The connection broke: shut the server out of our buffers, then fail
 * every request in flight.  One that had writes in flight is listed
 * for the others to name to the server (abandoned.h) before any of
 * them writes again, and before the NBD client can learn the writes
 * failed and send them again.  Once; a later call does nothing.  Called
 * with c->m held.
 */
static void
broken (struct conn *c, const char *why)
{
  if (c->dead)
    return;
  if (c->closing || c->server_left)
    nbdkit_debug (NAME ": %s:%s: closed: %s", server.host, server.port, why);
  else
    nbdkit_error (NAME ": %s:%s: connection broken: %s", server.host,
                  server.port, why);
  qp_error (c);
  c->dead = true;
  if (!c->closing && !c->server_left && writes_in_flight (c))
    gm_ab_broken (c->ab, c->instance);
  if (!c->closing && !c->server_left)
    nbdkit_debug (NAME ": up to %" PRIu64 " writes acknowledged and not flushed "
                  "(all connections): a flush to the same server process "
                  "covers them, a restarted one makes the next flush fail",
                  gm_uf_uncovered ());
  for (unsigned i = 0; i < GM_RP_MAX_CREDITS; i++) {
    struct slot *s = &c->slots[i];
    if (s->posted) {
      s->posted = false;
      s->done = true;
      s->exposed = c->unfenced;
      s->result = c->server_left ? CONN_UNSERVED
        : c->timed_out || c->shut_down ? CONN_TIMEDOUT : -1;
      pthread_cond_signal (&s->done_cv);
    }
  }
  pthread_cond_broadcast (&c->free_cv);
}

/* The server shuts down: it answered every request it served, and
 * with FLUSHED it flushed what it acknowledged (on this connection,
 * with multi-conn on all), as a FLUSH sent now would have.  The
 * requests still in flight were not served: the next connection gets
 * them again.  Returns false: this connection ends.
 */
static bool
take_goodbye (struct conn *c, unsigned i, uint32_t len)
{
  struct gm_rp_goodbye g;
  char why[160];

  if (gm_rp_conn_take_goodbye (&c->rp, recv_buf (c, i), len, &g,
                               why, sizeof why)) {
    nbdkit_error (NAME ": protocol error from the server: %s", why);
    broken (c, why);
    return false;
  }
  COUNT (BC_GOODBYES, 1);
  if (g.flags & GM_RP_BYE_FLUSHED)
    gm_uf_flush_done (&c->uf, gm_uf_flush_sent (), g.instance);
  c->server_left = true;
  broken (c, g.flags & GM_RP_BYE_FLUSHED
          ? "the server shut down, its writes flushed"
          : "the server shut down without flushing");
  return false;
}

/* A completion; false when the connection broke. */
static bool
take (struct conn *c, const struct ibv_wc *wc)
{
  struct gm_rp_reply rep;
  struct gm_rp_request r;
  unsigned i = wc->wr_id >> 1;
  char why[160];
  struct slot *s;

  if (wc->status != IBV_WC_SUCCESS) {
    /* Draining, the QP in error: work requests complete flushed.  A
     * receive's ends the drain (receives complete in order: every
     * message that came is behind us); a send's tells nothing. */
    if (c->draining)
      return !(wc->wr_id & WR_RECV);
    broken (c, wc->wr_id == WR_PROBE ? "the server does not answer a "
            "liveness probe" : ibv_wc_status_str (wc->status));
    return false;
  }
  c->progress = now ();
  if (wc->wr_id == WR_PROBE)
    c->probing = false;         /* its NIC answers: keep waiting */
  if (!(wc->wr_id & WR_RECV))
    return true;                /* a SEND went out: its reply tells more */
  if (wc->byte_len == GM_RP_GOODBYE_SIZE)
    return take_goodbye (c, i, wc->byte_len);
  if (gm_rp_conn_take_reply (&c->rp, recv_buf (c, i), wc->byte_len, &rep, &r,
                             why, sizeof why)) {
    nbdkit_error (NAME ": protocol error from the server: %s", why);
    broken (c, why);
    return false;
  }
  s = &c->slots[r.handle & 0xff];
  if (!s->posted || s->handle != r.handle) {
    broken (c, "a reply for a handle of no request");
    return false;
  }
  s->posted = false;
  s->done = true;
  s->result = rep.error ? gm_rp_error_from_wire (rep.error) : 0;
  s->count = rep.count;
  if (rep.error == GM_RP_ESHUTDOWN && c->rp.lim.version >= 3) {
    /* Not done: the server shuts down (nbdkit gives up requests then),
     * and its goodbye or its disconnect follows.  Sent again to the
     * next server, like what it never answers. */
    s->result = CONN_UNSERVED;
    if (!c->leaving)
      c->leaving_since = now ();
    c->leaving = true;
  }
  else if (rep.error)
    COUNT (BC_ERRORS, 1);
  else if (r.op == GM_RP_FLUSH)
    gm_uf_flush_done (&c->uf, s->flush_mark, c->rp.lim.instance);
  else if (gm_rp_op_writes (r.op) && !(r.flags & GM_RP_FLAG_FUA) && s->ack)
    /* Counted once the whole request succeeded (conn_acked). */
    gm_uf_reply (&c->uf, c->rp.lim.instance, s->ack);
  pthread_cond_signal (&s->done_cv);
  if (!c->qp_err && post_recv (c, i) == -1) {
    broken (c, "ibv_post_recv failed");
    return false;
  }
  return true;
}

/* A request may take long (a FLUSH writing back a large cache to a slow
 * disk): silence alone does not mean the server is gone.  After
 * PROBE_S without a completion, a zero-length RDMA WRITE (no buffer, no
 * key: the responder checks none for zero length, IBTA C9-88) asks the
 * server's NIC.  Answered: the server lives, the wait goes on.  Not:
 * its retries end in an error completion, and the connection is broken.
 * Called with m held.
 */
static int
probe (struct conn *c)
{
  struct ibv_send_wr wr = { .wr_id = WR_PROBE, .opcode = IBV_WR_RDMA_WRITE,
                            .send_flags = IBV_SEND_SIGNALED }, *bad;

  if (ibv_post_send (c->id->qp, &wr, &bad))
    return -1;
  c->probing = true;
  c->probe_sent = now ();
  COUNT (BC_PROBES, 1);
  return 0;
}

/* The server disconnected.  Its goodbye, if it sent one, came first
 * (the server waits for the SEND's completion, then disconnects), but
 * the CM event travels apart from the CQ and may be read before the
 * goodbye's completion shows.  With the QP in the error state every
 * receive still posted completes, flushed, and a QP's receives complete
 * in order: the goodbye, and every reply that came, land before the
 * first flushed receive.  So take completions until that one (or the
 * goodbye, or a protocol error, ends the connection), DRAIN_MS at
 * most.  Called with c->m held, let go while waiting (conn_post waits
 * for the drain's end: nothing is posted meanwhile).
 */
static void
drain (struct conn *c)
{
  struct pollfd stop = { .fd = c->stop_fd, .events = POLLIN };
  struct timespec t0, t;
  struct ibv_wc wc[16];
  bool more = true;

  qp_error (c);
  c->draining = true;
  clock_gettime (CLOCK_MONOTONIC, &t0);
  while (more) {
    int n = ibv_poll_cq (c->cq, 16, wc);

    if (n < 0)
      break;
    for (int i = 0; i < n && more; i++)
      more = take (c, &wc[i]);
    if (n > 0 || !more)
      continue;
    clock_gettime (CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000
        >= DRAIN_MS) {
      /* Requests in flight fail (EIO), a goodbye may be missed. */
      nbdkit_error (NAME ": %s:%s: no flushed receive within %d ms of the "
                    "disconnect", server.host, server.port, DRAIN_MS);
      break;
    }
    pthread_mutex_unlock (&c->m);
    n = poll (&stop, 1, 1);     /* teardown: stop at once */
    pthread_mutex_lock (&c->m);
    if (n > 0)
      break;
  }
  c->draining = false;
  pthread_cond_broadcast (&c->free_cv);   /* conn_post waits */
}

/* timeout=N: a request unanswered for N s breaks the connection, as an
 * unanswered probe does (a server whose NIC answers probes while its
 * software or storage hangs would hold it for ever).  Whether it broke.
 * Looks once a second, so a request fails between N and N + 1 s after
 * it was sent, never before.  Called with c->m held.
 */
static bool
overdue (struct conn *c)
{
  uint64_t t;

  if (opt_timeout == 0 || (t = now_ms ()) / 1000 == c->timeout_checked)
    return false;
  c->timeout_checked = t / 1000;
  for (unsigned i = 0; i < GM_RP_MAX_CREDITS; i++) {
    const struct slot *s = &c->slots[i];
    char why[96];

    if (!s->posted || t - s->posted_ms < opt_timeout * 1000ull)
      continue;
    snprintf (why, sizeof why, "a %s unanswered for %u s (timeout=%u)",
              gm_rp_op_name (s->op), opt_timeout, opt_timeout);
    COUNT (BC_TIMEOUTS, 1);
    c->timed_out = true;
    broken (c, why);
    return true;
  }
  return false;
}

/* nbdkit quits (SIGTERM) and waits for every request in progress
 * before it exits, while its clients, leaving, will not read their
 * replies: requests still in flight QUIT_GRACE_MS later fail, the QP in
 * error first, not sent again.  Without this, a server whose software
 * hangs while its NIC answers the probes held the bridge up for ever.
 * nbdkit_nanosleep (0, 0) says whether nbdkit quits; asked once a
 * second, and only with requests in flight: once it sees the quit it
 * logs "error: aborting sleep because of server shut down", which an
 * idle connection's clean stop should not.  Whether it broke.  Called
 * with c->m held.
 */
static bool
quitting (struct conn *c)
{
  uint64_t t = now_ms ();

  if (c->rp.in_use == 0)
    return false;
  if (c->quit_ms == 0) {
    if (t / 1000 == c->quit_checked)
      return false;
    c->quit_checked = t / 1000;
    if (nbdkit_nanosleep (0, 0) == 0)
      return false;
    c->quit_ms = t;
  }
  if (t - c->quit_ms < QUIT_GRACE_MS)
    return false;
  c->shut_down = true;
  broken (c, "nbdkit is shutting down, and requests are still in flight "
          "2 s later: they fail");
  return true;
}

static void *
completion_thread (void *arg)
{
  struct conn *c = arg;

  for (;;) {
    struct pollfd p[3] = { { .fd = c->cc->fd, .events = POLLIN },
                           { .fd = c->ch->fd, .events = POLLIN },
                           { .fd = c->stop_fd, .events = POLLIN } };
    struct ibv_wc wc[16];
    struct rdma_cm_event *ev;
    struct ibv_cq *ev_cq;
    void *ctx;
    int n = ibv_poll_cq (c->cq, 16, wc);

    if (n == 0) {
      if (ibv_req_notify_cq (c->cq, 0))
        n = -1;
      else                      /* one may have landed before the notice */
        n = ibv_poll_cq (c->cq, 16, wc);
    }
    if (n != 0) {
      bool ok = n > 0;
      pthread_mutex_lock (&c->m);
      if (n < 0)
        broken (c, "ibv_poll_cq failed");
      for (int i = 0; i < n && ok; i++)
        ok = take (c, &wc[i]);
      if (ok && (overdue (c) || quitting (c)))  /* others may keep completing */
        ok = false;
      pthread_mutex_unlock (&c->m);
      if (!ok)
        return NULL;
      continue;
    }
    n = poll (p, 3, 1000);
    if (n == -1 && errno != EINTR) {
      pthread_mutex_lock (&c->m);
      broken (c, "poll failed");
      pthread_mutex_unlock (&c->m);
      return NULL;
    }
    if (p[2].revents)
      return NULL;              /* teardown */
    if (p[0].revents && ibv_get_cq_event (c->cc, &ev_cq, &ctx) == 0)
      ibv_ack_cq_events (ev_cq, 1);
    if (p[1].revents && rdma_get_cm_event (c->ch, &ev) == 0) {
      enum rdma_cm_event_type t = ev->event;
      rdma_ack_cm_event (ev);
      if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL) {
        pthread_mutex_lock (&c->m);
        /* What came before the disconnect first: the server's goodbye
         * (then take ends the connection: broken does nothing more). */
        drain (c);
        broken (c, rdma_event_str (t));
        pthread_mutex_unlock (&c->m);
        return NULL;
      }
    }
    pthread_mutex_lock (&c->m);
    /* An ESHUTDOWN may also come from below a server that is not
     * shutting down (a proxy): after LEAVE_S without a goodbye, post
     * again.  A server that is shutting down leaves those undone, and
     * its goodbye (they are sent again) or its disconnect still ends
     * the connection; its flush may take long, and the probes find it
     * alive meanwhile. */
    if (c->leaving && now () - c->leaving_since > LEAVE_S) {
      c->leaving = false;
      pthread_cond_broadcast (&c->free_cv);
    }
    if (overdue (c) || quitting (c)) {
      pthread_mutex_unlock (&c->m);
      return NULL;
    }
    if (c->probing && now () - c->probe_sent > silence_s ()) {
      char why[64];
      snprintf (why, sizeof why, "a liveness probe unanswered for %d s",
                silence_s ());
      broken (c, why);
      pthread_mutex_unlock (&c->m);
      return NULL;
    }
    /* Waiting for replies, or for the goodbye of a server that shuts
     * down (its flush may take long): is it still there? */
    if ((c->rp.in_use || c->leaving) && !c->probing &&
        now () - c->progress >= PROBE_S && probe (c) == -1) {
      broken (c, "cannot post a liveness probe");
      pthread_mutex_unlock (&c->m);
      return NULL;
    }
    pthread_mutex_unlock (&c->m);
  }
}

/* ---- Requests. */

int
conn_reserve (struct conn *c, bool wait, bool *waited)
{
  int r = -1;
  unsigned given_up;
  bool patient;

  pthread_mutex_lock (&c->m);
  given_up = c->given_up;
  for (;;) {
    if (c->dead) {
      if (!wait) {
        if (c->server_left)
          r = CONN_UNSERVED;
        break;
      }
      /* A reconnect failed while this one waited: fail now, not
       * once more each. */
      if (c->given_up != given_up) {
        r = -1;
        break;
      }
      if (c->busy || c->connecting) {
        /* Others still collect their failed requests, or reconnect. */
        pthread_cond_wait (&c->free_cv, &c->m);
        continue;
      }
      c->connecting = true;
      patient = c->server_left || c->leaving;
      pthread_mutex_unlock (&c->m);
      teardown (c);
      r = connect_retry (c, patient);
      pthread_mutex_lock (&c->m);
      c->connecting = false;
      /* Only ever set here: the new completion thread may already have
       * found the fresh connection broken, and clearing the flag again
       * would leave a request waiting for a thread that has ended. */
      if (r == -1) {
        c->dead = true;
        /* The requests that waited meanwhile fail with this one, not
         * each after a reconnect of its own (review finding: minutes
         * for nbdkit's threads queued on a server that stays down). */
        c->given_up++;
        if (patient)
          /* It did not come back: from now on it is a server gone. */
          c->server_left = c->leaving = false;
      }
      pthread_cond_broadcast (&c->free_cv);
      if (r == -1)
        break;
      continue;
    }
    if (c->leaving) {
      /* Wait for the goodbye (or the disconnect), then reconnect. */
      r = CONN_UNSERVED;
      if (!wait)
        break;
      pthread_cond_wait (&c->free_cv, &c->m);
      continue;
    }
    if (c->busy < c->nslots) {
      for (r = 0; c->slots[r].busy; r++)
        ;
      c->slots[r].busy = true;
      c->slots[r].done = false;
      c->busy++;
      break;
    }
    r = -2;
    if (!wait)
      break;
    /* Counted by the caller, once: every slot given back wakes all
     * waiters, and most find none free again. */
    *waited = true;
    pthread_cond_wait (&c->free_cv, &c->m);
  }
  pthread_mutex_unlock (&c->m);
  return r;
}

void
conn_unreserve (struct conn *c, int slot)
{
  pthread_mutex_lock (&c->m);
  c->slots[slot].busy = false;
  c->busy--;
  pthread_cond_broadcast (&c->free_cv);
  pthread_mutex_unlock (&c->m);
}

int
conn_post (struct conn *c, int slot, struct gm_rp_request *r,
           struct gm_uf_ack *ack)
{
  struct slot *s = &c->slots[slot];
  uint8_t *m = req_buf (c, slot);
  struct ibv_sge sge = { .addr = (uintptr_t) m, .length = GM_RP_REQUEST_SIZE };
  struct ibv_send_wr wr = { .wr_id = WR_SEND, .sg_list = &sge, .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED }, *bad;
  char why[160];
  int e = -1;

  pthread_mutex_lock (&c->m);
  /* A disconnect is being drained: its end says whether the server
   * left (CONN_UNSERVED) or the connection broke. */
  while (c->draining)
    pthread_cond_wait (&c->free_cv, &c->m);
  if (c->dead || c->leaving) {
    if (c->server_left || c->leaving)
      e = CONN_UNSERVED;
    goto out;                   /* broke while this piece waited */
  }
  /* The slot in the low byte finds it again from the reply. */
  r->handle = (++c->seq << 8) | (unsigned) slot;
  /* A request's SEND needs no completion: its reply says it arrived,
   * and only then is its slot's buffer reused.  One in opt_credits is
   * signaled so the send queue's entries are retired (errors complete
   * anyway); each saves a wake-up of the completion thread. */
  if (c->seq % opt_credits != 0)
    wr.send_flags = 0;
  e = gm_rp_conn_request_begin (&c->rp, r, why, sizeof why);
  if (e > 0) {
    nbdkit_debug (NAME ": refused locally: %s", why);
    e = gm_rp_error_from_wire (e);
    goto out;
  }
  if (e == -1) {
    nbdkit_error (NAME ": %s at %" PRIu64 " length %" PRIu32 ": %s",
                  gm_rp_op_name (r->op), r->offset, r->length, why);
    broken (c, why);
    goto out;
  }
  gm_rp_encode_request (r, m);
  sge.lkey = c->msg_mr->lkey;
  if (c->rp.in_use == 1)
    c->progress = now ();
  /* Before the SEND: a reply on another connection that comes after it
   * may be for a write the server finished after this FLUSH. */
  if (r->op == GM_RP_FLUSH)
    s->flush_mark = gm_uf_flush_sent ();
  if (ibv_post_send (c->id->qp, &wr, &bad)) {
    /* Its credit is taken and will never come back: start afresh. */
    broken (c, "ibv_post_send failed");
    e = -1;
    goto out;
  }
  COUNT (BC_REQUESTS, 1);
  if (opt_timeout)
    s->posted_ms = now_ms ();
  s->op = r->op;
  s->handle = r->handle;
  s->ack = ack;
  s->posted = true;
  pthread_mutex_unlock (&c->m);
  return 0;

 out:
  s->busy = false;
  c->busy--;
  pthread_cond_broadcast (&c->free_cv);
  pthread_mutex_unlock (&c->m);
  return e;
}

int
conn_collect (struct conn *c, int slot, bool *exposed)
{
  return conn_collect_count (c, slot, NULL, exposed);
}

int
conn_collect_count (struct conn *c, int slot, uint32_t *count, bool *exposed)
{
  struct slot *s;
  int r;

  if (exposed)
    *exposed = false;
  /* A caller's bug must not reach beside the array. */
  if (slot < 0 || slot >= GM_RP_MAX_CREDITS) {
    nbdkit_error (NAME ": internal error: collecting slot %d", slot);
    return EIO;
  }
  s = &c->slots[slot];
  pthread_mutex_lock (&c->m);
  while (!s->done)
    pthread_cond_wait (&s->done_cv, &c->m);
  r = s->result;
  if (count)
    *count = s->count;
  if (exposed)
    *exposed = s->exposed;
  s->exposed = false;
  s->busy = false;
  c->busy--;
  pthread_cond_broadcast (&c->free_cv);
  pthread_mutex_unlock (&c->m);
  return r;
}

void
conn_acked (struct conn *c, const struct gm_uf_ack *ack)
{
  gm_uf_acked (&c->uf, ack);
}

void
conn_flush_begin (struct conn *c, struct gm_uf_flush *f)
{
  gm_uf_flush_begin (&c->uf, f);
}

bool
conn_flush_lost (struct conn *c, const struct gm_uf_flush *f)
{
  return gm_uf_flush_end (&c->uf, f);
}

/* rdma-badclient: a raw client of the gmblock RDMA protocol that
 * misbehaves on purpose, for the lab scenario rdma-malformed.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   rdma-badclient HOST PORT CASE
 *
 * CASE and what the server must do (exit 0 if it did, 1 if not):
 *   bad-hello    a hello with a wrong magic: rejected, error EINVAL
 *   short-send   a 7-byte SEND: drops the client (DISCONNECTED)
 *   bad-op       opcode 9: drops the client
 *   bad-reserved a request with its reserved byte set: drops the client
 *   bad-rkey     a READ whose rkey is not ours: drops the client
 *   bad-rkey-write  a 1M WRITE at 0 whose rkey is not ours: drops the
 *                client, and writes nothing (the scenario reads the disk
 *                back: its RDMA READ failed, the pool buffer holds no
 *                data of ours)
 *   split-short-mr  a 1M READ (cut into pieces by the server) whose
 *                rkey covers its first 256K only: the later pieces fail
 *                at our NIC, the server drops the client and gets every
 *                piece's pool memory back
 *   past-end     a READ past the end of the export: error reply EINVAL,
 *                and then a valid READ on the same connection succeeds
 *   full         connect to a server already serving rdma-max-clients
 *                clients: refused, error ENOSPC
 *   no-receive   a valid READ from a client that posts no receive (RNR
 *                retries forever): the reply never completes, and the
 *                server drops the client (about 10 s) instead of holding
 *                its pool memory.  Prints a line once the READ is
 *                delivered (the scenario waits for it).
 *   deferred     one credit (one request slot on the server): READ 1's
 *                reply cannot land (no receive posted yet, RNR) and
 *                keeps the slot; READ 2, sent meanwhile, must wait for
 *                it and then be served once we post receives: both
 *                replies come, READ 2's without an error
 *   stall-rread  a valid 1M WRITE, asking for the longest ACK timeout
 *                (73 minutes a retry), then our QP silently in error (no
 *                DREQ), and we stay 60 s: the server's RDMA READ of the
 *                data is never answered.  The scenario judges (the
 *                server must give the WRITE's pool memory back meanwhile,
 *                not hold it for hours); exit 0 once the QP is silent.
 *                (Its disconnect may not reach us: the CM's DREQ waits
 *                on the same long timeout.)
 */
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdmaaddr.h"
#include "rdmaproto.h"

#define BUF (1u << 20)

static struct rdma_event_channel *ch;
static struct rdma_cm_id *id;
static struct ibv_pd *pd;
static struct ibv_comp_channel *cc;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint8_t *mem;            /* [0, 64): messages; [4096, 4096+BUF): data */
static struct gm_rp_conn rp;

static void
die (const char *what)
{
  fprintf (stderr, "rdma-badclient: %s: %m\n", what);
  exit (1);
}

/* The next CM event within ms; returns its type (acked), or -1. */
static int
cm_next (int ms, struct gm_rp_welcome *refusal)
{
  struct pollfd p = { .fd = ch->fd, .events = POLLIN };
  struct rdma_cm_event *ev;
  int t;

  if (poll (&p, 1, ms) <= 0 || rdma_get_cm_event (ch, &ev))
    return -1;
  t = ev->event;
  if (refusal && (t == RDMA_CM_EVENT_REJECTED || t == RDMA_CM_EVENT_ESTABLISHED)) {
    char why[128];
    memset (refusal, 0, sizeof *refusal);
    if (ev->param.conn.private_data_len &&
        gm_rp_decode_welcome (ev->param.conn.private_data,
                              ev->param.conn.private_data_len, refusal,
                              why, sizeof why) == -1)
      fprintf (stderr, "rdma-badclient: undecodable welcome: %s\n", why);
    if (t == RDMA_CM_EVENT_ESTABLISHED &&
        gm_rp_conn_take_welcome (&rp, ev->param.conn.private_data,
                                 ev->param.conn.private_data_len,
                                 why, sizeof why) == -1) {
      fprintf (stderr, "rdma-badclient: bad welcome: %s\n", why);
      exit (1);
    }
  }
  rdma_ack_cm_event (ev);
  return t;
}

static void
post_recv (void)
{
  struct ibv_sge sge = { .addr = (uintptr_t) mem + 48, .length = 16,
                         .lkey = mr->lkey };
  struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
  if (ibv_post_recv (id->qp, &wr, &bad))
    die ("ibv_post_recv");
}

static void
send_raw (uint32_t len)
{
  struct ibv_sge sge = { .addr = (uintptr_t) mem, .length = len,
                         .lkey = mr->lkey };
  struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED }, *bad;
  if (ibv_post_send (id->qp, &wr, &bad))
    die ("ibv_post_send");
}

/* Wait for the SEND and the reply (2 completions).  0: got the reply in
 * mem+48; -1: the connection broke or 10 s passed.
 */
static int
await_reply (void)
{
  for (int n = 0; n < 2;) {
    struct ibv_wc wc;
    int r = gm_rdma_cq_wait (cq, cc, &wc, ch->fd, 10000);
    if (r != 1)
      return -1;
    if (wc.status != IBV_WC_SUCCESS)
      return -1;
    n++;
  }
  return 0;
}

/* A receive for one reply at mem + off (outside the data area). */
static void
post_recv_at (size_t off)
{
  struct ibv_sge sge = { .addr = (uintptr_t) mem + off, .length = 16,
                         .lkey = mr->lkey };
  struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
  if (ibv_post_recv (id->qp, &wr, &bad))
    die ("ibv_post_recv");
}

/* Send r from mem and wait for the SEND's completion (mem is free
 * again).  0, or -1.
 */
static int
send_request (const struct gm_rp_request *r)
{
  struct ibv_wc wc;
  gm_rp_encode_request (r, mem);
  send_raw (GM_RP_REQUEST_SIZE);
  return gm_rdma_cq_wait (cq, cc, &wc, -1, 5000) == 1 &&
    wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

static struct gm_rp_request
read_req (uint64_t handle, uint64_t offset, uint32_t len)
{
  struct gm_rp_request r = { .op = GM_RP_READ, .length = len,
                             .handle = handle, .offset = offset,
                             .addr = (uintptr_t) mem + 4096,
                             .rkey = mr->rkey, .buf_len = BUF };
  return r;
}

/* Wait up to 20 s for the server to drop us.  0 if it did. */
static int
await_drop (const char *what)
{
  for (int i = 0; i < 20; i++) {
    int t = cm_next (1000, NULL);
    if (t == RDMA_CM_EVENT_DISCONNECTED) {
      printf ("%s: the server dropped the client, as it must\n", what);
      return 0;
    }
  }
  printf ("%s: the server did not drop the client within 20 s\n", what);
  return 1;
}

/* A request (already in mem) the server must drop us for. */
static int
expect_drop (const char *what)
{
  send_raw (GM_RP_REQUEST_SIZE);
  return await_drop (what);
}

int
main (int argc, char **argv)
{
  struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
  struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC };
  struct rdma_conn_param cp = { .responder_resources = 1,
                                .initiator_depth = 1, .retry_count = 7,
                                .rnr_retry_count = 7 };
  struct gm_rp_hello hello;
  struct gm_rp_welcome w;
  struct gm_rp_request r;
  struct gm_rp_reply rep;
  uint8_t hmsg[GM_RP_HELLO_SIZE];
  char why[128];
  const char *c;
  int t;

  if (argc != 4) {
    fprintf (stderr, "usage: rdma-badclient HOST PORT CASE\n");
    return 2;
  }
  c = argv[3];
  if (getaddrinfo (argv[1], argv[2], &hints, &ai))
    die ("getaddrinfo");
  ch = rdma_create_event_channel ();
  if (ch == NULL || rdma_create_id (ch, &id, NULL, RDMA_PS_TCP))
    die ("rdma_create_id");
  if (strcmp (c, "stall-rread") == 0) {
    /* Our CM REQ carries this as the local ACK timeout the server's QP
     * uses: 4.096 us << 30 = about 73 minutes per retry. */
    uint8_t t = 30;
    if (rdma_set_option (id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                         &t, sizeof t))
      die ("rdma_set_option ACK_TIMEOUT");
  }
  if (rdma_resolve_addr (id, NULL, ai->ai_addr, 5000) ||
      cm_next (5000, NULL) != RDMA_CM_EVENT_ADDR_RESOLVED ||
      rdma_resolve_route (id, 5000) ||
      cm_next (5000, NULL) != RDMA_CM_EVENT_ROUTE_RESOLVED)
    die ("resolve");
  pd = ibv_alloc_pd (id->verbs);
  cc = ibv_create_comp_channel (id->verbs);
  cq = ibv_create_cq (id->verbs, 16, NULL, cc, 0);
  if (posix_memalign ((void **) &mem, 4096, 4096 + BUF))
    die ("posix_memalign");
  memset (mem, 0, 4096 + BUF);
  mr = ibv_reg_mr (pd, mem, 4096 + BUF, IBV_ACCESS_LOCAL_WRITE |
                   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
  if (cq == NULL || mr == NULL)
    die ("verbs resources");
  qa.send_cq = qa.recv_cq = cq;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (rdma_create_qp (id, pd, &qa))
    die ("rdma_create_qp");
  /* no-receive: never a receive for the reply, and RNR retries forever
   * (rnr_retry_count 7): the reply can never complete. */
  if (strcmp (c, "no-receive") != 0 && strcmp (c, "deferred") != 0)
    post_recv ();
  gm_rp_conn_init (&rp, GM_RP_CLIENT);
  if (gm_rp_conn_hello (&rp, 1, BUF, &hello, why, sizeof why) == -1)
    return 1;
  gm_rp_encode_hello (&hello, hmsg);
  if (strcmp (c, "bad-hello") == 0)
    hmsg[0] ^= 0xff;
  cp.private_data = hmsg;
  cp.private_data_len = sizeof hmsg;
  if (rdma_connect (id, &cp))
    die ("rdma_connect");
  /* 20 s: a loaded TCG guest's server may still be freeing the client
   * the case before dropped (seen: no answer within 5 s). */
  switch (t = cm_next (20000, &w)) {
  case RDMA_CM_EVENT_REJECTED:
    if (strcmp (c, "bad-hello") == 0 && w.error == GM_RP_EINVAL) {
      printf ("bad-hello: refused with EINVAL: %s\n", w.reason);
      return 0;
    }
    if (strcmp (c, "full") == 0 && w.error == GM_RP_ENOSPC) {
      printf ("full: refused with ENOSPC: %s\n", w.reason);
      return 0;
    }
    printf ("%s: refused (error %u: %s)\n", c, w.error, w.reason);
    return 1;
  case RDMA_CM_EVENT_ESTABLISHED:
    if (strcmp (c, "bad-hello") == 0 || strcmp (c, "full") == 0) {
      printf ("%s: the server accepted the connection\n", c);
      return 1;
    }
    break;
  default:
    printf ("%s: no answer to the connect request (%s)\n", c,
            t == -1 ? "none within 20 s" : rdma_event_str (t));
    return 1;
  }

  if (strcmp (c, "short-send") == 0) {
    memset (mem, 0, 8);
    send_raw (7);
    for (int i = 0; i < 20; i++)
      if (cm_next (1000, NULL) == RDMA_CM_EVENT_DISCONNECTED) {
        printf ("short-send: the server dropped the client, as it must\n");
        return 0;
      }
    printf ("short-send: not dropped\n");
    return 1;
  }
  r = read_req (1, 0, 4096);
  if (strcmp (c, "bad-op") == 0) {
    r.op = 9;
    gm_rp_encode_request (&r, mem);
    return expect_drop (c);
  }
  if (strcmp (c, "bad-reserved") == 0) {
    gm_rp_encode_request (&r, mem);
    mem[1] = 1;
    return expect_drop (c);
  }
  if (strcmp (c, "no-receive") == 0) {
    /* A valid READ whose reply cannot land: its pool memory must not
     * stay held forever (the server's reply watchdog drops us). */
    if (gm_rp_conn_request_begin (&rp, &r, why, sizeof why)) {
      printf ("no-receive: %s\n", why);
      return 1;
    }
    /* Once our SEND completed the server holds the READ: say so, so
     * that the scenario starts its next client only then. */
    if (send_request (&r)) {
      printf ("no-receive: the READ was not delivered\n");
      return 1;
    }
    printf ("no-receive: the READ is delivered, its reply cannot land\n");
    fflush (stdout);
    return await_drop (c);
  }
  if (strcmp (c, "bad-rkey") == 0) {
    r.rkey ^= 0x5a5a00;
    gm_rp_encode_request (&r, mem);
    return expect_drop (c);
  }
  if (strcmp (c, "bad-rkey-write") == 0) {
    r = read_req (1, 0, BUF);
    r.op = GM_RP_WRITE;
    r.rkey ^= 0x5a5a00;
    gm_rp_encode_request (&r, mem);
    return expect_drop (c);
  }
  if (strcmp (c, "deferred") == 0) {
    /* The server ended READ 1 in the protocol when it posted its reply,
     * so READ 2 is within our one credit; its slot is still taken
     * until the reply completes, which our receives allow only after
     * READ 2 has arrived (1 s each: the server must have taken it). */
    struct gm_rp_request r2 = read_req (2, 4096, 4096);
    struct gm_rp_reply rep2;
    struct ibv_wc wc;
    int got = 0;
    if (send_request (&r) == -1) {
      printf ("deferred: READ 1 was not sent\n");
      return 1;
    }
    sleep (1);
    if (send_request (&r2) == -1) {
      printf ("deferred: READ 2 was not sent\n");
      return 1;
    }
    sleep (1);
    post_recv_at (48);
    post_recv_at (2048);
    while (got < 2 && gm_rdma_cq_wait (cq, cc, &wc, -1, 15000) == 1 &&
           wc.status == IBV_WC_SUCCESS)
      got++;
    if (got < 2 ||
        gm_rp_decode_reply (mem + 2048, 16, &rep2, why, sizeof why) == -1 ||
        rep2.handle != 2 || rep2.error) {
      printf ("deferred: %d of 2 replies within 15 s%s\n", got,
              got == 2 ? ", the second not READ 2's success" : "");
      return 1;
    }
    printf ("deferred: READ 2 waited for READ 1's slot and was served\n");
    return 0;
  }
  if (strcmp (c, "stall-rread") == 0) {
    /* A valid 1M WRITE; once the server has its SEND (our send
     * completion), our QP goes to the error state silently (no DREQ):
     * the server's RDMA READ for it is never answered, and it retries
     * with the ACK timeout we chose.  Does it drop us? */
    struct ibv_qp_attr qpa = { .qp_state = IBV_QPS_ERR };
    struct ibv_wc wc;
    r = read_req (7, 0, BUF);
    r.op = GM_RP_WRITE;
    if (gm_rp_conn_request_begin (&rp, &r, why, sizeof why)) {
      printf ("stall-rread: %s\n", why);
      return 1;
    }
    gm_rp_encode_request (&r, mem);
    send_raw (GM_RP_REQUEST_SIZE);
    if (gm_rdma_cq_wait (cq, cc, &wc, -1, 5000) != 1 ||
        wc.status != IBV_WC_SUCCESS) {
      printf ("stall-rread: the WRITE request was not sent\n");
      return 1;
    }
    if (ibv_modify_qp (id->qp, &qpa, IBV_QP_STATE))
      die ("ibv_modify_qp ERR");
    printf ("stall-rread: WRITE sent, our QP silently in error\n");
    fflush (stdout);
    for (int i = 0; i < 60; i++)
      if (cm_next (1000, NULL) == RDMA_CM_EVENT_DISCONNECTED) {
        printf ("stall-rread: the server's disconnect came after %d s\n", i);
        break;
      }
    return 0;
  }
  if (strcmp (c, "split-short-mr") == 0) {
    /* A 1M READ, which the server cuts into pieces (alone on its
     * connection), whose rkey covers only the first 256K: piece 0
     * lands, the later ones fail at our NIC.  We must be dropped and
     * every piece's pool memory come back. */
    struct ibv_mr *small = ibv_reg_mr (pd, mem + 4096, 256 * 1024,
                                       IBV_ACCESS_LOCAL_WRITE |
                                       IBV_ACCESS_REMOTE_WRITE);
    if (small == NULL)
      die ("ibv_reg_mr of 256K");
    r = read_req (1, 0, BUF);
    r.rkey = small->rkey;
    gm_rp_encode_request (&r, mem);
    return expect_drop (c);
  }
  if (strcmp (c, "past-end") == 0) {
    r.offset = rp.lim.size;     /* well formed, but past the end */
    /* Bypass the client-side checks: they would refuse it locally. */
    gm_rp_encode_request (&r, mem);
    send_raw (GM_RP_REQUEST_SIZE);
    if (await_reply () == -1 ||
        gm_rp_decode_reply (mem + 48, 16, &rep, why, sizeof why) == -1 ||
        rep.handle != 1 || rep.error != GM_RP_EINVAL) {
      printf ("past-end: no EINVAL reply\n");
      return 1;
    }
    post_recv ();
    r = read_req (2, 0, 4096);
    if (gm_rp_conn_request_begin (&rp, &r, why, sizeof why)) {
      printf ("past-end: %s\n", why);
      return 1;
    }
    gm_rp_encode_request (&r, mem);
    send_raw (GM_RP_REQUEST_SIZE);
    if (await_reply () == -1 ||
        gm_rp_conn_take_reply (&rp, mem + 48, 16, &rep, &r, why, sizeof why) ||
        rep.error) {
      printf ("past-end: the valid READ after it failed\n");
      return 1;
    }
    printf ("past-end: EINVAL reply, then a valid 4K READ on the same "
            "connection\n");
    return 0;
  }
  fprintf (stderr, "rdma-badclient: unknown case %s\n", c);
  return 2;
}

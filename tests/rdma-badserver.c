/* rdma-badserver: a raw server of the gmblock RDMA protocol that
 * misbehaves on purpose, for the lab scenario rdma-badserver (the
 * bridge's side of what rdma-badclient does to the server).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   rdma-badserver HOST PORT CASE
 *
 * Serves connections one after another until killed, each the same way:
 *   refuse-ok      rejects the connect request with a valid refusal
 *                  (EINVAL, "go away"): the bridge says so, no retry
 *   refuse-forged  rejects the connect request with a refusal whose
 *                  reason holds a newline and a log line of its own
 *   refuse-nonul   the same with 48 printable bytes of reason, no NUL
 *   bad-handle     accepts (a 64M export); answers the first request
 *                  with a handle that is not in flight
 *   bad-count      answers a READ with count 1
 *   bad-error      answers with error 4, which the protocol lacks
 *   bye-other      says goodbye (FLUSHED) with another instance
 * The bridge must fail the NBD request (EIO), log a protocol error or
 * the malformed refusal, and stay up; the scenario judges.  Prints one
 * line per connection to stdout.
 */
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdmaaddr.h"
#include "rdmaproto.h"

#define CREDITS 16
#define INSTANCE 0x5eed5eed00000001ull

static struct rdma_event_channel *ch;
static const char *kase;

static void
die (const char *what)
{
  fprintf (stderr, "rdma-badserver: %s: %m\n", what);
  exit (1);
}

/* The next CM event within ms (NULL if none): the caller acks it. */
static struct rdma_cm_event *
cm_next (int ms)
{
  struct pollfd p = { .fd = ch->fd, .events = POLLIN };
  struct rdma_cm_event *ev;

  if (poll (&p, 1, ms) <= 0 || rdma_get_cm_event (ch, &ev))
    return NULL;
  return ev;
}

static void
refuse (struct rdma_cm_id *id)
{
  struct gm_rp_welcome w;
  uint8_t msg[GM_RP_WELCOME_SIZE];

  gm_rp_welcome_refusal (&w, GM_RP_EINVAL, "");
  if (strcmp (kase, "refuse-ok") == 0)
    strcpy (w.reason, "go away");
  else if (strcmp (kase, "refuse-forged") == 0)
    strcpy (w.reason, "bad\nnbdkit: error: forged by the server");
  else
    memset (w.reason, 'x', GM_RP_REASON_LEN);
  gm_rp_encode_welcome (&w, msg);
  if (rdma_reject (id, msg, sizeof msg))
    die ("rdma_reject");
  printf ("%s: refused\n", kase);
}

/* Accept id, take one request, answer it badly, wait for the end. */
static void
serve (struct rdma_cm_id *id, const void *hello, size_t hello_len)
{
  static const struct gm_rp_limits offer = {
    .size = 64u << 20, .flags = GM_RP_TF_FLUSH | GM_RP_TF_MULTI_CONN,
    .min_block = 512, .pref_block = 4096, .max_block = 32u << 20,
    .max_request = 1u << 20, .credits = CREDITS, .instance = INSTANCE,
  };
  struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC };
  struct rdma_conn_param cp = { .responder_resources = 1,
                                .initiator_depth = 1, .retry_count = 7,
                                .rnr_retry_count = 7 };
  uint8_t wmsg[GM_RP_WELCOME_SIZE], *mem;
  struct gm_rp_welcome w;
  struct gm_rp_request r;
  struct gm_rp_conn rp;
  struct ibv_comp_channel *cc;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_mr *mr;
  struct ibv_wc wc;
  char why[160];
  size_t out = GM_RP_REPLY_SIZE;

  gm_rp_conn_init (&rp, GM_RP_SERVER);
  if (gm_rp_conn_accept_hello (&rp, hello, hello_len, &offer, &w,
                               why, sizeof why)) {
    printf ("%s: bad hello: %s\n", kase, why);
    rdma_reject (id, NULL, 0);
    return;
  }
  pd = ibv_alloc_pd (id->verbs);
  cc = ibv_create_comp_channel (id->verbs);
  cq = cc ? ibv_create_cq (id->verbs, 4 * CREDITS, NULL, cc, 0) : NULL;
  mem = calloc (CREDITS + 1, 64);
  mr = pd && mem ? ibv_reg_mr (pd, mem, (CREDITS + 1) * 64,
                               IBV_ACCESS_LOCAL_WRITE) : NULL;
  if (cq == NULL || mr == NULL)
    die ("verbs resources");
  qa.send_cq = qa.recv_cq = cq;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = CREDITS + 1;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (rdma_create_qp (id, pd, &qa))
    die ("rdma_create_qp");
  for (unsigned i = 0; i < CREDITS; i++) {
    struct ibv_sge sge = { .addr = (uintptr_t) mem + 64 * (i + 1),
                           .length = 64, .lkey = mr->lkey };
    struct ibv_recv_wr wr = { .wr_id = i + 1, .sg_list = &sge,
                              .num_sge = 1 }, *bad;
    if (ibv_post_recv (id->qp, &wr, &bad))
      die ("ibv_post_recv");
  }
  gm_rp_encode_welcome (&w, wmsg);
  cp.private_data = wmsg;
  cp.private_data_len = sizeof wmsg;
  if (rdma_accept (id, &cp))
    die ("rdma_accept");

  /* The first request (the CM's ESTABLISHED comes on the channel). */
  for (;;) {
    int n = gm_rdma_cq_wait (cq, cc, &wc, -1, 30000);
    if (n != 1 || wc.status != IBV_WC_SUCCESS) {
      printf ("%s: no request\n", kase);
      goto end;
    }
    if (wc.wr_id)
      break;
  }
  if (gm_rp_conn_take_request (&rp, mem + 64 * wc.wr_id, wc.byte_len, &r,
                               why, sizeof why)) {
    printf ("%s: bad request: %s\n", kase, why);
    goto end;
  }
  if (strcmp (kase, "bye-other") == 0) {
    struct gm_rp_goodbye g = { .magic = GM_RP_GOODBYE_MAGIC,
                               .flags = GM_RP_BYE_FLUSHED,
                               .instance = INSTANCE + 1 };
    gm_rp_encode_goodbye (&g, mem);
    out = GM_RP_GOODBYE_SIZE;
  }
  else {
    struct gm_rp_reply rep = { .handle = r.handle };
    if (strcmp (kase, "bad-handle") == 0)
      rep.handle ^= 0x100;
    else if (strcmp (kase, "bad-count") == 0)
      rep.count = 1;
    else
      rep.error = 4;
    gm_rp_encode_reply (&rep, mem);
  }
  {
    struct ibv_sge sge = { .addr = (uintptr_t) mem, .length = out,
                           .lkey = mr->lkey };
    struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
                              .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED }, *bad;
    if (ibv_post_send (id->qp, &wr, &bad))
      die ("ibv_post_send");
  }
  printf ("%s: answered %s of handle 0x%llx\n", kase, gm_rp_op_name (r.op),
          (unsigned long long) r.handle);

 end:
  /* Until the bridge goes (it must: the answer was malformed). */
  for (int i = 0; i < 60; i++) {
    struct rdma_cm_event *ev = cm_next (1000);
    struct rdma_cm_id *other;
    int t;

    if (ev == NULL)
      continue;
    t = ev->event;
    other = ev->id;
    if (t == RDMA_CM_EVENT_CONNECT_REQUEST)
      rdma_reject (other, NULL, 0);     /* one at a time: try again */
    rdma_ack_cm_event (ev);
    if (t == RDMA_CM_EVENT_CONNECT_REQUEST)
      rdma_destroy_id (other);
    if (t == RDMA_CM_EVENT_DISCONNECTED && other == id)
      break;
  }
  fflush (stdout);
  rdma_destroy_qp (id);
  ibv_destroy_cq (cq);
  ibv_destroy_comp_channel (cc);
  ibv_dereg_mr (mr);
  ibv_dealloc_pd (pd);
  free (mem);
  rdma_destroy_id (id);
}

int
main (int argc, char **argv)
{
  struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
                            .ai_flags = AI_PASSIVE }, *ai;
  struct rdma_cm_id *listener;

  if (argc != 4) {
    fprintf (stderr, "usage: rdma-badserver HOST PORT CASE\n");
    return 2;
  }
  kase = argv[3];
  setvbuf (stdout, NULL, _IOLBF, 0);
  if (getaddrinfo (argv[1], argv[2], &hints, &ai))
    die ("getaddrinfo");
  ch = rdma_create_event_channel ();
  if (ch == NULL || rdma_create_id (ch, &listener, NULL, RDMA_PS_TCP))
    die ("rdma_create_id");
  if (rdma_bind_addr (listener, ai->ai_addr) || rdma_listen (listener, 4))
    die ("rdma_bind_addr/listen");
  printf ("rdma-badserver %s listening\n", kase);
  for (;;) {
    struct rdma_cm_event *ev = cm_next (-1);
    struct rdma_cm_id *id;
    uint8_t hello[64];
    size_t len;

    if (ev == NULL)
      continue;
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event (ev);
      continue;
    }
    id = ev->id;
    len = ev->param.conn.private_data_len;
    if (len > sizeof hello)
      len = sizeof hello;
    memcpy (hello, ev->param.conn.private_data, len);
    rdma_ack_cm_event (ev);
    if (strncmp (kase, "refuse-", 7) == 0) {
      refuse (id);
      rdma_destroy_id (id);
    }
    else
      serve (id, hello, len);
  }
}

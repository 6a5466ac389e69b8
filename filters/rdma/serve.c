/* gmblock-rdma filter: serving one RDMA client.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Each client has one poller thread and a few request workers
 * (rdma-threads=).  The poller owns the completion queue: it checks
 * each received request, reposts the receive and queues the request;
 * it frees a request's buffer when its reply has completed.  Workers
 * serve the requests through the client's context on the stack below.
 *
 * A READ is cut into pieces (rdma-piece=, or the stripe chunks that
 * gmblock-stripe publishes: one stream per data disk).  Workers claim
 * pieces in buffer order, which on a stripe takes each data disk in
 * turn, so every member has a read at once, and with more workers than
 * members, the next ones queued behind it (a member's reads one after
 * another would each pay its latency alone).  Each piece is
 * RDMA-WRITten to the client the moment its read returns, in whatever
 * order the pieces land, and the worker that ends the last piece posts
 * the reply behind them on the same queue pair, so it cannot overtake
 * the data.  The worker that starts a request keeps claiming its
 * pieces until none is left, so a request never waits for an idle
 * worker to progress.
 *
 * Pieces pay off when a READ is alone: then its disk time and its
 * network time can only overlap inside it.  With other requests of
 * the client in service, those already keep disk and network busy at
 * once, and pieces only add reads, sends and completions (CPU), so by
 * default (rdma-split=alone) such a READ is read whole.
 *
 * Nothing is allocated per request: a client has 'credits' request
 * slots, and buffers come from the shared registered pool.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rdma.h"
#include "rdmaaddr.h"

/* wr_id: the kind in the high half; below, the receive slot, or the
 * request index << 8 | the piece.
 */
#define WR_RECV   (1ull << 32)
#define WR_REPLY  (2ull << 32)
#define WR_RREAD  (3ull << 32)
#define WR_DATA   (4ull << 32)
#define WR_BYE    (5ull << 32)
#define WR_PROBE  (6ull << 32)
#define WR_KIND(w) ((w) & ~0xffffffffull)
#define WR_REQ(w) ((unsigned) (((w) >> 8) & 0xffffff))
#define WR_PIECE(w) ((unsigned) ((w) & 0xff))

/* The NIC orders a request's work: what a worker wrote in the request
 * before posting work for it is seen by the poller that takes the
 * completion.  ThreadSanitizer cannot see that (the verbs library's
 * queues are not instrumented): tell it, per request.
 */
#ifdef __SANITIZE_THREAD__
void __tsan_acquire (void *addr);
void __tsan_release (void *addr);
#define NIC_RELEASE(q) __tsan_release (q)
#define NIC_ACQUIRE(q) __tsan_acquire (q)
#else
#define NIC_RELEASE(q) ((void) (q))
#define NIC_ACQUIRE(q) ((void) (q))
#endif

static inline unsigned
req_index (struct client *c, struct req *q)
{
  return q - c->reqs;
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
  int e = ibv_post_recv (c->id->qp, &wr, &bad);

  if (e == 0)
    return 0;
  errno = e;                    /* returned, not set: for the caller's %m */
  return -1;
}

/* An RDMA WRITE (to the client, for READ) or READ (from it, for WRITE)
 * of len bytes at buf <-> the client's addr + off, into *wr and *sge.
 * Signaled.
 */
static void
rdma_wr (struct req *q, enum ibv_wr_opcode op, uint64_t wr_id,
         uint32_t off, uint32_t len, struct ibv_send_wr *wr,
         struct ibv_sge *sge)
{
  *sge = (struct ibv_sge) { .addr = (uintptr_t) q->sbuf + off, .length = len,
                            .lkey = gm_rdma_pool_mr->lkey };
  memset (wr, 0, sizeof *wr);
  wr->wr_id = wr_id;
  wr->sg_list = sge;
  wr->num_sge = 1;
  wr->opcode = op;
  wr->send_flags = IBV_SEND_SIGNALED;
  wr->wr.rdma.remote_addr = q->r.addr + off;
  wr->wr.rdma.rkey = q->r.rkey;
  if (op == IBV_WR_RDMA_WRITE) {
    COUNT (RC_RDMA_WRITES, 1);
    if (q->r.op == GM_RP_READ)
      COUNT (RC_READ_BYTES, len);
  }
  else
    COUNT (RC_RDMA_READS, 1);
}

static int
post_rdma (struct client *c, struct req *q, enum ibv_wr_opcode op,
           uint64_t wr_id, uint32_t off, uint32_t len)
{
  struct ibv_send_wr wr, *bad;
  struct ibv_sge sge;

  rdma_wr (q, op, wr_id, off, len, &wr, &sge);
  NIC_RELEASE (q);
  return ibv_post_send (c->id->qp, &wr, &bad) ? -1 : 0;
}

/* ---- Request slots (under c->lock). */

static void
queue_req (struct client *c, struct req *q, const struct gm_rp_request *r,
           uint32_t error, uint64_t t0)
{
  q->r = *r;
  q->error = error;
  q->count = 0;
  q->data_with_reply = false;
  q->t0 = t0;
  q->state = RQ_QUEUED;
  c->queue[(c->qhead + c->qlen++) % c->rp.lim.credits] = req_index (c, q);
  pthread_cond_signal (&c->work);
}

/* Its reply has completed (or can never be sent): free it, and give it
 * to a request that arrived while every slot was busy.
 */
static void
release_req (struct client *c, struct req *q)
{
  gm_rdma_mem_put (q);
  q->state = RQ_FREE;
  if (c->ndeferred) {
    struct gm_rdma_deferred d = c->deferred[0];
    memmove (c->deferred, c->deferred + 1, --c->ndeferred * sizeof d);
    queue_req (c, q, &d.r, d.error, d.t0);
  }
}

static struct req *
free_req (struct client *c)
{
  for (unsigned i = 0; i < c->rp.lim.credits; i++)
    if (c->reqs[i].state == RQ_FREE)
      return &c->reqs[i];
  return NULL;
}

static bool
all_free (struct client *c)
{
  if (c->ndeferred || c->qlen)
    return false;
  for (unsigned i = 0; i < c->rp.lim.credits; i++)
    if (c->reqs[i].state != RQ_FREE)
      return false;
  return true;
}

static void
set_error (struct client *c, struct req *q, int err)
{
  pthread_mutex_lock (&c->lock);
  if (q->error == 0)
    q->error = gm_rp_error_to_wire (err ? err : EIO);
  pthread_mutex_unlock (&c->lock);
}

/* ---- Workers. */

/* Post q's reply (after its data, on the same QP).  A READ read whole
 * posts its data here too, in one call with the reply and unsignaled:
 * one doorbell and one completion (the reply's, which comes after the
 * data's on an RC queue pair) instead of two of each, per request.
 */
static void
finish (struct client *c, struct req *q)
{
  struct gm_rp_reply rep;
  uint8_t msg[GM_RP_REPLY_SIZE];
  struct ibv_sge sge = { .addr = (uintptr_t) msg, .length = sizeof msg }, dsge;
  struct ibv_send_wr wr, data, *first = &wr, *bad;
  char why[128];

  pthread_mutex_lock (&c->lock);
  /* An error reply counts nothing (the bridge takes a count beside an
   * error for a malformed reply): a BLOCK_STATUS whose extents could
   * not be sent set its count before it failed. */
  rep = (struct gm_rp_reply) { .handle = q->r.handle, .error = q->error,
                               .count = q->error ? 0 : q->count };
  /* The receive was reposted when the request came: give the credit
   * back with this reply.  On a failed connection this fails, and the
   * reply is posted all the same (below). */
  (void) gm_rp_conn_request_end (&c->rp, q->r.handle, NULL, why, sizeof why);
  q->state = RQ_REPLIED;
  q->replied_ns = gm_now_ns ();
  pthread_mutex_unlock (&c->lock);
  if (rep.error)
    COUNT (RC_ERROR_REPLIES, 1);
  gm_rp_encode_reply (&rep, msg);
  memset (&wr, 0, sizeof wr);
  wr.wr_id = WR_REPLY | (uint64_t) req_index (c, q) << 8;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  if (q->data_with_reply) {
    rdma_wr (q, IBV_WR_RDMA_WRITE, WR_DATA | (uint64_t) req_index (c, q) << 8,
             q->piece[0].off, q->piece[0].len, &data, &dsge);
    data.send_flags = 0;
    data.next = &wr;
    first = &data;
  }
  /* Posted even when the connection has failed: on a queue
   * pair in error it completes as flushed, and only that completion
   * says the NIC is done with the buffer (earlier pieces' WRITEs may
   * still be sending from it).  Should posting itself fail, the buffer
   * stays held until the queue pair is destroyed
   * (gm_rdma_client_release).
   */
  NIC_RELEASE (q);
  if (ibv_post_send (c->id->qp, first, &bad))
    nbdkit_debug (NAME ": %s: posting a reply failed: its buffer is held "
                  "until the client is released", c->peer);
}

/* Read piece p of q and send it as it lands (unless another piece
 * failed); the last piece to end posts the reply.
 */
static void
run_piece (struct client *c, struct req *q, unsigned p)
{
  nbdkit_next *next = c->next;
  struct gm_stripe_piece *pc = &q->piece[p];
  unsigned left;
  int err, r;

  pthread_mutex_lock (&c->lock);
  err = q->error;
  pthread_mutex_unlock (&c->lock);
  /* A client gone or dropped (its queue pair in error) gets nothing
   * more: the pieces not begun are not read from the disk for it, with
   * its buffer held (a review finding: every piece was). */
  if (err == 0 && c->stop) {
    set_error (c, q, EIO);
    err = EIO;
  }
  if (err == 0) {
    q->disk[p].start = gm_now_ns ();
    r = next->pread (next, (uint8_t *) q->buf + pc->off, pc->len,
                     q->r.offset + pc->off, 0, &err);
    q->disk[p].end = gm_now_ns ();
    if (r == -1)
      set_error (c, q, err);
    else {
      gm_rdma_mem_stage (q, pc->off, pc->len, true);
      q->net[p].start = gm_now_ns ();
      if (q->npieces == 1)
        q->data_with_reply = true;      /* finish () posts it */
      else if (post_rdma (c, q, IBV_WR_RDMA_WRITE,
                     WR_DATA | (uint64_t) req_index (c, q) << 8 | p,
                     pc->off, pc->len))
        set_error (c, q, EIO);
    }
  }
  pthread_mutex_lock (&c->lock);
  left = --q->pieces_left;
  pthread_mutex_unlock (&c->lock);
  if (left == 0)
    finish (c, q);
}

/* Does the client have requests in service besides q: queued, being
 * served, or with data or a reply still on the wire?  Under c->lock.
 */
static bool
others_in_service (struct client *c, struct req *q)
{
  if (c->qlen || c->ndeferred)
    return true;
  for (unsigned i = 0; i < c->rp.lim.credits; i++)
    if (&c->reqs[i] != q && c->reqs[i].state != RQ_FREE)
      return true;
  return false;
}

/* Cut q (a READ) into pieces: gmblock-stripe's chunks (buffer order
 * takes each data disk in turn), or fixed pieces; whole when it is
 * small, or 'busy' (others in service) and rdma-split=alone.
 */
static void
plan_read (struct req *q, bool busy)
{
  struct gm_stripe g = {
    .chunk = gm_rdma_set.piece,
    .data_disks = gm_rdma_set.streams ? gm_rdma_set.streams : MAX_PIECES,
    .offset = gm_rdma_set.streams ? gm_rdma_set.stripe_offset : 0,
  };
  unsigned n, nstreams;

  if (gm_rdma_set.serial || g.chunk == 0 || q->r.length <= g.chunk ||
      (busy && !gm_rdma_set.split_always)) {
    q->piece[0] = (struct gm_stripe_piece) { 0, q->r.length, 0 };
    q->npieces = 1;
    if (busy && g.chunk && q->r.length > g.chunk && !gm_rdma_set.serial)
      COUNT (RC_WHOLE_BUSY, 1);
    return;
  }
  /* Too many pieces: bigger ones (then a piece spans data disks).
   * Workers claim pieces, not streams, so the stream count is unused. */
  while ((n = gm_stripe_layout (&g, q->r.offset, q->r.length, q->piece,
                                MAX_PIECES, &nstreams)) == 0) {
    g.chunk *= 2;
    g.data_disks = MAX_PIECES;
    g.offset = 0;
  }
  q->npieces = n;
  COUNT (RC_SPLIT_READS, 1);
  COUNT (RC_PIECES, n);
}

/* WRITE: fetch the data from the client, then write it below. */
#define RREAD_STOP_WAIT_S 2

static void
serve_write (struct client *c, struct req *q, uint32_t fl)
{
  nbdkit_next *next = c->next;
  int err = 0;
  bool ok;
  uint64_t giveup = 0;

  pthread_mutex_lock (&c->lock);
  q->rread_done = false;
  q->rread_ns = gm_now_ns ();
  pthread_mutex_unlock (&c->lock);
  if (post_rdma (c, q, IBV_WR_RDMA_READ,
                 WR_RREAD | (uint64_t) req_index (c, q) << 8,
                 0, q->r.length)) {
    pthread_mutex_lock (&c->lock);
    q->rread_ns = 0;
    pthread_mutex_unlock (&c->lock);
    set_error (c, q, EIO);
    return;
  }
  pthread_mutex_lock (&c->lock);
  /* Its completion, success or flushed.  Once the client ends, for
   * RREAD_STOP_WAIT_S at most: a provider may never flush a READ posted
   * as the queue pair went to error (and the queue pair is destroyed
   * only once this worker has left).  Giving up is safe: the buffer
   * goes back to the pool only at the reply's completion, which the
   * queue pair delivers after the READ's, or at the queue pair's
   * destruction (gm_rdma_client_release). */
  while (!q->rread_done) {
    if (c->stop) {
      struct timespec t;
      if (giveup == 0)
        giveup = gm_now_ns () + RREAD_STOP_WAIT_S * 1000000000ull;
      else if (gm_now_ns () >= giveup)
        break;
      clock_gettime (CLOCK_REALTIME, &t);
      t.tv_sec++;
      pthread_cond_timedwait (&c->rread, &c->lock, &t);
    }
    else
      pthread_cond_wait (&c->rread, &c->lock);
  }
  ok = q->rread_done && q->rread_ok;
  pthread_mutex_unlock (&c->lock);
  if (!ok) {                    /* a bad rkey (the QP is broken), or ended */
    set_error (c, q, EIO);
    return;
  }
  COUNT (RC_WRITE_BYTES, q->r.length);
  gm_rdma_mem_stage (q, 0, q->r.length, false);
  if (next->pwrite (next, q->buf, q->r.length, q->r.offset, fl, &err) == -1)
    set_error (c, q, err);
}

/* BLOCK_STATUS: the extents below, as many as the client's buffer
 * takes (at most EXTENTS_MAX), RDMA-WRITten to it.
 */
#define EXTENTS_MAX 512

static void
serve_extents (struct client *c, struct req *q)
{
  nbdkit_next *next = c->next;
  uint64_t pos = q->r.offset, end = q->r.offset + q->r.length;
  bool one = q->r.flags & GM_RP_FLAG_REQ_ONE;
  uint32_t max = one ? 1 : q->r.buf_len / GM_RP_EXTENT_SIZE, n = 0;
  struct nbdkit_extents *ex;
  int err = 0;

  if (max > EXTENTS_MAX)
    max = EXTENTS_MAX;
  ex = nbdkit_extents_new (pos, end);
  if (ex == NULL) {
    set_error (c, q, ENOMEM);
    return;
  }
  if (next->extents (next, q->r.length, q->r.offset,
                     one ? NBDKIT_FLAG_REQ_ONE : 0, ex, &err) == -1) {
    set_error (c, q, err);
    nbdkit_extents_free (ex);
    return;
  }
  if (gm_rdma_mem_get_len (q, max * GM_RP_EXTENT_SIZE, &c->stop) == -1) {
    set_error (c, q, EIO);      /* the client ends (begin) */
    nbdkit_extents_free (ex);
    return;
  }
  for (size_t i = 0; i < nbdkit_extents_count (ex) && n < max && pos < end;
       i++) {
    struct nbdkit_extent e = nbdkit_get_extent (ex, i);
    uint64_t e_end = e.offset + e.length < end ? e.offset + e.length : end;
    struct gm_rp_extent w;

    if (e_end <= pos)
      continue;
    /* A length is 32 bits: a longer extent is cut, and the reply ends
     * there (the client asks again from where it ends).  Going on to
     * the next extent would describe the cut-off rest with its type.
     */
    w.length = e_end - pos > 0x80000000u ? 0x80000000u : e_end - pos;
    w.flags = e.type & (GM_RP_EXTENT_HOLE | GM_RP_EXTENT_ZERO);
    gm_rp_encode_extent (&w, (uint8_t *) q->sbuf + n++ * GM_RP_EXTENT_SIZE);
    pos += w.length;
    if (pos < e_end)
      break;
  }
  nbdkit_extents_free (ex);
  if (n == 0) {                 /* nbdkit always covers the offset */
    set_error (c, q, EIO);
    return;
  }
  q->count = n;
  COUNT (RC_EXTENTS, n);
  if (post_rdma (c, q, IBV_WR_RDMA_WRITE,
                 WR_DATA | (uint64_t) req_index (c, q) << 8, 0,
                 n * GM_RP_EXTENT_SIZE))
    set_error (c, q, EIO);
}

/* The worker that takes q from the queue: everything but a READ's
 * other streams.
 */
static void
begin (struct client *c, struct req *q)
{
  nbdkit_next *next = c->next;
  uint32_t fl = q->r.flags & GM_RP_FLAG_FUA ? NBDKIT_FLAG_FUA : 0;
  int err = 0, r = 0;

  if (q->error) {               /* refused by the checks: error reply */
    finish (c, q);
    return;
  }
  /* fence.c, before any pool memory is taken: a write waiting there
   * holding some could wait for ever for a gone client's WRITE that
   * waits for that memory. */
  if (gm_rp_op_writes (q->r.op))
    gm_rdma_fence_wait (c, q->r.offset, q->r.length);
  /* A client that ends gives up waiting for memory: what it waits for
   * may be held by a reply of its own whose completion never comes
   * until its queue pair is destroyed, which waits for this worker
   * (a server that never exited at SIGTERM, twice in the lab). */
  if ((q->r.op == GM_RP_READ || q->r.op == GM_RP_WRITE) &&
      gm_rdma_mem_get (q, &c->stop) == -1) {
    set_error (c, q, EIO);
    finish (c, q);
    return;
  }
  switch (q->r.op) {
  case GM_RP_READ:
    pthread_mutex_lock (&c->lock);
    plan_read (q, others_in_service (c, q));
    q->next_piece = 1;
    q->pieces_left = q->npieces;
    q->state = RQ_ACTIVE;
    if (q->npieces > 1)
      pthread_cond_broadcast (&c->work);
    pthread_mutex_unlock (&c->lock);
    /* Piece 0, then help with the others. */
    run_piece (c, q, 0);
    for (;;) {
      unsigned p;
      pthread_mutex_lock (&c->lock);
      p = q->state == RQ_ACTIVE && q->next_piece < q->npieces
        ? q->next_piece++ : 0;
      pthread_mutex_unlock (&c->lock);
      if (p == 0)
        return;
      run_piece (c, q, p);
    }
  case GM_RP_WRITE:
    serve_write (c, q, fl);
    finish (c, q);
    return;
  case GM_RP_FLUSH:
    r = next->flush (next, 0, &err);
    break;
  case GM_RP_TRIM:
    r = next->trim (next, q->r.length, q->r.offset, fl, &err);
    break;
  case GM_RP_ZERO:
    if (!(q->r.flags & GM_RP_FLAG_NO_HOLE))
      fl |= NBDKIT_FLAG_MAY_TRIM;
    if (q->r.flags & GM_RP_FLAG_FAST_ZERO)
      fl |= NBDKIT_FLAG_FAST_ZERO;
    r = next->zero (next, q->r.length, q->r.offset, fl, &err);
    break;
  case GM_RP_CACHE:
    r = next->cache (next, q->r.length, q->r.offset, 0, &err);
    break;
  case GM_RP_BLOCK_STATUS:
    serve_extents (c, q);
    finish (c, q);
    return;
  case GM_RP_ABANDON:
    /* conn_id in the offset, its server instance in addr: of another
     * process, it died with that one. */
    if (q->r.addr == c->rp.lim.instance)
      gm_rdma_fence_abandoned (c, q->r.offset, q->t0);
    break;
  default:                      /* not advertised: refused by the checks */
    r = -1;
    err = EINVAL;
  }
  if (r == -1)
    set_error (c, q, err);
  finish (c, q);
}

static void *
worker_run (void *arg)
{
  struct client *c = arg;
  uint64_t one = 1;

  pthread_mutex_lock (&c->lock);
  while (!c->stop) {
    struct req *help = NULL;

    for (unsigned i = 0; i < c->rp.lim.credits && !help; i++) {
      struct req *q = &c->reqs[i];
      if (q->state == RQ_ACTIVE && q->next_piece < q->npieces)
        help = q;
    }
    if (help) {
      unsigned p = help->next_piece++;
      pthread_mutex_unlock (&c->lock);
      run_piece (c, help, p);
      pthread_mutex_lock (&c->lock);
    }
    else if (c->qlen) {
      struct req *q = &c->reqs[c->queue[c->qhead]];
      c->qhead = (c->qhead + 1) % c->rp.lim.credits;
      c->qlen--;
      q->state = RQ_SETUP;
      pthread_mutex_unlock (&c->lock);
      begin (c, q);
      pthread_mutex_lock (&c->lock);
    }
    else
      pthread_cond_wait (&c->work, &c->lock);
  }
  c->running--;
  pthread_mutex_unlock (&c->lock);
  if (write (c->wake_fd, &one, sizeof one) != sizeof one)
    nbdkit_debug (NAME ": %s: wake the poller: %m", c->peer);
  return NULL;
}

/* ---- The poller. */

/* A received request.  Returns 0, or -1: end the client. */
static int
on_recv (struct client *c, const struct ibv_wc *wc)
{
  unsigned slot = wc->wr_id & 0xffffffffu;
  struct gm_rp_request r;
  struct req *q;
  char why[160];
  int e;

  /* One hold of the lock from the drain check to the queue: a request
   * taken must be in a slot before the shutdown can see this client
   * drained (gm_rdma_client_drained), or it could be served after the
   * shutdown's flush began, and its acknowledgement would pass for
   * flushed. */
  pthread_mutex_lock (&c->lock);
  if (c->draining) {
    /* Shutting down: not served, not answered.  The goodbye tells the
     * client so, and it sends the request again elsewhere.  The
     * receive goes back all the same: at the disconnect, its flushed
     * completion is what ends this poller. */
    pthread_mutex_unlock (&c->lock);
    COUNT (RC_UNSERVED, 1);
    return post_recv (c, slot);
  }
  e = gm_rp_conn_take_request (&c->rp, c->recv_buf + slot * GM_RP_REQUEST_SIZE,
                               wc->byte_len, &r, why, sizeof why);
  if (e == -1) {
    pthread_mutex_unlock (&c->lock);
    nbdkit_error (NAME ": %s: protocol error, dropping the client: %s",
                  c->peer, why);
    COUNT (RC_PROTO_ERRORS, 1);
    return -1;
  }
  if (r.op == GM_RP_DISCONNECT) {
    c->closing = true;          /* answer what is in flight, then end */
    pthread_mutex_unlock (&c->lock);
    return 0;
  }
  /* Before the request can be answered: its reply returns the credit. */
  if (post_recv (c, slot) == -1) {
    pthread_mutex_unlock (&c->lock);
    return -1;
  }
  q = free_req (c);
  if (q)
    queue_req (c, q, &r, e, gm_now_ns ());
  else {
    /* Every slot waits for its reply's completion, which comes soon;
     * at most 'credits' receives can complete meanwhile. */
    c->deferred[c->ndeferred++] = (struct gm_rdma_deferred) {
      .r = r, .error = e, .t0 = gm_now_ns () };
  }
  pthread_mutex_unlock (&c->lock);
  return 0;
}

/* One completion.  Returns 0, or -1: end the client. */
static int
on_completion (struct client *c, const struct ibv_wc *wc)
{
  uint64_t kind = WR_KIND (wc->wr_id);
  struct req *q = NULL;
  bool ok = wc->status == IBV_WC_SUCCESS;

  if (!ok && wc->status != IBV_WC_WR_FLUSH_ERR && !c->stop)
    nbdkit_debug (NAME ": %s: %s", c->peer, ibv_wc_status_str (wc->status));
  if (kind == WR_RECV)
    return ok && !c->stop ? on_recv (c, wc) : -1;
  if (kind == WR_PROBE) {
    c->probing = false;
    if (!ok && wc->status != IBV_WC_WR_FLUSH_ERR && !c->stop) {
      nbdkit_error (NAME ": %s: a keepalive probe after %u s of silence "
                    "failed (%s): the client is gone, dropping it", c->peer,
                    gm_rdma_set.keepalive, ibv_wc_status_str (wc->status));
      COUNT (RC_KEEPALIVE_DROPS, 1);
    }
    return ok ? 0 : -1;
  }
  if (kind == WR_BYE) {
    pthread_mutex_lock (&c->lock);
    c->bye = ok ? BYE_SENT : BYE_FAILED;
    pthread_mutex_unlock (&c->lock);
    return ok ? 0 : -1;
  }
  if (WR_REQ (wc->wr_id) >= c->rp.lim.credits)
    return -1;
  q = &c->reqs[WR_REQ (wc->wr_id)];
  NIC_ACQUIRE (q);
  pthread_mutex_lock (&c->lock);
  switch (kind) {
  case WR_DATA:
    q->net[WR_PIECE (wc->wr_id) % MAX_PIECES].end = gm_now_ns ();
    break;
  case WR_RREAD:
    q->rread_done = true;
    q->rread_ok = ok;
    q->rread_ns = 0;
    pthread_cond_broadcast (&c->rread);
    break;
  case WR_REPLY:
    if (ok) {
      uint64_t t = gm_now_ns ();
      COUNT (RC_REQUESTS, 1);
      if (q->data_with_reply)
        q->net[0].end = t;      /* its data's completion was not asked */
      if (q->r.op == GM_RP_READ && q->error == 0)
        gm_rdma_overlap_add (q, t);
    }
    /* Its RDMA READ never completed (serve_write gave up): a provider
     * that completes the reply first breaks the queue's order, and the
     * NIC may still write into the buffer; held until the queue pair
     * is destroyed (gm_rdma_client_release). */
    if (q->rread_ns)
      break;
    release_req (c, q);
    break;
  }
  pthread_mutex_unlock (&c->lock);
  return ok ? 0 : -1;
}

static void
stop_workers (struct client *c)
{
  pthread_mutex_lock (&c->lock);
  c->stop = true;
  pthread_cond_broadcast (&c->work);
  pthread_cond_broadcast (&c->rread);
  pthread_mutex_unlock (&c->lock);
  /* Those waiting for pool memory see c->stop (begin). */
  gm_rdma_mem_wake ();
}

void
gm_rdma_client_ending (struct client *c)
{
  int live = GM_FENCE_LIVE;

  /* Workers stopped first (a fenced client begins nothing more: what
   * is only queued never runs), then counted. */
  stop_workers (c);
  if (atomic_compare_exchange_strong (&c->fence, &live, GM_FENCE_ENDING))
    atomic_fetch_add (&gm_rdma_ending, 1);
}

/* Its workers have all left: nothing of it can land any more. */
static void
fence_done (struct client *c)
{
  if (atomic_exchange (&c->fence, GM_FENCE_DONE) == GM_FENCE_ENDING)
    atomic_fetch_sub (&gm_rdma_ending, 1);
}

/* A reply whose completion has not come for REPLY_TIMEOUT_S: the
 * client posts no receives (its NIC answers RNR, and the client chose
 * how many retries: 7 is forever) or is gone.  The same for the RDMA
 * READ of a WRITE's data: a client that went silent without a
 * disconnect leaves it to the NIC's retries, which could take hours
 * (the worker waits for it, holding its buffer, and no reply is posted
 * yet).  Its requests hold pool memory every client shares, so it is
 * dropped: the queue pair in error flushes what was outstanding.
 * Checked about once a second; dropped when found on two checks in a
 * row.  Under lock.
 */
#define REPLY_TIMEOUT_S 10
#define WATCH_MS 1000

/* The first stalled request's index, or -1, and since when it waits
 * on the client's NIC.  'now' was read before the lock was taken: one
 * posted in between is younger than 'now', so the age is only compared
 * in the form that cannot wrap around (a 'now - replied_ns' did, and
 * dropped healthy clients).
 */
static int
stalled_req (struct client *c, uint64_t now, uint64_t *since)
{
  for (unsigned i = 0; i < c->rp.lim.credits; i++) {
    const struct req *q = &c->reqs[i];
    /* A WRITE fetches its data in RQ_SETUP: rread_ns says while. */
    uint64_t t = q->state == RQ_REPLIED ? q->replied_ns : q->rread_ns;
    if (t && t + REPLY_TIMEOUT_S * 1000000000ull < now) {
      *since = t;
      return (int) i;
    }
  }
  return -1;
}

/* Say which reply stalled and what the queue pair thinks of it, so
 * that a drop explains itself (a client posting no receives, or a
 * link retrying).
 */
static void
report_stall (struct client *c, const struct gm_rp_request *r, bool replied,
              uint64_t age_ns)
{
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  char qp[128] = "";

  if (ibv_query_qp (c->id->qp, &attr,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                    IBV_QP_RNR_RETRY, &init) == 0)
    snprintf (qp, sizeof qp, "; queue pair %u state %d timeout %u retry %u "
              "rnr_retry %u", c->id->qp->qp_num, (int) attr.qp_state,
              attr.timeout, attr.retry_cnt, attr.rnr_retry);
  nbdkit_error (NAME ": %s: %s %s (handle 0x%" PRIx64 ", offset %"
                PRIu64 ", length %" PRIu32 ") unacknowledged for %" PRIu64
                " ms (%s)%s: dropping it", c->peer,
                replied ? "the reply to" : "the RDMA READ of the data of",
                gm_rp_op_name (r->op), r->handle, r->offset, r->length,
                age_ns / 1000000, replied ? "does the client post receives?"
                : "is the client still there?", qp);
}

/* rdma-keepalive=: a client silent for that long (nothing received,
 * nothing in service) is asked by a zero-length RDMA WRITE (no buffer,
 * no key: IBTA C9-88), which its NIC answers without its software.  A
 * client that is gone (its host died, the network is cut for good)
 * never answers, the queue pair's retries end in an error completion,
 * and it is dropped (on_completion).  One whose probe neither succeeds
 * nor fails within REPLY_TIMEOUT_S of being posted is dropped too, once
 * found so at two watches in a row: the poller takes what is in the
 * queue between them, so one that was itself held up (a paused VM, a
 * descheduled thread) does not blame a client whose answer is waiting
 * there (as stalled_req).  quiet_since: when the poller last saw a
 * completion, or the probe's answer.  Called at each watch.  Returns -1
 * to drop the client.
 */
static int
keepalive (struct client *c, uint64_t now, uint64_t quiet_since)
{
  struct ibv_send_wr wr = { .wr_id = WR_PROBE, .opcode = IBV_WR_RDMA_WRITE,
                            .send_flags = IBV_SEND_SIGNALED }, *bad;
  uint64_t k = gm_rdma_set.keepalive * 1000000000ull;
  bool quiet, posted = false;

  if (k == 0 || quiet_since + k > now)
    return 0;
  if (c->probing) {
    /* From the probe's post: a poller held up past quiet_since + k
     * posts it late, and its answer gets the same time. */
    if (c->probe_ns + REPLY_TIMEOUT_S * 1000000000ull > now)
      return 0;
    if (!c->probe_late) {
      c->probe_late = true;
      return 0;
    }
    nbdkit_error (NAME ": %s: a keepalive probe unanswered for %d s: "
                  "dropping it", c->peer, REPLY_TIMEOUT_S);
    COUNT (RC_KEEPALIVE_DROPS, 1);
    return -1;
  }
  /* Posted under the lock: a goodbye (gm_rdma_client_goodbye, after
   * draining is set) then goes out after the probe, whose answer comes
   * first, never before it, when the client may already be leaving. */
  pthread_mutex_lock (&c->lock);
  quiet = all_free (c) && c->ndeferred == 0 && !c->closing && !c->draining;
  if (quiet) {
    c->probing = true;
    c->probe_late = false;
    c->probe_ns = now;
    posted = ibv_post_send (c->id->qp, &wr, &bad) == 0;
  }
  pthread_mutex_unlock (&c->lock);
  if (!quiet)
    return 0;                   /* the stall watch covers requests */
  COUNT (RC_KEEPALIVE_PROBES, 1);
  if (!posted) {
    nbdkit_error (NAME ": %s: cannot post a keepalive probe: dropping it",
                  c->peer);
    return -1;
  }
  return 0;
}

void *
gm_rdma_client_run (void *arg)
{
  struct client *c = arg;
  struct ibv_wc wc;
  bool ending = false, suspect = false;
  uint64_t deadline = 0, next_watch = gm_now_ns () + WATCH_MS * 1000000ull;
  /* Completions taken, and at the last watch: keepalive's clock. */
  uint64_t taken = 0, watched = 0, quiet_since = gm_now_ns ();

  for (;;) {
    int r = 1;
    bool idle;
    uint64_t now;

    if (!ending && (now = gm_now_ns ()) >= next_watch) {
      int stalled;
      struct gm_rp_request q;
      uint64_t age = 0, since = 0;
      bool replied = false;
      next_watch = now + WATCH_MS * 1000000ull;
      pthread_mutex_lock (&c->lock);
      stalled = stalled_req (c, now, &since);
      if (stalled >= 0) {
        q = c->reqs[stalled].r;
        replied = c->reqs[stalled].state == RQ_REPLIED;
        age = now - since;
      }
      pthread_mutex_unlock (&c->lock);
      /* Found twice in a row, with a second of completions taken in
       * between: a poller that was itself held up (a paused VM, a
       * descheduled thread) must not blame a client whose completion
       * is already waiting in the queue. */
      if (stalled >= 0 && !suspect) {
        suspect = true;
        stalled = -1;
      }
      else if (stalled < 0)
        suspect = false;
      if (stalled >= 0) {
        report_stall (c, &q, replied, age);
        r = -1;
      }
      if (taken != watched) {
        watched = taken;
        quiet_since = now;
      }
      else if (r == 1 && keepalive (c, now, quiet_since) == -1)
        r = -1;                 /* counted below, as any drop */
    }
    if (r == 1)
      r = gm_rdma_cq_wait (c->cq, c->cc, &wc, c->wake_fd,
                           ending ? 100 : WATCH_MS);
    if (r == -2 && !ending)
      continue;                 /* time to watch */

    if (r == 1)
      taken++;
    if (r == 1 && on_completion (c, &wc) == 0 && !ending) {
      bool done;
      pthread_mutex_lock (&c->lock);
      done = c->closing && all_free (c);
      pthread_mutex_unlock (&c->lock);
      if (!done)
        continue;
      r = 0;                    /* DISCONNECT answered: end normally */
    }
    else if (r == 0) {
      uint64_t n;
      if (read (c->wake_fd, &n, sizeof n) != sizeof n)
        n = 0;
    }
    else if (!ending && !c->stop && gm_rdma_client_bye (c) == BYE_NONE)
      COUNT (RC_DROPPED, 1);    /* not one that leaves after its goodbye */
    if (!ending) {
      /* End: the QP goes to the error state, every work request
       * still posted completes (flushed), workers leave. */
      ending = true;
      deadline = gm_now_ns () + 5000000000ull;
      /* Fenced before the client can see the break (fence.c). */
      gm_rdma_client_ending (c);
      gm_rdma_disconnect (c);
    }
    pthread_mutex_lock (&c->lock);
    if (c->running == 0) {
      /* No worker will take what is still queued: it holds nothing. */
      for (unsigned i = 0; i < c->rp.lim.credits; i++)
        if (c->reqs[i].state == RQ_QUEUED)
          c->reqs[i].state = RQ_FREE;
      c->qlen = c->ndeferred = 0;
    }
    idle = c->running == 0;
    r = idle && all_free (c);
    pthread_mutex_unlock (&c->lock);
    if (r || (idle && gm_now_ns () > deadline))
      break;
  }
  fence_done (c);               /* left only once no worker runs */
  atomic_store (&c->finished, true);
  return NULL;
}

/* ---- Shutting down (rdma.c's cleanup thread). */

/* Serve no request received from now on (on_recv ignores them); the
 * ones already received are served and answered.  A version 2 client
 * cannot be told which were not served: it is disconnected at once, as
 * before version 3 (its requests in flight fail).
 */
bool
gm_rdma_client_drain (struct client *c)
{
  bool v3;

  pthread_mutex_lock (&c->lock);
  v3 = c->rp.lim.version >= 3;
  c->draining = v3;
  pthread_mutex_unlock (&c->lock);
  if (!v3)
    gm_rdma_disconnect (c);
  return v3;
}

/* What c is still doing, for a shutdown that waits for it: appended
 * to buf (of len bytes, NUL-terminated). */
void
gm_rdma_client_describe (struct client *c, char *buf, size_t len)
{
  unsigned n[RQ_REPLIED + 1] = { 0 };
  size_t used = strlen (buf);

  pthread_mutex_lock (&c->lock);
  for (unsigned i = 0; c->reqs && i < c->rp.lim.credits; i++)
    n[c->reqs[i].state]++;
  if (used < len)
    snprintf (buf + used, len - used, "%s%s (%u of %u workers not ended; "
              "requests: %u being served, %u queued, %u replied, %u "
              "deferred)", used ? ", " : "", c->peer, c->running,
              c->nstarted, n[RQ_SETUP] + n[RQ_ACTIVE], n[RQ_QUEUED],
              n[RQ_REPLIED], c->ndeferred);
  pthread_mutex_unlock (&c->lock);
}

/* Every request received before the drain is answered and its reply
 * completed (or the client is gone).
 */
bool
gm_rdma_client_drained (struct client *c)
{
  bool r;

  pthread_mutex_lock (&c->lock);
  r = atomic_load (&c->finished) || (all_free (c) && c->rp.in_use == 0);
  pthread_mutex_unlock (&c->lock);
  return r;
}

/* Post the goodbye: the last message, after every reply.  Its
 * completion (c->bye) comes to the poller.  0, or -1.
 */
int
gm_rdma_client_goodbye (struct client *c, bool flushed)
{
  struct gm_rp_goodbye g;
  uint8_t msg[GM_RP_GOODBYE_SIZE];
  struct ibv_sge sge = { .addr = (uintptr_t) msg, .length = sizeof msg };
  struct ibv_send_wr wr = { .wr_id = WR_BYE, .sg_list = &sge, .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE },
    *bad;
  char why[128];
  int r = -1;

  pthread_mutex_lock (&c->lock);
  /* all_free: no reply still on its way either (finish () ends a
   * request in the protocol before it posts the reply). */
  if (!atomic_load (&c->finished) && all_free (c) &&
      gm_rp_conn_goodbye (&c->rp, flushed, &g, why, sizeof why) == 0) {
    gm_rp_encode_goodbye (&g, msg);
    if (ibv_post_send (c->id->qp, &wr, &bad) == 0) {
      c->bye = BYE_POSTED;
      r = 0;
    }
  }
  pthread_mutex_unlock (&c->lock);
  return r;
}

enum bye_state
gm_rdma_client_bye (struct client *c)
{
  enum bye_state r;

  pthread_mutex_lock (&c->lock);
  r = c->bye;
  pthread_mutex_unlock (&c->lock);
  return r;
}

/* ---- Set-up and release (listener thread). */

struct client *
gm_rdma_client_new (void)
{
  struct client *c = calloc (1, sizeof *c);

  if (c == NULL)
    return NULL;
  c->wake_fd = -1;
  pthread_mutex_init (&c->lock, NULL);
  pthread_cond_init (&c->work, NULL);
  pthread_cond_init (&c->rread, NULL);
  return c;
}

int
gm_rdma_client_setup (struct client *c)
{
  unsigned n = c->rp.lim.credits, i;
  struct ibv_qp_init_attr qa;

  c->wake_fd = eventfd (0, EFD_CLOEXEC);
  c->reqs = calloc (n, sizeof *c->reqs);
  c->queue = calloc (n, sizeof *c->queue);
  c->deferred = calloc (n, sizeof *c->deferred);
  c->nworkers = gm_rdma_set.serial ? 1 : gm_rdma_set.threads;
  c->workers = calloc (c->nworkers, sizeof *c->workers);
  c->recv_buf = calloc (n, GM_RP_REQUEST_SIZE);
  c->cc = ibv_create_comp_channel (c->id->verbs);
  if (c->wake_fd == -1 || !c->reqs || !c->queue || !c->deferred ||
      !c->workers || !c->recv_buf || !c->cc)
    return -1;
  /* Completions: receives, replies, RDMA READs and every piece. */
  c->cq = ibv_create_cq (c->id->verbs, n * (MAX_PIECES + 3) + 8, c, c->cc, 0);
  c->recv_mr = ibv_reg_mr (gm_rdma_pool_mr->pd, c->recv_buf, n * GM_RP_REQUEST_SIZE,
                           IBV_ACCESS_LOCAL_WRITE);
  if (c->cq == NULL || c->recv_mr == NULL)
    return -1;
  memset (&qa, 0, sizeof qa);
  qa.send_cq = qa.recv_cq = c->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = n * (MAX_PIECES + 2);
  qa.cap.max_recv_wr = n;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = GM_RP_GOODBYE_SIZE;   /* > a reply */
  if (rdma_create_qp (c->id, gm_rdma_pool_mr->pd, &qa))
    return -1;
  for (i = 0; i < n; i++)
    if (post_recv (c, i) == -1)
      return -1;
  for (i = 0; i < c->nworkers; i++) {
    int e = pthread_create (&c->workers[i], NULL, worker_run, c);
    if (e) {
      errno = e;
      return -1;
    }
    c->nstarted++;
    pthread_mutex_lock (&c->lock);
    c->running++;
    pthread_mutex_unlock (&c->lock);
  }
  return 0;
}

void
gm_rdma_client_release (struct client *c)
{
  unsigned i;

  stop_workers (c);
  for (i = 0; i < c->nstarted; i++)
    pthread_join (c->workers[i], NULL);
  fence_done (c);
  /* The queue pair first: until it is gone the NIC may still use a
   * request's buffer (a reply whose completion never came). */
  gm_rdma_qp_destroy (c->id, &c->cq, &c->cc, &c->recv_mr);
  if (c->reqs)
    for (i = 0; i < c->rp.lim.credits; i++)
      gm_rdma_mem_put (&c->reqs[i]);
  if (c->wake_fd >= 0)
    close (c->wake_fd);
  free (c->recv_buf);
  free (c->reqs);
  free (c->queue);
  free (c->deferred);
  free (c->workers);
  pthread_mutex_destroy (&c->lock);
  pthread_cond_destroy (&c->work);
  pthread_cond_destroy (&c->rread);
}

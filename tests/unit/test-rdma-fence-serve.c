/* Unit test: fence.c's rule as filters/rdma/serve.c's workers keep it.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Real workers (worker_run, begin) serve requests queued by hand; a
 * fake queue pair completes what they post at once, as the poller
 * would (flushed once the client is gone), except a live client's
 * RDMA READ when a case holds it; request memory comes from a real
 * pool.  A gone client's write in the storage holds a live client's
 * overlapping WRITE, TRIM and ZERO; a waiter holds no pool memory,
 * which a gone client's WRITE may be waiting for; ending a client
 * from another thread than its poller is no data race; and a client's
 * ABANDON (protocol version 5) fences the connection it names, of its
 * host and of this server instance only, before its reply.  Also the
 * keepalive probe (rdma-keepalive=) of a silent client.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <unistd.h>

#include "unit.h"

#include "../../filters/rdma/serve.c"
#include "../../filters/rdma/fence.c"
#include "../../filters/rdma/disconnect.c"

struct gm_counter gm_rdma_stats[RC_COUNT];
struct rdma_settings gm_rdma_set;
struct client *gm_rdma_clients;
pthread_mutex_t gm_rdma_clients_lock = PTHREAD_MUTEX_INITIALIZER;
struct gm_pool *gm_rdma_pool;
static struct ibv_mr pool_mr;
struct ibv_mr *gm_rdma_pool_mr = &pool_mr;

/* What serve.c calls of nbdkit, memory.c and stats.c. */
void
nbdkit_debug (const char *fs, ...)
{
}

void
nbdkit_error (const char *fs, ...)
{
}

struct nbdkit_extents *
nbdkit_extents_new (uint64_t start, uint64_t end)
{
  return NULL;
}

void
nbdkit_extents_free (struct nbdkit_extents *ex)
{
}

size_t
nbdkit_extents_count (const struct nbdkit_extents *ex)
{
  return 0;
}

struct nbdkit_extent
nbdkit_get_extent (const struct nbdkit_extents *ex, size_t i)
{
  return (struct nbdkit_extent) { 0 };
}

void
gm_rdma_overlap_add (const struct req *q, uint64_t t_end)
{
}

int
gm_rdma_mem_get (struct req *q, const _Atomic bool *cancel)
{
  return gm_rdma_mem_get_len (q, q->r.length, cancel);
}

int
gm_rdma_mem_get_len (struct req *q, size_t len, const _Atomic bool *cancel)
{
  q->buflen = len;
  q->buf = q->sbuf = gm_pool_get_cancellable (gm_rdma_pool, len, cancel);
  return q->buf ? 0 : -1;
}

void
gm_rdma_mem_wake (void)
{
  gm_pool_wake (gm_rdma_pool);
}

void
gm_rdma_mem_put (struct req *q)
{
  if (q->buf)
    gm_pool_put (gm_rdma_pool, q->buf, q->buflen);
  q->buf = q->sbuf = NULL;
}

void
gm_rdma_mem_stage (struct req *q, uint32_t off, uint32_t len, bool to_send)
{
}

#define K 1024
#define NSLOTS 4
#define MAXW 3

/* A client without verbs: its queue pair, its stack below. */
struct fake {
  struct client c;
  struct ibv_context ctx;
  struct ibv_device dev;
  struct ibv_qp qp;
  struct rdma_cm_id id;
  nbdkit_next next;
  struct req reqs[NSLOTS];
  unsigned queue[NSLOTS];
  struct gm_rdma_deferred deferred[NSLOTS];
  pthread_t workers[MAXW];
  unsigned nw;
  _Atomic bool flushed;         /* gone: what it posts fails */
  bool hold_rread;              /* a case completes its RDMA READs */
  bool lose_reply;              /* replies never complete (a provider
                                 * that flushes nothing) */
  _Atomic bool rread_posted;
  struct ibv_wc held;
  _Atomic bool hold_below;      /* its writes below wait for a case */
  _Atomic unsigned in_below, landed;
  unsigned probes;              /* keepalive probes posted */
  bool hold_probe;              /* a case answers the probe */
};

static struct fake fk[2];       /* 0 live, 1 gone as a case says */

static int
fake_post_send (struct ibv_qp *qp, struct ibv_send_wr *wr,
                struct ibv_send_wr **bad)
{
  struct fake *f = qp->qp_context;

  for (; wr; wr = wr->next) {
    struct ibv_wc wc = { .wr_id = wr->wr_id, .status = IBV_WC_SUCCESS };
    if (WR_KIND (wr->wr_id) == WR_PROBE) {
      /* Zero length, no buffer, no key: nothing the client must have. */
      CHECK (wr->opcode == IBV_WR_RDMA_WRITE && wr->num_sge == 0 &&
             (wr->send_flags & IBV_SEND_SIGNALED));
      /* Posted under the client's lock, as the goodbye is: a goodbye
       * never goes out between the probe's check and its post. */
      CHECK (pthread_mutex_trylock (&f->c.lock) == EBUSY);
      f->probes++;
      if (f->hold_probe)
        continue;
    }
    if (atomic_load (&f->flushed))
      wc.status = IBV_WC_WR_FLUSH_ERR;
    if (WR_KIND (wr->wr_id) == WR_REPLY && f->lose_reply)
      continue;
    if (WR_KIND (wr->wr_id) == WR_RREAD && f->hold_rread &&
        wc.status == IBV_WC_SUCCESS) {
      f->held = wc;
      atomic_store (&f->rread_posted, true);
      continue;
    }
    if (wr->send_flags & IBV_SEND_SIGNALED)
      on_completion (&f->c, &wc);
  }
  return 0;
}

/* Below: a write lands when the case lets it. */
static int
below (nbdkit_next *n)
{
  struct fake *f = (struct fake *) ((char *) n - offsetof (struct fake, next));

  atomic_fetch_add (&f->in_below, 1);
  while (atomic_load (&f->hold_below))
    usleep (1000);
  atomic_fetch_add (&f->landed, 1);
  return 0;
}

static int
fake_pwrite (nbdkit_next *n, const void *buf, uint32_t count,
             uint64_t offset, uint32_t flags, int *err)
{
  return below (n);
}

static int
fake_trim (nbdkit_next *n, uint32_t count, uint64_t offset, uint32_t flags,
           int *err)
{
  return below (n);
}

static void
fake_start (struct fake *f, unsigned nw)
{
  struct client *c = &f->c;

  memset (f, 0, sizeof *f);
  f->ctx.ops.post_send = fake_post_send;
  f->qp.context = &f->ctx;
  f->qp.qp_context = f;
  f->id.qp = &f->qp;
  f->dev.transport_type = IBV_TRANSPORT_IB;
  f->ctx.device = &f->dev;
  f->id.verbs = &f->ctx;
  f->next.pwrite = fake_pwrite;
  f->next.trim = fake_trim;
  f->next.zero = fake_trim;
  pthread_mutex_init (&c->lock, NULL);
  pthread_cond_init (&c->work, NULL);
  pthread_cond_init (&c->rread, NULL);
  gm_rp_conn_init (&c->rp, GM_RP_SERVER);
  c->rp.lim.credits = NSLOTS;
  c->id = &f->id;
  c->next = &f->next;
  c->reqs = f->reqs;
  c->queue = f->queue;
  c->deferred = f->deferred;
  c->wake_fd = eventfd (0, EFD_CLOEXEC);
  CHECK (c->wake_fd >= 0);
  pthread_mutex_lock (&gm_rdma_clients_lock);
  c->next_client = gm_rdma_clients;
  gm_rdma_clients = c;
  pthread_mutex_unlock (&gm_rdma_clients_lock);
  for (f->nw = 0; f->nw < nw; f->nw++) {
    CHECK (pthread_create (&f->workers[f->nw], NULL, worker_run, c) == 0);
    pthread_mutex_lock (&c->lock);
    c->running++;
    c->nstarted++;
    pthread_mutex_unlock (&c->lock);
  }
}

static void
fake_stop (struct fake *f)
{
  stop_workers (&f->c);
  for (unsigned i = 0; i < f->nw; i++)
    pthread_join (f->workers[i], NULL);
  f->nw = 0;
  if (f->c.wake_fd >= 0)
    close (f->c.wake_fd);
  f->c.wake_fd = -1;
}

static void
setup (size_t pool_size)
{
  char err[256];

  gm_rdma_clients = NULL;
  atomic_store (&gm_rdma_ending, 0);
  gm_rdma_stats[RC_FENCE_WAITS].value = 0;
  gm_rdma_pool = gm_pool_create (pool_size, GM_HUGE_OFF, err, sizeof err);
  CHECK (gm_rdma_pool != NULL);
}

static void
teardown (void)
{
  fake_stop (&fk[0]);
  fake_stop (&fk[1]);
  gm_pool_destroy (gm_rdma_pool);
}

/* rdma_disconnect and rdma_notify (-Wl,--wrap): the queue pair flushes
 * what is posted from now on, as the poller would make it; the
 * connections are established (test-rdma-disconnect: before). */
int __wrap_rdma_disconnect (struct rdma_cm_id *id);
int __wrap_rdma_notify (struct rdma_cm_id *id, enum ibv_event_type event);

int
__wrap_rdma_disconnect (struct rdma_cm_id *id)
{
  struct fake *f = id->qp->qp_context;

  atomic_store (&f->flushed, true);
  return 0;
}

int
__wrap_rdma_notify (struct rdma_cm_id *id, enum ibv_event_type event)
{
  errno = EISCONN;
  return -1;
}

/* Queue r as received at t0 (0: now); deferred: as one that came
 * while every slot was busy, given the slot a reply frees. */
static void
submit_at (struct fake *f, struct gm_rp_request r, uint64_t t0,
           bool deferred)
{
  static uint64_t handle;
  struct req *q;

  r.handle = ++handle;
  if (t0 == 0)
    t0 = gm_now_ns ();
  pthread_mutex_lock (&f->c.lock);
  q = free_req (&f->c);
  CHECK (q != NULL);
  if (deferred) {
    f->c.deferred[f->c.ndeferred++] = (struct gm_rdma_deferred) {
      .r = r, .t0 = t0 };
    q->state = RQ_REPLIED;
    release_req (&f->c, q);
  }
  else
    queue_req (&f->c, q, &r, 0, t0);
  pthread_mutex_unlock (&f->c.lock);
}

static void
submit_req (struct fake *f, struct gm_rp_request r)
{
  submit_at (f, r, 0, false);
}

static void
submit (struct fake *f, uint8_t op, uint64_t off, uint32_t len)
{
  submit_req (f, (struct gm_rp_request) { .op = op, .offset = off,
                                          .length = len });
}

/* Wait up to 10 s (a loaded machine, TSan) for *v to reach n. */
static bool
reaches (_Atomic unsigned *v, unsigned n)
{
  for (int i = 0; i < 10000 && atomic_load (v) < n; i++)
    usleep (1000);
  return atomic_load (v) >= n;
}

/* Wait up to 10 s for n writes to have been held by the fence. */
static bool
fence_waits (uint64_t n)
{
  for (int i = 0; i < 1000 &&
         gm_counter_get (&gm_rdma_stats[RC_FENCE_WAITS]) < n; i++)
    usleep (10 * 1000);
  return gm_counter_get (&gm_rdma_stats[RC_FENCE_WAITS]) >= n;
}

static bool
posted (struct fake *f)
{
  for (int i = 0; i < 10000 && !atomic_load (&f->rread_posted); i++)
    usleep (1000);
  return atomic_load (&f->rread_posted);
}

static bool
pool_waiter (void)
{
  struct gm_pool_stats s;

  gm_pool_get_stats (gm_rdma_pool, &s);
  return s.waits > 0;
}

static void
gone (struct fake *f)
{
  atomic_store (&f->flushed, true);
  gm_rdma_client_ending (&f->c);
}

/* fk[1], with one worker, has a 64K WRITE at 0 held in the storage;
 * fk[0] has 'workers'. */
static void
write_in_storage (unsigned workers)
{
  setup (1024 * K);
  fake_start (&fk[0], workers);
  fake_start (&fk[1], 1);
  atomic_store (&fk[1].hold_below, true);
  submit (&fk[1], GM_RP_WRITE, 0, 64 * K);
  CHECK (reaches (&fk[1].in_below, 1));
}

/* What a shutdown that waits for a client logs of it (rdma.c's
 * say_waiting): its workers not ended and its requests by state. */
static void
describe_client (void)
{
  char buf[512] = "earlier";

  write_in_storage (0);
  submit (&fk[1], GM_RP_TRIM, 0, 4 * K);
  strcpy (fk[1].c.peer, "10.0.0.2:4791");
  gm_rdma_client_describe (&fk[1].c, buf, sizeof buf);
  CHECK (strcmp (buf, "earlier, 10.0.0.2:4791 (1 of 1 workers not ended; "
                 "requests: 1 being served, 1 queued, 0 replied, "
                 "0 deferred)") == 0);
  atomic_store (&fk[1].hold_below, false);
  CHECK (reaches (&fk[1].landed, 2));
  teardown ();
}

/* A gone client's WRITE in the storage holds a live client's
 * overlapping WRITE, TRIM and ZERO until it has landed. */
static void
holds_live (void)
{
  struct gm_pool_stats before, held;

  write_in_storage (3);
  gone (&fk[1]);
  gm_pool_get_stats (gm_rdma_pool, &before);
  submit (&fk[0], GM_RP_WRITE, 32 * K, 64 * K);
  submit (&fk[0], GM_RP_TRIM, 60 * K, 4 * K);
  submit (&fk[0], GM_RP_ZERO, 0, 4 * K);
  CHECK (fence_waits (3));
  usleep (100 * 1000);
  CHECK_EQ_U64 (atomic_load (&fk[0].in_below), 0);
  /* Held before taking pool memory (waiter_holds_no_pool says why). */
  gm_pool_get_stats (gm_rdma_pool, &held);
  CHECK_EQ_U64 (held.in_use, before.in_use);
  atomic_store (&fk[1].hold_below, false);
  CHECK (reaches (&fk[0].landed, 3));
  CHECK_EQ_U64 (gm_counter_get (&gm_rdma_stats[RC_FENCE_WAITS]), 3);
  teardown ();
}

/* A gone client begins nothing more: its ZERO, queued behind its WRITE
 * in the storage, never runs (it needs no data from the client, and
 * would land after the writes that waited for that WRITE, over them). */
static void
gone_begins_nothing (void)
{
  write_in_storage (0);
  submit (&fk[1], GM_RP_ZERO, 0, 64 * K);
  gone (&fk[1]);
  atomic_store (&fk[1].hold_below, false);
  CHECK (reaches (&fk[1].landed, 1));
  usleep (200 * 1000);
  CHECK_EQ_U64 (atomic_load (&fk[1].landed), 1);
  teardown ();
}

/* The pool holds one WRITE.  A live client's WRITE has it, fetching
 * its data; a client's WRITE waits for it, and that client goes.  The
 * live WRITE must not wait for the gone one while holding what it
 * waits for: the two would wait for ever, and with them every request
 * of every client behind them in the pool. */
static void
waiter_holds_no_pool (void)
{
  setup (64 * K);
  fake_start (&fk[0], 1);
  fake_start (&fk[1], 1);
  fk[0].hold_rread = true;
  submit (&fk[0], GM_RP_WRITE, 0, 64 * K);
  CHECK (posted (&fk[0]));
  submit (&fk[1], GM_RP_WRITE, 0, 64 * K);
  for (int i = 0; i < 10000 && !pool_waiter (); i++)
    usleep (1000);
  CHECK (pool_waiter ());
  gone (&fk[1]);
  on_completion (&fk[0].c, &fk[0].held);        /* its data has come */
  CHECK (reaches (&fk[0].landed, 1));
  /* The gone one's WRITE got the memory once free, and failed. */
  fake_stop (&fk[1]);
  CHECK_EQ_U64 (atomic_load (&fk[1].in_below), 0);
  teardown ();
}

/* The poller takes completions while the listener ends the client (its
 * disconnect event, or a replacement): whether it is stopping is read
 * and written by both (a data race under make check-tsan-quick when
 * it was a plain bool). */
static _Atomic bool polling;
static _Atomic unsigned polled;

static void *
poll_run (void *arg)
{
  struct fake *f = arg;
  struct ibv_wc wc = { .wr_id = WR_BYE, .status = IBV_WC_REM_ACCESS_ERR };

  while (atomic_load (&polling))
    if (on_completion (&f->c, &wc) == -1)     /* a failed completion */
      atomic_fetch_add (&polled, 1);
  return NULL;
}

static void
poller_sees_end (void)
{
  pthread_t t;

  setup (64 * K);
  fake_start (&fk[0], 0);
  fake_start (&fk[1], 1);
  atomic_store (&polling, true);
  atomic_store (&polled, 0);
  CHECK (pthread_create (&t, NULL, poll_run, &fk[1]) == 0);
  CHECK (reaches (&polled, 100));
  gone (&fk[1]);
  CHECK (reaches (&polled, atomic_load (&polled) + 100));
  atomic_store (&polling, false);
  pthread_join (t, NULL);
  teardown ();
}

/* Two connections of one bridge (its host, its conn_ids): 1 has a
 * WRITE in the storage and looks healthy here (the network cut it off
 * from its bridge, which failed the write).  0 says so (ABANDON), then
 * writes over it: the ABANDON drops and fences 1, and 0's WRITE waits
 * for 1's to land.  An ABANDON naming another server instance, or a
 * connection of another host, changes nothing. */
#define INSTANCE 0x5eed5eed5eedull

/* Every request of f answered (the workers write the states). */
static bool
all_free_locked (struct fake *f)
{
  bool r;

  pthread_mutex_lock (&f->c.lock);
  r = all_free (&f->c);
  pthread_mutex_unlock (&f->c.lock);
  return r;
}

/* Wait up to 10 s for every request of f to be answered. */
static bool
answered (struct fake *f)
{
  for (int i = 0; i < 10000 && !all_free_locked (f); i++)
    usleep (1000);
  return all_free_locked (f);
}

static void
abandon_case (uint64_t instance, const char *peer1, uint64_t accepted,
              uint64_t received, bool deferred, bool fences)
{
  setup (1024 * K);
  gm_rdma_stats[RC_ABANDONED].value = 0;
  fake_start (&fk[0], 2);
  fake_start (&fk[1], 1);
  snprintf (fk[0].c.peer, sizeof fk[0].c.peer, "10.77.0.2:41000");
  snprintf (fk[1].c.peer, sizeof fk[1].c.peer, "%s", peer1);
  fk[0].c.rp.conn_id = 0xb0;
  fk[1].c.rp.conn_id = 0xa1;
  fk[0].c.rp.lim.instance = fk[1].c.rp.lim.instance = INSTANCE;
  fk[1].c.accepted_ns = accepted;
  atomic_store (&fk[1].hold_below, true);
  submit (&fk[1], GM_RP_WRITE, 0, 64 * K);
  CHECK (reaches (&fk[1].in_below, 1));
  submit_at (&fk[0], (struct gm_rp_request) {
      .op = GM_RP_ABANDON, .offset = 0xa1, .addr = instance },
    received, deferred);
  /* Its reply went out: only then may the bridge write. */
  CHECK (answered (&fk[0]));
  CHECK_EQ_U64 (gm_counter_get (&gm_rdma_stats[RC_ABANDONED]), fences);
  CHECK_EQ_U64 (atomic_load (&fk[1].c.fence),
                fences ? GM_FENCE_ENDING : GM_FENCE_LIVE);
  CHECK_EQ_U64 (atomic_load (&fk[1].flushed), fences);
  submit (&fk[0], GM_RP_WRITE, 0, 64 * K);
  CHECK (fences ? fence_waits (1) : reaches (&fk[0].in_below, 1));
  usleep (100 * 1000);
  CHECK_EQ_U64 (atomic_load (&fk[0].in_below), !fences);
  atomic_store (&fk[1].hold_below, false);
  CHECK (reaches (&fk[0].landed, 1));
  CHECK_EQ_U64 (gm_counter_get (&gm_rdma_stats[RC_FENCE_WAITS]), fences);
  teardown ();
}

static void
abandon_fences (void)
{
  abandon_case (INSTANCE, "10.77.0.2:41001", 0, 0, false, true);
}

/* The connection named was accepted after the ABANDON came (here: its
 * accept time is later than the worker's run): that is its reconnect,
 * which the bridge let go once the ABANDON's connection broke with the
 * ABANDON still waiting here for a worker.  Left alone. */
static void
abandon_reconnected_since (void)
{
  abandon_case (INSTANCE, "10.77.0.2:41001", gm_now_ns () + 60000000000ull,
                0, false, false);
}

/* The same when the reconnect was accepted before a worker took the
 * ABANDON (all of them busy), but after it was received: the receive
 * time is what counts, also for one that waited for a free slot. */
static void
abandon_accepted_while_queued (void)
{
  uint64_t now = gm_now_ns ();

  abandon_case (INSTANCE, "10.77.0.2:41001", now - 1000000000ull,
                now - 2000000000ull, false, false);
  abandon_case (INSTANCE, "10.77.0.2:41001", now - 1000000000ull,
                now - 2000000000ull, true, false);
  /* Received after that accept: the named one is fenced, deferred or
   * not. */
  abandon_case (INSTANCE, "10.77.0.2:41001", now - 2000000000ull,
                now - 1000000000ull, true, true);
}

static void
abandon_other_instance (void)
{
  abandon_case (INSTANCE + 1, "10.77.0.2:41001", 0, 0, false, false);
}

static void
abandon_other_host (void)
{
  abandon_case (INSTANCE, "10.77.0.3:41001", 0, 0, false, false);
}

/* A client silent for rdma-keepalive seconds, with nothing in service,
 * is probed once; a probe that fails (the NIC's retries ended: the
 * client is gone) or is not answered in REPLY_TIMEOUT_S drops it; a
 * client with a request in service, or keepalive 0, is never probed. */
static void
keepalive_probe (void)
{
  struct client *c = &fk[0].c;
  const uint64_t s = 1000000000ull, t0 = 1000 * s;
  struct ibv_wc wc = { .wr_id = WR_PROBE, .status = IBV_WC_RETRY_EXC_ERR };

  setup (64 * K);
  fake_start (&fk[0], 0);
  fake_start (&fk[1], 0);
  gm_rdma_stats[RC_KEEPALIVE_PROBES].value = 0;
  gm_rdma_stats[RC_KEEPALIVE_DROPS].value = 0;
  gm_rdma_set.keepalive = 3;
  CHECK (keepalive (c, t0 + 2 * s, t0) == 0);
  CHECK_EQ_U64 (fk[0].probes, 0);
  /* Silent 3 s: probed; the fake NIC answers at once. */
  CHECK (keepalive (c, t0 + 3 * s, t0) == 0);
  CHECK_EQ_U64 (fk[0].probes, 1);
  CHECK (!c->probing);
  CHECK_EQ_U64 (gm_rdma_stats[RC_KEEPALIVE_PROBES].value, 1);
  /* A request in service: the stall watch's business, not a probe's. */
  c->reqs[1].state = RQ_QUEUED;
  CHECK (keepalive (c, t0 + 9 * s, t0) == 0);
  CHECK_EQ_U64 (fk[0].probes, 1);
  c->reqs[1].state = RQ_FREE;
  /* Nor while the client leaves (DISCONNECT received) or the server
   * drains for its goodbye, which must be the last message. */
  c->closing = true;
  CHECK (keepalive (c, t0 + 9 * s, t0) == 0);
  c->closing = false;
  c->draining = true;
  CHECK (keepalive (c, t0 + 9 * s, t0) == 0);
  c->draining = false;
  CHECK_EQ_U64 (fk[0].probes, 1);
  /* The probe failed: the client is dropped. */
  c->probing = true;
  CHECK (on_completion (c, &wc) == -1);
  CHECK (!c->probing);
  CHECK_EQ_U64 (gm_rdma_stats[RC_KEEPALIVE_DROPS].value, 1);
  /* Neither answered nor failed: waited for REPLY_TIMEOUT_S after the
   * probe (posted at t0 + 3 s), and found so at two watches in a row. */
  c->probing = true;
  CHECK (keepalive (c, t0 + (3 + REPLY_TIMEOUT_S) * s - 1, t0) == 0);
  CHECK (keepalive (c, t0 + (3 + REPLY_TIMEOUT_S) * s, t0) == 0);
  CHECK (keepalive (c, t0 + (4 + REPLY_TIMEOUT_S) * s, t0) == -1);
  CHECK_EQ_U64 (gm_rdma_stats[RC_KEEPALIVE_DROPS].value, 2);
  c->probing = false;
  /* Off. */
  gm_rdma_set.keepalive = 0;
  CHECK (keepalive (c, t0 + 3600 * s, t0) == 0);
  CHECK_EQ_U64 (fk[0].probes, 1);
  teardown ();
}

/* The poller was held up (a paused VM, a descheduled thread): a probe
 * posted late gets REPLY_TIMEOUT_S from its post all the same, and one
 * found unanswered after the poller itself stood still, its answer
 * waiting in the queue, does not drop the client: the next watch
 * comes after the poller took what is there. */
static void
keepalive_held_up (void)
{
  struct client *c = &fk[0].c;
  const uint64_t s = 1000000000ull, t0 = 1000 * s;
  struct ibv_wc ok = { .wr_id = WR_PROBE, .status = IBV_WC_SUCCESS };

  setup (64 * K);
  fake_start (&fk[0], 0);
  fake_start (&fk[1], 0);
  gm_rdma_stats[RC_KEEPALIVE_DROPS].value = 0;
  gm_rdma_set.keepalive = 3;
  fk[0].hold_probe = true;
  /* Silent since t0, the first watch in 20 s: probed now. */
  CHECK (keepalive (c, t0 + 20 * s, t0) == 0);
  CHECK_EQ_U64 (fk[0].probes, 1);
  CHECK (c->probing);
  /* The next watches, a second apart: its answer needs a retry, and
   * REPLY_TIMEOUT_S counts from the post, not from the silence. */
  CHECK (keepalive (c, t0 + 21 * s, t0) == 0);
  CHECK (keepalive (c, t0 + 22 * s, t0) == 0);
  /* Past it, found once: not dropped yet (the answer may wait in the
   * queue), and then it comes. */
  CHECK (keepalive (c, t0 + 31 * s, t0) == 0);
  CHECK (c->probing);
  CHECK (on_completion (c, &ok) == 0);
  CHECK (!c->probing);
  /* Probed again; then the poller stands still for 15 s, the answer
   * already in the queue: the watch it runs first does not drop (the
   * first probe's late finding does not count for this one). */
  CHECK (keepalive (c, t0 + 40 * s, t0 + 32 * s) == 0);
  CHECK_EQ_U64 (fk[0].probes, 2);
  CHECK (keepalive (c, t0 + 55 * s, t0 + 32 * s) == 0);
  CHECK (on_completion (c, &ok) == 0);
  CHECK (!c->probing);
  CHECK_EQ_U64 (gm_rdma_stats[RC_KEEPALIVE_DROPS].value, 0);
  fk[0].hold_probe = false;
  gm_rdma_set.keepalive = 0;
  teardown ();
}

/* A client's workers have all left (its poller's end, then its
 * release): done, counted out of gm_rdma_ending once, whether it was
 * gone or not; the hot path is back to one atomic load. */
static void
fence_done_once (void)
{
  setup (64 * K);
  fake_start (&fk[0], 0);
  fake_start (&fk[1], 0);
  gone (&fk[1]);
  CHECK_EQ_U64 (atomic_load (&gm_rdma_ending), 1);
  fence_done (&fk[1].c);
  fence_done (&fk[1].c);
  fence_done (&fk[0].c);
  CHECK_EQ_U64 (atomic_load (&gm_rdma_ending), 0);
  CHECK_EQ_U64 (atomic_load (&fk[0].c.fence), GM_FENCE_DONE);
  CHECK_EQ_U64 (atomic_load (&fk[1].c.fence), GM_FENCE_DONE);
  teardown ();
}

/* A client naming its own connection in an ABANDON (no bridge does)
 * is answered and stays: only others' connections are dropped. */
static void
abandon_self (void)
{
  setup (64 * K);
  gm_rdma_stats[RC_ABANDONED].value = 0;
  fake_start (&fk[0], 1);
  fake_start (&fk[1], 0);
  snprintf (fk[0].c.peer, sizeof fk[0].c.peer, "10.77.0.2:41000");
  fk[0].c.rp.conn_id = 0xb0;
  fk[0].c.rp.lim.instance = INSTANCE;
  submit_req (&fk[0], (struct gm_rp_request) {
      .op = GM_RP_ABANDON, .offset = 0xb0, .addr = INSTANCE });
  CHECK (answered (&fk[0]));
  CHECK_EQ_U64 (atomic_load (&fk[0].c.fence), GM_FENCE_LIVE);
  CHECK (!atomic_load (&fk[0].flushed));
  CHECK_EQ_U64 (gm_counter_get (&gm_rdma_stats[RC_ABANDONED]), 0);
  teardown ();
}

/* A live client's WRITE held by a gone one's WRITE stops waiting when
 * its own client goes too: a gone client's requests never wait (two
 * that died waiting on each other's would wait for ever, and their
 * pollers for their workers).  It fails, its data never fetched. */
static void
gone_waiter_stops (void)
{
  write_in_storage (1);
  gone (&fk[1]);
  submit (&fk[0], GM_RP_WRITE, 0, 64 * K);
  CHECK (fence_waits (1));
  gone (&fk[0]);
  CHECK (answered (&fk[0]));
  CHECK_EQ_U64 (atomic_load (&fk[0].in_below), 0);
  atomic_store (&fk[1].hold_below, false);
  teardown ();
}

/* Whether all of f's workers have left, within 10 s. */
static bool
workers_left (struct fake *f)
{
  unsigned running = 1;

  for (int i = 0; i < 10000 && running; i++) {
    pthread_mutex_lock (&f->c.lock);
    running = f->c.running;
    pthread_mutex_unlock (&f->c.lock);
    if (running)
      usleep (1000);
  }
  return running == 0;
}

/* The pool holds one WRITE, and a reply of the client's holds it: its
 * completion never comes (on a queue pair in error, a provider may
 * flush nothing).  Another worker of the same client waits for that
 * memory.  The client ends: the waiter must leave, failing its
 * request, or the poller waits for it for ever, the client is never
 * freed (its queue pair destroyed, the memory given back), and the
 * server never exits. */
static void
ended_leaves_pool_wait (void)
{
  setup (64 * K);
  fake_start (&fk[0], 2);
  fk[0].lose_reply = true;
  submit (&fk[0], GM_RP_WRITE, 0, 64 * K);
  CHECK (reaches (&fk[0].landed, 1));
  submit (&fk[0], GM_RP_WRITE, 64 * K, 64 * K);
  for (int i = 0; i < 10000 && !pool_waiter (); i++)
    usleep (1000);
  CHECK (pool_waiter ());
  gone (&fk[0]);
  CHECK (workers_left (&fk[0]));
  CHECK_EQ_U64 (atomic_load (&fk[0].landed), 1);
  CHECK (fk[0].reqs[0].error != 0 || fk[0].reqs[1].error != 0);
  /* The lost reply's buffer is still held: only the queue pair's
   * destruction may give it back. */
  {
    struct gm_pool_stats st;
    gm_pool_get_stats (gm_rdma_pool, &st);
    CHECK_EQ_U64 (st.in_use, 64 * K);
  }
  fk[0].reqs[0].state = fk[0].reqs[1].state = RQ_FREE;
  gm_rdma_mem_put (&fk[0].reqs[0]);
  gm_rdma_mem_put (&fk[0].reqs[1]);
  teardown ();
}

/* A WRITE's RDMA READ whose completion never comes (not even flushed)
 * when the client ends: its worker gives up after RREAD_STOP_WAIT_S,
 * failing the WRITE, which never reaches the storage. */
static void
ended_gives_up_rread (void)
{
  uint64_t t0;

  setup (1024 * K);
  fake_start (&fk[0], 1);
  fk[0].hold_rread = true;
  submit (&fk[0], GM_RP_WRITE, 0, 64 * K);
  CHECK (posted (&fk[0]));
  t0 = gm_now_ns ();
  gm_rdma_client_ending (&fk[0].c);
  CHECK (workers_left (&fk[0]));
  CHECK (gm_now_ns () - t0 >= (RREAD_STOP_WAIT_S - 1) * 1000000000ull);
  CHECK_EQ_U64 (atomic_load (&fk[0].in_below), 0);
  /* Its reply completed (this fake keeps no order), its READ not: the
   * buffer stays held, for the queue pair's destruction to give back. */
  {
    struct gm_pool_stats st;
    gm_pool_get_stats (gm_rdma_pool, &st);
    CHECK_EQ_U64 (st.in_use, 64 * K);
    CHECK (fk[0].reqs[0].state == RQ_REPLIED);
  }
  gm_rdma_mem_put (&fk[0].reqs[0]);
  fk[0].reqs[0].state = RQ_FREE;
  teardown ();
}

static const struct unit_case cases[] = {
  { "describe_client", describe_client },
  { "ended_leaves_pool_wait", ended_leaves_pool_wait },
  { "ended_gives_up_rread", ended_gives_up_rread },
  { "keepalive_probe", keepalive_probe },
  { "keepalive_held_up", keepalive_held_up },
  { "holds_live", holds_live },
  { "gone_begins_nothing", gone_begins_nothing },
  { "gone_waiter_stops", gone_waiter_stops },
  { "waiter_holds_no_pool", waiter_holds_no_pool },
  { "poller_sees_end", poller_sees_end },
  { "abandon_fences", abandon_fences },
  { "abandon_other_instance", abandon_other_instance },
  { "abandon_reconnected_since", abandon_reconnected_since },
  { "abandon_accepted_while_queued", abandon_accepted_while_queued },
  { "abandon_other_host", abandon_other_host },
  { "abandon_self", abandon_self },
  { "fence_done_once", fence_done_once },
};

int
main (int argc, char *argv[])
{
  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

/* Unit test: the bridge's connection (plugins/gmblock-rdma/conn.c)
 * when nbdkit shuts down (SIGTERM) while a request waits.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * conn.c is compiled in over a fake queue pair: the fake NIC answers
 * liveness probes (as a real or soft-RoCE NIC does with the server's
 * software hung) and never a request.  nbdkit's quit is what
 * nbdkit_nanosleep reports (it returns -1, ESHUTDOWN, once nbdkit
 * quits): the test sets it.  nbdkit waits for every connection thread
 * before it exits, so a request that never returns keeps nbdkit up.
 *
 *   quit_ends_collect    a request in flight to a server whose NIC
 *                        answers: after quit it must end within
 *                        QUIT_BOUND_S, the QP moved to error first.
 *   quit_ends_reconnect  a reconnect after a goodbye (27 tries, about
 *                        30 s, more when each try waits 5 s): after
 *                        quit it must stop trying.
 *   unfenced_exposes     a break whose QP can be neither moved to
 *                        error nor disconnected reports the request's
 *                        buffer exposed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "unit.h"

#include "../../plugins/gmblock-rdma/conn.c"

#define QUIT_BOUND_S 5

/* What bridge.c and mem.c define. */
struct gm_counter bstats[BC_COUNT];
struct gm_rdma_addr server = { .host = "127.0.0.1", .port = "10810" };
unsigned opt_credits = 4;
unsigned opt_timeout;
uint64_t opt_pool = 1 << 20;
enum zc_mode opt_zero_copy;
int mem_attach (struct ibv_context *v, char *why, size_t whylen) { return 0; }
struct ibv_pd *mem_pd (void) { return NULL; }
uint32_t mem_max_request (void) { return 1 << 20; }

void nbdkit_debug (const char *fs, ...) { }
void nbdkit_error (const char *fs, ...) { }

static _Atomic bool nbdkit_quit;
static _Atomic unsigned quit_asked;     /* nbdkit_nanosleep calls */
static _Atomic bool qp_in_error;
static _Atomic unsigned connect_tries;
/* A dead device: the QP can be neither moved to error nor disconnected. */
static _Atomic bool qp_unfenceable;

int
nbdkit_nanosleep (unsigned sec, unsigned nsec)
{
  atomic_fetch_add (&quit_asked, 1);
  if (atomic_load (&nbdkit_quit)) {
    errno = ESHUTDOWN;
    return -1;
  }
  struct timespec t = { sec, nsec };
  nanosleep (&t, NULL);
  return 0;
}

/* ---- The fake queue pair: probes answered, requests never. */
static pthread_mutex_t nic = PTHREAD_MUTEX_INITIALIZER;
static unsigned probes_pending;

static int
fake_poll_cq (struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
  int k = 0;

  pthread_mutex_lock (&nic);
  while (probes_pending > 0 && k < n) {
    probes_pending--;
    wc[k++] = (struct ibv_wc) { .wr_id = WR_PROBE, .status = IBV_WC_SUCCESS,
                                .opcode = IBV_WC_RDMA_WRITE };
  }
  pthread_mutex_unlock (&nic);
  return k;
}

static int
fake_notify (struct ibv_cq *cq, int solicited)
{
  return 0;
}

static int
fake_post_send (struct ibv_qp *qp, struct ibv_send_wr *wr,
                struct ibv_send_wr **bad)
{
  if (wr->wr_id == WR_PROBE && !atomic_load (&qp_in_error)) {
    pthread_mutex_lock (&nic);
    probes_pending++;
    pthread_mutex_unlock (&nic);
  }
  return 0;
}

static int
fake_post_recv (struct ibv_qp *qp, struct ibv_recv_wr *wr,
                struct ibv_recv_wr **bad)
{
  return 0;
}

int __real_ibv_modify_qp (struct ibv_qp *, struct ibv_qp_attr *, int);
int
__wrap_ibv_modify_qp (struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
  if (atomic_load (&qp_unfenceable))
    return EIO;
  if ((mask & IBV_QP_STATE) && a->qp_state == IBV_QPS_ERR)
    atomic_store (&qp_in_error, true);
  return 0;
}

int
__wrap_rdma_disconnect (struct rdma_cm_id *id)
{
  if (atomic_load (&qp_unfenceable)) {
    errno = EIO;
    return -1;
  }
  atomic_store (&qp_in_error, true);
  return 0;
}

/* Teardown of the fake resources: nothing to free. */
void __wrap_rdma_destroy_qp (struct rdma_cm_id *id) { id->qp = NULL; }
int __wrap_ibv_destroy_cq (struct ibv_cq *cq) { return 0; }
int __wrap_ibv_destroy_comp_channel (struct ibv_comp_channel *cc) { return 0; }
int __wrap_ibv_dereg_mr (struct ibv_mr *mr) { return 0; }
int __wrap_rdma_destroy_id (struct rdma_cm_id *id) { return 0; }
void __wrap_rdma_destroy_event_channel (struct rdma_event_channel *ch) { }

/* A connect that fails at once (no RDMA device here). */
struct rdma_event_channel *
__wrap_rdma_create_event_channel (void)
{
  if (atomic_fetch_add (&connect_tries, 1) >= 3 && atomic_load (&nbdkit_quit)) {
    fprintf (stderr, "quit_ends_reconnect: still reconnecting (try %u) "
             "after nbdkit quit\n", atomic_load (&connect_tries));
    exit (1);
  }
  errno = ENODEV;
  return NULL;
}

static struct conn *collected_c;
static int collected_slot, collected_result;
static bool collected_exposed;
static _Atomic bool collected;

static struct ibv_context fctx;
static struct ibv_cq fcq;
static struct ibv_qp fqp;
static struct rdma_cm_id fid;
static struct ibv_comp_channel fcc;
static struct rdma_event_channel fch;
static struct ibv_mr fmr;

/* c as connect_server leaves it, connected (credits 4), its completion
 * thread running. */
static struct conn *
connected (void)
{
  struct conn *c = calloc (1, sizeof *c);
  struct gm_rp_conn sv;
  struct gm_rp_hello h;
  struct gm_rp_welcome w;
  struct gm_rp_limits offer = {
    .size = 1 << 30, .min_block = 512, .pref_block = 4096,
    .max_block = 1 << 20, .max_request = 1 << 20, .credits = 4,
    .instance = 0x1234,
  };
  uint8_t b[GM_RP_WELCOME_SIZE > GM_RP_HELLO_SIZE ? GM_RP_WELCOME_SIZE
            : GM_RP_HELLO_SIZE] = { 0 };
  int p1[2], p2[2];
  char why[160];

  CHECK (c != NULL);
  atomic_store (&nbdkit_quit, false);
  atomic_store (&qp_in_error, false);
  atomic_store (&collected, false);
  fctx.ops.poll_cq = fake_poll_cq;
  fctx.ops.req_notify_cq = fake_notify;
  fctx.ops.post_send = fake_post_send;
  fctx.ops.post_recv = fake_post_recv;
  fcq.context = fqp.context = &fctx;
  fid.qp = &fqp;
  CHECK (pipe (p1) == 0 && pipe (p2) == 0);     /* never written */
  fcc.fd = p1[0];
  fch.fd = p2[0];
  c->msgs = calloc (1, msgs_size ());
  c->stop_fd = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
  c->ab = gm_ab_open (0xc1);
  pthread_mutex_init (&c->m, NULL);
  pthread_cond_init (&c->free_cv, NULL);
  for (unsigned i = 0; i < GM_RP_MAX_CREDITS; i++)
    pthread_cond_init (&c->slots[i].done_cv, NULL);
  gm_uf_open (&c->uf);
  gm_rp_conn_init (&c->rp, GM_RP_CLIENT);
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  CHECK (gm_rp_conn_hello (&c->rp, 4, 1 << 20, &h, why, sizeof why) == 0);
  gm_rp_encode_hello (&h, b);
  CHECK (gm_rp_conn_accept_hello (&sv, b, GM_RP_HELLO_SIZE, &offer, &w,
                                  why, sizeof why) == 0);
  gm_rp_encode_welcome (&w, b);
  CHECK (gm_rp_conn_take_welcome (&c->rp, b, GM_RP_WELCOME_SIZE,
                                  why, sizeof why) == 0);
  c->id = &fid;
  c->cq = &fcq;
  c->cc = &fcc;
  c->ch = &fch;
  c->msg_mr = &fmr;
  c->lim = c->rp.lim;
  c->nslots = c->rp.lim.credits;
  c->instance = c->rp.lim.instance;
  c->ever = true;
  c->progress = now ();
  CHECK (pthread_create (&c->thread, NULL, completion_thread, c) == 0);
  c->thread_on = true;
  pthread_mutex_lock (&open_lock);      /* as conn_open lists it */
  c->next_open = open_conns;
  open_conns = c;
  pthread_mutex_unlock (&open_lock);
  return c;
}

/* Its completion thread ended (it may have ended itself), joined by
 * what the plugin's .cleanup does: nbdkit calls no .close once it
 * quits.  Under ThreadSanitizer, one left unjoined is a report. */
static void
done_with (struct conn *c)
{
  conn_stop_all ();
  CHECK (!c->thread_on);
}

static void *
collector (void *arg)
{
  collected_result = conn_collect (collected_c, collected_slot,
                                   &collected_exposed);
  atomic_store (&collected, true);
  return NULL;
}

static void
quit_ends_collect (void)
{
  struct conn *c = connected ();
  struct gm_rp_request r = { .op = GM_RP_READ, .length = 4096, .offset = 0,
                             .addr = 0x10000, .rkey = 1, .buf_len = 4096 };
  bool waited = false;
  pthread_t t;
  uint64_t t0;

  collected_c = c;
  collected_slot = conn_reserve (c, true, &waited);
  CHECK (collected_slot >= 0);
  CHECK (conn_post (c, collected_slot, &r, NULL) == 0);
  CHECK (pthread_create (&t, NULL, collector, NULL) == 0);
  usleep (200 * 1000);
  CHECK (!atomic_load (&collected));
  atomic_store (&nbdkit_quit, true);               /* SIGTERM to nbdkit */
  t0 = now_ms ();
  while (!atomic_load (&collected) && now_ms () - t0 < QUIT_BOUND_S * 1000)
    usleep (50 * 1000);
  if (!atomic_load (&collected))
    fprintf (stderr, "quit_ends_collect: the request still waits %d s after "
             "nbdkit quit (probes answered: %" PRIu64 ")\n", QUIT_BOUND_S,
             (uint64_t) bstats[BC_PROBES].value);
  CHECK (atomic_load (&collected));
  CHECK (collected_result < 0);
  /* Its buffer goes back to the pool now: the server must be out. */
  CHECK (atomic_load (&qp_in_error));
  pthread_join (t, NULL);
  done_with (c);
}

/* An idle connection does not ask whether nbdkit quits: the first
 * answer that it does comes with nbdkit's "error: aborting sleep",
 * which a clean stop should not log (once per bridge connection). */
static void
idle_does_not_ask (void)
{
  struct conn *c = connected ();

  atomic_store (&quit_asked, 0);
  sleep (2);
  CHECK_EQ_U64 (atomic_load (&quit_asked), 0);
  done_with (c);
}

/* One READ in flight, its collector started. */
static pthread_t
one_in_flight (void)
{
  struct gm_rp_request r = { .op = GM_RP_READ, .length = 4096, .offset = 0,
                             .addr = 0x10000, .rkey = 1, .buf_len = 4096 };
  bool waited = false;
  pthread_t t;

  collected_c = connected ();
  collected_slot = conn_reserve (collected_c, true, &waited);
  CHECK (collected_slot >= 0);
  CHECK (conn_post (collected_c, collected_slot, &r, NULL) == 0);
  CHECK (pthread_create (&t, NULL, collector, NULL) == 0);
  return t;
}

/* Controls: the harness works.  timeout=1 ends the wait (QP to error
 * first); without it the NIC's answered probes keep it waiting. */
static void
timeout_ends_collect (void)
{
  pthread_t t;
  uint64_t t0 = now_ms ();

  opt_timeout = 1;
  t = one_in_flight ();
  pthread_join (t, NULL);
  opt_timeout = 0;
  CHECK (now_ms () - t0 < 3000);
  CHECK_EQ_U64 ((unsigned) collected_result, (unsigned) CONN_TIMEDOUT);
  CHECK (atomic_load (&qp_in_error));
  CHECK (!collected_exposed);
  done_with (collected_c);
}

/* The same break on a dead device: the QP stays as it was, so the
 * request's buffer must be reported exposed (never lent again). */
static void
unfenced_exposes (void)
{
  pthread_t t;

  opt_timeout = 1;
  atomic_store (&qp_unfenceable, true);
  t = one_in_flight ();
  pthread_join (t, NULL);
  opt_timeout = 0;
  atomic_store (&qp_unfenceable, false);
  CHECK (collected_result < 0);
  CHECK (!atomic_load (&qp_in_error));
  CHECK (collected_exposed);
  done_with (collected_c);
}

static void
probes_keep_waiting (void)              /* 13 s: by name only */
{
  uint64_t p0 = bstats[BC_PROBES].value;

  one_in_flight ();
  sleep (13);
  CHECK (bstats[BC_PROBES].value > p0);
  CHECK (!atomic_load (&collected));
  CHECK (!atomic_load (&qp_in_error));
}

static void
quit_ends_reconnect (void)
{
  struct conn *c = connected ();
  bool waited = false;
  uint64_t t0;
  int r;

  /* The server said goodbye: the next request reconnects patiently. */
  pthread_mutex_lock (&c->m);
  c->server_left = true;
  broken (c, "the server shut down, its writes flushed");
  pthread_mutex_unlock (&c->m);
  atomic_store (&nbdkit_quit, true);
  t0 = now_ms ();
  r = conn_reserve (c, true, &waited);
  CHECK (r == -1);
  CHECK (now_ms () - t0 < QUIT_BOUND_S * 1000);
  done_with (c);
}

int
main (int argc, char *argv[])
{
  static const struct unit_case cases[] = {
    { "quit_ends_collect", quit_ends_collect },
    { "quit_ends_reconnect", quit_ends_reconnect },
    { "timeout_ends_collect", timeout_ends_collect },
    { "unfenced_exposes", unfenced_exposes },
    { "idle_does_not_ask", idle_does_not_ask },
  };
  if (argc == 2 && strcmp (argv[1], "patient_reconnect") == 0) {
    struct conn *c = connected ();      /* control, 30 s: no quit */
    bool w = false;
    uint64_t t0;
    pthread_mutex_lock (&c->m);
    c->server_left = true;
    broken (c, "goodbye");
    pthread_mutex_unlock (&c->m);
    t0 = now_ms ();
    CHECK (conn_reserve (c, true, &w) == -1);
    printf ("patient reconnect: %u tries, %" PRIu64 " ms\n",
            atomic_load (&connect_tries), now_ms () - t0);
    UNIT_DONE ();
  }
  if (argc == 2 && strcmp (argv[1], "probes_keep_waiting") == 0) {
    probes_keep_waiting ();
    UNIT_DONE ();
  }

  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

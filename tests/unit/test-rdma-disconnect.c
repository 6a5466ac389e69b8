/* Unit test: filters/rdma/disconnect.c, a client's disconnect at every
 * stage of its connection handshake.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The CM calls are wrapped (-Wl,--wrap): rdma_notify answers as the
 * kernel would (0: this notice established the connection; EISCONN:
 * it was already), and can stop half-way for a case to act meanwhile;
 * rdma_disconnect and ibv_modify_qp are counted.  What must hold: a
 * DREQ never follows a notice that established the connection before
 * the CM's ESTABLISHED event (its REP would be left retried, holding
 * the connection id: rdma_destroy_id waits about a minute), yet every
 * dropped client gets exactly its DREQ, its queue pair in error at
 * once, whoever calls, however often, and whichever comes first.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "unit.h"

#include "../../filters/rdma/disconnect.c"

struct client *gm_rdma_clients;
pthread_mutex_t gm_rdma_clients_lock = PTHREAD_MUTEX_INITIALIZER;

void
nbdkit_debug (const char *fs, ...)
{
}

/* The wrapped CM of one client. */
static struct rdma_cm_id id;
static struct ibv_context verbs;
static struct ibv_device dev;
static struct ibv_qp qp;
static struct client cl;
static int notify_answer;               /* 0, or an errno */
static _Atomic unsigned notifies, disconnects, qp_errors;
/* rdma_notify stops here while a case sets stall (until released). */
static _Atomic bool stall, stalled, release;
/* Called by rdma_notify before it answers, if set. */
static void (*during_notify) (void);

int __wrap_rdma_notify (struct rdma_cm_id *i, enum ibv_event_type e);
int __wrap_rdma_disconnect (struct rdma_cm_id *i);
int __wrap_ibv_modify_qp (struct ibv_qp *q, struct ibv_qp_attr *a, int mask);

int
__wrap_rdma_notify (struct rdma_cm_id *i, enum ibv_event_type e)
{
  CHECK (i == &id && e == IBV_EVENT_COMM_EST);
  notifies++;
  if (atomic_load (&stall)) {
    atomic_store (&stalled, true);
    while (!atomic_load (&release))
      usleep (1000);
  }
  if (during_notify)
    during_notify ();
  if (notify_answer == 0)
    return 0;
  errno = notify_answer;
  return -1;
}

int
__wrap_rdma_disconnect (struct rdma_cm_id *i)
{
  CHECK (i == &id);
  disconnects++;
  return 0;
}

int
__wrap_ibv_modify_qp (struct ibv_qp *q, struct ibv_qp_attr *a, int mask)
{
  CHECK (q == &qp && mask == IBV_QP_STATE && a->qp_state == IBV_QPS_ERR);
  qp_errors++;
  return 0;
}

/* A fresh client, listed, its ESTABLISHED event not seen. */
static void
fresh (int answer)
{
  memset (&cl, 0, sizeof cl);
  id.qp = &qp;
  id.verbs = &verbs;
  verbs.device = &dev;
  dev.transport_type = IBV_TRANSPORT_IB;    /* InfiniBand, RoCE */
  cl.id = &id;
  strcpy (cl.peer, "10.0.0.2:1");
  gm_rdma_clients = &cl;
  notify_answer = answer;
  notifies = disconnects = qp_errors = 0;
  stall = stalled = release = false;
  during_notify = NULL;
}

/* Established before (its RTU came): the DREQ goes at once; later
 * calls disconnect again (harmless) without asking the CM. */
static void
established_before (void)
{
  fresh (EISCONN);
  gm_rdma_disconnect (&cl);
  CHECK_EQ_U64 (notifies, 1);
  CHECK_EQ_U64 (disconnects, 1);
  gm_rdma_disconnect (&cl);
  CHECK_EQ_U64 (notifies, 1);
  CHECK_EQ_U64 (disconnects, 2);
  gm_rdma_established (&cl);    /* its event, read late: nothing more */
  CHECK_EQ_U64 (disconnects, 2);
}

/* Its event seen: no notice at all. */
static void
event_seen (void)
{
  fresh (0);
  gm_rdma_established (&cl);
  CHECK_EQ_U64 (disconnects, 0);
  gm_rdma_disconnect (&cl);
  CHECK_EQ_U64 (notifies, 0);
  CHECK_EQ_U64 (disconnects, 1);
}

/* Established by the notice: queue pair in error at once, the DREQ
 * held until the ESTABLISHED event, then sent once. */
static void
held_until_event (void)
{
  fresh (0);
  gm_rdma_disconnect (&cl);
  CHECK_EQ_U64 (qp_errors, 1);
  CHECK_EQ_U64 (disconnects, 0);
  CHECK (atomic_load (&cl.cm) == CM_HELD);
  gm_rdma_disconnect (&cl);     /* the poller, fence.c, the shutdown... */
  gm_rdma_disconnect (&cl);
  CHECK_EQ_U64 (notifies, 1);
  CHECK_EQ_U64 (disconnects, 0);
  gm_rdma_release_held ();      /* the listener's sweep: not yet due */
  CHECK_EQ_U64 (disconnects, 0);
  CHECK (gm_rdma_held (&cl));   /* not to be reaped */
  gm_rdma_established (&cl);
  CHECK_EQ_U64 (disconnects, 1);
  CHECK (!gm_rdma_held (&cl));
  atomic_store (&cl.held_ns, 0);
  gm_rdma_release_held ();
  CHECK_EQ_U64 (disconnects, 1);
}

/* The event read while the notice was still being answered: the
 * caller sends the DREQ itself, once. */
static void
event_now (void)
{
  gm_rdma_established (&cl);
}

static void
event_during_notice (void)
{
  fresh (0);
  during_notify = event_now;
  gm_rdma_disconnect (&cl);
  CHECK_EQ_U64 (disconnects, 1);
  CHECK (atomic_load (&cl.cm) == CM_SEEN);
  atomic_store (&cl.held_ns, 0);
  gm_rdma_release_held ();
  CHECK_EQ_U64 (disconnects, 1);
}

/* No event within HOLD_MS (the client's own DREQ got there first, its
 * CM left ESTABLISHED; or the listener has stopped, at shutdown): the
 * sweep sends it then, once; until then the client is not reaped. */
static void
no_event (void)
{
  fresh (0);
  gm_rdma_disconnect (&cl);
  gm_rdma_release_held ();
  CHECK_EQ_U64 (disconnects, 0);
  /* Nearly due: still held (a hold of milliseconds, not HOLD_MS, would
   * pass the checks made at once). */
  atomic_store (&cl.held_ns, gm_now_ns () - (HOLD_MS - 100) * 1000000ull);
  gm_rdma_release_held ();
  CHECK_EQ_U64 (disconnects, 0);
  CHECK (gm_rdma_held (&cl));
  atomic_store (&cl.held_ns, gm_now_ns () - HOLD_MS * 1000000ull - 1);
  gm_rdma_release_held ();
  CHECK_EQ_U64 (disconnects, 1);
  CHECK (!gm_rdma_held (&cl));
  gm_rdma_release_held ();
  gm_rdma_established (&cl);    /* late: nothing more */
  CHECK_EQ_U64 (disconnects, 1);
}

/* iWARP has no REP and no RTU: disconnected at once, the CM not asked,
 * the queue pair left to rdma_disconnect. */
static void
iwarp (void)
{
  fresh (0);
  dev.transport_type = IBV_TRANSPORT_IWARP;
  gm_rdma_disconnect (&cl);
  CHECK_EQ_U64 (notifies, 0);
  CHECK_EQ_U64 (qp_errors, 0);
  CHECK_EQ_U64 (disconnects, 1);
  CHECK (!gm_rdma_held (&cl));
}

/* A second caller while the first one's notice is in the CM must not
 * send a DREQ (the CM is ESTABLISHED by then: it would be sent, before
 * the event); the first holds it; the event sends it. */
static void *
first_caller (void *arg)
{
  gm_rdma_disconnect (&cl);
  return NULL;
}

static void
second_caller (void)
{
  pthread_t t;

  fresh (0);
  stall = true;
  CHECK (pthread_create (&t, NULL, first_caller, NULL) == 0);
  while (!atomic_load (&stalled))
    usleep (1000);
  gm_rdma_disconnect (&cl);
  CHECK_EQ_U64 (notifies, 1);
  CHECK_EQ_U64 (disconnects, 0);
  release = true;
  CHECK (pthread_join (t, NULL) == 0);
  CHECK_EQ_U64 (disconnects, 0);
  CHECK (atomic_load (&cl.cm) == CM_HELD);
  gm_rdma_established (&cl);
  CHECK_EQ_U64 (disconnects, 1);
}

static const struct unit_case cases[] = {
  { "established_before", established_before },
  { "event_seen", event_seen },
  { "held_until_event", held_until_event },
  { "event_during_notice", event_during_notice },
  { "no_event", no_event },
  { "second_caller", second_caller },
  { "iwarp", iwarp },
};

int
main (int argc, char *argv[])
{
  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

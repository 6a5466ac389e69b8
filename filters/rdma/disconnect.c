/* gmblock-rdma filter: disconnecting a client, whatever stage its
 * connection handshake is at.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A client may send as soon as it sees ESTABLISHED, so its first
 * request can be taken (and found malformed) while the CM here still
 * waits for its RTU.  rdma_disconnect then sends no DREQ and the client
 * never learns it was dropped (seen in the lab under load: rdma-malformed
 * bad-op).  A receive is proof of an established connection, as the
 * COMM_EST event it raises would be, so the CM is told so first
 * (rdma_notify).
 *
 * But a DREQ must not follow that notice at once.  The CM's REP is
 * still being retried, and only the work the notice queues cancels it
 * (Linux ib_cm, cm_establish_handler), and only while the connection
 * is still ESTABLISHED: a DREQ sent before that work runs leaves the
 * REP retried to its last retry (the client's CM response timeout times
 * its retries: about a minute with librdmacm's), and the REP holds the
 * connection id, so rdma_destroy_id waits for it, uninterruptibly (CI
 * of b16e0ca: a server over 30 s past SIGTERM in cm_destroy_id, after
 * four clients dropped on their first request at once).  So the queue
 * pair goes to the error state at once (the poller and the workers end
 * as with a disconnect), and the DREQ waits for the ESTABLISHED event
 * that work raises (the listener: gm_rdma_established), or HOLD_MS if
 * it never comes (the client's own DREQ got there first: its
 * DISCONNECTED is answered anyway, but the kernel does not cancel the
 * REP then either, and nothing here can).  A client whose DREQ is held
 * is not reaped (its id destroyed sends a DREQ too).  Only the IB CM
 * (InfiniBand, RoCE) has this handshake: an iWARP connection is simply
 * disconnected.
 */
#include "rdma.h"

#define HOLD_MS 2000

static void
qp_to_error (struct client *c)
{
  struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

  if (c->id->qp && ibv_modify_qp (c->id->qp, &a, IBV_QP_STATE))
    nbdkit_debug (NAME ": %s: queue pair to the error state: %m", c->peer);
}

/* From any thread, any number of times. */
void
gm_rdma_disconnect (struct client *c)
{
  int s = CM_WAIT;

  if (c->id->verbs->device->transport_type != IBV_TRANSPORT_IB)
    ;                           /* no REP, no RTU */
  else if (atomic_compare_exchange_strong (&c->cm, &s, CM_NOTIFYING)) {
    int r = rdma_notify (c->id, IBV_EVENT_COMM_EST);

    s = CM_NOTIFYING;
    if (r == 0) {
      /* Established by this notice: hold the DREQ for its work. */
      qp_to_error (c);
      atomic_store (&c->held_ns, gm_now_ns ());
      if (atomic_compare_exchange_strong (&c->cm, &s, CM_HELD)) {
        nbdkit_debug (NAME ": %s: dropped before its RTU came: the "
                      "disconnect waits for the CM's ESTABLISHED event",
                      c->peer);
        return;
      }
      /* s is CM_SEEN: the event came meanwhile; send it now. */
      nbdkit_debug (NAME ": %s: dropped before its RTU came: the CM's "
                    "ESTABLISHED event came at once", c->peer);
    }
    else                        /* established before (EISCONN) */
      atomic_compare_exchange_strong (&c->cm, &s, CM_SEEN);
  }
  else if (s == CM_NOTIFYING || s == CM_HELD)
    return;                     /* another caller's DREQ is on its way */
  rdma_disconnect (c->id);
}

/* The listener: the CM's ESTABLISHED event for c. */
void
gm_rdma_established (struct client *c)
{
  if (atomic_exchange (&c->cm, CM_SEEN) == CM_HELD)
    rdma_disconnect (c->id);
}

bool
gm_rdma_held (const struct client *c)
{
  return atomic_load (&c->cm) == CM_HELD;
}

/* The listener, every poll; the shutdown, once the listener has
 * stopped (no event comes then: the hold's time ends it). */
void
gm_rdma_release_held (void)
{
  uint64_t now = gm_now_ns ();

  pthread_mutex_lock (&gm_rdma_clients_lock);
  for (struct client *c = gm_rdma_clients; c; c = c->next_client) {
    int s = CM_HELD;
    /* now was read first: a later hold may be younger than it. */
    if (atomic_load (&c->cm) != CM_HELD ||
        now < atomic_load (&c->held_ns) + HOLD_MS * 1000000ull)
      continue;
    if (atomic_compare_exchange_strong (&c->cm, &s, CM_SEEN)) {
      nbdkit_debug (NAME ": %s: no ESTABLISHED event %d ms after the "
                    "drop: disconnecting", c->peer, HOLD_MS);
      rdma_disconnect (c->id);
    }
  }
  pthread_mutex_unlock (&gm_rdma_clients_lock);
}

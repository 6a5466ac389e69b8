/* gmblock-rdma filter: a gone client's writes land before later ones.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * When an RDMA client goes (its bridge was killed, or it was dropped),
 * a WRITE, TRIM or ZERO of it may still be in the storage below: its
 * data was fetched, the disk is slow.  The client learnt nothing (its
 * request failed with EIO), so whoever comes next (the bridge restarted
 * over the same NBD device, or a TCP client taking over) may write
 * those bytes again and have that acknowledged, and then the old write
 * lands over it: acknowledged data silently replaced by older data.
 *
 * So a client that is gone is fenced: its workers begin nothing more
 * (gm_rdma_client_ending), and every later WRITE, TRIM or ZERO that
 * overlaps one it still has in the storage waits for it to land
 * (gm_rdma_fence_wait): those of other RDMA clients, and those of TCP
 * clients, which pass through this filter.  The listener marks a client
 * gone before it accepts the next connect request, so a restarted
 * bridge's requests always see it.  Reads do not wait: a failed write
 * leaves its range undefined until the next write, as in NBD.
 *
 * A client cut off by the network may look healthy here for long
 * (nothing is sent to it while its write sleeps in the storage), while
 * its bridge has failed the write and connects again.  A version 4
 * bridge names each of its connections in the hello (conn_id, the same
 * across its reconnects): a connect request from the same host naming
 * a connection still open here replaces it, fenced first
 * (gm_rdma_fence_predecessor).  A version 5 bridge also names, by an
 * ABANDON on another connection, one it gave up on with writes in
 * flight, before it writes anything more (the NBD client may retry
 * them over any connection): that one is fenced the same way
 * (gm_rdma_fence_abandoned).
 */
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "rdma.h"

/* Clients gone with their poller not yet finished: the hot path reads
 * only this.  Marked in gm_rdma_client_ending, unmarked when finished.
 */
_Atomic unsigned gm_rdma_ending;

/* Whether a gone client other than self still has a write begun
 * (RQ_SETUP: a worker took it; a fenced client's workers begin nothing
 * more, so what is only queued never runs) over [offset, offset+len).
 * Under the clients lock, which keeps each client allocated.
 */
static bool
overlaps_gone (const struct client *self, uint64_t offset, uint64_t len)
{
  bool hit = false;

  for (struct client *o = gm_rdma_clients; o && !hit; o = o->next_client) {
    if (o == self || atomic_load (&o->fence) != GM_FENCE_ENDING)
      continue;
    pthread_mutex_lock (&o->lock);
    for (unsigned i = 0; o->reqs && i < o->rp.lim.credits && !hit; i++) {
      const struct req *q = &o->reqs[i];
      hit = q->state == RQ_SETUP && gm_rp_op_writes (q->r.op) &&
        q->r.offset < offset + len && offset < q->r.offset + q->r.length;
    }
    pthread_mutex_unlock (&o->lock);
  }
  return hit;
}

void
gm_rdma_fence_wait (const struct client *self, uint64_t offset, uint64_t len)
{
  const struct timespec ms = { .tv_nsec = 1000000 };
  bool waited = false;

  while (atomic_load (&gm_rdma_ending) > 0) {
    bool hit;

    /* A gone client's own requests never wait: no one was told they
     * ended, so their order among the gone does not matter, and two
     * clients that died while waiting on each other's would wait for
     * ever. */
    if (self && atomic_load (&self->fence) != GM_FENCE_LIVE)
      break;

    pthread_mutex_lock (&gm_rdma_clients_lock);
    hit = overlaps_gone (self, offset, len);
    pthread_mutex_unlock (&gm_rdma_clients_lock);
    if (!hit)
      break;
    if (!waited)
      COUNT (RC_FENCE_WAITS, 1);
    waited = true;
    /* Rare (a client gone with a write in a slow disk), and it ends
     * when that write does: polled, nothing on the hot path. */
    nanosleep (&ms, NULL);
  }
}

/* The host part of a peer name "HOST:PORT". */
static size_t
host_len (const char *peer)
{
  const char *colon = strrchr (peer, ':');

  return colon ? (size_t) (colon - peer) : strlen (peer);
}

bool
gm_rdma_is_predecessor (const struct client *o, const char *peer,
                        uint64_t conn_id)
{
  size_t n = host_len (peer);

  return conn_id != 0 && o->rp.conn_id == conn_id &&
    host_len (o->peer) == n && strncmp (o->peer, peer, n) == 0 &&
    atomic_load (&o->fence) == GM_FENCE_LIVE;
}

/* Drop and fence the connection of c's host named conn_id, other than
 * c, accepted before 'before', if it is still open here.  Whether one
 * was.
 */
static bool
fence_named (struct client *c, uint64_t conn_id, uint64_t before,
             const char *how)
{
  bool found = false;

  pthread_mutex_lock (&gm_rdma_clients_lock);
  for (struct client *o = gm_rdma_clients; o; o = o->next_client) {
    if (o == c || !gm_rdma_is_predecessor (o, c->peer, conn_id) ||
        o->accepted_ns >= before)
      continue;
    nbdkit_debug (NAME ": %s %s connection 0x%" PRIx64 ", still open from "
                  "%s: that one is dropped, and what it has in the storage "
                  "lands first", c->peer, how, conn_id, o->peer);
    gm_rdma_client_ending (o);
    gm_rdma_disconnect (o);
    found = true;
  }
  pthread_mutex_unlock (&gm_rdma_clients_lock);
  return found;
}

void
gm_rdma_fence_predecessor (struct client *c)
{
  if (fence_named (c, c->rp.conn_id, UINT64_MAX, "connects again as"))
    COUNT (RC_REPLACED, 1);
}

/* Nothing to wait for here: from now on every WRITE, TRIM and ZERO
 * that overlaps one the abandoned connection has in the storage waits
 * for it (gm_rdma_fence_wait), and the bridge sends its next one only
 * after this reply.
 */
void
gm_rdma_fence_abandoned (struct client *c, uint64_t conn_id,
                         uint64_t received)
{
  if (fence_named (c, conn_id, received, "abandons its"))
    COUNT (RC_ABANDONED, 1);
}

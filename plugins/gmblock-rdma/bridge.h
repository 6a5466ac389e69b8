/* gmblock-rdma bridge: what its three files share.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   bridge.c  the nbdkit plugin: options, callbacks, requests split in
 *             pieces sent in parallel
 *   conn.c    one RC connection per NBD connection: connect, request
 *             slots (one per credit), the completion thread, reconnect
 *   mem.c     process-wide memory: protection domain, the registered
 *             bounce pool, zero copy by on-demand-paging (ODP) MRs
 */
#ifndef GMBLOCK_BRIDGE_H
#define GMBLOCK_BRIDGE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "abandoned.h"
#include "counters.h"
#include "statsout.h"
#include "rdmaaddr.h"
#include "rdmaproto.h"
#include "unflushed.h"

#define NAME "gmblock-rdma"

enum {
  BC_CONNECTS, BC_RECONNECTS, BC_REQUESTS, BC_READ_BYTES, BC_WRITE_BYTES,
  BC_COPIED, BC_ZERO_COPY, BC_ODP_HITS, BC_ODP_MISSES, BC_POOL_WAITS,
  BC_CREDIT_WAITS, BC_ERRORS, BC_TRANSPORT_ERRORS, BC_RETRIES,
  BC_LOST_FLUSHES, BC_PROBES, BC_GOODBYES, BC_RESENT, BC_ABANDONS,
  BC_NAMES_TAKEN, BC_TIMEOUTS, BC_EXPOSED,
  BC_COUNT
};
extern struct gm_counter bstats[BC_COUNT];
#define COUNT(id, n) gm_count (&bstats[id], (n))

/* Options (bridge.c). */
enum zc_mode { ZC_AUTO, ZC_ON, ZC_OFF };
extern struct gm_rdma_addr server;
extern unsigned opt_credits;
extern unsigned opt_timeout;     /* seconds, 0: none */
extern uint64_t opt_pool;
extern enum zc_mode opt_zero_copy;

/* ---- mem.c */

/* Where a piece's data goes: addr/keys for the request, and what to
 * give back when it is done (a bounce buffer, or a cache entry).
 */
struct buf_ref {
  void *addr;
  uint32_t rkey;
  bool bounce;                  /* addr is a pool buffer: copy */
  int ent;                      /* ODP cache entry held, or -1 */
  uint32_t len;
};

/* At start-up with zero-copy=on: is there a device with ODP for RC
 * READ and WRITE?  0, or -1 with why set.
 */
int mem_check_odp (char *why, size_t whylen);
/* A connection came up on verbs: the first one allocates the process's
 * protection domain, probes ODP and creates the pool.  Every later one
 * must use the same device.  0, or -1 with why set.
 */
int mem_attach (struct ibv_context *verbs, char *why, size_t whylen);
struct ibv_pd *mem_pd (void);
/* The largest READ/WRITE to ask for: a piece must fit the pool. */
uint32_t mem_max_request (void);
/* A buffer for len bytes of user's data: user itself when zero copy
 * is possible, else a bounce buffer (wait: block until one is free;
 * else -1 when none is).  0 or -1.
 */
int mem_get (void *user, uint32_t len, bool wait, struct buf_ref *b);
/* A pool buffer whatever the zero-copy mode (BLOCK_STATUS). */
int mem_get_bounce (uint32_t len, bool wait, struct buf_ref *b);
void mem_put (struct buf_ref *b);
/* Give b back when the server may still reach it (conn_collect's
 * exposed): a bounce buffer is quarantined (never lent again), a
 * per-range ODP MR deregistered once idle (its rkey dies with it).
 */
void mem_put_exposed (struct buf_ref *b);
void mem_unload (void);

/* ---- conn.c */

struct conn;
struct conn *conn_open (void);
void conn_close (struct conn *c);
/* .cleanup: end the completion threads of connections never closed
 * (nbdkit quit with them open). */
void conn_stop_all (void);
const struct gm_rp_limits *conn_limits (const struct conn *c);
unsigned conn_credits (const struct conn *c);
/* Its node in the list of broken connections (abandoned.h), and the
 * server instance of its latest connection. */
struct gm_ab_node *conn_ab (struct conn *c, uint64_t *instance);
/* Reserve a request slot.  wait (the caller has nothing in flight):
 * reconnect if the connection is dead, and wait for a free slot
 * (*waited set true when it did; the caller counts credit_waits).
 * Returns the slot, -1 (the connection is dead, or cannot be made),
 * CONN_UNSERVED (without wait: dead after the server's goodbye, or the
 * server shutting down) or, without wait, -2 when no slot is free.
 */
int conn_reserve (struct conn *c, bool wait, bool *waited);
void conn_unreserve (struct conn *c, int slot);
/* Send r on slot (its handle is set here).  0, or the slot is given
 * back and: a positive errno (refused locally), -1 (transport),
 * CONN_UNSERVED (dead after the server's goodbye).  ack (or NULL): a
 * successful reply to a write, trim or zero without FUA is numbered
 * into it (gm_uf_reply), for conn_acked.
 */
int conn_post (struct conn *c, int slot, struct gm_rp_request *r,
               struct gm_uf_ack *ack);
/* What conn_reserve, conn_post and conn_collect return for a request
 * the server did not do because it shuts down (no reply before its
 * goodbye, an ESHUTDOWN reply, or not posted since): like -1, but safe
 * to send again, whatever the op, to the next server.
 */
#define CONN_UNSERVED (-3)
/* What conn_collect returns for a request in flight on a connection
 * that timeout= broke (one of its requests waited that long), or that
 * nbdkit's shutdown broke (still in flight 2 s after it began): like
 * -1, but not sent again: the user asked for an error after that long,
 * or nobody waits for it any more.
 */
#define CONN_TIMEDOUT (-5)       /* RUN_TELL (bridge.c) is -4 */
/* Wait for slot's reply and give the slot back: 0, a positive errno
 * (the server's answer), -1 (the connection broke), CONN_UNSERVED or
 * CONN_TIMEDOUT.  *exposed (or NULL): set true when the connection
 * broke and its QP could be neither moved to the error state nor
 * disconnected, so the server may still reach the buffer the request
 * lent it: then give it back with mem_put_exposed.
 */
int conn_collect (struct conn *c, int slot, bool *exposed);
/* The same, with a BLOCK_STATUS reply's count of extents. */
int conn_collect_count (struct conn *c, int slot, uint32_t *count,
                        bool *exposed);
/* The NBD request whose pieces' replies are in ack is acknowledged to
 * the client: only now do they count as writes a FLUSH must cover, or
 * report lost (common/unflushed.h).
 */
void conn_acked (struct conn *c, const struct gm_uf_ack *ack);
/* An NBD FLUSH came on c (begin), and was answered (lost: true when
 * it must fail, since writes acknowledged before it came died with a
 * restarted server; common/unflushed.h).
 */
void conn_flush_begin (struct conn *c, struct gm_uf_flush *f);
bool conn_flush_lost (struct conn *c, const struct gm_uf_flush *f);

#endif /* GMBLOCK_BRIDGE_H */

/* gmblock: which acknowledged writes a FLUSH can still cover (the RDMA
 * bridge's durability rule; no verbs here).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A server acknowledges a write (without FUA) before it is on stable
 * storage; a later FLUSH to the same server process makes it durable.
 * Every welcome names that process: a random instance number the
 * server picks when it starts.  So:
 *
 *  - a broken connection loses nothing by itself: the server may have
 *    dropped only this client, or the network failed, and the process
 *    that holds the writes is still there;
 *  - reconnecting to the same instance loses nothing: its next FLUSH
 *    covers them;
 *  - reaching a different instance, on any connection, means the old
 *    process died: every connection's writes from the old instance not
 *    yet covered count as lost, and each connection's next FLUSH fails
 *    once (gm_uf_lost), as a disk that lost its write cache;
 *  - a connection closed while broken can no longer find out, so its
 *    uncovered writes count as lost at once;
 *  - a connection the client closes normally takes its uncovered
 *    writes along, as with any NBD server.
 *
 * Process-wide, because with multi-conn a FLUSH on any connection must
 * answer for the writes of all of them.  Every function takes one
 * short lock of its own; callers may hold their own locks, but must
 * never take one while inside these.
 */
#ifndef GMBLOCK_UNFLUSHED_H
#define GMBLOCK_UNFLUSHED_H

#include <stdbool.h>
#include <stdint.h>

struct gm_unflushed {
  struct gm_unflushed *next;    /* every open one */
  uint64_t acked;               /* writes acknowledged without FUA */
  uint64_t covered;             /* of those, covered by a FLUSH's reply */
  uint64_t instance;            /* who acknowledged the uncovered ones */
  uint64_t lost_seen;           /* losses this connection has reported */
};

/* A connection opens (before its first connect) and closes; 'broken':
 * it closes without having reconnected.  gm_uf_close returns how many
 * writes it counted as lost (0 almost always).
 */
void gm_uf_open (struct gm_unflushed *u);
uint64_t gm_uf_close (struct gm_unflushed *u, bool broken);

/* A write, trim or zero without FUA got a successful reply from the
 * server instance 'instance'.
 */
void gm_uf_acked (struct gm_unflushed *u, uint64_t instance);

/* A FLUSH is posted: it covers what was acknowledged so far.  Hand the
 * mark back to gm_uf_flush_done when its reply says it succeeded.
 */
uint64_t gm_uf_flush_sent (struct gm_unflushed *u);
void gm_uf_flush_done (struct gm_unflushed *u, uint64_t mark);

/* A connection (re)connected to server instance 'instance'.  Returns how many
 * writes, over every connection, the old instance had acknowledged
 * and that count as lost now (0: none).
 */
uint64_t gm_uf_connected (uint64_t instance);

/* Writes acknowledged and not covered yet (for messages). */
uint64_t gm_uf_uncovered (struct gm_unflushed *u);

/* True once per loss since u last asked (or opened): its next FLUSH
 * must fail.
 */
bool gm_uf_lost (struct gm_unflushed *u);

#endif /* GMBLOCK_UNFLUSHED_H */

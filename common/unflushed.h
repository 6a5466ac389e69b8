/* gmblock: which acknowledged writes a FLUSH can still cover (the RDMA
 * bridge's durability rule; no verbs here).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A server acknowledges a write (without FUA) before it is on stable
 * storage; a later FLUSH to the same server process makes it durable,
 * whichever connection carried the write (the server offers
 * multi-conn: a FLUSH covers every write it acknowledged before it).
 * Every welcome names that process: a random instance number the
 * server picks when it starts.  So the writes are tracked for the whole
 * bridge, not per connection:
 *
 *  - a broken or closed connection loses nothing by itself: the server
 *    may have dropped only this client, or the network failed, and the
 *    process that holds the writes is still there; a FLUSH to it, on
 *    any connection, covers them;
 *  - reaching a different instance, on any connection, means the old
 *    process died: every write it acknowledged and no FLUSH covered
 *    counts as lost, and each connection's next FLUSH fails once
 *    (gm_uf_lost), as from a disk that lost its write cache;
 *  - a reply from the old instance that comes after that (already in
 *    flight) counts as lost at once, as does a FLUSH's.
 *
 * One short lock for all of it; callers may hold their own locks, but
 * must never take one while inside these.
 */
#ifndef GMBLOCK_UNFLUSHED_H
#define GMBLOCK_UNFLUSHED_H

#include <stdbool.h>
#include <stdint.h>

/* Per connection: the losses it has reported. */
struct gm_unflushed {
  uint64_t lost_seen;
};

/* A connection opens (before its first connect): losses before now are
 * not its to report.
 */
void gm_uf_open (struct gm_unflushed *u);

/* A connection (re)connected to server instance 'instance'.  Returns how
 * many writes the previous instance had acknowledged that no FLUSH
 * covered, lost now (0: none, or the same instance).
 */
uint64_t gm_uf_connected (uint64_t instance);

/* A write, trim or zero without FUA got a successful reply from server
 * instance 'instance'.
 */
void gm_uf_acked (uint64_t instance);

/* A FLUSH is posted: it covers what was acknowledged so far.  Hand the
 * mark back to gm_uf_flush_done, with the instance that answered, when
 * its reply says it succeeded.
 */
uint64_t gm_uf_flush_sent (void);
void gm_uf_flush_done (uint64_t mark, uint64_t instance);

/* Writes acknowledged and not covered yet (for messages). */
uint64_t gm_uf_uncovered (void);

/* True once per loss since u last asked (or opened): its next FLUSH
 * must fail.
 */
bool gm_uf_lost (struct gm_unflushed *u);

#endif /* GMBLOCK_UNFLUSHED_H */

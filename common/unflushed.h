/* gmblock: which acknowledged writes a FLUSH can still cover (the RDMA
 * bridge's durability rule; no verbs here).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A server acknowledges a write (without FUA) before it is on stable
 * storage; a later FLUSH to the same server process makes it durable:
 * the writes of that connection, and with multi-conn those of every
 * connection.  Every welcome names that process: a random instance
 * number the server picks when it starts.  Acknowledgements are
 * numbered in the order they arrive, over every connection, so:
 *
 *  - a FLUSH covers the acknowledgements numbered up to the count when
 *    its SEND was posted (gm_uf_flush_sent), on its own connection, or
 *    on all of them when the server offers multi-conn;
 *  - a broken or closed connection loses nothing by itself: the server
 *    may have dropped only this client, or the network failed, and the
 *    process that holds the writes is still there;
 *  - but without multi-conn, a connection that reconnects to the same
 *    process is a new one there, and no FLUSH can cover what the old
 *    one's did not: those writes count as lost at the reconnect;
 *  - reaching a different instance, on any connection, means the old
 *    process died: every acknowledgement it made and no FLUSH covered
 *    is lost (a closed connection's too); so is a reply from it still
 *    in flight;
 *  - an NBD FLUSH fails if a write acknowledged before the FLUSH came
 *    to the bridge is lost and its connection has not reported that
 *    loss yet (gm_uf_flush_begin/gm_uf_flush_end), as a disk that lost
 *    its write cache.  A new connection reports the losses that no
 *    FLUSH has reported yet (as Linux's errseq does for a new file
 *    descriptor), not the ones already reported.
 *
 * Only writes acknowledged to the NBD client count: the pieces of a
 * request the bridge split are numbered as their replies arrive, and
 * counted once every piece succeeded (gm_uf_reply, gm_uf_acked).
 *
 * Where writes interleave on several connections without multi-conn,
 * a loss may take in writes a FLUSH did cover: a FLUSH then fails that
 * could have succeeded, never the reverse.  One short lock for all of
 * it; callers may hold their own locks, but must not take one inside.
 */
#ifndef GMBLOCK_UNFLUSHED_H
#define GMBLOCK_UNFLUSHED_H

#include <stdbool.h>
#include <stdint.h>

/* Per connection.  Private to unflushed.c. */
struct gm_unflushed {
  struct gm_unflushed *next;    /* every open one */
  uint64_t hi;                  /* its newest acknowledgement */
  uint64_t covered;             /* its own FLUSHes covered up to here */
  uint64_t reported;            /* losses up to this generation reported */
  uint64_t resets;              /* times 'covered' was reset (reconnect
                                 * without multi-conn, a new instance) */
  uint64_t reset_inst;          /* the instance before the last reset */
  uint64_t reset_covered;       /* what was covered before it */
};

/* A connection opens (before its first connect) and closes. */
void gm_uf_open (struct gm_unflushed *u);
void gm_uf_close (struct gm_unflushed *u);

/* Connection u (re)connected to server instance 'instance', which
 * offers multi-conn or not.  Before any request is posted on it.
 * Returns at most how many acknowledgements that no FLUSH covered are
 * lost now: the previous instance's, or, reconnected to the same one
 * without multi-conn, u's old connection's (0: none; without
 * multi-conn, or with late replies, the count may take in
 * some that were covered or counted before, and a write acknowledged
 * to the client after a FLUSH came counts twice: gm_uf_acked).
 */
uint64_t gm_uf_connected (struct gm_unflushed *u, uint64_t instance,
                          bool multi_conn);

/* A successful reply to a write, trim or zero without FUA, or to a
 * piece of one the bridge split: numbered when it arrives, as that is
 * its order against FLUSHes (gm_uf_reply), counted only when the whole
 * NBD request is acknowledged to the client (gm_uf_acked).  A request
 * that failed as a whole acknowledged nothing, whatever its pieces did,
 * and a FLUSH need not answer for it.  The replies of one request are
 * taken one at a time (their connection's lock), into one gm_uf_ack,
 * zeroed before the first.
 */
struct gm_uf_ack {
  uint64_t lo, hi;              /* numbers of its first and last reply;
                                 * hi 0: none */
  uint64_t instance;            /* the first reply's server instance */
  uint64_t first_hi;            /* the number of its last reply from it */
  uint64_t last;                /* the newest reply's */
  uint64_t resets;              /* u->resets at the first reply */
  bool late;                    /* one came from a replaced instance */
};
void gm_uf_reply (struct gm_unflushed *u, uint64_t instance,
                  struct gm_uf_ack *a);
void gm_uf_acked (struct gm_unflushed *u, const struct gm_uf_ack *a);

/* A write with one reply, acknowledged to the client at once. */
static inline void
gm_uf_acked_whole (struct gm_unflushed *u, uint64_t instance)
{
  struct gm_uf_ack a = { 0 };

  gm_uf_reply (u, instance, &a);
  gm_uf_acked (u, &a);
}

/* A FLUSH's SEND is about to be posted: the mark of what it covers.
 * Hand it back to gm_uf_flush_done, with the instance that answered,
 * when its reply says it succeeded.
 */
uint64_t gm_uf_flush_sent (void);
void gm_uf_flush_done (struct gm_unflushed *u, uint64_t mark,
                       uint64_t instance);

/* An NBD FLUSH came to the bridge on u (begin) and was answered below,
 * whether it succeeded or not (end).  gm_uf_flush_end returns true when
 * the FLUSH must fail: a write acknowledged before it came is lost, and
 * the loss had not been reported to u when it came (so FLUSHes in
 * flight together all fail); it is reported now.
 */
struct gm_uf_flush {
  uint64_t mark;                /* acknowledgements before it came */
  uint64_t reported;            /* u's losses reported when it came */
};
void gm_uf_flush_begin (struct gm_unflushed *u, struct gm_uf_flush *f);
bool gm_uf_flush_end (struct gm_unflushed *u, const struct gm_uf_flush *f);

/* At most how many acknowledgements no FLUSH has covered yet, on any
 * connection (for messages).
 */
uint64_t gm_uf_uncovered (void);

#endif /* GMBLOCK_UNFLUSHED_H */

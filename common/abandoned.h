/* gmblock: the RDMA bridge's broken connections that the server must
 * still be told about (protocol version 5, ABANDON; no verbs here).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A connection broken by the network may still look open to the server,
 * with a WRITE of it sleeping in the server's storage, which the bridge
 * has already failed (EIO).  The NBD client may write those bytes again
 * over any other connection of the bridge (multi-conn) or a new one,
 * and have it acknowledged; then the old write lands over it.  The
 * server holds later writes back behind a connection it knows is gone
 * (filters/rdma/fence.c); a connection that reconnects tells it by its
 * conn_id, but the others must say it: before a connection sends its
 * next WRITE, TRIM or ZERO, it sends an ABANDON naming each broken one
 * that may still be open in the same server process, and waits for
 * the reply.  This list says which, and makes sure one connection tells
 * and the others wait for that.
 *
 * A node per bridge connection, allocated when it opens (nothing is
 * allocated when it breaks).  Listed when the connection breaks with a
 * write in flight; unlisted when the server has been told (by an
 * ABANDON, or by the connection's own reconnect), or when a connection
 * reaches another server instance (the old process, and its writes in
 * flight, are gone).  A node outlives its connection's close while
 * listed.  Callers may hold their own locks; nothing here blocks
 * except gm_ab_take and gm_ab_hello, and, with a state file, the calls
 * that rewrite it (gm_ab_state, gm_ab_connected, gm_ab_close,
 * gm_ab_told), which wait for its fdatasync holding no lock of this
 * module.
 */
#ifndef GMBLOCK_ABANDONED_H
#define GMBLOCK_ABANDONED_H

#include <stdbool.h>
#include <stdint.h>

struct gm_ab_node;

/* A connection opens, named conn_id: its node, or NULL (ENOMEM). */
struct gm_ab_node *gm_ab_open (uint64_t conn_id);
/* A connection opens, taking the name of one a killed bridge left open
 * on the server (gm_ab_state): its node, with *conn_id set, or NULL
 * when no such name is left.  Its hello replaces that connection on
 * the server, as a reconnect does: no ABANDON is needed for it, and it
 * is not one client too many for the server's rdma-max-clients (which
 * the killed bridge's connections may fill).  Should it close before
 * it connects, the name goes back for the next connection.  A name is
 * given to one connection at a time: one the file names twice (a
 * rewrite killed halfway) is adopted once, or, with two instances,
 * taken by none (only named in ABANDONs).
 */
struct gm_ab_node *gm_ab_reuse (uint64_t *conn_id);
/* It closes: the node is freed now, or once it is unlisted. */
void gm_ab_close (struct gm_ab_node *n);

/* It broke with a WRITE, TRIM or ZERO in flight, connected to server
 * instance 'instance': listed (once; again after it was told).  Before
 * the failed requests are reported to anyone.
 */
void gm_ab_broken (struct gm_ab_node *n, uint64_t instance);

/* Some connection (n: this one's node) connected to 'instance': n's own
 * listing ends (its hello named it: the server replaced it), and so do
 * those of other instances.
 */
void gm_ab_connected (struct gm_ab_node *n, uint64_t instance);

/* n's connection is about to send a hello.  The hello names n: the
 * server replaces the link of n it still holds, so an ABANDON naming n
 * must not arrive after it (it would drop the new link, failing its
 * requests for nothing), nor be skipped while the hello may not have
 * arrived yet (a writer's request could then overtake the old link's
 * writes).  Waits while an ABANDON naming n is out; then, until
 * gm_ab_connected or gm_ab_hello_failed, writers that must name n
 * wait in gm_ab_take.  A teller holds a slot on its own connection
 * while it takes and tells, so it never says hello meanwhile: each
 * wait is bounded by one reply or one connect attempt.
 */
void gm_ab_hello (struct gm_ab_node *n);
/* The connect after gm_ab_hello failed: n stays as it was (listed or
 * not), for a writer to tell.  Nothing to do otherwise.
 */
void gm_ab_hello_failed (struct gm_ab_node *n);

/* Before a WRITE, TRIM or ZERO on the connection of node self, to
 * 'instance'.  Returns false when no listed connection of that
 * instance other than self is left to tell (having waited while
 * another connection tells one, or says hello: self's own listing is
 * for its reconnect, which tells the server by itself); true with *id
 * set to one to tell (an ABANDON naming it), and *told to pass to
 * gm_ab_told with the outcome.  Self's connection must hold a slot
 * (see gm_ab_hello).  Lock-free when nothing is listed.
 */
bool gm_ab_take (const struct gm_ab_node *self, uint64_t instance,
                 uint64_t *id, struct gm_ab_node **told);
/* Whether a connection of 'instance' other than self is listed (told
 * now or not): a write about to go out on self's connection, which
 * cannot reconnect meanwhile, must let gm_ab_take tell them first.
 * Its instance may have changed since gm_ab_take was asked (a dead
 * connection reconnects as its request reserves a slot).  Lock-free
 * when nothing is listed.
 */
bool gm_ab_pending (const struct gm_ab_node *self, uint64_t instance);
/* The ABANDON for *told ended: ok, the server has fenced it (or never
 * had it); not ok, it stays listed for the next writer.
 */
void gm_ab_told (struct gm_ab_node *told, bool ok);

/* Connections listed now (the bridge's stats and tests). */
unsigned gm_ab_listed (void);

/* A bridge killed (while the network is cut, so the kernel's disconnect
 * requests for its connections are lost) leaves them open on the
 * server, maybe with writes in its storage; its successor is a new
 * process with new connections.  The state file names them: every
 * connection the server may still hold (open and connected, or
 * listed), as "CONN_ID INSTANCE" lines in hex, rewritten (and
 * fdatasync'ed) at every connect, close and tell.  gm_ab_state reads
 * the one a killed bridge left in fd (empty: a new one), lists those
 * connections as broken (the first write tells the server, as for any
 * broken connection; a new server instance drops them), and keeps the
 * file up to date from then on; failed (errno) is called when a rewrite
 * fails.  Once, before any connection opens.  0, or -1 with why set
 * (a file of another kind, a bad line): the caller refuses to start.
 */
int gm_ab_state (int fd, void (*failed) (int err), char *why, size_t whylen);

#endif /* GMBLOCK_ABANDONED_H */

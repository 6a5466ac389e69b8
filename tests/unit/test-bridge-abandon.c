/* Unit test: the bridge's requests (plugins/gmblock-rdma/bridge.c)
 * name broken connections to the server (ABANDON, protocol version 5)
 * before a WRITE, TRIM or ZERO, to the server instance the write goes
 * to.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * bridge.c is compiled in over a fake conn.c and mem.c: a connection
 * that is dead reconnects, to the instance a case chose, at the first
 * conn_reserve that may wait (as conn.c does), and every request it
 * posts is logged with the instance it went to; the server answers
 * everything with success, unless a case sets the next collect's
 * outcome (next_result).  Also: how a broken connection's requests are
 * sent again, or not.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "unit.h"

#include "../../plugins/gmblock-rdma/bridge.c"

struct conn {
  bool dead;
  uint64_t instance;            /* its latest connection's */
  uint64_t next_instance;       /* the one it reconnects to */
  struct gm_ab_node *ab;
  struct gm_rp_limits lim;
  unsigned busy;
  unsigned doomed;              /* in flight when it died */
};

#define MAXLOG 16
static struct sent {
  uint8_t op;
  uint64_t offset, addr;
  uint64_t instance;            /* of the connection it went on */
} sent[MAXLOG];
static unsigned nsent;
static int next_result;         /* the next conn_collect's, once */
/* The next conn_collects' outcomes, in order, before next_result. */
static int results[8];
static unsigned nresults, results_at;
/* The connection dies as its die_after'th request is posted: what was
 * in flight then ends with dying_result (conn.c's broken ()). */
static unsigned die_after;
static int dying_result;
/* The connection dies whenever a slot is given back unused, and at
 * each reconnect, connection 'rebroken' breaks again on its instance
 * (a flapping network); or it breaks as the break_after'th request is
 * posted. */
static unsigned die_at_unreserve, break_after;
static struct gm_ab_node *rebroken;
static int last_error;          /* nbdkit_set_error's */

#include "fake-bridge.h"

unsigned
conn_credits (const struct conn *c)
{
  return 4;
}

struct gm_ab_node *
conn_ab (struct conn *c, uint64_t *instance)
{
  *instance = c->instance;
  return c->ab;
}

int
conn_reserve (struct conn *c, bool wait, bool *waited)
{
  if (c->dead) {
    if (!wait)
      return -1;
    /* conn.c's reconnect: the hello names it (connect_server). */
    gm_ab_hello (c->ab);
    c->dead = false;
    c->instance = c->next_instance;
    gm_ab_connected (c->ab, c->instance);
    if (rebroken)
      gm_ab_broken (rebroken, c->instance);
  }
  if (c->busy == 4)
    return -2;
  return c->busy++;
}

void
conn_unreserve (struct conn *c, int slot)
{
  c->busy--;
  if (die_at_unreserve > 0) {
    die_at_unreserve--;
    c->dead = true;
  }
}

int
conn_post (struct conn *c, int slot, struct gm_rp_request *r,
           struct gm_uf_ack *ack)
{
  CHECK (nsent < MAXLOG);
  sent[nsent++] = (struct sent) { .op = r->op, .offset = r->offset,
                                  .addr = r->addr, .instance = c->instance };
  if (nsent == break_after)
    gm_ab_broken (rebroken, c->instance);
  if (nsent == die_after) {
    c->dead = true;
    c->doomed = c->busy;
  }
  return 0;
}

int
conn_collect (struct conn *c, int slot, bool *exposed)
{
  if (exposed)
    *exposed = false;
  int r = next_result;

  if (results_at < nresults)
    r = results[results_at++];
  else
    next_result = 0;
  if (c->doomed > 0) {
    c->doomed--;
    r = dying_result;
  }
  c->busy--;
  return r;
}

int
conn_collect_count (struct conn *c, int slot, uint32_t *count,
                    bool *exposed)
{
  *count = 0;
  return conn_collect (c, slot, exposed);
}

uint32_t
mem_max_request (void)
{
  return 1 << 20;
}

void
nbdkit_set_error (int err)
{
  last_error = err;
}

#define I1 0x1111
#define I2 0x2222

static void
conn_init (struct conn *c, uint64_t id, uint64_t instance)
{
  *c = (struct conn) { .instance = instance, .next_instance = instance,
                       .ab = gm_ab_open (id),
                       .lim = { .size = 1 << 30, .max_request = 1 << 20,
                                .min_block = 512, .credits = 4 } };
  CHECK (c->ab != NULL);
  gm_ab_connected (c->ab, instance);
}

/* x broke with a write in flight on instance 'broke_on'; c, dead since
 * it last talked to 'was', reconnects to 'now' and writes.  What went
 * out, in order. */
static void
write_after (uint64_t broke_on, uint64_t was, uint64_t now)
{
  static char buf[4096];
  struct conn x, c;

  nsent = 0;
  conn_init (&x, 0xa, broke_on);
  conn_init (&c, 0xc, was);
  gm_ab_broken (x.ab, broke_on);
  c.dead = true;
  c.next_instance = now;
  CHECK (bridge_pwrite (&c, buf, sizeof buf, 0, 0) == 0);
  CHECK_EQ_U64 (c.busy, 0);
  gm_ab_close (x.ab);
  gm_ab_close (c.ab);
}

/* The next n conn_collects end with these. */
static void
answer (unsigned n, const int *r)
{
  memcpy (results, r, n * sizeof *r);
  nresults = n;
  results_at = 0;
}

static void
conns_close (struct conn *x, unsigned n)
{
  for (unsigned i = 0; i < n; i++) {
    gm_ab_connected (x[i].ab, x[i].instance);   /* its own listing ends */
    gm_ab_close (x[i].ab);
  }
  CHECK_EQ_U64 (gm_ab_listed (), 0);
}

/* x (0xa) connected to x_on, broken there with a write in flight if
 * 'broke', and c (0xc) connected to c_on; nothing sent yet. */
static void
pair (struct conn *x, struct conn *c, uint64_t x_on, uint64_t c_on,
      bool broke)
{
  nsent = 0;
  conn_init (x, 0xa, x_on);
  conn_init (c, 0xc, c_on);
  if (broke)
    gm_ab_broken (x->ab, x_on);
}

static void
pair_close (struct conn *x, struct conn *c)
{
  conns_close (x, 1);
  conns_close (c, 1);
}

/* The plain case: the same instance throughout. */
static void
same_instance (void)
{
  write_after (I1, I1, I1);
  CHECK_EQ_U64 (nsent, 2);
  CHECK_EQ_U64 (sent[0].op, GM_RP_ABANDON);
  CHECK_EQ_U64 (sent[0].offset, 0xa);
  CHECK_EQ_U64 (sent[0].addr, I1);
  CHECK_EQ_U64 (sent[1].op, GM_RP_WRITE);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
}

/* c last talked to the server process before a restart (I1), and was
 * dead since; x broke on the new one (I2) with a write in flight, and
 * the NBD client writes again over c.  c's reconnect (to I2) comes
 * only as its write is sent: x must be named to I2 before that write,
 * or x's write, still in I2's storage, may land over it. */
static void
stale_instance (void)
{
  write_after (I2, I1, I2);
  CHECK_EQ_U64 (nsent, 2);
  CHECK_EQ_U64 (sent[0].op, GM_RP_ABANDON);
  CHECK_EQ_U64 (sent[0].offset, 0xa);
  CHECK_EQ_U64 (sent[0].addr, I2);
  CHECK_EQ_U64 (sent[0].instance, I2);
  CHECK_EQ_U64 (sent[1].op, GM_RP_WRITE);
  CHECK_EQ_U64 (sent[1].instance, I2);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
}

/* x broke on a process that c's reconnect finds restarted: x died with
 * it, nothing is left listed, and the write goes out alone.  The
 * ABANDON is chosen once c holds a slot, so after its reconnect: not
 * by the instance c last talked to (an ABANDON for the old process,
 * sent to the new one, would be ignored; and a teller must not say
 * hello, gm_ab_hello). */
static void
old_instance (void)
{
  write_after (I1, I1, I2);
  CHECK_EQ_U64 (nsent, 1);
  CHECK_EQ_U64 (sent[0].op, GM_RP_WRITE);
  CHECK_EQ_U64 (sent[0].instance, I2);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
}

/* c, alive on I1, has nothing to name there; its connection dies as
 * the slot it chose with is given back, and reconnects at the write's
 * first slot to I2, where x broke with a write in flight: x is named to
 * I2 (run's RUN_TELL) before the write, which goes out once. */
static void
reconnect_at_write (void)
{
  static char buf[4096];
  struct conn x, c;

  pair (&x, &c, I2, I1, true);
  c.next_instance = I2;
  die_at_unreserve = 1;
  CHECK (bridge_pwrite (&c, buf, sizeof buf, 0, 0) == 0);
  CHECK_EQ_U64 (nsent, 2);
  CHECK_EQ_U64 (sent[0].op, GM_RP_ABANDON);
  CHECK_EQ_U64 (sent[0].addr, I2);
  CHECK_EQ_U64 (sent[0].instance, I2);
  CHECK_EQ_U64 (sent[1].op, GM_RP_WRITE);
  CHECK_EQ_U64 (sent[1].instance, I2);
  CHECK_EQ_U64 (c.busy, 0);
  pair_close (&x, &c);
}

/* A network that flaps: the connection dies whenever it gives a slot
 * back, and x breaks again at each reconnect.  The write, never sent,
 * fails after MAX_TELLS rounds instead of going round for ever. */
static void
flapping (void)
{
  static char buf[4096];
  struct conn x, c;

  pair (&x, &c, I1, I1, true);
  rebroken = x.ab;
  die_at_unreserve = 1000;
  last_error = 0;
  CHECK (bridge_pwrite (&c, buf, sizeof buf, 0, 0) == -1);
  die_at_unreserve = 0;
  rebroken = NULL;
  CHECK_EQ_U64 (last_error, EIO);
  CHECK_EQ_U64 (nsent, MAX_TELLS);
  for (unsigned i = 0; i < nsent; i++)
    CHECK_EQ_U64 (sent[i].op, GM_RP_ABANDON);
  CHECK_EQ_U64 (c.busy, 0);
  pair_close (&x, &c);
}

/* x breaks while a write of three pieces is in flight on c: the NBD
 * client has not seen x's failure yet, so the pieces still to send go
 * out as they are; the next write names x. */
static void
broken_during_write (void)
{
  static char buf[3 << 20];
  struct conn x, c;

  pair (&x, &c, I1, I1, false);
  rebroken = x.ab;
  break_after = 1;
  CHECK (bridge_pwrite (&c, buf, sizeof buf, 0, 0) == 0);
  break_after = 0;
  rebroken = NULL;
  CHECK_EQ_U64 (nsent, 3);
  for (unsigned i = 0; i < nsent; i++)
    CHECK_EQ_U64 (sent[i].op, GM_RP_WRITE);
  CHECK_EQ_U64 (c.busy, 0);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  CHECK (bridge_pwrite (&c, buf, 4096, 0, 0) == 0);
  CHECK_EQ_U64 (nsent, 5);
  CHECK_EQ_U64 (sent[3].op, GM_RP_ABANDON);
  pair_close (&x, &c);
}

/* Only writes name anyone: a READ or a FLUSH while x is listed goes
 * out alone, and x stays listed for the next write. */
static void
reads_name_nobody (void)
{
  static char buf[4096];
  struct conn x, c;

  pair (&x, &c, I1, I1, true);
  CHECK (bridge_pread (&c, buf, sizeof buf, 0, 0) == 0);
  CHECK (bridge_flush (&c, 0) == 0);
  CHECK_EQ_U64 (nsent, 2);
  CHECK_EQ_U64 (sent[0].op, GM_RP_READ);
  CHECK_EQ_U64 (sent[1].op, GM_RP_FLUSH);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  pair_close (&x, &c);
}

/* An ABANDON answered with an error: the write fails with it, unsent,
 * and x stays listed; the next write names it again. */
static void
abandon_fails (void)
{
  static char buf[4096];
  struct conn x, c;

  pair (&x, &c, I1, I1, true);
  answer (1, (int[]) { EIO });
  last_error = 0;
  CHECK (bridge_pwrite (&c, buf, sizeof buf, 0, 0) == -1);
  CHECK_EQ_U64 (last_error, EIO);
  CHECK_EQ_U64 (nsent, 1);
  CHECK_EQ_U64 (sent[0].op, GM_RP_ABANDON);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  CHECK (bridge_pwrite (&c, buf, sizeof buf, 0, 0) == 0);
  CHECK_EQ_U64 (nsent, 3);
  CHECK_EQ_U64 (sent[1].op, GM_RP_ABANDON);
  CHECK_EQ_U64 (sent[2].op, GM_RP_WRITE);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  CHECK_EQ_U64 (c.busy, 0);
  pair_close (&x, &c);
}

/* Nine connections broke at once (a switch failed): one write names
 * them all, then goes out; more than MAX_TELLS is no failure. */
static void
many_broken (void)
{
  static char buf[4096];
  struct conn x[9], c;

  nsent = 0;
  for (unsigned i = 0; i < 9; i++) {
    conn_init (&x[i], 0x10 + i, I1);
    gm_ab_broken (x[i].ab, I1);
  }
  conn_init (&c, 0xc, I1);
  CHECK (bridge_pwrite (&c, buf, sizeof buf, 0, 0) == 0);
  CHECK_EQ_U64 (nsent, 10);
  for (unsigned i = 0; i < 9; i++)
    CHECK_EQ_U64 (sent[i].op, GM_RP_ABANDON);
  CHECK_EQ_U64 (sent[9].op, GM_RP_WRITE);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  conns_close (x, 9);
  conns_close (&c, 1);
}

/* A request whose pieces end with these outcomes, then succeed: how
 * often it went out, and its result. */
static int
outcomes (uint8_t op, uint32_t len, unsigned n, const int *r)
{
  static char buf[3 << 20];
  struct conn c;
  int ret;

  nsent = 0;
  last_error = 0;
  conn_init (&c, 0xc, I1);
  answer (n, r);
  if (op == GM_RP_READ)
    ret = bridge_pread (&c, buf, len, 0, 0);
  else
    ret = bridge_pwrite (&c, buf, len, 0, 0);
  CHECK_EQ_U64 (c.busy, 0);
  nresults = results_at = 0;
  conns_close (&c, 1);
  return ret;
}

/* A write of three pieces is acknowledged only if all three were; its
 * error is the worst outcome (badness), the first of a kind. */
static void
worst_piece (void)
{
  const int u = CONN_UNSERVED;

  CHECK (outcomes (GM_RP_WRITE, 3 << 20, 3, (int[]) { EIO, 0, 0 }) == -1);
  CHECK_EQ_U64 (nsent, 3);
  CHECK_EQ_U64 (last_error, EIO);
  CHECK (outcomes (GM_RP_WRITE, 3 << 20, 3, (int[]) { EIO, ENOSPC, 0 })
         == -1);
  CHECK_EQ_U64 (last_error, EIO);
  /* A piece not served: the whole write is sent again, and succeeds. */
  CHECK (outcomes (GM_RP_WRITE, 3 << 20, 3, (int[]) { EIO, u, 0 }) == 0);
  CHECK_EQ_U64 (nsent, 6);
  /* ... unless another piece's connection broke: it may have landed. */
  CHECK (outcomes (GM_RP_WRITE, 3 << 20, 3, (int[]) { u, -1, 0 }) == -1);
  CHECK_EQ_U64 (nsent, 3);
  CHECK_EQ_U64 (last_error, EIO);
}

/* How often a request goes out again: a write whose connection broke,
 * never (it may have landed); a READ, once; one the server did not
 * serve, MAX_RESENDS times. */
static void
sent_again (void)
{
  const int u = CONN_UNSERVED;

  CHECK (outcomes (GM_RP_WRITE, 4096, 1, (int[]) { -1 }) == -1);
  CHECK_EQ_U64 (nsent, 1);
  CHECK (outcomes (GM_RP_READ, 4096, 2, (int[]) { -1, -1 }) == -1);
  CHECK_EQ_U64 (nsent, 2);
  CHECK (outcomes (GM_RP_WRITE, 4096, MAX_RESENDS + 1,
                   (int[]) { u, u, u, u, u }) == -1);
  CHECK_EQ_U64 (nsent, MAX_RESENDS + 1);
  CHECK (outcomes (GM_RP_WRITE, 4096, MAX_RESENDS,
                   (int[]) { u, u, u, u }) == 0);
  CHECK_EQ_U64 (nsent, MAX_RESENDS + 1);
}

/* A READ whose connection broke is sent once more (on a new
 * connection); one whose connection timeout= broke is not: the user
 * asked for an error after that long, not for a second wait. */
static void
read_broken (int result, unsigned want_sent, int want_ret)
{
  static char buf[4096];
  struct conn c;

  nsent = 0;
  conn_init (&c, 0xc, I1);
  next_result = result;
  CHECK (bridge_pread (&c, buf, sizeof buf, 0, 0) == want_ret);
  CHECK_EQ_U64 (nsent, want_sent);
  for (unsigned i = 0; i < nsent; i++)
    CHECK_EQ_U64 (sent[i].op, GM_RP_READ);
  CHECK_EQ_U64 (c.busy, 0);
  gm_ab_close (c.ab);
}

static void
read_retried (void)
{
  read_broken (-1, 2, 0);
}

static void
timeout_not_retried (void)
{
  read_broken (CONN_TIMEDOUT, 1, -1);
}

/* A READ of three pieces whose connection dies once the first is
 * posted: the second finds it dead (-1) before the first is collected
 * (result).  A plain break sends the READ once more, whole; a break by
 * timeout= does not, whatever the order: CONN_TIMEDOUT outranks -1. */
static void
read_dies (int result, unsigned want_sent, int want_ret)
{
  static char buf[3 << 20];
  struct conn c;

  nsent = 0;
  conn_init (&c, 0xc, I1);
  die_after = 1;
  dying_result = result;
  CHECK (bridge_pread (&c, buf, sizeof buf, 0, 0) == want_ret);
  die_after = 0;
  CHECK_EQ_U64 (nsent, want_sent);
  CHECK_EQ_U64 (c.busy, 0);
  gm_ab_close (c.ab);
}

static void
timeout_multi_piece (void)
{
  read_dies (CONN_TIMEDOUT, 1, -1);
}

static void
broken_multi_piece (void)
{
  read_dies (-1, 4, 0);
}

static const struct unit_case cases[] = {
  { "same_instance", same_instance },
  { "stale_instance", stale_instance },
  { "old_instance", old_instance },
  { "reconnect_at_write", reconnect_at_write },
  { "flapping", flapping },
  { "broken_during_write", broken_during_write },
  { "reads_name_nobody", reads_name_nobody },
  { "abandon_fails", abandon_fails },
  { "many_broken", many_broken },
  { "worst_piece", worst_piece },
  { "sent_again", sent_again },
  { "read_retried", read_retried },
  { "timeout_not_retried", timeout_not_retried },
  { "timeout_multi_piece", timeout_multi_piece },
  { "broken_multi_piece", broken_multi_piece },
};

int
main (int argc, char *argv[])
{
  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

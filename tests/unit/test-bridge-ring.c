/* Unit test: run ()'s window of pieces in flight (plugins/gmblock-rdma/
 * bridge.c) with the most credits a server may grant, 128.  A request
 * of 129 pieces of 64K keeps every credit busy and sets up one more: the
 * window was a ring of 128 entries, so that piece's slot (-2, none free)
 * overwrote the oldest piece's entry, and conn.c collected slot -2,
 * outside its array (a review finding; in the lab it failed a 9M read
 * with errno 128, or could return another request's data).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * bridge.c is compiled in over a fake conn.c and mem.c that track which
 * slots are reserved and posted.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "unit.h"

#include "../../plugins/gmblock-rdma/bridge.c"

#define NSLOTS GM_RP_MAX_CREDITS        /* the server granted 128 */

struct conn {
  struct gm_rp_limits lim;
  bool busy[NSLOTS], posted[NSLOTS];
  unsigned nbusy;
  struct gm_ab_node *ab;
};

static unsigned bad_collects, collects, posts;
/* The next this many collects: the connection broke with its QP not
 * fenced (conn.c's exposed). */
static unsigned exposing;

#include "fake-bridge.h"

unsigned conn_credits (const struct conn *c) { return NSLOTS; }
struct gm_ab_node *
conn_ab (struct conn *c, uint64_t *instance) { *instance = 1; return c->ab; }

int
conn_reserve (struct conn *c, bool wait, bool *waited)
{
  for (int i = 0; i < NSLOTS; i++)
    if (!c->busy[i]) {
      c->busy[i] = true;
      c->nbusy++;
      return i;
    }
  CHECK (!wait);                /* would wait for ever: all are ours */
  return -2;
}

void
conn_unreserve (struct conn *c, int slot)
{
  c->busy[slot] = false;
  c->nbusy--;
}

int
conn_post (struct conn *c, int slot, struct gm_rp_request *r,
           struct gm_uf_ack *ack)
{
  CHECK (slot >= 0 && slot < NSLOTS && c->busy[slot] && !c->posted[slot]);
  c->posted[slot] = true;
  posts++;
  return 0;
}

int
conn_collect (struct conn *c, int slot, bool *exposed)
{
  if (exposed)
    *exposed = false;
  collects++;
  if (slot < 0 || slot >= NSLOTS || !c->posted[slot]) {
    fprintf (stderr, "conn_collect of slot %d, which is not in flight "
             "(conn.c would read c->slots[%d])\n", slot, slot);
    bad_collects++;
    return 0;
  }
  c->posted[slot] = false;
  c->busy[slot] = false;
  c->nbusy--;
  if (exposing > 0) {
    exposing--;
    if (exposed)
      *exposed = true;
    return -1;
  }
  return 0;
}

int
conn_collect_count (struct conn *c, int slot, uint32_t *count,
                    bool *exposed)
{
  *count = 1;
  return conn_collect (c, slot, exposed);
}

uint32_t mem_max_request (void) { return 16u << 20; }

void nbdkit_set_error (int err) { }

static void
read_129_pieces (void)
{
  static struct conn c;
  static char buf[129 * 65536];
  int r;

  c.lim = (struct gm_rp_limits) { .size = 1ull << 30, .min_block = 512,
                                  .pref_block = 4096, .max_block = 65536,
                                  .max_request = 65536, .credits = NSLOTS,
                                  .instance = 1, .version = 5 };
  r = bridge_pread (&c, buf, sizeof buf, 0, 0);
  printf ("pread -> %d: %u pieces posted, %u collects, %u of a slot not in "
          "flight, %u slots still busy\n", r, posts, collects, bad_collects,
          c.nbusy);
  CHECK_EQ_U64 (bad_collects, 0);
  CHECK_EQ_U64 (c.nbusy, 0);
  CHECK_EQ_U64 (collects, posts);
}

/* A connection that broke with its QP neither in error nor
 * disconnected: the buffers of the pieces it had in flight are never
 * lent again; the read is sent again and succeeds. */
static void
exposed_not_reused (void)
{
  static struct conn c;
  static char buf[4 * 65536];

  c.lim = (struct gm_rp_limits) { .size = 1ull << 30, .min_block = 512,
                                  .pref_block = 4096, .max_block = 65536,
                                  .max_request = 65536, .credits = NSLOTS,
                                  .instance = 1, .version = 5 };
  exposing = 4;
  mem_puts = mem_exposed_puts = 0;
  CHECK (bridge_pread (&c, buf, sizeof buf, 0, 0) == 0);
  CHECK_EQ_U64 (mem_exposed_puts, 4);
  CHECK_EQ_U64 (mem_puts, 4);           /* the second try's pieces */
}

static const struct unit_case cases[] = {
  { "read_129_pieces", read_129_pieces },
  { "exposed_not_reused", exposed_not_reused },
};

int
main (int argc, char *argv[])
{
  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

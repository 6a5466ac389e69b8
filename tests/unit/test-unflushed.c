/* Unit tests for common/unflushed.c: the bridge's rule for which
 * acknowledged writes a FLUSH can still cover.
 */
#include "unflushed.h"
#include "unit.h"

#define OLD 0x1111
#define NEW 0x2222

int
main (void)
{
  struct gm_unflushed a, b, c;
  uint64_t mark;

  /* A FLUSH covers what was acknowledged before it was sent, not
   * what came after. */
  gm_uf_open (&a);
  CHECK_EQ_U64 (gm_uf_connected (OLD), 0);
  gm_uf_acked (&a, OLD);
  gm_uf_acked (&a, OLD);
  mark = gm_uf_flush_sent (&a);
  gm_uf_acked (&a, OLD);
  gm_uf_flush_done (&a, mark);
  CHECK_EQ_U64 (gm_uf_uncovered (&a), 1);
  CHECK (!gm_uf_lost (&a));

  /* A broken connection that reaches the same instance again loses
   * nothing; its next FLUSH covers the write. */
  CHECK_EQ_U64 (gm_uf_connected (OLD), 0);
  CHECK (!gm_uf_lost (&a));
  mark = gm_uf_flush_sent (&a);
  gm_uf_flush_done (&a, mark);
  CHECK_EQ_U64 (gm_uf_uncovered (&a), 0);

  /* Reaching a new instance on another connection loses a's writes
   * from the old one, and both connections' next FLUSH fail, once. */
  gm_uf_open (&b);
  gm_uf_acked (&a, OLD);
  gm_uf_acked (&a, OLD);
  CHECK (!gm_uf_lost (&b));
  CHECK_EQ_U64 (gm_uf_connected (NEW), 2);
  CHECK_EQ_U64 (gm_uf_uncovered (&a), 0);
  CHECK (gm_uf_lost (&a));
  CHECK (!gm_uf_lost (&a));
  CHECK (gm_uf_lost (&b));
  CHECK (!gm_uf_lost (&b));
  /* The same instance again: nothing more. */
  CHECK_EQ_U64 (gm_uf_connected (NEW), 0);
  CHECK (!gm_uf_lost (&a));

  /* Writes already covered are not lost, nor a FLUSH's late mark
   * counted twice. */
  gm_uf_acked (&b, NEW);
  mark = gm_uf_flush_sent (&b);
  gm_uf_flush_done (&b, mark);
  CHECK_EQ_U64 (gm_uf_connected (OLD), 0);
  CHECK (!gm_uf_lost (&b));
  gm_uf_flush_done (&b, mark);
  CHECK_EQ_U64 (gm_uf_uncovered (&b), 0);

  /* A mark from before a loss does not cover writes after it. */
  gm_uf_acked (&b, OLD);
  mark = gm_uf_flush_sent (&b);
  CHECK_EQ_U64 (gm_uf_connected (NEW), 1);
  CHECK (gm_uf_lost (&b));
  gm_uf_acked (&b, NEW);
  gm_uf_flush_done (&b, mark);
  CHECK_EQ_U64 (gm_uf_uncovered (&b), 1);

  /* Closed normally: its writes go with it, nobody's FLUSH fails.
   * Closed while broken: it can no longer find out, they are lost. */
  CHECK (gm_uf_lost (&a));      /* b's loss above: every FLUSH fails once */
  CHECK_EQ_U64 (gm_uf_close (&b, false), 0);
  CHECK (!gm_uf_lost (&a));
  gm_uf_open (&c);
  gm_uf_acked (&c, NEW);
  gm_uf_acked (&c, NEW);
  CHECK_EQ_U64 (gm_uf_close (&c, true), 2);
  CHECK (gm_uf_lost (&a));
  /* A closed connection is no longer looked at. */
  CHECK_EQ_U64 (gm_uf_connected (OLD), 0);
  CHECK (!gm_uf_lost (&a));
  /* Nothing uncovered, broken or not: nothing lost. */
  CHECK_EQ_U64 (gm_uf_close (&a, true), 0);

  /* A connection opened after a loss does not report it. */
  gm_uf_open (&c);
  CHECK (!gm_uf_lost (&c));
  gm_uf_close (&c, false);
  UNIT_DONE ();
}

/* Unit tests for common/unflushed.c: the bridge's rule for which
 * acknowledged writes a FLUSH can still cover.
 */
#include "unflushed.h"
#include "unit.h"

#define OLD 0x1111
#define NEW 0x2222
#define THIRD 0x3333

int
main (void)
{
  struct gm_unflushed a, b, c;
  uint64_t mark, stale;

  /* The first connection meets the first instance: nothing lost. */
  gm_uf_open (&a);
  gm_uf_open (&b);
  CHECK_EQ_U64 (gm_uf_connected (OLD), 0);
  CHECK (!gm_uf_lost (&a));

  /* A FLUSH covers what was acknowledged before it was posted, on any
   * connection (multi-conn), not what came after. */
  gm_uf_acked (OLD);            /* on a */
  gm_uf_acked (OLD);            /* on b */
  mark = gm_uf_flush_sent ();   /* on a */
  gm_uf_acked (OLD);            /* on b, after the FLUSH went out */
  gm_uf_flush_done (mark, OLD);
  CHECK_EQ_U64 (gm_uf_uncovered (), 1);
  CHECK (!gm_uf_lost (&a) && !gm_uf_lost (&b));

  /* A broken connection that reaches the same instance again loses
   * nothing; a FLUSH on any connection covers the write. */
  CHECK_EQ_U64 (gm_uf_connected (OLD), 0);
  CHECK (!gm_uf_lost (&a) && !gm_uf_lost (&b));
  gm_uf_flush_done (gm_uf_flush_sent (), OLD);
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);

  /* A late reply to an older FLUSH does not move the mark back. */
  gm_uf_flush_done (mark, OLD);
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);

  /* Everything covered: a new instance loses nothing. */
  CHECK_EQ_U64 (gm_uf_connected (NEW), 0);
  CHECK (!gm_uf_lost (&a) && !gm_uf_lost (&b));

  /* Two writes uncovered, a FLUSH in flight to NEW, then a connection
   * reaches THIRD: both writes are lost, every connection's next FLUSH
   * fails once, and the stale FLUSH's reply covers nothing. */
  gm_uf_acked (NEW);
  gm_uf_acked (NEW);
  stale = gm_uf_flush_sent ();
  CHECK_EQ_U64 (gm_uf_connected (THIRD), 2);
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  gm_uf_acked (THIRD);
  gm_uf_flush_done (stale, NEW);
  CHECK_EQ_U64 (gm_uf_uncovered (), 1);
  CHECK (gm_uf_lost (&a));
  CHECK (!gm_uf_lost (&a));
  CHECK (gm_uf_lost (&b));
  CHECK (!gm_uf_lost (&b));
  /* The others reconnecting to THIRD lose nothing more. */
  CHECK_EQ_U64 (gm_uf_connected (THIRD), 0);
  CHECK (!gm_uf_lost (&a));

  /* A reply from the replaced instance that was still in flight: that
   * write died with it, counted at once, not added to THIRD's. */
  gm_uf_acked (NEW);
  CHECK_EQ_U64 (gm_uf_uncovered (), 1);
  CHECK (gm_uf_lost (&a) && gm_uf_lost (&b));

  /* A connection opened after a loss does not report it, but one that
   * is open when its writes die does, though it carried none of them. */
  gm_uf_open (&c);
  CHECK (!gm_uf_lost (&c));
  CHECK_EQ_U64 (gm_uf_connected (OLD), 1);
  CHECK (gm_uf_lost (&c));
  CHECK (gm_uf_lost (&a));
  UNIT_DONE ();
}

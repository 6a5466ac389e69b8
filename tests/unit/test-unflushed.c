/* Unit tests for common/unflushed.c: the bridge's rule for which
 * acknowledged writes a FLUSH can still cover, and which NBD FLUSH
 * must fail.  One process-wide state: the cases run in order, each
 * server instance a new number.
 */
#include "unflushed.h"
#include "unit.h"

static uint64_t inst = 0x100;   /* the server instance now */

static struct gm_unflushed a, b, c, y;

/* The server restarts: a reaches the next instance. */
static uint64_t
restart (bool multi_conn)
{
  return gm_uf_connected (&a, ++inst, multi_conn);
}

/* An NBD FLUSH on u that begins and ends with nothing in between:
 * true when it must fail.  Its FLUSH below succeeds.
 */
static bool
flush_fails (struct gm_unflushed *u)
{
  struct gm_uf_flush f;

  gm_uf_flush_begin (u, &f);
  gm_uf_flush_done (u, gm_uf_flush_sent (), inst);
  return gm_uf_flush_end (u, &f);
}

/* The same, its FLUSH below answered with an error. */
static bool
flush_fails_below (struct gm_unflushed *u)
{
  struct gm_uf_flush f;

  gm_uf_flush_begin (u, &f);
  (void) gm_uf_flush_sent ();
  return gm_uf_flush_end (u, &f);
}

/* Every connection's next FLUSH covers everything: a clean slate. */
static void
settle (void)
{
  (void) flush_fails (&a);
  (void) flush_fails (&b);
  (void) flush_fails (&y);
  CHECK (!flush_fails (&a) && !flush_fails (&b) && !flush_fails (&y));
}

int
main (void)
{
  struct gm_uf_flush f1, f2;
  uint64_t mark;

  /* The first connection meets the first instance: nothing lost. */
  gm_uf_open (&a);
  gm_uf_open (&b);
  CHECK_EQ_U64 (gm_uf_connected (&a, inst, true), 0);

  /* Multi-conn: a FLUSH covers what any connection had acknowledged
   * before its SEND, not what came after. */
  gm_uf_acked_whole (&a, inst);
  gm_uf_acked_whole (&b, inst);
  mark = gm_uf_flush_sent ();
  gm_uf_acked_whole (&b, inst);
  gm_uf_flush_done (&a, mark, inst);
  CHECK_EQ_U64 (gm_uf_uncovered (), 1);
  /* The same instance again (a broken connection reconnected): nothing
   * lost; a FLUSH on any connection covers the rest. */
  CHECK_EQ_U64 (gm_uf_connected (&b, inst, true), 0);
  CHECK (!flush_fails (&a));
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  /* Everything covered: a restart loses nothing, no FLUSH fails. */
  CHECK_EQ_U64 (restart (true), 0);
  CHECK (!flush_fails (&a) && !flush_fails (&b));

  /* A restart with writes uncovered: each connection's next FLUSH
   * fails, once; the one after covers what came since. */
  gm_uf_acked_whole (&a, inst);
  gm_uf_acked_whole (&b, inst);
  CHECK_EQ_U64 (restart (true), 2);
  CHECK (flush_fails (&a));
  CHECK (!flush_fails (&a));
  CHECK (flush_fails (&b));
  CHECK (!flush_fails (&b));

  /* An NBD FLUSH in flight when the server dies (review finding): W1
   * acknowledged, F1 comes, W2 acknowledged after, the server dies, F1
   * is retried on the new instance and succeeds there.  F1 fails, and
   * so does F2, which came after W2; F3 does not. */
  gm_uf_acked_whole (&a, inst);                       /* W1 */
  gm_uf_flush_begin (&a, &f1);                  /* F1 comes */
  gm_uf_acked_whole (&a, inst);                       /* W2 */
  CHECK_EQ_U64 (restart (true), 2);
  gm_uf_flush_done (&a, gm_uf_flush_sent (), inst);     /* F1 retried */
  CHECK (gm_uf_flush_end (&a, &f1));
  CHECK (flush_fails (&a));                     /* F2 */
  CHECK (!flush_fails (&a));                    /* F3 */
  CHECK (flush_fails (&b));                     /* b's next FLUSH */

  /* F1's reply from the old instance came first: it covered W1, and
   * succeeds though the server dies before F1 ends; F2 covers W2, which
   * came after F1 and died: it fails. */
  gm_uf_acked_whole (&a, inst);                       /* W1 */
  gm_uf_flush_begin (&a, &f1);
  mark = gm_uf_flush_sent ();
  gm_uf_acked_whole (&a, inst);                       /* W2 */
  gm_uf_flush_done (&a, mark, inst);
  CHECK_EQ_U64 (restart (true), 1);
  CHECK (!gm_uf_flush_end (&a, &f1));
  CHECK (flush_fails (&a));
  CHECK (flush_fails (&b));

  /* Two NBD FLUSHes in flight together when the server dies: both
   * fail, not only the first to end. */
  gm_uf_acked_whole (&a, inst);
  gm_uf_flush_begin (&a, &f1);
  gm_uf_flush_begin (&a, &f2);
  CHECK_EQ_U64 (restart (true), 1);
  CHECK (gm_uf_flush_end (&a, &f1));
  CHECK (gm_uf_flush_end (&a, &f2));
  CHECK (!flush_fails (&a));
  CHECK (flush_fails (&b));

  /* A reply from the replaced instance still in flight: that write
   * died with it, counted at once. */
  gm_uf_acked_whole (&a, inst - 1);
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  CHECK (flush_fails (&a));
  CHECK (flush_fails (&b));

  /* A closed connection's writes stay the server's (review finding):
   * c writes and closes, the server restarts, a READ on b notices (no
   * FLUSH reports it), then y opens: y's FLUSH fails. */
  gm_uf_open (&c);
  gm_uf_acked_whole (&c, inst);
  gm_uf_close (&c);
  CHECK_EQ_U64 (restart (true), 1);
  gm_uf_open (&y);
  CHECK (flush_fails (&y));
  CHECK (!flush_fails (&y));
  /* A connection opened after a FLUSH reported the loss: not its. */
  CHECK (flush_fails (&a));
  gm_uf_close (&y);
  gm_uf_open (&y);
  CHECK (!flush_fails (&y));
  CHECK (flush_fails (&b));
  /* With multi-conn a FLUSH on another connection covers a closed
   * one's writes: a restart then loses nothing. */
  gm_uf_open (&c);
  gm_uf_acked_whole (&c, inst);
  gm_uf_close (&c);
  CHECK (!flush_fails (&a));
  CHECK_EQ_U64 (restart (true), 0);
  CHECK (!flush_fails (&a) && !flush_fails (&b) && !flush_fails (&y));

  /* Without multi-conn (review finding): a FLUSH covers only its own
   * connection's writes, so b's write, uncovered, dies with the server
   * though a FLUSH on a succeeded after it. */
  CHECK_EQ_U64 (gm_uf_connected (&a, inst, false), 0);
  gm_uf_acked_whole (&b, inst);
  CHECK (!flush_fails (&a));
  CHECK_EQ_U64 (gm_uf_uncovered (), 1);
  CHECK (restart (false) >= 1);
  CHECK (flush_fails (&b));
  /* The others report it too (they need not, without multi-conn: a
   * FLUSH that could have succeeded fails, never the reverse). */
  CHECK (flush_fails (&a) && flush_fails (&y));
  /* Its own FLUSH covers it. */
  gm_uf_acked_whole (&b, inst);
  CHECK (!flush_fails (&b));
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  CHECK_EQ_U64 (restart (false), 0);
  /* A closed connection's writes, without multi-conn: nobody can cover
   * them any more; a restart loses them. */
  gm_uf_open (&c);
  gm_uf_acked_whole (&c, inst);
  gm_uf_close (&c);
  CHECK (!flush_fails (&a) && !flush_fails (&b) && !flush_fails (&y));
  CHECK_EQ_U64 (gm_uf_uncovered (), 1);
  CHECK (restart (false) >= 1);
  CHECK (flush_fails (&a) && flush_fails (&b) && flush_fails (&y));

  /* Late replies from a replaced instance make losses above live
   * writes (a third review's findings).  (1) W on the new instance,
   * then b's late reply; a FLUSH that fails below reports that one;
   * the instance dies: W is lost, and a connection opened before any
   * FLUSH reported that, and a's next FLUSH, must fail. */
  settle ();
  CHECK_EQ_U64 (restart (true), 0);
  gm_uf_acked_whole (&a, inst);                       /* W */
  gm_uf_acked_whole (&b, inst - 1);                   /* late */
  CHECK (flush_fails_below (&a));
  CHECK (restart (true) >= 1);
  gm_uf_close (&y);
  gm_uf_open (&y);
  CHECK (flush_fails (&y));
  CHECK (flush_fails (&a));
  /* (2) A FLUSH comes after W; a late reply and a restart; then 31
   * more late replies merge the oldest losses: the FLUSH still fails. */
  settle ();
  gm_uf_acked_whole (&a, inst);                       /* W */
  gm_uf_flush_begin (&a, &f1);
  gm_uf_acked_whole (&b, inst - 1);
  CHECK (restart (true) >= 1);
  for (int i = 0; i < 31; i++)
    gm_uf_acked_whole (&b, inst - 1);
  gm_uf_flush_done (&a, gm_uf_flush_sent (), inst);
  CHECK (gm_uf_flush_end (&a, &f1));
  /* (3) Without multi-conn, a loss is a range from the lowest write
   * some connection's FLUSHes did not cover: here it takes in a late
   * reply a FLUSH had reported already, so a FLUSH that came before
   * b's write fails though it need not (never the reverse); b's next
   * FLUSH must fail for b's write. */
  settle ();
  CHECK_EQ_U64 (restart (false), 0);
  gm_uf_acked_whole (&b, inst - 1);                   /* late: lost */
  CHECK (flush_fails (&a));
  gm_uf_flush_begin (&a, &f1);
  gm_uf_acked_whole (&b, inst);                       /* after the FLUSH came */
  CHECK (restart (false) >= 1);
  gm_uf_flush_done (&a, gm_uf_flush_sent (), inst);
  CHECK (gm_uf_flush_end (&a, &f1));
  CHECK (flush_fails (&b));
  CHECK (!flush_fails (&b));
  /* (4) Without multi-conn, a reconnect to the same instance is a new
   * connection on the server: its FLUSH cannot cover the old one's
   * writes, and no other connection's can (a fourth review's finding:
   * the next FLUSH succeeded without them).  Lost at the reconnect: the
   * next FLUSH fails, once, on every connection (the others need not:
   * never the reverse); a restart then loses nothing more. */
  settle ();
  gm_uf_acked_whole (&a, inst);
  CHECK_EQ_U64 (gm_uf_connected (&a, inst, false), 1);
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  CHECK (flush_fails (&a));
  CHECK (!flush_fails (&a));
  CHECK (flush_fails (&b));
  CHECK_EQ_U64 (restart (false), 0);
  CHECK (!flush_fails (&a) && !flush_fails (&b));
  /* Covered before the reconnect: nothing lost. */
  settle ();
  gm_uf_acked_whole (&a, inst);
  CHECK (!flush_fails (&a));
  CHECK_EQ_U64 (gm_uf_connected (&a, inst, false), 0);
  CHECK (!flush_fails (&a) && !flush_fails (&b));
  /* With multi-conn it does cover them. */
  settle ();
  CHECK_EQ_U64 (restart (true), 0);
  gm_uf_acked_whole (&a, inst);
  CHECK_EQ_U64 (gm_uf_connected (&a, inst, true), 0);
  CHECK (!flush_fails (&a));
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);

  /* A split write (the bridge's pieces): its replies count only once
   * the whole write is acknowledged to the NBD client.  Two pieces
   * answered, a third failed: the client got an error, so a restart
   * loses nothing it must hear of, and no FLUSH fails. */
  settle ();
  CHECK_EQ_U64 (restart (true), 0);
  {
    struct gm_uf_ack w = { 0 };
    gm_uf_reply (&a, inst, &w);
    gm_uf_reply (&a, inst, &w);
  }
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  CHECK_EQ_U64 (restart (true), 0);
  CHECK (!flush_fails (&a) && !flush_fails (&b) && !flush_fails (&y));
  /* All its pieces answered: acknowledged, lost with the server. */
  {
    struct gm_uf_ack w = { 0 };
    gm_uf_reply (&a, inst, &w);
    gm_uf_reply (&a, inst, &w);
    gm_uf_acked (&a, &w);
  }
  CHECK_EQ_U64 (gm_uf_uncovered (), 2);
  CHECK (restart (true) >= 1);
  CHECK (flush_fails (&a) && flush_fails (&b));
  settle ();
  /* The replies came before a goodbye that said FLUSHED, the client
   * hears of the write only after the restart: nothing lost. */
  {
    struct gm_uf_ack w = { 0 };
    gm_uf_reply (&a, inst, &w);
    gm_uf_reply (&a, inst, &w);
    gm_uf_flush_done (&a, gm_uf_flush_sent (), inst);   /* the goodbye */
    CHECK_EQ_U64 (restart (true), 0);
    gm_uf_acked (&a, &w);
  }
  CHECK (!flush_fails (&a) && !flush_fails (&b));
  /* A write across a clean restart: its first piece before a goodbye
   * that said FLUSHED, the rest on the new process, then acknowledged:
   * nothing lost (its next FLUSH failed), but the new pieces count. */
  settle ();
  {
    struct gm_uf_ack w = { 0 };
    gm_uf_reply (&a, inst, &w);
    gm_uf_flush_done (&a, gm_uf_flush_sent (), inst);   /* the goodbye */
    CHECK_EQ_U64 (restart (true), 0);
    gm_uf_reply (&a, inst, &w);
    gm_uf_acked (&a, &w);
  }
  CHECK_EQ_U64 (gm_uf_uncovered (), 1);
  CHECK (!flush_fails (&a) && !flush_fails (&b));
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  /* The same, then the new process dies before a FLUSH: lost. */
  {
    struct gm_uf_ack w = { 0 };
    gm_uf_reply (&a, inst, &w);
    gm_uf_flush_done (&a, gm_uf_flush_sent (), inst);
    CHECK_EQ_U64 (restart (true), 0);
    gm_uf_reply (&a, inst, &w);
    gm_uf_acked (&a, &w);
  }
  CHECK (restart (true) >= 1);
  CHECK (flush_fails (&a) && flush_fails (&b));
  settle ();
  /* The replies came, the server died with them unflushed, then the
   * client heard of the write: a FLUSH that came before that need not
   * fail, the next one on every connection must. */
  {
    struct gm_uf_ack w = { 0 };
    gm_uf_reply (&a, inst, &w);
    CHECK_EQ_U64 (restart (true), 0);
    gm_uf_flush_begin (&a, &f1);
    gm_uf_flush_done (&a, gm_uf_flush_sent (), inst);
    gm_uf_reply (&a, inst, &w);         /* a piece on the new instance */
    gm_uf_acked (&a, &w);
    CHECK (!gm_uf_flush_end (&a, &f1));
  }
  CHECK (flush_fails (&a));
  CHECK (!flush_fails (&a));
  CHECK (flush_fails (&b));
  /* Without multi-conn its connection is replaced mid-write by another
   * to the same process: no FLUSH can cover the first piece any more,
   * so the write, once acknowledged, is lost: the next FLUSH fails.
   * A new instance first: one process answers multi-conn one way. */
  (void) restart (false);
  settle ();
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  CHECK_EQ_U64 (gm_uf_connected (&a, inst, false), 0);
  {
    struct gm_uf_ack w = { 0 };
    gm_uf_reply (&a, inst, &w);
    CHECK_EQ_U64 (gm_uf_connected (&a, inst, false), 0);
    gm_uf_reply (&a, inst, &w);
    gm_uf_acked (&a, &w);
  }
  CHECK (flush_fails (&a));
  CHECK (!flush_fails (&a));
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  /* A FUA write: no reply that counts, nothing to do. */
  settle ();
  {
    struct gm_uf_ack w = { 0 };
    gm_uf_acked (&a, &w);
  }
  CHECK_EQ_U64 (gm_uf_uncovered (), 0);
  CHECK_EQ_U64 (restart (true), 0);

  /* Many restarts: the oldest losses merge, none is forgotten. */
  for (int i = 0; i < 40; i++) {
    gm_uf_acked_whole (&a, inst);
    CHECK_EQ_U64 (restart (true), 1);
  }
  CHECK (flush_fails (&a));
  CHECK (!flush_fails (&a));
  CHECK (flush_fails (&b));

  gm_uf_close (&a);
  gm_uf_close (&b);
  gm_uf_close (&y);
  UNIT_DONE ();
}

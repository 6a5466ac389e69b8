/* Unit tests for common/twoq: 2Q lists, victim choice, ghost history.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "unit.h"
#include "twoq.h"

static bool
not_odd (uint32_t s, void *opaque)
{
  return s % 2 == 0;
}

int
main (void)
{
  struct gm_2q q;

  CHECK (gm_2q_init (&q, 8, 2, 4) == 0);

  /* Empty: no victim. */
  CHECK (gm_2q_victim (&q, NULL, NULL, 100) == GM_2Q_NONE);

  /* A1in is FIFO: touching does not reorder it. */
  for (uint32_t s = 0; s < 4; s++)
    gm_2q_insert (&q, s, GM_2Q_A1IN);
  gm_2q_touch (&q, 0);
  CHECK_EQ_U64 (q.len[GM_2Q_A1IN], 4);
  CHECK_EQ_U64 (gm_2q_victim (&q, NULL, NULL, 100), 0);

  /* Am is LRU: touching moves to the front. */
  gm_2q_insert (&q, 4, GM_2Q_AM);
  gm_2q_insert (&q, 5, GM_2Q_AM);
  gm_2q_insert (&q, 6, GM_2Q_AM);
  gm_2q_touch (&q, 4);
  /* A1in (4) is over its target (2): victims come from A1in first. */
  CHECK_EQ_U64 (gm_2q_victim (&q, NULL, NULL, 100), 0);
  gm_2q_remove (&q, 0);
  gm_2q_remove (&q, 1);
  CHECK_EQ_U64 (q.len[GM_2Q_A1IN], 2);
  /* At its target, the LRU end of Am goes: 5 (4 was touched). */
  CHECK_EQ_U64 (gm_2q_victim (&q, NULL, NULL, 100), 5);
  /* Skip entries ok() refuses; 5 is odd, so 6 is next... */
  CHECK_EQ_U64 (gm_2q_victim (&q, not_odd, NULL, 100), 6);
  /* ...and with a scan limit of 1 Am gives nothing, so A1in is tried. */
  CHECK_EQ_U64 (gm_2q_victim (&q, not_odd, NULL, 1), 2);
  CHECK (gm_2q_where (&q, 6) == GM_2Q_AM);
  gm_2q_remove (&q, 6);
  CHECK (gm_2q_where (&q, 6) == GM_2Q_FREE);
  /* Moving between lists. */
  gm_2q_insert (&q, 2, GM_2Q_AM);
  CHECK_EQ_U64 (q.len[GM_2Q_A1IN], 1);
  CHECK_EQ_U64 (q.len[GM_2Q_AM], 3);
  CHECK (q.head[GM_2Q_AM] == 2);

  /* Ghosts: FIFO of 4, replace, take. */
  uint32_t tag;
  for (uint64_t k = 100; k < 104; k++)
    gm_2q_ghost_add (&q, k, (uint32_t) k + 1);
  CHECK (gm_2q_ghost_peek (&q, 100, &tag) && tag == 101);
  gm_2q_ghost_add (&q, 101, 7);          /* replace, no new entry */
  CHECK (gm_2q_ghost_peek (&q, 101, &tag) && tag == 7);
  CHECK_EQ_U64 (q.gcount, 4);
  gm_2q_ghost_add (&q, 104, 0);          /* evicts the oldest: 100 */
  CHECK (!gm_2q_ghost_peek (&q, 100, NULL));
  CHECK (gm_2q_ghost_take (&q, 102, &tag) && tag == 103);
  CHECK (!gm_2q_ghost_peek (&q, 102, NULL));
  CHECK_EQ_U64 (q.gcount, 3);
  /* Many keys colliding in few buckets stay findable. */
  for (uint64_t k = 0; k < 1000; k++) {
    gm_2q_ghost_add (&q, k * 4096, (uint32_t) k);
    CHECK (gm_2q_ghost_peek (&q, k * 4096, &tag) && tag == k);
    if (k >= 4)
      CHECK (!gm_2q_ghost_peek (&q, (k - 4) * 4096, NULL));
  }
  CHECK (q.gcount <= 4);
  gm_2q_free (&q);

  /* No ghost history at all. */
  CHECK (gm_2q_init (&q, 2, 0, 0) == 0);
  gm_2q_ghost_add (&q, 5, 1);
  CHECK (!gm_2q_ghost_peek (&q, 5, NULL));
  gm_2q_insert (&q, 1, GM_2Q_A1IN);
  CHECK_EQ_U64 (gm_2q_victim (&q, NULL, NULL, 10), 1);
  gm_2q_free (&q);

  /* A long scan through A1in costs Am one entry, not its contents. */
  CHECK (gm_2q_init (&q, 100, 25, 50) == 0);
  for (uint32_t s = 0; s < 75; s++)
    gm_2q_insert (&q, s, GM_2Q_AM);
  uint32_t next = 75;
  for (int i = 0; i < 10000; i++) {
    uint32_t s;
    if (next < 100)
      s = next++;
    else {
      s = gm_2q_victim (&q, NULL, NULL, 100);
      gm_2q_remove (&q, s);
    }
    gm_2q_insert (&q, s, GM_2Q_A1IN);
  }
  /* Only the first reclaim (A1in exactly at its target) took from Am. */
  CHECK_EQ_U64 (q.len[GM_2Q_AM], 74);
  CHECK_EQ_U64 (q.len[GM_2Q_A1IN], 26);
  gm_2q_free (&q);

  UNIT_DONE ();
}

/* Unit test: common/overlap.c.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "overlap.h"
#include "unit.h"

int
main (void)
{
  /* Disjoint in time: read everything, then send everything. */
  {
    struct gm_span d[] = { { 0, 100 } }, n[] = { { 100, 200 } };
    CHECK_EQ_U64 (gm_overlap_ns (d, 1, n, 1), 0);
  }
  /* Four pieces: each sent while the next ones are read (out of order,
   * overlapping reads, sends queued behind each other). */
  {
    struct gm_span d[] = { { 0, 40 }, { 0, 30 }, { 0, 50 }, { 0, 20 } };
    struct gm_span n[] = { { 40, 60 }, { 30, 45 }, { 50, 70 }, { 20, 35 } };
    /* disk busy [0,50), net busy [20,70): both at once [20,50) */
    CHECK_EQ_U64 (gm_overlap_ns (d, 4, n, 4), 30);
    CHECK_EQ_U64 (gm_union_ns (d, 4), 50);
    CHECK_EQ_U64 (gm_union_ns (n, 4), 50);
  }
  /* Holes on both sides, an empty span, spans touching. */
  {
    struct gm_span d[] = { { 50, 60 }, { 0, 10 }, { 7, 7 }, { 10, 20 } };
    struct gm_span n[] = { { 15, 55 }, { 58, 100 } };
    /* disk [0,20) [50,60); net [15,55) [58,100): 5 + 5 + 2 */
    CHECK_EQ_U64 (gm_overlap_ns (d, 4, n, 2), 12);
    CHECK_EQ_U64 (gm_union_ns (d, 4), 30);
  }
  /* Nothing on one side. */
  {
    struct gm_span d[] = { { 0, 10 } };
    CHECK_EQ_U64 (gm_overlap_ns (d, 1, NULL, 0), 0);
    CHECK_EQ_U64 (gm_union_ns (NULL, 0), 0);
  }
  UNIT_DONE ();
}

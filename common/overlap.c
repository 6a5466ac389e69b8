/* gmblock: overlap of busy intervals (see overlap.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "overlap.h"

/* Insertion sort by start, then merge overlapping spans in place;
 * returns how many disjoint spans remain, in order.  Empty spans go.
 */
static size_t
normalise (struct gm_span *s, size_t n)
{
  size_t i, j, k = 0;

  for (i = 1; i < n; i++) {
    struct gm_span x = s[i];
    for (j = i; j > 0 && s[j - 1].start > x.start; j--)
      s[j] = s[j - 1];
    s[j] = x;
  }
  for (i = 0; i < n; i++) {
    if (s[i].end <= s[i].start)
      continue;
    if (k > 0 && s[i].start <= s[k - 1].end) {
      if (s[i].end > s[k - 1].end)
        s[k - 1].end = s[i].end;
    }
    else
      s[k++] = s[i];
  }
  return k;
}

uint64_t
gm_union_ns (struct gm_span *a, size_t n)
{
  uint64_t t = 0;

  n = normalise (a, n);
  for (size_t i = 0; i < n; i++)
    t += a[i].end - a[i].start;
  return t;
}

uint64_t
gm_overlap_ns (struct gm_span *a, size_t na, struct gm_span *b, size_t nb)
{
  size_t i = 0, j = 0;
  uint64_t t = 0;

  na = normalise (a, na);
  nb = normalise (b, nb);
  while (i < na && j < nb) {
    uint64_t lo = a[i].start > b[j].start ? a[i].start : b[j].start;
    uint64_t hi = a[i].end < b[j].end ? a[i].end : b[j].end;
    if (hi > lo)
      t += hi - lo;
    if (a[i].end < b[j].end)
      i++;
    else
      j++;
  }
  return t;
}

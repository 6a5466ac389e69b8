/* gmblock: how long two sets of busy intervals overlapped.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The RDMA transport measures, per request, when the disk was busy
 * (each piece's read) and when the network was (each piece's RDMA
 * WRITE, posted to completed).  The overlap ratio of issue 10 is the
 * time both were busy at once over the request's time: 0 when the
 * reply waits for the whole read before sending, near 1 when sending
 * hides behind reading.
 */
#ifndef GMBLOCK_OVERLAP_H
#define GMBLOCK_OVERLAP_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct gm_span {
  uint64_t start, end;          /* ns; end < start counts as empty */
};

/* CLOCK_MONOTONIC in ns, for spans. */
static inline uint64_t
gm_now_ns (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000u + ts.tv_nsec;
}

/* Length of (union of a[0..na)) intersected with (union of b[0..nb)).
 * Sorts both arrays in place.  Meant for a few dozen spans.
 */
uint64_t gm_overlap_ns (struct gm_span *a, size_t na,
                        struct gm_span *b, size_t nb);

/* Length of the union of a[0..n) (sorts it in place). */
uint64_t gm_union_ns (struct gm_span *a, size_t n);

#endif /* GMBLOCK_OVERLAP_H */

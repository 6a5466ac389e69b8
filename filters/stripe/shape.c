/* gmblock-stripe filter: what it shapes (block sizes, NBD_CMD_CACHE)
 * and what it observes (writes against the stripes).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Data requests are never split or changed: md already drives every
 * member at once for one large request.  What the layers lack is the
 * geometry, so the filter tells clients the stripe (block sizes) and
 * makes prefetch from above cover whole stripes.
 */
#include <errno.h>

#include "sizes.h"
#include "stripe.h"

uint32_t
shape_preferred (const struct sp_geom *g)
{
  return gm_prev_power_of_2 (g->width);
}

/* Bytes from the last stripe boundary at or before x ('phase': the
 * export may start inside a stripe, as a partition does).
 */
static uint64_t
into_stripe (const struct sp_geom *g, uint64_t x)
{
  return (x + g->geo.offset % g->width) % g->width;
}

void
shape_round_out (const struct sp_geom *g, uint64_t offset, uint32_t count,
                 uint64_t size, uint64_t *start, uint64_t *end)
{
  uint64_t s = offset, e = offset + count, r;

  r = into_stripe (g, s);
  s = s >= r ? s - r : 0;
  r = into_stripe (g, e);
  if (r)
    e += g->width - r;
  if (e > size)
    e = size;
  if (e < offset + count || e - s > UINT32_MAX) {
    s = offset;                 /* past the end, or too large: as is */
    e = offset + count;
  }
  *start = s;
  *end = e;
}

_Static_assert (MAX_STRIPE <= GM_NBDKIT_MAX_REQUEST,
                "a preferred size (at most a full stripe) within the maximum");

/* Preferred: one full stripe, or the largest power of two in it;
 * maximum: the layer below's, at most nbdkit's request limit (that
 * limit when below gives none); minimum: unchanged (1 when below gives
 * none).  Each uses the geometry its connection found when it opened
 * (the handle).
 */
int
sp_block_size (nbdkit_next *next, void *handle, uint32_t *minimum,
               uint32_t *preferred, uint32_t *maximum)
{
  const struct sp_geom *g = handle;
  uint32_t pref;

  if (next->block_size (next, minimum, preferred, maximum) == -1)
    return -1;
  if (!g->active)
    return 0;
  gm_block_size_unsaid (minimum, maximum);
  /* Nor beyond nbdkit's limit when below gives more (blocksize-policy,
   * a remote server through the nbd plugin): nbdkit refuses those
   * requests before below sees them. */
  if (*maximum > GM_NBDKIT_MAX_REQUEST)
    *maximum = GM_NBDKIT_MAX_REQUEST;
  /* Otherwise the maximum stays the layer below's: nbdkit does not split
   * requests, so a larger one would promise what below refuses (a
   * strict client sending the advertised maximum got EINVAL).  The
   * preferred size is clamped to it instead, to the largest power of
   * two in it: a preferred size must be one (NBD spec), and libnbd
   * ignores every constraint of an export whose preferred size is not
   * (a 3M maximum below made it 3M: the client lost the maximum too).
   * The minimum is a power of two no larger than the maximum, so the
   * result is no smaller than it.
   */
  pref = shape_preferred (g);
  if (pref < *minimum)
    pref = *minimum;
  if (pref > *maximum)
    pref = gm_prev_power_of_2 (*maximum);
  *preferred = pref;
  return 0;
}

/* Rounded to the geometry for new connections, not the context's own:
 * gmblock-readahead's workers open their contexts once, at start-up,
 * and prefetch for every client since, so a context's copy could be a
 * reshape's pass-through, or the stripe before one, for the server's
 * whole life (a review finding).  CACHE is only a hint: rounding to the
 * stripe of now is right whenever the context was opened.
 */
int
sp_cache (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
          uint32_t flags, int *err)
{
  struct sp_geom now;
  const struct sp_geom *g = &now;
  uint64_t s = offset, e = offset + count;
  int64_t size;

  geometry_current (&now);
  SCOUNT (SS_CACHE_REQUESTS, 1);
  SCOUNT (SS_CACHE_BYTES_IN, count);
  if (g->active) {
    if ((size = next->get_size (next)) == -1) {
      *err = errno ? errno : EIO;
      return -1;
    }
    shape_round_out (g, offset, count, size, &s, &e);
    if (s != offset || e != offset + count)
      SCOUNT (SS_CACHE_ROUNDED, 1);
  }
  SCOUNT (SS_CACHE_BYTES_OUT, e - s);
  return next->cache (next, e - s, s, flags, err);
}

int
sp_pwrite (nbdkit_next *next, void *handle, const void *buf, uint32_t count,
           uint64_t offset, uint32_t flags, int *err)
{
  const struct sp_geom *g = handle;

  SCOUNT (SS_WRITES, 1);
  if (g->active) {
    if (into_stripe (g, offset) == 0 && count % g->width == 0 && count)
      SCOUNT (SS_WRITES_FULL_STRIPE, 1);
    else
      SCOUNT (SS_WRITES_PARTIAL, 1);
  }
  return next->pwrite (next, buf, count, offset, flags, err);
}

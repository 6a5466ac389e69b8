/* gmblock-stripe filter: the geometry of each new connection.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * An md array can change its geometry while we serve it (mdadm --grow:
 * more members, another chunk).  Shaping with a stale geometry never
 * corrupts data (the filter changes no data request), but it would
 * keep telling clients a wrong stripe.  So the device's sysfs is read
 * again as each connection opens (a few small files: not a hot path),
 * and the connection keeps what it found for its life:
 *   - during a reshape it passes through (neither geometry holds for
 *     the whole array), said once per reshape;
 *   - after it, the new geometry, said once and counted.
 * Connections already open keep theirs: their hints were right when
 * given, and only hints depend on it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sizes.h"
#include "stripe.h"

void *
sp_open (nbdkit_next_open *next, nbdkit_context *nxdata, int readonly,
         const char *exportname, int is_tls)
{
  struct sp_geom *g;

  if (next (nxdata, readonly, exportname) == -1)
    return NULL;
  if ((g = calloc (1, sizeof *g)) == NULL) {
    nbdkit_error (SNAME ": open: calloc: %m");
    return NULL;
  }
  return g;
}

void
sp_close (void *handle)
{
  free (handle);
}

/* Say what new connections get now, when it changed. */
static void
tell (const struct sp_geom *g, const struct sp_geom *old, const char *why)
{
  char now[512], was[512];

  if (g->reshape) {
    fprintf (stderr, "nbdkit: " SNAME ": %s: new connections pass "
             "through until it ends\n", why);
    return;
  }
  geometry_describe (old, was, sizeof was);
  if (!g->active) {
    fprintf (stderr, "nbdkit: " SNAME ": %s: new connections pass through "
             "(was: %s)\n", why, was);
    return;
  }
  geometry_describe (g, now, sizeof now);
  fprintf (stderr, "nbdkit: " SNAME ": geometry for new connections: %s "
           "(was: %s)\n", now, was);
  geometry_note (g);
}

int
sp_prepare (nbdkit_next *next, void *handle, int readonly)
{
  struct sp_geom *g = handle, old;
  char why[512] = "", a[32], b[32];
  int64_t size;
  int r;

  SCOUNT (SS_CONNECTIONS, 1);
  if (!geometry_has_device ()) {        /* options alone: fixed */
    geometry_current (g);
    return 0;
  }
  geometry_resolve (false, g, why, sizeof why);
  if (g->active) {
    if ((size = next->get_size (next)) == -1)
      return -1;
    if (g->geo.chunk > (uint64_t) size) {
      snprintf (why, sizeof why, "%s: the chunk %s is larger than the "
                "export (%s)", g->geo.source,
                gm_format_size (g->geo.chunk, a, sizeof a),
                gm_format_size (size, b, sizeof b));
      g->active = false;
    }
  }
  if (g->reshape)
    SCOUNT (SS_RESHAPE_CONNECTIONS, 1);
  r = geometry_replace (g, &old);
  if (r == 2)
    SCOUNT (SS_GEOMETRY_CHANGES, 1);
  if (r)
    tell (g, &old, why);
  return 0;
}

/* gmblock-stripe filter: deciding the geometry.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The device comes from the registry (common/registry: the gmblock
 * plugin publishes the file it serves), its geometry from
 * common/stripegeo; options override what was detected, with a
 * warning when they disagree (at start-up), and stand alone when
 * nothing was.  The same decision is made again as each connection
 * opens (reshape.c): 'current' is the latest, for new connections.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"
#include "sizes.h"
#include "stripe.h"

static char *device;            /* what the plugin below serves, or NULL */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct sp_geom current;  /* under lock once serving */
static struct sp_geom last_active; /* the last geometry shaped with */

/* An option overriding a detected value: say so when they differ. */
static void
override (bool warn, const char *key, const char *given, const char *found,
          const char *source)
{
  if (warn && strcmp (given, found) != 0)
    fprintf (stderr, "nbdkit: " SNAME ": warning: %s=%s disagrees with the "
             "detected %s (%s): using %s\n", key, given, found, source, given);
}

static void
apply_options (struct gm_stripe *geo, bool detected, bool warn)
{
  char a[32], b[32], src[sizeof geo->source];

  warn = warn && detected;
  snprintf (src, sizeof src, "%s", geo->source);
  if (cfg.chunk) {
    override (warn, "stripe-chunk", gm_format_size (cfg.chunk, a, sizeof a),
              gm_format_size (geo->chunk, b, sizeof b), src);
    geo->chunk = cfg.chunk;
  }
  if (cfg.data_disks) {
    snprintf (a, sizeof a, "%u", cfg.data_disks);
    snprintf (b, sizeof b, "%u", geo->data_disks);
    override (warn, "stripe-data-disks", a, b, src);
    geo->data_disks = cfg.data_disks;
  }
  if (cfg.parity >= 0) {
    snprintf (a, sizeof a, "%d", cfg.parity);
    snprintf (b, sizeof b, "%u", geo->parity);
    override (warn && geo->parity_known, "stripe-parity", a, b, src);
    geo->parity = cfg.parity;
    geo->parity_known = true;
  }
  if (cfg.offset >= 0) {
    snprintf (a, sizeof a, "%" PRId64, cfg.offset);
    snprintf (b, sizeof b, "%" PRIu64, geo->offset);
    override (warn, "stripe-offset", a, b, src);
    geo->offset = cfg.offset;
  }
  if (detected && (cfg.chunk || cfg.data_disks || cfg.parity >= 0 ||
                   cfg.offset >= 0))
    snprintf (geo->source, sizeof geo->source, "%.120s, with options", src);
  /* The options say where the stripe is. */
  if ((cfg.chunk && cfg.data_disks) ||
      (cfg.offset >= 0 && geo->offset_unknown))
    geo->note[0] = '\0';
}

/* Options alone: they must give the whole geometry. */
static int
options_alone (bool startup, struct gm_stripe *geo, const char *why)
{
  if (cfg.chunk && cfg.data_disks) {
    memset (geo, 0, sizeof *geo);
    snprintf (geo->source, sizeof geo->source, "options");
    return 0;
  }
  if (startup)
    nbdkit_error (SNAME ": %s given without %s, and no geometry was "
                  "detected (%s): expected both stripe-chunk=SIZE and "
                  "stripe-data-disks=N", cfg.chunk ? "stripe-chunk" :
                  cfg.data_disks ? "stripe-data-disks" : cfg.parity >= 0
                  ? "stripe-parity" : "stripe-offset",
                  cfg.chunk ? "stripe-data-disks" : cfg.data_disks ?
                  "stripe-chunk" : "stripe-chunk and stripe-data-disks", why);
  return -1;
}

/* The checks a whole geometry must pass: 1 when it does; -1 when the
 * options made it wrong at start-up (said); else 0, why set: pass
 * everything through.
 */
static int
whole_geometry_check (bool startup, const struct gm_stripe *geo, char *why,
                      size_t len)
{
  char a[32], b[32];

  if (geo->parity == 2 && geo->data_disks < 2) {
    if (startup)
      nbdkit_error (SNAME ": %s with %s%u: expected stripe-data-disks=2 "
                    "or more (md's RAID6 has at least 4 members)",
                    cfg.parity == 2 ? "stripe-parity=2 (RAID6)"
                    : "the detected RAID6", cfg.data_disks ?
                    "stripe-data-disks=" : "the detected data disks ",
                    geo->data_disks);
    snprintf (why, len, "%s: RAID6 with %u data disk", geo->source,
              geo->data_disks);
    return startup ? -1 : 0;
  }
  if (geo->chunk > MAX_STRIPE / geo->data_disks) {
    /* Refuse only what the options made too large; a detected stripe
     * that is too large passes through, with or without stripe-parity.
     */
    if (startup && (cfg.chunk || cfg.data_disks)) {
      nbdkit_error (SNAME ": a full stripe of %s%u x %s%s is larger than %s, "
                    "the largest request (expected chunk x data disks up "
                    "to %s)", cfg.data_disks ? "stripe-data-disks=" :
                    "the detected data disks ", geo->data_disks,
                    cfg.chunk ? "stripe-chunk=" : "the detected chunk ",
                    gm_format_size (geo->chunk, a, sizeof a),
                    gm_format_size (MAX_STRIPE, b, sizeof b), b);
      return -1;
    }
    snprintf (why, len, "%s: a full stripe of %u x %s is larger than %s, "
              "the largest request", geo->source, geo->data_disks,
              gm_format_size (geo->chunk, a, sizeof a),
              gm_format_size (MAX_STRIPE, b, sizeof b));
    return 0;
  }
  return 1;
}

int
geometry_resolve (bool startup, struct sp_geom *g, char *why, size_t len)
{
  bool any_option = cfg.chunk || cfg.data_disks || cfg.parity >= 0 ||
    cfg.offset >= 0;
  struct gm_stripe *geo = &g->geo;
  char w[384] = "";
  int r = 0;

  memset (g, 0, sizeof *g);
  if (device)
    r = gm_stripe_detect (cfg.sysfs, device, geo, w, sizeof w);
  else
    snprintf (w, sizeof w, "no gmblock plugin below names the device");

  /* Neither the old nor the new geometry holds for the whole array
   * while md reshapes it, whatever the options say.
   */
  if (r == -1 && geo->reshape) {
    /* Options that give a whole geometry are checked all the same: what
     * start-up refuses must not start because md was reshaping.
     */
    if (startup && options_alone (false, geo, w) == 0) {
      apply_options (geo, false, false);
      if (whole_geometry_check (true, geo, why, len) == -1)
        return -1;
    }
    memset (g, 0, sizeof *g);
    g->reshape = true;
    snprintf (why, len, "%s", w);
    return 0;
  }
  if (r != 1 && !any_option) {
    memset (g, 0, sizeof *g);
    snprintf (why, len, "no RAID geometry: %s", w);
    return 0;
  }
  if (r != 1 && options_alone (startup, geo, w) == -1) {
    memset (g, 0, sizeof *g);
    snprintf (why, len, "no RAID geometry: %s, and the options do not "
              "give a whole one", w);
    return startup ? -1 : 0;
  }
  apply_options (geo, r == 1, startup);

  if ((r = whole_geometry_check (startup, geo, why, len)) != 1) {
    memset (g, 0, sizeof *g);
    return r;
  }
  g->width = gm_stripe_width (geo);
  g->active = true;
  return 0;
}

int
geometry_decide (void)
{
  char why[512];

  device = gm_registry_lookup (GM_REG_SERVED_FILE);
  if (geometry_resolve (true, &current, why, sizeof why) == -1)
    return -1;
  last_active = current;
  if (current.reshape)
    fprintf (stderr, "nbdkit: " SNAME ": %s: passing everything through "
             "until it ends (read again as each connection opens)\n", why);
  else if (!current.active)
    fprintf (stderr, "nbdkit: " SNAME ": %s: passing everything through\n",
             why);
  else {
    geometry_note (&current);
    /* Once, with -v: the offset detection chose, and how to change it
     * (a file's place in its file system, above all, is a guess).
     */
    if (cfg.offset < 0 && current.geo.offset_from[0])
      nbdkit_debug (SNAME ": offset in the array %" PRIu64 ", detected: %s; "
                    "stripe-offset=SIZE overrides it", current.geo.offset,
                    current.geo.offset_from);
  }
  return 0;
}

void
geometry_note (const struct sp_geom *g)
{
  if (g->active && g->geo.note[0])
    fprintf (stderr, "nbdkit: " SNAME ": note: %s\n", g->geo.note);
}

bool
geometry_has_device (void)
{
  return device != NULL;
}

void
geometry_current (struct sp_geom *g)
{
  pthread_mutex_lock (&lock);
  *g = current;
  pthread_mutex_unlock (&lock);
}

static bool
same (const struct sp_geom *a, const struct sp_geom *b)
{
  if (a->active != b->active || a->reshape != b->reshape)
    return false;
  return !a->active ||
    (a->geo.chunk == b->geo.chunk && a->geo.data_disks == b->geo.data_disks &&
     a->geo.parity == b->geo.parity &&
     a->geo.parity_known == b->geo.parity_known &&
     a->geo.offset == b->geo.offset);
}

int
geometry_replace (const struct sp_geom *g, struct sp_geom *old)
{
  int r = 0;

  pthread_mutex_lock (&lock);
  *old = current;
  if (!same (g, &current)) {
    current = *g;
    r = 1;
    if (g->active && !same (g, &last_active)) {
      last_active = *g;
      r = 2;
    }
  }
  pthread_mutex_unlock (&lock);
  return r;
}

void
geometry_describe (const struct sp_geom *g, char *buf, size_t len)
{
  const struct gm_stripe *geo = &g->geo;
  char a[32], b[32], c[32];

  if (!g->active) {
    snprintf (buf, len, "none (%s)",
              g->reshape ? "a reshape is in progress: pass-through" :
              "pass-through");
    return;
  }
  snprintf (buf, len, "%s: chunk %s, %u data disks, parity %s, full stripe "
            "%s, offset in the array %llu, preferred block %s", geo->source,
            gm_format_size (geo->chunk, a, sizeof a), geo->data_disks,
            geo->parity_known ? (geo->parity == 0 ? "0" : geo->parity == 1 ?
                                 "1" : "2") : "unknown",
            gm_format_size (g->width, b, sizeof b),
            (unsigned long long) geo->offset,
            gm_format_size (shape_preferred (g), c, sizeof c));
}

void
geometry_print (void)
{
  struct sp_geom g;
  char d[512];

  geometry_current (&g);
  geometry_describe (&g, d, sizeof d);
  fprintf (stderr, "nbdkit: " SNAME ": geometry: %s\n", d);
}

void
geometry_unload (void)
{
  free (device);
  device = NULL;
}

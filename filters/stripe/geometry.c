/* gmblock-stripe filter: deciding the geometry at start-up.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The device comes from the registry (common/registry: the gmblock
 * plugin publishes the file it serves), its geometry from
 * common/stripegeo; options override what was detected, with a
 * warning when they disagree, and stand alone when nothing was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"
#include "sizes.h"
#include "stripe.h"

bool sp_active;
struct gm_stripe geo;
uint64_t sp_width;

/* An option overriding a detected value: say so when they differ. */
static void
override (const char *key, const char *given, const char *found,
          const char *source)
{
  if (strcmp (given, found) != 0)
    fprintf (stderr, "nbdkit: " SNAME ": warning: %s=%s disagrees with the "
             "detected %s (%s): using %s\n", key, given, found, source, given);
}

static void
apply_options (bool detected)
{
  char a[32], b[32], src[sizeof geo.source];

  snprintf (src, sizeof src, "%s", geo.source);
  if (cfg.chunk) {
    if (detected)
      override ("stripe-chunk", gm_format_size (cfg.chunk, a, sizeof a),
                gm_format_size (geo.chunk, b, sizeof b), src);
    geo.chunk = cfg.chunk;
  }
  if (cfg.data_disks) {
    snprintf (a, sizeof a, "%u", cfg.data_disks);
    snprintf (b, sizeof b, "%u", geo.data_disks);
    if (detected)
      override ("stripe-data-disks", a, b, src);
    geo.data_disks = cfg.data_disks;
  }
  if (cfg.parity >= 0) {
    snprintf (a, sizeof a, "%d", cfg.parity);
    snprintf (b, sizeof b, "%u", geo.parity);
    if (detected && geo.parity_known)
      override ("stripe-parity", a, b, src);
    geo.parity = cfg.parity;
    geo.parity_known = true;
  }
  if (detected && (cfg.chunk || cfg.data_disks || cfg.parity >= 0))
    snprintf (geo.source, sizeof geo.source, "%.120s, with options", src);
}

/* Options alone: they must give the whole geometry. */
static int
options_alone (const char *why)
{
  if (cfg.chunk && cfg.data_disks) {
    memset (&geo, 0, sizeof geo);
    snprintf (geo.source, sizeof geo.source, "options");
    return 0;
  }
  nbdkit_error (SNAME ": %s given without %s, and no geometry was detected "
                "(%s): expected both stripe-chunk=SIZE and "
                "stripe-data-disks=N", cfg.chunk ? "stripe-chunk" :
                cfg.data_disks ? "stripe-data-disks" : "stripe-parity",
                cfg.chunk ? "stripe-data-disks" : cfg.data_disks ?
                "stripe-chunk" : "stripe-chunk and stripe-data-disks", why);
  return -1;
}

int
geometry_decide (void)
{
  bool any_option = cfg.chunk || cfg.data_disks || cfg.parity >= 0;
  char why[384] = "", a[32], b[32], *file;
  int r = 0;

  file = gm_registry_lookup (GM_REG_SERVED_FILE);
  if (file)
    r = gm_stripe_detect (cfg.sysfs, file, &geo, why, sizeof why);
  else
    snprintf (why, sizeof why, "no gmblock plugin below names the device");
  free (file);

  if (r != 1 && !any_option) {
    fprintf (stderr, "nbdkit: " SNAME ": no RAID geometry: %s: passing "
             "everything through\n", why);
    memset (&geo, 0, sizeof geo);
    return 0;
  }
  if (r != 1 && options_alone (why) == -1)
    return -1;
  apply_options (r == 1);

  if (geo.parity == 2 && geo.data_disks < 2) {
    nbdkit_error (SNAME ": stripe-parity=2 (RAID6) with %u data disk: "
                  "expected stripe-data-disks=2 or more (md's RAID6 has "
                  "at least 4 members)", geo.data_disks);
    return -1;
  }
  if (geo.chunk > MAX_STRIPE / geo.data_disks) {
    if (!any_option) {
      fprintf (stderr, "nbdkit: " SNAME ": %s: a full stripe of %u x %s is "
               "larger than %s, the largest request: passing everything "
               "through\n", geo.source, geo.data_disks,
               gm_format_size (geo.chunk, a, sizeof a),
               gm_format_size (MAX_STRIPE, b, sizeof b));
      memset (&geo, 0, sizeof geo);
      return 0;
    }
    nbdkit_error (SNAME ": a full stripe of stripe-data-disks=%u x "
                  "stripe-chunk=%s is larger than %s, the largest request "
                  "(expected chunk x data disks up to %s)", geo.data_disks,
                  gm_format_size (geo.chunk, a, sizeof a),
                  gm_format_size (MAX_STRIPE, b, sizeof b), b);
    return -1;
  }
  sp_width = gm_stripe_width (&geo);
  sp_active = true;
  return 0;
}

void
geometry_print (void)
{
  char a[32], b[32], c[32];

  if (!sp_active) {
    fprintf (stderr, "nbdkit: " SNAME ": geometry: none (pass-through)\n");
    return;
  }
  fprintf (stderr, "nbdkit: " SNAME ": geometry: %s: chunk %s, %u data "
           "disks, parity %s, full stripe %s, offset in the array %llu, "
           "preferred block %s\n", geo.source,
           gm_format_size (geo.chunk, a, sizeof a), geo.data_disks,
           geo.parity_known ? (geo.parity == 0 ? "0" : geo.parity == 1 ?
                               "1" : "2") : "unknown",
           gm_format_size (sp_width, b, sizeof b),
           (unsigned long long) geo.offset,
           gm_format_size (shape_preferred (), c, sizeof c));
}

/* gmblock: try a filter's first context below in a child process (see
 * trialopen.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#define NBDKIT_API_VERSION 2
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "childtrial.h"
#include "nbdkitargs.h"
#include "trialopen.h"

/* Long enough for a plugin that connects somewhere on open (nbdkit's
 * nbd plugin); a trial that runs out of it only costs the wait. */
#define TRIAL_MS 10000

struct below {
  nbdkit_backend *backend;
  int readonly;
};

/* In the child: open and prepare as the filter is about to. */
static int
open_below (void *arg)
{
  struct below *b = arg;
  nbdkit_next *n = nbdkit_next_context_open (b->backend, b->readonly, "", 1);

  return n == NULL || n->prepare (n) == -1 ? -1 : 0;
}

int
gm_trial_open_below (const char *module, nbdkit_backend *backend,
                     int readonly)
{
  static bool tried;
  struct below b = { .backend = backend, .readonly = readonly };
  struct gm_nbdkit_args args;
  struct gm_trial t;
  const char *said;
  char how[96];

  if (tried)
    return 0;
  tried = true;
  gm_nbdkit_self (&args);
  if (args.gmblock_plugin)
    return 0;
  gm_child_trial (open_below, &b, TRIAL_MS, &t);
  nbdkit_debug ("%s: trial open of the layer below: a child process %s",
                module, gm_trial_describe (&t, how, sizeof how));
  if (t.end == GM_TRIAL_UNKNOWN)  /* a stall of up to TRIAL_MS: say it */
    fprintf (stderr, "nbdkit: %s: warning: the trial open of the layer "
             "below in a child process %s; opening it without a trial\n",
             module, how);
  if (t.end != GM_TRIAL_CRASHED)
    return 0;
  /* Its message alone: nbdkit puts "nbdkit: error: " before this one. */
  said = strstr (t.said, "error: ");
  said = said ? said + 7 : t.said;
  nbdkit_error ("%s: opening the layer below without a client crashes it: "
                "a child process that tried it %s%s%s.  This filter opens "
                "its own context below at start-up, before any client, on "
                "export \"\"; a plugin that needs a client to name its "
                "export cannot be opened so (nbdkit 1.32's file plugin "
                "with dir= is one).  Put the filter over a plugin that "
                "serves one export (file file=PATH)",
                module, how, *said ? "; it said: " : "", said);
  return -1;
}

/* gmblock: try a filter's first context below in a child process.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * See childtrial.h for why.  Each gmblock filter that opens contexts of
 * its own below calls this in .after_fork before its first one.
 */
#ifndef GMBLOCK_TRIALOPEN_H
#define GMBLOCK_TRIALOPEN_H

#include <nbdkit-filter.h>

/* 0 when the layer below opens (or refuses cleanly, which the real open
 * then reports) in a child, or the trial cannot tell; -1, with an
 * nbdkit_error naming MODULE, when the open crashed the child.  Tries
 * once per module, and not at all over a gmblock plugin.
 */
int gm_trial_open_below (const char *module, nbdkit_backend *backend,
                         int readonly);

#endif /* GMBLOCK_TRIALOPEN_H */

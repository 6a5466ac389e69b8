/* gmblock: a small registry shared by the modules of one nbdkit process.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The plugin and each filter are separate shared objects, each with
 * its own static copy of common/, so a variable cannot carry anything
 * between them.  The registry uses the one thing they share: the
 * process environment.  An entry is the variable GMBLOCK_REG_<KEY>
 * holding "<pid>:<value>"; a lookup ignores entries published by
 * another process (an nbdkit started from a --run command of another
 * one inherits its environment), and the entries stay in nbdkit's
 * children, harmlessly.
 *
 * Publish from .config_complete or .get_ready only: nbdkit is still
 * single-threaded there, and setenv is not thread-safe.  A filter
 * reads an entry in its .config_complete after calling next(), which
 * has run the plugin's .config_complete.
 */
#ifndef GMBLOCK_REGISTRY_H
#define GMBLOCK_REGISTRY_H

#include <stdint.h>

/* Keys (letters, digits and '_'). */
#define GM_REG_SERVED_FILE "SERVED_FILE" /* absolute path gmblock serves */
/* The gmblock plugin's sysfs.path= (libpci's PCI folder), when given:
 * filters that look for device memory read the same tree. */
#define GM_REG_SYSFS_PATH "SYSFS_PATH"
/* The stripe geometry gmblock-stripe uses, in decimal:
 * "chunk:data_disks:parity:offset" (bytes, count, 0-2, where the export
 * starts in the array in bytes).  Published only when it is active.
 */
#define GM_REG_STRIPE "STRIPE"
/* The export's size in bytes, in decimal, as the gmblock plugin serves
 * it; published at its .get_ready, which nbdkit runs before the
 * filters' (and before it forks).
 */
#define GM_REG_SERVED_SIZE "SERVED_SIZE"
/* The stats files the modules write, one "PREFIX OPTION=PATH" line
 * each (common/statsout.c): no two may share one.
 */
#define GM_REG_STATS_FILES "STATS_FILES"

/* Returns 0, or -1 with errno set (EINVAL for a bad key). */
int gm_registry_publish (const char *key, const char *value);

/* The value published by this process, malloc'd (the caller frees
 * it), or NULL when there is none (or no memory).
 */
char *gm_registry_lookup (const char *key);

/* For a filter's .get_ready: the export's size as this filter will see
 * it, known before nbdkit forks (an error then still reaches the user
 * and makes nbdkit exit non-zero; after the fork, nbdkit 1.32 with
 * --run waits for ever, and as a daemon exits 0 with the error in
 * syslog).  It is known when the gmblock plugin published its size and
 * no filter but gmblock's, which keep the size, is loaded
 * (common/nbdkitargs.h).  Returns 1 and *size, or 0.
 */
int gm_registry_served_size (uint64_t *size);

#endif /* GMBLOCK_REGISTRY_H */

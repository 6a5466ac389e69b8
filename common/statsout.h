/* gmblock: where a module's counters go, and when.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Every module has the same three outputs, set by two options named
 * after it (stats= and stats-interval= for the plugin, cache-stats= and
 * cache-stats-interval= for gmblock-cache, ...) and its -D NAME.stats=1
 * flag:
 *
 *  - at exit: "prefix.name value" lines to stderr (the flag) and to
 *    FILE;
 *  - live: with an interval, FILE is rewritten atomically every
 *    interval seconds in the Prometheus text format, for
 *    node_exporter's textfile collector, and once more at exit;
 *  - on SIGUSR1: with the flag set, the lines go to stderr at once and
 *    nbdkit carries on.
 *
 * common/ does not link against nbdkit, so the module hands in
 * nbdkit_error and nbdkit_absolute_path (GM_STATS_OUT does).
 */
#ifndef GMBLOCK_STATSOUT_H
#define GMBLOCK_STATSOUT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "counters.h"

struct gm_stats_out {
  const char *module;           /* Prometheus label: "plugin", "cache" */
  const char *prefix;           /* of the plain lines: "gmblock-cache" */
  const char *option;           /* "cache-stats": also "...-interval" */
  struct gm_counter *c;
  size_t n;
  /* Derived values as "prefix.name value" lines; may be NULL.  Called
   * from the interval thread while requests run: it must read state
   * that requests change under their lock or atomically.
   */
  void (*extra) (FILE *fp, void *opaque);
  void *opaque;
  /* May be NULL: brings counters kept elsewhere (a pool's) into the
   * table before each output.  Same rules as extra.
   */
  void (*refresh) (void);
  const int *to_stderr;         /* the module's -D NAME.stats flag */
  void (*error) (const char *fmt, ...)
    __attribute__((format (printf, 1, 2)));
  char *(*absolute_path) (const char *path);

  /* Set by the options. */
  char *path;
  unsigned interval;            /* seconds; 0: at exit only */

  /* Private. */
  pthread_t thread;
  bool running, handler_installed, failing;
};

#define GM_STATS_OUT(module_, prefix_, option_, table_, n_, extra_,     \
                     flag_, ...)                                        \
  { .module = (module_), .prefix = (prefix_), .option = (option_),     \
    .c = (table_), .n = (n_), .extra = (extra_), .to_stderr = (flag_), \
    .error = nbdkit_error, .absolute_path = nbdkit_absolute_path,      \
    __VA_ARGS__ }

#define GM_STATS_MAX_INTERVAL 86400

/* From .config: 1 when key is the module's stats or stats-interval
 * option (and its value was good), 0 when it is another key, -1 after
 * an error was reported.
 */
int gm_stats_config (struct gm_stats_out *s, const char *key,
                     const char *value);

/* From .config_complete: an interval needs a file. */
int gm_stats_config_complete (struct gm_stats_out *s);

/* From .get_ready: check that the file could be written (a temp file
 * in its directory, removed at once), so that a path that cannot be
 * written stops nbdkit at start-up, before it daemonises or forks --run
 * (an error in .after_fork comes too late for both: the daemon's parent
 * has already returned 0, and --run waits for ever on a command whose
 * server never serves).  Nothing is left behind: .get_ready runs before
 * nbdkit changes user (-u, -g), and a file made now would belong to
 * root.  Only a directory that root may write and that user may not
 * passes here and fails in gm_stats_start.  Returns 0 or -1 (reported).
 */
int gm_stats_ready (struct gm_stats_out *s);

/* From .after_fork: write the first file (all zeros), then start the
 * interval writer and the SIGUSR1 summary when they are asked for.
 * Call it last, once everything print_derived reads without a lock is
 * set: the thread's creation is what publishes it to the thread.
 * Returns 0 or -1 (reported).
 */
int gm_stats_start (struct gm_stats_out *s);

/* From .cleanup: stop them (nbdkit cleans up the outermost layer first,
 * the reverse of .after_fork, so SIGUSR1 handlers come off in the
 * reverse of the order they went on).  Returns once no call of the
 * module's SIGUSR1 handler is under way in any thread, so that none
 * writes to the closed pipe's number after it.  The last handler off
 * leaves SIGUSR1 ignored (not nbdkit's fatal default) for the rest of
 * the shutdown.
 */
void gm_stats_stop (struct gm_stats_out *s);

/* From .unload: the report at exit (reported on failure), and the
 * file name freed.
 */
void gm_stats_final (struct gm_stats_out *s);

/* The Prometheus text of a module's counters and derived lines.
 * Counters are gmblock_NAME_total (counter), derived numbers gmblock_NAME
 * (gauge), derived words gmblock_NAME_info{value="..."} 1; every
 * sample carries module="...".  HELP depends on the name alone, so that
 * families shared by several modules' files agree.
 */
void gm_stats_print_prometheus (FILE *fp, const struct gm_stats_out *s);

#endif /* GMBLOCK_STATSOUT_H */

/* gmblock: process-wide event and byte counters.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Each module declares a table of named counters indexed by an enum.
 * Updates are relaxed atomic adds; readers see a consistent-enough
 * snapshot for statistics.
 */
#ifndef GMBLOCK_COUNTERS_H
#define GMBLOCK_COUNTERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct gm_counter {
  const char *name;
  const char *help;
  _Atomic uint64_t value;
};

/* One entry of a module's counter table, indexed by its enum. */
#define GM_COUNTER(id, name, help) [id] = { name, help, 0 }

/* nbdkit sets the variable NAME_debug_FLAG for -D NAME.FLAG=N.  A
 * module whose name holds a '-' ("gmblock-cache") cannot spell that as
 * a C identifier, so this defines 'var' and exports it under the exact
 * name as an assembler alias:
 *     GM_DEBUG_FLAG (gmblock_cache_debug_stats, "gmblock-cache_debug_stats");
 */
#define GM_DEBUG_FLAG(var, exported)                                    \
  __attribute__((visibility ("default"))) int var = 0;                 \
  __asm__ (".globl \"" exported "\"\n"                                  \
           ".set \"" exported "\", " #var)

static inline void
gm_count (struct gm_counter *c, uint64_t n)
{
  atomic_fetch_add_explicit (&c->value, n, memory_order_relaxed);
}

static inline uint64_t
gm_counter_get (struct gm_counter *c)
{
  return atomic_load_explicit (&c->value, memory_order_relaxed);
}

/* Print "prefix.name value" one per line. */
void gm_counters_print (FILE *fp, const char *prefix,
                        struct gm_counter *c, size_t n);

/* Write what emit prints to path atomically: a new temp file with a
 * random name in path's directory (never one planted there), mode 0644,
 * fsync'd, renamed over path.  Returns 0 or -1 with errno set.
 */
int gm_write_file_atomic (const char *path,
                          void (*emit) (FILE *fp, void *opaque),
                          void *opaque);

/* Whether gm_write_file_atomic could write path, without writing it:
 * a temp file can be made in its directory (then removed at once), and
 * path is no directory.  Returns 0 or -1 with errno set.
 */
int gm_probe_file_atomic (const char *path);

#endif /* GMBLOCK_COUNTERS_H */

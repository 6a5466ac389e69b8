/* gmblock: minimal assertions for the C unit tests.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_UNIT_H
#define GMBLOCK_UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int unit_checks;

#define CHECK(cond) do {                                                \
    unit_checks++;                                                      \
    if (!(cond)) {                                                      \
      fprintf (stderr, "%s:%d: check failed: %s\n",                     \
               __FILE__, __LINE__, #cond);                              \
      exit (1);                                                         \
    }                                                                   \
  } while (0)

#define CHECK_EQ_U64(a, b) do {                                         \
    unsigned long long a_ = (a), b_ = (b);                              \
    unit_checks++;                                                      \
    if (a_ != b_) {                                                     \
      fprintf (stderr, "%s:%d: %s == %llu, expected %s == %llu\n",      \
               __FILE__, __LINE__, #a, a_, #b, b_);                     \
      exit (1);                                                         \
    }                                                                   \
  } while (0)

#define UNIT_DONE() do {                                                \
    printf ("%s: %d checks passed\n", __FILE__, unit_checks);           \
    return 0;                                                           \
  } while (0)

#endif /* GMBLOCK_UNIT_H */

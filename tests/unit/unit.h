/* gmblock: minimal assertions for the C unit tests.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_UNIT_H
#define GMBLOCK_UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Atomic: CHECK runs in the tests' own threads too. */
static _Atomic int unit_checks;

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

/* Named cases: run those named on the command line, or all. */
struct unit_case {
  const char *name;
  void (*fn) (void);
};

static inline void
unit_run_cases (const struct unit_case *cases, size_t n, int argc,
                char *argv[])
{
  for (size_t i = 0; i < n; i++) {
    int run = argc == 1;
    for (int j = 1; j < argc; j++)
      run |= strcmp (argv[j], cases[i].name) == 0;
    if (run) {
      printf ("%s\n", cases[i].name);
      fflush (stdout);
      cases[i].fn ();
    }
  }
}
#define UNIT_RUN_CASES(cases, argc, argv) \
  unit_run_cases (cases, sizeof cases / sizeof cases[0], argc, argv)

#endif /* GMBLOCK_UNIT_H */

/* gmblock: size parsing and formatting.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sizes.h"

int
gm_parse_u64 (const char *str, int base, uint64_t *out)
{
  unsigned long long v;
  char *end;

  /* strtoull would take a sign ("-1" is 2^64-1) and leading space. */
  if (!isdigit ((unsigned char) *str))
    return -1;
  errno = 0;
  v = strtoull (str, &end, base);
  if (errno || *end != '\0')
    return -1;
  *out = v;
  return 0;
}

/* Parse a run of decimal digits into *v, refusing overflow. */
static const char *
parse_digits (const char *p, uint64_t *v, const char **why)
{
  if (!isdigit ((unsigned char) *p)) {
    *why = "expected a number";
    return NULL;
  }
  *v = 0;
  for (; isdigit ((unsigned char) *p); p++) {
    unsigned d = *p - '0';
    if (*v > (UINT64_MAX - d) / 10) {
      *why = "number too large";
      return NULL;
    }
    *v = *v * 10 + d;
  }
  return p;
}

static int
suffix_shift (const char *s, unsigned *shift)
{
  static const char units[] = "KMGTPE";
  const char *u;

  if (*s == '\0') {
    *shift = 0;
    return 0;
  }
  if (strcasecmp (s, "b") == 0) {
    *shift = 0;
    return 0;
  }
  u = strchr (units, toupper ((unsigned char) *s));
  if (u == NULL)
    return -1;
  /* Accept "K", "KB", "KiB" (all binary). */
  if (s[1] != '\0' && strcasecmp (s + 1, "b") != 0 && strcasecmp (s + 1, "ib") != 0)
    return -1;
  *shift = 10 * (unsigned) (u - units + 1);
  return 0;
}

/* Where the digits of a number written as nbdkit's own parsers take it
 * begin: after blanks and an optional "+".  NULL for an empty value or
 * a "-", with *why set.
 */
static const char *
number_start (const char *str, const char **why)
{
  if (str == NULL || *str == '\0') {
    *why = "empty value";
    return NULL;
  }
  while (isspace ((unsigned char) *str))
    str++;
  if (*str == '-') {
    *why = "negative values are not allowed";
    return NULL;
  }
  return *str == '+' ? str + 1 : str;
}

int
gm_parse_count (const char *str, unsigned lo, unsigned hi, unsigned *out,
                const char **why)
{
  uint64_t v;
  const char *p = number_start (str, why);

  if (p == NULL || (p = parse_digits (p, &v, why)) == NULL)
    return -1;
  if (*p != '\0') {
    *why = "expected a whole number";
    return -1;
  }
  if (v < lo || v > hi) {
    *why = "out of range";
    return -1;
  }
  *out = v;
  return 0;
}

int
gm_parse_size (const char *str, uint64_t *out, const char **why)
{
  uint64_t v;
  unsigned shift;
  const char *p;

  if ((str = number_start (str, why)) == NULL)
    return -1;
  p = parse_digits (str, &v, why);
  if (p == NULL)
    return -1;
  if (suffix_shift (p, &shift) == -1) {
    *why = "unknown suffix (accepted: none, B, K, M, G, T, P, E)";
    return -1;
  }
  if (shift >= 64 || v > (UINT64_MAX >> shift)) {
    *why = "size too large";
    return -1;
  }
  *out = v << shift;
  return 0;
}

static int
parse_size_in (const char *str, uint64_t lo, uint64_t hi, bool pow2,
               uint64_t *out, const char **why)
{
  uint64_t v;

  if (gm_parse_size (str, &v, why) == -1)
    return -1;
  if (pow2 && !gm_is_power_of_2 (v)) {
    *why = "not a power of two";
    return -1;
  }
  if (v < lo || v > hi) {
    *why = "out of range";
    return -1;
  }
  *out = v;
  return 0;
}

int
gm_parse_size_range (const char *str, uint64_t lo, uint64_t hi, uint64_t *out,
                     const char **why)
{
  return parse_size_in (str, lo, hi, false, out, why);
}

int
gm_parse_pow2_size (const char *str, uint64_t lo, uint64_t hi, uint64_t *out,
                    const char **why)
{
  return parse_size_in (str, lo, hi, true, out, why);
}

int
gm_parse_size_or_percent (const char *str, uint64_t whole,
                          uint64_t *out, const char **why)
{
  uint64_t pct;
  const char *p;

  /* No "%" (an empty value included): a size, which says what is wrong. */
  if (str == NULL || strchr (str, '%') == NULL)
    return gm_parse_size (str, out, why);
  /* Blanks and a "+" before the number, as gm_parse_size allows them. */
  if ((p = number_start (str, why)) == NULL ||
      (p = parse_digits (p, &pct, why)) == NULL)
    return -1;
  if (p == NULL)
    return -1;
  if (*p != '%' || p[1] != '\0') {
    *why = "a percentage must be a whole number followed by %";
    return -1;
  }
  if (pct < 1 || pct > 100) {
    *why = "percentage must be between 1% and 100%";
    return -1;
  }
  *out = whole / 100 * pct + whole % 100 * pct / 100;
  return 0;
}

int
gm_parse_seconds (const char *str, double min, double max, double *out,
                  const char **why)
{
  char *end;
  double v;

  if (str == NULL || *str == '\0') {
    *why = "empty value";
    return -1;
  }
  /* strtod also reads "nan", "inf" and "0x1p3": allow only decimals. */
  if (strspn (str, "0123456789.eE+-") != strlen (str)) {
    *why = "expected a decimal number";
    return -1;
  }
  errno = 0;
  v = strtod (str, &end);
  if (end == str || *end != '\0') {
    *why = "expected a decimal number";
    return -1;
  }
  if (errno == ERANGE || !isfinite (v) || !(v >= min && v <= max)) {
    *why = "out of range";
    return -1;
  }
  *out = v;
  return 0;
}

const char *
gm_format_size (uint64_t n, char *buf, size_t len)
{
  static const char units[] = "KMGTPE";
  unsigned i = 0;
  uint64_t div = 1;

  while (i < sizeof units - 1 && n / div >= 1024 && n % (div * 1024) == 0) {
    div *= 1024;
    i++;
  }
  /* Exact when that is short: the header promises that 16 bytes are
   * enough, and "%.1fM" alone printed up to 17 characters (2^64 - 1 as
   * "17592186044416.0M"), the exact form up to 19 ("18014398509481983K").
   */
  if (i > 0 && snprintf (buf, len, "%llu%c", (unsigned long long) (n / div),
                         units[i - 1]) < 16)
    ;
  else if (n >= 1024 * 1024) {
    /* Rounded, in the largest unit from M up that leaves less than
     * 1024 of it (1023.96 of one rounds up to "1024.0").
     */
    for (i = 2, div = 1024 * 1024; i < sizeof units - 1 && n / div >= 1024;
         i++)
      div *= 1024;
    snprintf (buf, len, "%.1f%c", (double) n / (double) div, units[i - 1]);
  }
  else
    snprintf (buf, len, "%llu", (unsigned long long) n);
  return buf;
}

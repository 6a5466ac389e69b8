/* libFuzzer target: the option value parsers of common/ (sizes.c,
 * rdmaaddr.c, gm_parse_bdf of topology.c).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * An input is byte 0 (parameters: bits 0-1 the base of gm_parse_u64,
 * 0, 10, 16 or 8; bits 2-3 which range gm_parse_seconds gets; bits 4-5
 * the range of gm_parse_size_range and gm_parse_pow2_size) and the
 * text after it, given to every parser as a C string (cut at its first
 * NUL) in a buffer of exactly its length, so ASan sees any read past
 * it.  The first 8 bytes of the input, little-endian, are also the
 * "whole" of a percentage and a number for gm_format_size.
 *
 * Each parser's verdict and value are checked against a model written
 * here from the header's words (common/sizes.h, rdmaaddr.h and
 * topology.h), not from the code:
 *   - gm_parse_u64: all of the text one number in the base, no sign,
 *     blank or junk, no overflow; *out left alone on error
 *   - gm_parse_size: blanks, an optional "+", digits, then nothing,
 *     B, or K/M/G/T/P/E with an optional B or iB, any case; binary
 *     multiples; no overflow
 *   - gm_parse_size_or_percent: "N%" (blanks and a "+" before it, as
 *     a size) with N from 1 to 100 is N percent of the whole (rounded
 *     down, exactly), else as gm_parse_size
 *   - gm_parse_size_range, gm_parse_pow2_size: gm_parse_size's verdict,
 *     then from lo to hi (and a power of two); *out left alone on error,
 *     *why gm_parse_size's reason, "not a power of two" or "out of range"
 *   - gm_parse_count: blanks, an optional "+", decimal digits, nothing
 *     after; from lo to hi; *out left alone on error
 *   - gm_parse_seconds: a decimal number (sign, digits, point,
 *     exponent) within [min, max]; never NaN or infinite
 *   - gm_format_size: fits 16 bytes (the header's minimum); when it
 *     is a whole number of a unit, reads back as n, else is n rounded
 *     to a tenth of the largest unit from M up that leaves 1 to 1023 (which may round to 1024.0)
 *   - gm_rdma_addr_parse: HOST[:PORT] or [HOST]:PORT, host 1 to 255
 *     characters and no bracket in it, port 1 to 65535 (default 10810), printed back plain
 *   - gm_parse_bdf: [DOMAIN:]BUS:DEV.FN in hex (domain up to 5 digits,
 *     bus 2, device 2 up to 1f, function 1 up to 7), lower case
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rdmaaddr.h"
#include "sizes.h"
#include "topology.h"

static void
die (const char *what, const char *input)
{
  fprintf (stderr, "invariant broken: %s\ninput: \"", what);
  for (const char *p = input; *p; p++)
    fprintf (stderr, isprint ((unsigned char) *p) ? "%c" : "\\x%02x",
             (unsigned char) *p);
  fprintf (stderr, "\"\n");
  abort ();
}
#define ASSERT(c) do { if (!(c)) die (#c, s); } while (0)

typedef unsigned __int128 u128;
#define U64_MAX_128 ((u128) UINT64_MAX)

/* Decimal digits at *p into *v (saturating past 2^64); how many. */
static size_t
digits (const char **p, u128 *v)
{
  size_t n = 0;

  *v = 0;
  for (; **p >= '0' && **p <= '9'; (*p)++, n++) {
    *v = *v * 10 + (**p - '0');
    if (*v > U64_MAX_128)
      *v = U64_MAX_128 + 1;
  }
  return n;
}

static int
digit_value (char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z')
    return c - 'A' + 10;
  return 99;
}

/* ---- gm_parse_u64 ---- */

static int
model_u64 (const char *s, int base, uint64_t *out)
{
  u128 v = 0;
  const char *p = s;

  if (base == 0) {
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') &&
        digit_value (p[2]) < 16)
      base = 16, p += 2;
    else if (p[0] == '0')
      base = 8;
    else
      base = 10;
  }
  else if (base == 16 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X') &&
           digit_value (p[2]) < 16)
    p += 2;
  /* The first character is a decimal digit (no sign, no blank). */
  if (!(s[0] >= '0' && s[0] <= '9') || *p == '\0')
    return -1;
  for (; *p; p++) {
    int d = digit_value (*p);
    if (d >= base)
      return -1;
    v = v * base + d;
    if (v > U64_MAX_128)
      return -1;
  }
  *out = v;
  return 0;
}

/* ---- gm_parse_size ---- */

static int
model_size (const char *s, uint64_t *out)
{
  const char *p = s, *units = "KMGTPE", *u;
  unsigned shift = 0;
  u128 v;

  while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
    p++;
  if (*p == '+')
    p++;
  if (digits (&p, &v) == 0)
    return -1;
  if (*p == '\0' || strcasecmp (p, "b") == 0)
    shift = 0;
  else if (*p && (u = strchr (units, toupper ((unsigned char) *p))) != NULL &&
           (p[1] == '\0' || strcasecmp (p + 1, "b") == 0 ||
            strcasecmp (p + 1, "ib") == 0))
    shift = 10 * (u - units + 1);
  else
    return -1;
  if (v > U64_MAX_128 || (v << shift) > U64_MAX_128)
    return -1;
  *out = v << shift;
  return 0;
}

static int
model_size_or_percent (const char *s, uint64_t whole, uint64_t *out)
{
  const char *p = s;
  u128 pct;

  while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
    p++;
  if (strchr (p, '%') == NULL)
    return model_size (s, out);
  if (*p == '+')
    p++;
  if (digits (&p, &pct) == 0 || strcmp (p, "%") != 0 || pct < 1 || pct > 100)
    return -1;
  *out = (u128) whole * pct / 100;
  return 0;
}

/* ---- gm_parse_count ---- */

static int
model_count (const char *s, unsigned lo, unsigned hi, unsigned *out)
{
  const char *p = s;
  u128 v;

  while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
    p++;
  if (*p == '+')
    p++;
  if (digits (&p, &v) == 0 || *p != '\0' || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* ---- gm_parse_seconds ---- */

/* [+-]? (D+ (. D*)? | . D+) ([eE] [+-]? D+)? */
static bool
decimal_number (const char *s)
{
  const char *p = s;
  u128 v;
  size_t n;

  if (*p == '+' || *p == '-')
    p++;
  n = digits (&p, &v);
  if (*p == '.') {
    p++;
    n += digits (&p, &v);
  }
  if (n == 0)
    return false;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-')
      p++;
    if (digits (&p, &v) == 0)
      return false;
  }
  return *p == '\0';
}

static void
check_seconds (const char *s, double min, double max)
{
  const char *why = NULL;
  double out = -12345, v;
  int r = gm_parse_seconds (s, min, max, &out, &why);
  bool range_error;

  ASSERT (r == 0 || r == -1);
  if (!decimal_number (s)) {
    ASSERT (r == -1 && why != NULL);
    return;
  }
  errno = 0;
  v = strtod (s, NULL);
  range_error = errno == ERANGE;
  if (r == 0) {
    ASSERT (isfinite (out) && out >= min && out <= max);
    ASSERT (out == v);
  }
  else
    ASSERT (why != NULL);
  /* Under- or overflow may be refused; anything else in range is not. */
  if (!range_error)
    ASSERT ((r == 0) == (v >= min && v <= max));
}

/* ---- gm_format_size ---- */

/* sized, m, size_why: the model's verdict and value for gm_parse_size,
 * and gm_parse_size's reason (checked against the model before).  The
 * range: from the first bytes (lo up to 2^24 - 1, hi = lo << 0..31),
 * or by bits 4-5 of byte 0 one with m at an end of it, or just outside
 * one (taken from the text's bytes, lo is rarely the number the text
 * says: an off-by-one at either end went unseen).  On error *why is
 * gm_parse_size's reason, or what is wrong: "out of range" or "not a
 * power of two" (either when both are). */
static void
check_size_ranges (const char *s, int sized, uint64_t m, const char *size_why,
                   uint64_t num, unsigned sel)
{
  uint64_t lo = num & 0xffffff, hi = lo << ((num >> 24) & 31), v;
  bool in, pow2;
  const char *why;
  int r;

  if (sized == 0) {
    switch (sel & 3) {
    case 1: lo = hi = m; break;
    case 2: lo = m == UINT64_MAX ? m : m + 1; hi = UINT64_MAX; break;
    case 3: lo = 0; hi = m == 0 ? 0 : m - 1; break;
    }
  }
  in = sized == 0 && m >= lo && m <= hi;
  pow2 = sized == 0 && m != 0 && (m & (m - 1)) == 0;

  v = 77;
  why = NULL;
  r = gm_parse_size_range (s, lo, hi, &v, &why);
  ASSERT (r == (in ? 0 : -1));
  ASSERT (r == 0 ? v == m : v == 77 && why != NULL);
  if (r == -1)
    ASSERT (strcmp (why, sized ? size_why : "out of range") == 0);
  v = 77;
  why = NULL;
  r = gm_parse_pow2_size (s, lo, hi, &v, &why);
  ASSERT (r == (in && pow2 ? 0 : -1));
  ASSERT (r == 0 ? v == m : v == 77 && why != NULL);
  if (r == -1 && sized)
    ASSERT (strcmp (why, size_why) == 0);
  else if (r == -1)
    ASSERT ((!in && strcmp (why, "out of range") == 0) ||
            (!pow2 && strcmp (why, "not a power of two") == 0));
}

static void
check_format (uint64_t n, const char *s)
{
  char buf[64], small[16];
  const char *f = gm_format_size (n, buf, sizeof buf);
  size_t len = strlen (f);
  uint64_t back;
  const char *why;

  ASSERT (f == buf);
  /* The header: "at least 16 bytes". */
  ASSERT (len < sizeof small);
  gm_format_size (n, small, sizeof small);
  ASSERT (strcmp (small, buf) == 0);
  if (strchr (f, '.') == NULL) {
    /* A whole number, of bytes or of a unit: exactly n. */
    ASSERT (gm_parse_size (f, &back, &why) == 0);
    ASSERT (back == n);
  }
  else {
    /* Rounded, 1M or more: "X.Y" and a unit, X below 1024 unless
     * in E, within a twentieth of the unit of n (%.1f).
     */
    const char *units = "MGTPE", *u = strchr (units, f[len - 1]);
    double unit, d;
    ASSERT (n >= 1048576 && u != NULL && f[len - 1] != '\0');
    unit = ldexp (1, 20 + 10 * (u - units));
    d = strtod (f, NULL);
    ASSERT (d >= 1 && (d <= 1024 || f[len - 1] == 'E'));   /* 1023.96 is 1024.0 */
    ASSERT (fabs (d * unit - (double) n) <= 0.05 * unit * (1 + 1e-9));
  }
}

/* ---- gm_rdma_addr_parse ---- */

static void
check_addr (const char *s)
{
  struct gm_rdma_addr a;
  char why[256] = "";
  int r = gm_rdma_addr_parse (s, &a, why, sizeof why);
  const char *host = s, *port = NULL, *close, *colon;
  size_t hlen;
  bool ok = true;
  unsigned long pn = GM_RDMA_DEFAULT_PORT;

  ASSERT (r == 0 || r == -1);
  if (r == -1)
    ASSERT (why[0] != '\0' && strlen (why) < sizeof why);
  else {
    ASSERT (memchr (a.host, '\0', sizeof a.host) != NULL);
    ASSERT (memchr (a.port, '\0', sizeof a.port) != NULL);
  }

  /* The model. */
  if (s[0] == '[') {
    close = strchr (s, ']');
    if (close == NULL || (close[1] != '\0' && close[1] != ':'))
      ok = false;
    else {
      host = s + 1;
      hlen = close - host;
      if (close[1] == ':')
        port = close + 2;
    }
  }
  else {
    colon = strchr (s, ':');
    if (colon && strchr (colon + 1, ':'))
      ok = false;               /* IPv6 without brackets */
    hlen = colon ? (size_t) (colon - s) : strlen (s);
    port = colon ? colon + 1 : NULL;
  }
  if (ok && (hlen == 0 || hlen > 255 || memchr (host, '[', hlen) ||
             memchr (host, ']', hlen)))
    ok = false;
  if (ok && port) {
    size_t plen = strlen (port);
    if (plen == 0 || plen > 5 || strspn (port, "0123456789") != plen)
      ok = false;
    else {
      pn = strtoul (port, NULL, 10);
      ok = pn >= 1 && pn <= 65535;
    }
  }
  ASSERT ((r == 0) == ok);
  if (ok) {
    char p[16];
    snprintf (p, sizeof p, "%lu", pn);
    ASSERT (strlen (a.host) == hlen && memcmp (a.host, host, hlen) == 0);
    ASSERT (strcmp (a.port, p) == 0);
  }
}

/* ---- gm_parse_bdf ---- */

/* n hex digits (1 to max) at *p, value into *v. */
static bool
hex_field (const char **p, int max, unsigned *v)
{
  int n = 0;

  *v = 0;
  while (n < max + 1 && digit_value (**p) < 16) {
    *v = *v * 16 + digit_value (**p);
    (*p)++;
    n++;
  }
  return n >= 1 && n <= max;
}

static void
check_bdf (const char *s)
{
  char out[32] = "", expect[32];
  int r = gm_parse_bdf (s, strlen (s), out, sizeof out);
  unsigned f[4];
  const char *p = s;
  int nf = 0;
  bool ok;

  ASSERT (r == 0 || r == -1);
  /* Fields split at ':' and '.': DOMAIN:BUS:DEV.FN or BUS:DEV.FN. */
  {
    static const int widths4[] = { 5, 2, 2, 1 }, widths3[] = { 2, 2, 1 };
    size_t colons = 0;
    for (const char *c = s; *c; c++)
      colons += *c == ':';
    const int *w = colons == 2 ? widths4 : widths3;
    int want = colons == 2 ? 4 : 3;
    ok = colons == 2 || colons == 1;
    for (nf = 0; ok && nf < want; nf++) {
      if (!hex_field (&p, w[nf], &f[nf]))
        ok = false;
      else if (nf < want - 2)
        ok = *p++ == ':';
      else if (nf == want - 2)
        ok = *p++ == '.';
    }
    ok = ok && *p == '\0';
    if (ok && want == 3) {
      f[3] = f[2], f[2] = f[1], f[1] = f[0], f[0] = 0;
    }
    if (ok)
      ok = f[2] <= 0x1f && f[3] <= 7;
  }
  ASSERT ((r == 0) == ok);
  if (ok) {
    snprintf (expect, sizeof expect, "%04x:%02x:%02x.%x", f[0], f[1], f[2],
              f[3]);
    ASSERT (strcmp (out, expect) == 0);
  }
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static const int bases[] = { 0, 10, 16, 8 };
  static const double ranges[][2] = {
    { 0, 3600 }, { 0.01, 3600 }, { 0, 0 }, { -1e300, 1e300 },
  };
  uint64_t num = 0, v, m;
  const char *why;
  char *s;
  size_t len;
  int r, rm;

  if (size < 1)
    return 0;
  for (size_t i = 0; i < 8 && i < size; i++)
    num |= (uint64_t) data[i] << (8 * i);
  len = strnlen ((const char *) data + 1, size - 1);
  s = malloc (len + 1);
  memcpy (s, data + 1, len);
  s[len] = '\0';

  /* gm_parse_u64: *out left alone on error. */
  v = 0x5a5a5a5a5a5a5a5a;
  r = gm_parse_u64 (s, bases[data[0] & 3], &v);
  rm = model_u64 (s, bases[data[0] & 3], &m);
  ASSERT (r == rm);
  ASSERT (r == 0 ? v == m : v == 0x5a5a5a5a5a5a5a5a);

  why = NULL;
  r = gm_parse_size (s, &v, &why);
  rm = model_size (s, &m);
  ASSERT (r == rm);
  ASSERT (r == 0 ? v == m : why != NULL);
  check_size_ranges (s, rm, m, why, num, data[0] >> 4);

  why = NULL;
  r = gm_parse_size_or_percent (s, num, &v, &why);
  rm = model_size_or_percent (s, num, &m);
  ASSERT (r == rm);
  ASSERT (r == 0 ? v == m : why != NULL);

  {
    /* The range from the first bytes too: lo up to 255, hi any. */
    unsigned lo = num & 0xff, hi = (unsigned) (num >> 8), n = 77, nm;
    why = NULL;
    r = gm_parse_count (s, lo, hi, &n, &why);
    rm = model_count (s, lo, hi, &nm);
    ASSERT (r == rm);
    ASSERT (r == 0 ? n == nm : n == 77 && why != NULL);
  }

  check_seconds (s, ranges[(data[0] >> 2) & 3][0], ranges[(data[0] >> 2) & 3][1]);
  check_format (num, s);
  if (r == 0)
    check_format (v, s);
  check_addr (s);
  check_bdf (s);
  free (s);
  return 0;
}

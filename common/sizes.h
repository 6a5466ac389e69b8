/* gmblock: size parsing and formatting shared by all modules.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_SIZES_H
#define GMBLOCK_SIZES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The whole of str is one unsigned number in base (0: a 0x or 0 prefix
 * picks it), nothing else: no sign, no space, no junk after it (what a
 * sysfs value must be).  Returns 0, or -1 with *out left alone.
 */
int gm_parse_u64 (const char *str, int base, uint64_t *out);

/* Parse "4096", "64K", "1M", "2G", "1T" (binary multiples, optional
 * trailing "B" or "iB", case-insensitive; leading blanks and a "+" are
 * allowed, as nbdkit's own size parser allows them).  Rejects empty
 * strings, a "-", garbage and overflow.  On error returns -1 and sets *why to a
 * static description of what was wrong.
 */
int gm_parse_size (const char *str, uint64_t *out, const char **why);

/* A whole number from lo to hi, in decimal, written as gm_parse_size
 * takes its number (leading blanks and a "+" allowed, as in nbdkit's
 * own parsers; no "-", no suffix, nothing after it): every count-like
 * option of every module.  On error returns -1, *out left alone, and
 * sets *why ("out of range" when only the range is wrong).
 */
int gm_parse_count (const char *str, unsigned lo, unsigned hi, unsigned *out,
                    const char **why);

/* A size from lo to hi, written as gm_parse_size takes it; the _pow2
 * form takes only a power of two (every block, window and piece size
 * option).  On error returns -1, *out left alone, and sets *why to
 * gm_parse_size's reason, "not a power of two" or "out of range".
 */
int gm_parse_size_range (const char *str, uint64_t lo, uint64_t hi,
                         uint64_t *out, const char **why);
int gm_parse_pow2_size (const char *str, uint64_t lo, uint64_t hi,
                        uint64_t *out, const char **why);

/* Like gm_parse_size, but also accepts "N%" meaning N percent of
 * 'whole' (N from 1 to 100).
 */
int gm_parse_size_or_percent (const char *str, uint64_t whole,
                              uint64_t *out, const char **why);

/* Parse a decimal number of seconds from min to max ("0.5", "2",
 * "1e-2").  Rejects empty strings, garbage, NaN and infinities (which
 * would pass a plain range check: every comparison with NaN is false)
 * and hexadecimal floats.  On error returns -1 and sets *why.
 */
int gm_parse_seconds (const char *str, double min, double max, double *out,
                      const char **why);

/* Format a byte count as a short human string ("64M", "1.5G", "512"):
 * exact ("1536K") when that takes less than 16 characters, else rounded
 * to a tenth of the largest unit from M up that leaves 1 to 1023 of it.
 * Writes into buf (at least 16 bytes) and returns it.
 */
const char *gm_format_size (uint64_t n, char *buf, size_t len);

static inline bool
gm_is_power_of_2 (uint64_t v)
{
  return v != 0 && (v & (v - 1)) == 0;
}

/* Smallest power of two >= v (v must be <= 2^63). */
static inline uint64_t
gm_next_power_of_2 (uint64_t v)
{
  uint64_t p = 1;
  while (p < v)
    p <<= 1;
  return p;
}

/* Largest power of two <= v (1 for v 0 or 1). */
static inline uint64_t
gm_prev_power_of_2 (uint64_t v)
{
  uint64_t p = 1;
  while (p <= v / 2)
    p <<= 1;
  return p;
}

static inline uint64_t
gm_round_down (uint64_t v, uint64_t align)
{
  return v - v % align;
}

static inline uint64_t
gm_round_up (uint64_t v, uint64_t align)
{
  return gm_round_down (v + align - 1, align);
}

/* The largest read or write nbdkit 1.32 serves: its server refuses
 * larger ones before any plugin or filter sees them (MAX_REQUEST_SIZE;
 * nbdkit-blocksize-filter(1): "nbdkit itself refuses a read or write
 * larger than 64 megabytes").  nbdkit-plugin(3) only bounds a maximum
 * block size by 0xffff_ffff.
 */
#define GM_NBDKIT_MAX_REQUEST (64u << 20)

/* For a filter's .block_size: a layer below that gave no block sizes
 * (minimum 0: nbdkit's memory and file plugins) gets minimum 1 and
 * nbdkit's own limit as the maximum, not nothing: a client that
 * believed 0xffffffff (qemu, nbd-client; libnbd caps it itself) would
 * send requests nbdkit refuses.
 */
static inline void
gm_block_size_unsaid (uint32_t *minimum, uint32_t *maximum)
{
  if (*minimum == 0) {
    *minimum = 1;
    *maximum = GM_NBDKIT_MAX_REQUEST;
  }
}

#endif /* GMBLOCK_SIZES_H */

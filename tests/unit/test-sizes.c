/* Unit tests for common/sizes.c. */
#include "sizes.h"
#include "unit.h"

static void
ok (const char *s, uint64_t want)
{
  uint64_t v = 0;
  const char *why = NULL;
  if (gm_parse_size (s, &v, &why) != 0) {
    fprintf (stderr, "parse '%s' failed: %s\n", s, why);
    exit (1);
  }
  CHECK_EQ_U64 (v, want);
}

static void
bad (const char *s)
{
  uint64_t v = 12345;
  const char *why = NULL;
  CHECK (gm_parse_size (s, &v, &why) == -1);
  CHECK (why != NULL && *why != '\0');
  CHECK_EQ_U64 (v, 12345);      /* untouched on error */
}

int
main (void)
{
  char buf[32];
  uint64_t v;
  const char *why;

  /* gm_parse_u64: a whole number and nothing else, *out untouched else. */
  v = 7;
  CHECK (gm_parse_u64 ("65536", 10, &v) == 0);
  CHECK_EQ_U64 (v, 65536);
  CHECK (gm_parse_u64 ("0x10", 0, &v) == 0);
  CHECK_EQ_U64 (v, 16);
  CHECK (gm_parse_u64 ("18446744073709551615", 10, &v) == 0);
  CHECK_EQ_U64 (v, UINT64_MAX);
  v = 7;
  CHECK (gm_parse_u64 ("18446744073709551616", 10, &v) == -1);
  CHECK (gm_parse_u64 ("65536x", 10, &v) == -1);
  CHECK (gm_parse_u64 ("-1", 0, &v) == -1);
  CHECK (gm_parse_u64 (" 1", 0, &v) == -1);
  CHECK (gm_parse_u64 ("+1", 0, &v) == -1);
  CHECK (gm_parse_u64 ("", 0, &v) == -1);
  CHECK_EQ_U64 (v, 7);

  ok ("0", 0);
  ok ("4096", 4096);
  ok ("64K", 65536);
  ok ("64k", 65536);
  ok ("1M", 1048576);
  ok ("1MiB", 1048576);
  ok ("1mb", 1048576);
  ok ("2G", 2ULL << 30);
  ok ("1T", 1ULL << 40);
  ok ("15E", 15ULL << 60);
  ok ("+8", 8);
  ok ("512B", 512);
  ok ("18446744073709551615", UINT64_MAX);

  bad (NULL);
  bad ("");
  bad ("banana");
  bad ("-1");
  bad ("-64M");
  bad ("1.5M");
  bad ("12Q");
  bad ("1MM");
  bad ("1 M");
  bad ("16E");                  /* 2^64 overflows */
  bad ("18446744073709551616");
  bad ("99999999999999999999999");
  bad ("M");

  CHECK (gm_parse_size_or_percent ("50%", 1000, &v, &why) == 0);
  CHECK_EQ_U64 (v, 500);
  CHECK (gm_parse_size_or_percent ("100%", UINT64_MAX, &v, &why) == 0);
  CHECK_EQ_U64 (v, UINT64_MAX);
  CHECK (gm_parse_size_or_percent ("1%", 24ULL << 30, &v, &why) == 0);
  CHECK_EQ_U64 (v, (24ULL << 30) / 100);
  CHECK (gm_parse_size_or_percent ("64M", 1000, &v, &why) == 0);
  CHECK_EQ_U64 (v, 64ULL << 20);
  CHECK (gm_parse_size_or_percent ("0%", 1000, &v, &why) == -1);
  CHECK (gm_parse_size_or_percent ("101%", 1000, &v, &why) == -1);
  CHECK (gm_parse_size_or_percent ("5.5%", 1000, &v, &why) == -1);
  CHECK (gm_parse_size_or_percent ("%", 1000, &v, &why) == -1);
  CHECK (gm_parse_size_or_percent (" 10%", 1000, &v, &why) == 0);
  CHECK_EQ_U64 (v, 100);
  CHECK (gm_parse_size_or_percent ("50%x", 1000, &v, &why) == -1);
  CHECK (strstr (why, "percentage") != NULL);
  CHECK (gm_parse_size_or_percent ("   ", 1000, &v, &why) == -1);
  /* The same "+" as a size takes (it was refused before a percent). */
  CHECK (gm_parse_size_or_percent ("+50%", 1000, &v, &why) == 0);
  CHECK_EQ_U64 (v, 500);
  CHECK (gm_parse_size_or_percent ("-50%", 1000, &v, &why) == -1);
  CHECK (gm_parse_size_or_percent ("+-50%", 1000, &v, &why) == -1);

  /* Sizes in a range, and powers of two in a range: block, window,
   * piece and pool sizes.  *out is left alone on error. */
  {
    uint64_t n = 77;
    CHECK (gm_parse_size_range ("64K", 4096, 1 << 20, &n, &why) == 0 &&
           n == 65536);
    CHECK (gm_parse_size_range ("48K", 4096, 1 << 20, &n, &why) == 0 &&
           n == 49152);
    CHECK (gm_parse_size_range ("0", 0, 32 << 20, &n, &why) == 0 && n == 0);
    CHECK (gm_parse_size_range ("4095", 4096, 1 << 20, &n, &why) == -1 &&
           strcmp (why, "out of range") == 0 && n == 0);
    n = 77;
    CHECK (gm_parse_size_range ("1025K", 4096, 1 << 20, &n, &why) == -1 &&
           strcmp (why, "out of range") == 0 && n == 77);
    CHECK (gm_parse_size_range ("banana", 0, UINT64_MAX, &n, &why) == -1 &&
           strcmp (why, "out of range") != 0 && n == 77);
    CHECK (gm_parse_pow2_size ("+1M", 4096, 1 << 20, &n, &why) == 0 &&
           n == 1 << 20);
    CHECK (gm_parse_pow2_size ("4K", 4096, 1 << 20, &n, &why) == 0 &&
           n == 4096);
    n = 77;
    CHECK (gm_parse_pow2_size ("48K", 4096, 1 << 20, &n, &why) == -1 &&
           strcmp (why, "not a power of two") == 0 && n == 77);
    CHECK (gm_parse_pow2_size ("0", 0, 1 << 20, &n, &why) == -1 &&
           strcmp (why, "not a power of two") == 0 && n == 77);
    CHECK (gm_parse_pow2_size ("2M", 4096, 1 << 20, &n, &why) == -1 &&
           strcmp (why, "out of range") == 0 && n == 77);
    CHECK (gm_parse_pow2_size ("2K", 4096, 1 << 20, &n, &why) == -1 &&
           strcmp (why, "out of range") == 0 && n == 77);
    CHECK (gm_parse_pow2_size ("", 4096, 1 << 20, &n, &why) == -1 &&
           n == 77);
  }

  /* Counts: every count-like option of every module. */
  {
    unsigned n = 77;
    static const char *const bad_counts[] = {
      "", " ", "+", "-1", "-0", "0x10", "1.0", "1e2", "3 ", "3x", "++3",
      "4294967296", "99999999999999999999999", "0", "17", NULL,
    };
    CHECK (gm_parse_count ("16", 1, 16, &n, &why) == 0 && n == 16);
    CHECK (gm_parse_count ("+4", 1, 16, &n, &why) == 0 && n == 4);
    CHECK (gm_parse_count (" 3", 1, 16, &n, &why) == 0 && n == 3);
    CHECK (gm_parse_count ("007", 1, 16, &n, &why) == 0 && n == 7);  /* decimal */
    CHECK (gm_parse_count ("0", 0, 5, &n, &why) == 0 && n == 0);
    CHECK (gm_parse_count ("4294967295", 0, UINT32_MAX, &n, &why) == 0 &&
           n == UINT32_MAX);
    for (int i = 0; bad_counts[i]; i++) {
      n = 77;
      why = NULL;
      if (gm_parse_count (bad_counts[i], 1, 16, &n, &why) != -1 || n != 77 ||
          why == NULL) {
        fprintf (stderr, "gm_parse_count took '%s'\n", bad_counts[i]);
        exit (1);
      }
    }
    CHECK (gm_parse_count ("17", 1, 16, &n, &why) == -1);
    CHECK (strcmp (why, "out of range") == 0);
  }

  {
    static const char *const bad_secs[] = {
      "nan", "NaN", "-nan", "inf", "-inf", "infinity", "1e999", "0x1p3",
      "", "1s", "0", "-1", "3601", "1e-9", ".", "e", NULL,
    };
    double d = 42;
    CHECK (gm_parse_seconds ("0.5", 0.01, 3600, &d, &why) == 0 && d == 0.5);
    CHECK (gm_parse_seconds ("1e-2", 0.01, 3600, &d, &why) == 0 && d == 0.01);
    CHECK (gm_parse_seconds ("3600", 0.01, 3600, &d, &why) == 0 && d == 3600);
    CHECK (gm_parse_seconds (NULL, 0.01, 3600, &d, &why) == -1);
    for (size_t i = 0; bad_secs[i]; i++) {
      d = 42;
      why = NULL;
      if (gm_parse_seconds (bad_secs[i], 0.01, 3600, &d, &why) != -1) {
        fprintf (stderr, "gm_parse_seconds accepted '%s'\n", bad_secs[i]);
        exit (1);
      }
      CHECK (why != NULL && d == 42);
    }
  }

  CHECK (strcmp (gm_format_size (64ULL << 20, buf, sizeof buf), "64M") == 0);
  CHECK (strcmp (gm_format_size (4096, buf, sizeof buf), "4K") == 0);
  CHECK (strcmp (gm_format_size (1000, buf, sizeof buf), "1000") == 0);
  CHECK (strcmp (gm_format_size (3ULL << 30, buf, sizeof buf), "3G") == 0);
  CHECK (strcmp (gm_format_size (1536ULL << 10, buf, sizeof buf), "1536K") == 0);
  CHECK (strcmp (gm_format_size ((1ULL << 20) + 1, buf, sizeof buf), "1.0M") == 0);
  /* 16 bytes are enough, as the header says (fuzz-options): the largest
   * numbers, exact ("18014398509317440K") or not ("17592186044416.0M"),
   * took up to 19 characters. */
  {
    char small[16];
    const uint64_t big[] = { UINT64_MAX, 0xfffffffff5f50000,
                             0x2bffc8a70000ffc8, (1ULL << 54) - 1,
                             ((1ULL << 54) - 1) << 10,
                             ((1ULL << 44) - 1) << 10 };
    const char *want[] = { "16.0E", "16.0E", "2.7E", "16.0P", "16.0E",
                           "17592186044415K" };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
      gm_format_size (big[i], buf, sizeof buf);
      gm_format_size (big[i], small, sizeof small);
      if (strlen (buf) >= sizeof small || strcmp (buf, want[i]) != 0) {
        fprintf (stderr, "gm_format_size (%#llx) is \"%s\", expected "
                 "\"%s\"\n", (unsigned long long) big[i], buf, want[i]);
        exit (1);
      }
      CHECK (strcmp (small, buf) == 0);
    }
  }
  /* Rounded in the largest unit that leaves 1 to 1023 of it. */
  CHECK (strcmp (gm_format_size ((3ULL << 29) + 1, buf, sizeof buf), "1.5G") == 0);

  CHECK (gm_is_power_of_2 (1) && gm_is_power_of_2 (4096));
  CHECK (!gm_is_power_of_2 (0) && !gm_is_power_of_2 (1536));
  CHECK_EQ_U64 (gm_next_power_of_2 (3000), 4096);
  CHECK_EQ_U64 (gm_next_power_of_2 (4096), 4096);
  CHECK_EQ_U64 (gm_prev_power_of_2 (0), 1);
  CHECK_EQ_U64 (gm_prev_power_of_2 (1), 1);
  CHECK_EQ_U64 (gm_prev_power_of_2 (3000), 2048);
  CHECK_EQ_U64 (gm_prev_power_of_2 (4096), 4096);
  CHECK_EQ_U64 (gm_prev_power_of_2 (16383), 8192);
  CHECK_EQ_U64 (gm_prev_power_of_2 (UINT64_MAX), UINT64_C (1) << 63);
  CHECK_EQ_U64 (gm_round_down (4097, 512), 4096);
  CHECK_EQ_U64 (gm_round_up (4097, 512), 4608);
  CHECK_EQ_U64 (gm_round_up (4096, 512), 4096);
  UNIT_DONE ();
}

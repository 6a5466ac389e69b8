/* Unit tests for common/statsout.c: the options, and the Prometheus
 * text (names, types, label escaping, derived lines).
 */
#include <stdarg.h>

#include "statsout.h"
#include "unit.h"

static char last_error[512];

static void
record_error (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (last_error, sizeof last_error, fmt, ap);
  va_end (ap);
}

static char *
fake_absolute_path (const char *path)
{
  char *p = NULL;

  if (asprintf (&p, "/abs/%s", path) == -1)
    return NULL;
  return p;
}

static struct gm_counter table[2] = {
  { "reads", "read requests", 0 },
  { "read-bytes", "a name with a character Prometheus refuses", 0 },
};

static void
extra (FILE *fp, void *opaque)
{
  fprintf (fp, "t.ratio 0.250\n");
  fprintf (fp, "t.backing say \"hi\" \\ there\n");
  fprintf (fp, "t.window_4K 7\n");
  fprintf (fp, "garbage line without a dot\n");
  fprintf (fp, "t.inf inf\n");
}

static struct gm_stats_out out = {
  .module = "test", .prefix = "t", .option = "t-stats",
  .c = table, .n = 2, .extra = extra,
  .error = record_error, .absolute_path = fake_absolute_path,
};

/* Static: open_memstream keeps their addresses until fclose. */
static char *buf;
static size_t size;

static char *
render (void)
{
  FILE *fp = open_memstream (&buf, &size);

  CHECK (fp != NULL);
  gm_stats_print_prometheus (fp, &out);
  CHECK (fclose (fp) == 0);
  return buf;
}

int
main (void)
{
  char *text;

  /* Options: the file, the interval and its bounds, other keys. */
  CHECK (gm_stats_config (&out, "other", "1") == 0);
  CHECK (gm_stats_config (&out, "t-statsx", "1") == 0);
  CHECK (gm_stats_config (&out, "t-stats", "f.prom") == 1);
  CHECK (strcmp (out.path, "/abs/f.prom") == 0);
  CHECK (gm_stats_config (&out, "t-stats-interval", "1") == 1);
  CHECK (out.interval == 1);
  CHECK (gm_stats_config (&out, "t-stats-interval", "86400") == 1);
  CHECK (out.interval == 86400);
  /* Blanks and a "+" as every count option takes them (gm_parse_count). */
  CHECK (gm_stats_config (&out, "t-stats-interval", "+5") == 1);
  CHECK (out.interval == 5);
  CHECK (gm_stats_config (&out, "t-stats-interval", " 86400") == 1);
  CHECK (out.interval == 86400);
  const char *bad[] = { "0", "86401", "-1", "+-5", "0x10", "5 ", "5s", "",
                        "1.5", "99999999999999999999" };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    last_error[0] = '\0';
    CHECK (gm_stats_config (&out, "t-stats-interval", bad[i]) == -1);
    CHECK (strstr (last_error, "t-stats-interval=") != NULL);
    CHECK (strstr (last_error, "whole seconds from 1 to 86400") != NULL);
    CHECK (out.interval == 86400);      /* unchanged */
  }
  CHECK (gm_stats_config_complete (&out) == 0);
  free (out.path);
  out.path = NULL;
  CHECK (gm_stats_config_complete (&out) == -1);
  CHECK (strstr (last_error, "t-stats-interval=86400 needs t-stats=FILE") != NULL);
  out.interval = 0;
  CHECK (gm_stats_config_complete (&out) == 0);

  /* The text. */
  gm_count (&table[0], 3);
  gm_count (&table[1], 4096);
  text = render ();
  CHECK (strstr (text, "# TYPE gmblock_reads_total counter\n"
                       "gmblock_reads_total{module=\"test\"} 3\n") != NULL);
  CHECK (strstr (text, "gmblock_read_bytes_total{module=\"test\"} 4096\n") != NULL);
  CHECK (strstr (text, "# TYPE gmblock_ratio gauge\n"
                       "gmblock_ratio{module=\"test\"} 0.250\n") != NULL);
  CHECK (strstr (text, "gmblock_window_4K{module=\"test\"} 7\n") != NULL);
  CHECK (strstr (text, "gmblock_backing_info{module=\"test\","
                       "value=\"say \\\"hi\\\" \\\\ there\"} 1\n") != NULL);
  /* Infinity is not a number a gauge can carry here: a setting. */
  CHECK (strstr (text, "gmblock_inf_info{module=\"test\",value=\"inf\"} 1\n") != NULL);
  CHECK (strstr (text, "garbage") == NULL);
  /* HELP depends on the name alone. */
  CHECK (strstr (text, "# HELP gmblock_reads_total gmblock counter 'reads' "
                       "of the module in label module") != NULL);
  CHECK (strstr (text, "test") == strstr (text, "module=\"test\"") + 8);
  free (text);
  UNIT_DONE ();
}

/* Unit tests for common/counters.c. */
#include <pthread.h>
#include <unistd.h>

#include "counters.h"
#include "unit.h"

static struct gm_counter c[2] = {
  { "ops", "operations", 0 },
  { "bytes", "bytes", 0 },
};

static void *
bump (void *arg)
{
  for (int i = 0; i < 100000; i++) {
    gm_count (&c[0], 1);
    gm_count (&c[1], 512);
  }
  return NULL;
}

static void
extra (FILE *fp, void *opaque)
{
  fprintf (fp, "%s 42\n", (const char *) opaque);
}

int
main (void)
{
  pthread_t th[4];
  char path[] = "/var/tmp/gmblock-counters-XXXXXX";
  char line[128];
  FILE *fp;
  int fd;

  for (int i = 0; i < 4; i++)
    pthread_create (&th[i], NULL, bump, NULL);
  for (int i = 0; i < 4; i++)
    pthread_join (th[i], NULL);
  CHECK_EQ_U64 (gm_counter_get (&c[0]), 400000);
  CHECK_EQ_U64 (gm_counter_get (&c[1]), 400000ULL * 512);

  fd = mkstemp (path);
  CHECK (fd >= 0);
  close (fd);
  CHECK (gm_counters_write_file (path, "t", c, 2, extra, "t.extra") == 0);
  fp = fopen (path, "r");
  CHECK (fp != NULL);
  CHECK (fgets (line, sizeof line, fp) && strcmp (line, "t.ops 400000\n") == 0);
  CHECK (fgets (line, sizeof line, fp) && strcmp (line, "t.bytes 204800000\n") == 0);
  CHECK (fgets (line, sizeof line, fp) && strcmp (line, "t.extra 42\n") == 0);
  fclose (fp);
  unlink (path);

  /* The exit-time report: nothing to do without a flag or a file, and
   * the file is written when given.
   */
  CHECK (gm_counters_report (false, NULL, "t", c, 2, NULL, NULL) == 0);
  CHECK (gm_counters_report (false, path, "t", c, 2, NULL, NULL) == 0);
  fp = fopen (path, "r");
  CHECK (fp != NULL);
  CHECK (fgets (line, sizeof line, fp) && strcmp (line, "t.ops 400000\n") == 0);
  fclose (fp);
  unlink (path);
  CHECK (gm_counters_report (false, "/nonexistent/dir/x", "t", c, 2, NULL, NULL) == -1);

  /* An unwritable destination fails cleanly. */
  CHECK (gm_counters_write_file ("/nonexistent/dir/x", "t", c, 2, NULL, NULL) == -1);
  UNIT_DONE ();
}

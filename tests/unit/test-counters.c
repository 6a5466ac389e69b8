/* Unit tests for common/counters.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "counters.h"
#include "unit.h"

static struct gm_counter c[2] = {
  { "ops", "operations", 0 },
  { "bytes", "bytes", 0 },
};

struct table {
  const char *prefix;
  size_t n;
  void (*extra) (FILE *fp, void *opaque);
  void *opaque;
};

static void
emit (FILE *fp, void *opaque)
{
  const struct table *t = opaque;

  gm_counters_print (fp, t->prefix, c, t->n);
  if (t->extra)
    t->extra (fp, t->opaque);
}

static int
write_table (const char *path, const char *prefix, size_t n,
             void (*extra) (FILE *fp, void *opaque), void *opaque)
{
  struct table t = { prefix, n, extra, opaque };

  return gm_write_file_atomic (path, emit, &t);
}

static void *
bump (void *arg)
{
  for (int i = 0; i < 100000; i++) {
    gm_count (&c[0], 1);
    gm_count (&c[1], 512);
  }
  return NULL;
}

/* The whole of a small file into buf (NUL-terminated), or "" */
static const char *
slurp (const char *path, char *buf, size_t len)
{
  FILE *fp = fopen (path, "r");
  size_t n = 0;

  if (fp) {
    n = fread (buf, 1, len - 1, fp);
    fclose (fp);
  }
  buf[n] = '\0';
  return buf;
}

/* The old writer used "PATH.tmpPID", a name anyone can guess, opened
 * with fopen, which follows symlinks: a symlink planted there made the
 * report overwrite its target (as root, any file), and the rename then
 * left the stats file a symlink to it.  Plant one at that name: the
 * victim must stay as it was and the stats file be a regular file.
 */
static void
check_no_symlink_follow (void)
{
  char dir[] = "/var/tmp/gmblock-counters-dir-XXXXXX";
  char victim[64], stats[64], trap[96], buf[256];
  struct stat st;
  int fd;

  CHECK (mkdtemp (dir) != NULL);
  snprintf (victim, sizeof victim, "%s/victim", dir);
  snprintf (stats, sizeof stats, "%s/stats.txt", dir);
  snprintf (trap, sizeof trap, "%s/stats.txt.tmp%ld", dir, (long) getpid ());
  fd = open (victim, O_WRONLY | O_CREAT | O_EXCL, 0600);
  CHECK (fd >= 0);
  CHECK (write (fd, "precious\n", 9) == 9);
  close (fd);
  CHECK (symlink (victim, trap) == 0);

  CHECK (write_table (stats, "t", 2, NULL, NULL) == 0);
  CHECK (strcmp (slurp (victim, buf, sizeof buf), "precious\n") == 0);
  CHECK (lstat (stats, &st) == 0 && S_ISREG (st.st_mode));
  CHECK ((st.st_mode & 07777) == 0644);
  CHECK (strcmp (slurp (stats, buf, sizeof buf),
                 "t.ops 400000\nt.bytes 204800000\n") == 0);

  /* Replacing an existing stats file works, and leaves no temp file. */
  CHECK (write_table (stats, "u", 1, NULL, NULL) == 0);
  CHECK (strcmp (slurp (stats, buf, sizeof buf), "u.ops 400000\n") == 0);
  unlink (trap);
  unlink (victim);
  unlink (stats);
  CHECK (rmdir (dir) == 0);       /* fails if a temp file was left */
}

static void
extra (FILE *fp, void *opaque)
{
  fprintf (fp, "%s 42\n", (const char *) opaque);
}

/* Prints more than the file may hold (RLIMIT_FSIZE: the first buffer's
 * write fails, as on a full disk), then lifts the limit, as freed space
 * would, and prints a last line, which fflush writes fine.
 */
static void
overflow (FILE *fp, void *opaque)
{
  struct rlimit *saved = opaque;

  for (int i = 0; i < 1000; i++)
    fprintf (fp, "line %d of many\n", i);
  setrlimit (RLIMIT_FSIZE, saved);
  fprintf (fp, "the end\n");
}

/* A write that failed inside emit is an error, though the flush of what
 * came after succeeds: the stream dropped the failed buffer, and the
 * truncated file used to be renamed over the good one with success.
 */
static void
check_lost_write_fails (void)
{
  char path[] = "/var/tmp/gmblock-counters-XXXXXX", buf[64];
  struct rlimit saved, small = { 2048, 2048 };
  int fd = mkstemp (path);

  CHECK (fd >= 0);
  close (fd);
  CHECK (write_table (path, "good", 1, NULL, NULL) == 0);
  CHECK (getrlimit (RLIMIT_FSIZE, &saved) == 0);
  signal (SIGXFSZ, SIG_IGN);
  small.rlim_max = saved.rlim_max;
  CHECK (setrlimit (RLIMIT_FSIZE, &small) == 0);
  errno = 0;
  CHECK (gm_write_file_atomic (path, overflow, &saved) == -1);
  CHECK (errno == EFBIG);
  CHECK (setrlimit (RLIMIT_FSIZE, &saved) == 0);
  /* The good file is still there, whole. */
  CHECK (strcmp (slurp (path, buf, sizeof buf), "good.ops 400000\n") == 0);
  unlink (path);
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
  CHECK (write_table (path, "t", 2, extra, "t.extra") == 0);
  fp = fopen (path, "r");
  CHECK (fp != NULL);
  CHECK (fgets (line, sizeof line, fp) && strcmp (line, "t.ops 400000\n") == 0);
  CHECK (fgets (line, sizeof line, fp) && strcmp (line, "t.bytes 204800000\n") == 0);
  CHECK (fgets (line, sizeof line, fp) && strcmp (line, "t.extra 42\n") == 0);
  fclose (fp);
  unlink (path);

  check_no_symlink_follow ();
  check_lost_write_fails ();

  /* An unwritable destination fails cleanly. */
  CHECK (write_table ("/nonexistent/dir/x", "t", 2, NULL, NULL) == -1);
  UNIT_DONE ();
}

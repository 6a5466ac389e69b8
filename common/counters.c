/* gmblock: counters output.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "counters.h"

void
gm_counters_print (FILE *fp, const char *prefix, struct gm_counter *c, size_t n)
{
  for (size_t i = 0; i < n; i++)
    fprintf (fp, "%s.%s %llu\n", prefix, c[i].name,
             (unsigned long long) gm_counter_get (&c[i]));
}

/* The temp file is made by mkostemp (O_CREAT|O_EXCL, random name) next
 * to the target, so a symlink or file planted at a guessable name is
 * never opened, and the rename stays within one filesystem.  mkostemp
 * makes it 0600; stats are for anyone to read.
 */
static int
make_temp (const char *path, char **tmp)
{
  size_t len = strlen (path) + sizeof ".tmpXXXXXX";
  int fd, e;

  *tmp = malloc (len);
  if (*tmp == NULL)
    return -1;
  snprintf (*tmp, len, "%s.tmpXXXXXX", path);
  fd = mkostemp (*tmp, O_CLOEXEC);
  if (fd == -1) {
    e = errno;
    free (*tmp);
    *tmp = NULL;
    errno = e;
  }
  return fd;
}

int
gm_probe_file_atomic (const char *path)
{
  struct stat st;
  char *tmp;
  int fd = make_temp (path, &tmp);

  if (fd == -1)
    return -1;
  close (fd);
  unlink (tmp);
  free (tmp);
  if (stat (path, &st) == 0 && S_ISDIR (st.st_mode)) {
    errno = EISDIR;
    return -1;
  }
  return 0;
}

int
gm_write_file_atomic (const char *path,
                      void (*emit) (FILE *fp, void *opaque), void *opaque)
{
  char *tmp;
  FILE *fp = NULL;
  int fd = make_temp (path, &tmp), e;

  if (fd == -1)
    return -1;
  if (fchmod (fd, 0644) == -1 || (fp = fdopen (fd, "w")) == NULL)
    goto fail;
  errno = 0;
  emit (fp, opaque);
  /* Durable before it replaces the old file.  A write that failed
   * inside emit (ENOSPC) threw its buffer away and is not reported by
   * fflush: only the stream's error flag tells.
   */
  if (ferror (fp) || fflush (fp) == EOF || fsync (fd) == -1) {
    if (errno == 0)
      errno = EIO;
    goto fail;
  }
  e = fclose (fp);
  fp = NULL;
  fd = -1;
  if (e == EOF || rename (tmp, path) == -1)
    goto fail;
  free (tmp);
  return 0;

 fail:
  e = errno;
  if (fp)
    fclose (fp);
  else if (fd >= 0)
    close (fd);
  unlink (tmp);
  free (tmp);
  errno = e;
  return -1;
}

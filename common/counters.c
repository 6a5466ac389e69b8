/* gmblock: counters output.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "counters.h"

void
gm_counters_print (FILE *fp, const char *prefix, struct gm_counter *c, size_t n)
{
  for (size_t i = 0; i < n; i++)
    fprintf (fp, "%s.%s %llu\n", prefix, c[i].name,
             (unsigned long long) gm_counter_get (&c[i]));
}

int
gm_counters_write_file (const char *path, const char *prefix,
                        struct gm_counter *c, size_t n,
                        void (*extra) (FILE *fp, void *opaque), void *opaque)
{
  size_t len = strlen (path) + 16;
  char *tmp = malloc (len);
  FILE *fp;
  int e;

  if (tmp == NULL)
    return -1;
  snprintf (tmp, len, "%s.tmp%ld", path, (long) getpid ());
  fp = fopen (tmp, "w");
  if (fp == NULL)
    goto fail;
  gm_counters_print (fp, prefix, c, n);
  if (extra)
    extra (fp, opaque);
  if (fclose (fp) == EOF)
    goto fail;
  if (rename (tmp, path) == -1)
    goto fail;
  free (tmp);
  return 0;

 fail:
  e = errno;
  unlink (tmp);
  free (tmp);
  errno = e;
  return -1;
}

int
gm_counters_report (bool to_stderr, const char *path, const char *prefix,
                    struct gm_counter *c, size_t n,
                    void (*extra) (FILE *fp, void *opaque), void *opaque)
{
  if (to_stderr) {
    gm_counters_print (stderr, prefix, c, n);
    if (extra)
      extra (stderr, opaque);
  }
  if (path)
    return gm_counters_write_file (path, prefix, c, n, extra, opaque);
  return 0;
}

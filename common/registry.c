/* gmblock: the cross-module registry (see registry.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbdkitargs.h"
#include "registry.h"
#include "sizes.h"

#define PREFIX "GMBLOCK_REG_"

/* The process that loaded the module.  Without -f, nbdkit forks into
 * the background after .get_ready and before .after_fork, where some
 * modules look entries up: the pid they were published with is this
 * one, not getpid () there.  An environment inherited from another
 * nbdkit (--run) still carries another pid, and is still ignored.
 */
static long load_pid;

__attribute__((constructor))
static void
note_load_pid (void)
{
  load_pid = (long) getpid ();
}

static int
var_name (const char *key, char *buf, size_t len)
{
  if (*key == '\0' || strlen (key) + sizeof PREFIX > len)
    goto bad;
  for (const char *p = key; *p; p++)
    if (!isalnum ((unsigned char) *p) && *p != '_')
      goto bad;
  snprintf (buf, len, PREFIX "%s", key);
  return 0;
 bad:
  errno = EINVAL;
  return -1;
}

int
gm_registry_publish (const char *key, const char *value)
{
  char name[64], *v;
  int r;

  if (var_name (key, name, sizeof name) == -1)
    return -1;
  if (asprintf (&v, "%ld:%s", load_pid, value) == -1)
    return -1;
  r = setenv (name, v, 1);
  free (v);
  return r;
}

char *
gm_registry_lookup (const char *key)
{
  char name[64], *end;
  const char *v;
  long pid;

  if (var_name (key, name, sizeof name) == -1 || (v = getenv (name)) == NULL)
    return NULL;
  errno = 0;
  pid = strtol (v, &end, 10);
  if (errno || end == v || *end != ':' || pid != load_pid)
    return NULL;
  return strdup (end + 1);
}

int
gm_registry_served_size (uint64_t *size)
{
  char *v = gm_registry_lookup (GM_REG_SERVED_SIZE);
  struct gm_nbdkit_args args;
  uint64_t n;
  int r = 0;

  if (v && gm_parse_u64 (v, 10, &n) == 0) {
    gm_nbdkit_self (&args);
    if (args.gmblock_filters_only) {
      *size = n;
      r = 1;
    }
  }
  free (v);
  return r;
}

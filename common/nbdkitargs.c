/* gmblock: nbdkit's command line (see nbdkitargs.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbdkitargs.h"

/* nbdkit 1.32's options (nbdkit(1)); only which take an argument
 * matters here, and which is --filter.  An option not listed is
 * skipped as unknown: if it took a separate argument, that argument is
 * taken for a plugin parameter, which can only hide an -r or a
 * --filter given as that argument.  ./nbdkit parses with the same
 * table.
 */
static const char short_opts[] = "46D:e:fg:i:nop:P:rst:u:U:vV";
static const struct option long_opts[] = {
  { "help", no_argument, NULL, 0 },
  { "ipv4-only", no_argument, NULL, '4' },
  { "ipv6-only", no_argument, NULL, '6' },
  { "debug", required_argument, NULL, 'D' },
  { "dump-config", no_argument, NULL, 0 },
  { "dump-plugin", no_argument, NULL, 0 },
  { "exit-with-parent", no_argument, NULL, 0 },
  { "export", required_argument, NULL, 'e' },
  { "export-name", required_argument, NULL, 'e' },
  { "exportname", required_argument, NULL, 'e' },
  { "filter", required_argument, NULL, 0 },
  { "foreground", no_argument, NULL, 'f' },
  { "no-fork", no_argument, NULL, 'f' },
  { "group", required_argument, NULL, 'g' },
  { "ip-addr", required_argument, NULL, 'i' },
  { "ipaddr", required_argument, NULL, 'i' },
  { "log", required_argument, NULL, 0 },
  { "mask-handshake", required_argument, NULL, 0 },
  { "new-style", no_argument, NULL, 'n' },
  { "newstyle", no_argument, NULL, 'n' },
  { "no-sr", no_argument, NULL, 0 },
  { "old-style", no_argument, NULL, 'o' },
  { "oldstyle", no_argument, NULL, 'o' },
  { "pid-file", required_argument, NULL, 'P' },
  { "pidfile", required_argument, NULL, 'P' },
  { "port", required_argument, NULL, 'p' },
  { "read-only", no_argument, NULL, 'r' },
  { "readonly", no_argument, NULL, 'r' },
  { "run", required_argument, NULL, 0 },
  { "selinux-label", required_argument, NULL, 0 },
  { "long-options", no_argument, NULL, 0 },
  { "short-options", no_argument, NULL, 0 },
  { "single", no_argument, NULL, 's' },
  { "stdin", no_argument, NULL, 's' },
  { "swap", no_argument, NULL, 0 },
  { "threads", required_argument, NULL, 't' },
  { "tls", required_argument, NULL, 0 },
  { "tls-certificates", required_argument, NULL, 0 },
  { "tls-psk", required_argument, NULL, 0 },
  { "tls-verify-peer", no_argument, NULL, 0 },
  { "unix", required_argument, NULL, 'U' },
  { "user", required_argument, NULL, 'u' },
  { "verbose", no_argument, NULL, 'v' },
  { "version", no_argument, NULL, 'V' },
  { "vsock", no_argument, NULL, 0 },
  { NULL, 0, NULL, 0 }
};

/* Whether NAME, a --filter argument, is one of gmblock's filters: by
 * its short name (gmblock-cache) or a path to its .so, as ./nbdkit
 * passes them (.../nbdkit-gmblock-cache-filter.so).
 */
static bool
gmblock_filter (const char *name)
{
  const char *base = strrchr (name, '/');
  size_t n;

  base = base ? base + 1 : name;
  if (strncmp (base, "gmblock-", 8) == 0 && strchr (base, '.') == NULL)
    return true;
  n = strlen (base);
  return strncmp (base, "nbdkit-gmblock-", 15) == 0 && n > 25 &&
    strcmp (base + n - 10, "-filter.so") == 0;
}

/* Parse argv as nbdkit does: *ro for -r, *gm_only for no filter but
 * gmblock's.
 */
static void
parse_args (int argc, char **argv, bool *ro, bool *gm_only)
{
  char **copy = malloc ((argc + 1) * sizeof *copy);   /* getopt permutes */
  int c, idx, saved_opterr = opterr;

  *ro = false;
  *gm_only = false;             /* unknown unless parsed */
  if (copy == NULL)
    return;
  *gm_only = true;
  memcpy (copy, argv, argc * sizeof *copy);
  copy[argc] = NULL;
  opterr = 0;
  optind = 0;                   /* GNU: start afresh */
  while ((c = getopt_long (argc, copy, short_opts, long_opts, &idx)) != -1) {
    if (c == 'r')
      *ro = true;
    else if (c == 0 && strcmp (long_opts[idx].name, "filter") == 0 &&
             !gmblock_filter (optarg))
      *gm_only = false;
  }
  optind = 0;
  opterr = saved_opterr;
  free (copy);
}

bool
gm_nbdkit_args_readonly (int argc, char **argv)
{
  bool ro, gm_only;

  parse_args (argc, argv, &ro, &gm_only);
  return ro;
}

bool
gm_nbdkit_args_gmblock_filters_only (int argc, char **argv)
{
  bool ro, gm_only;

  parse_args (argc, argv, &ro, &gm_only);
  return gm_only;
}

/* Parse this process's command line (/proc/self/cmdline); false for
 * both when it cannot be read.
 */
static void
parse_self (bool *ro, bool *gm_only)
{
  FILE *f = fopen ("/proc/self/cmdline", "r");
  char *buf = NULL, **argv = NULL;
  size_t len = 0, cap = 0, n;
  int argc = 0;

  *ro = *gm_only = false;
  if (f == NULL)
    return;
  for (;;) {                    /* the whole file: no size is known */
    if (len == cap) {
      size_t more = cap ? 2 * cap : 4096;
      char *b = realloc (buf, more + 1);      /* + a NUL after the last */
      if (b == NULL)
        goto out;
      buf = b;
      cap = more;
    }
    n = fread (buf + len, 1, cap - len, f);
    if (n == 0)
      break;
    len += n;
  }
  if (buf == NULL)
    goto out;
  buf[len] = '\0';
  argv = malloc ((len + 1) * sizeof *argv);
  if (argv == NULL)
    goto out;
  for (size_t i = 0; i < len; i += strlen (buf + i) + 1)
    argv[argc++] = buf + i;     /* arguments end with NUL, the last too */
  if (argc > 0)
    parse_args (argc, argv, ro, gm_only);
 out:
  fclose (f);
  free (argv);
  free (buf);
}

bool
gm_nbdkit_readonly (void)
{
  bool ro, gm_only;

  parse_self (&ro, &gm_only);
  return ro;
}

bool
gm_nbdkit_gmblock_filters_only (void)
{
  bool ro, gm_only;

  parse_self (&ro, &gm_only);
  return gm_only;
}

/* gmblock: nbdkit's command line (see nbdkitargs.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* The file name of a --filter or plugin argument (a short name or a
 * path). */
static const char *
path_base (const char *name)
{
  const char *slash = strrchr (name, '/');

  return slash ? slash + 1 : name;
}

/* Whether NAME, a --filter argument, is one of gmblock's filters: by
 * its short name (gmblock-cache) or a path to its .so, as ./nbdkit
 * passes them (.../nbdkit-gmblock-cache-filter.so).
 */
static bool
gmblock_filter (const char *name)
{
  const char *base = path_base (name);
  size_t n;

  if (strncmp (base, "gmblock-", 8) == 0 && strchr (base, '.') == NULL)
    return true;
  n = strlen (base);
  return strncmp (base, "nbdkit-gmblock-", 15) == 0 && n > 25 &&
    strcmp (base + n - 10, "-filter.so") == 0;
}

/* Whether NAME, nbdkit's plugin argument, is one of gmblock's plugins:
 * gmblock, gmblock-rdma, or a path to nbdkit-gmblock[-NAME]-plugin.so.
 */
static bool
gmblock_plugin (const char *name)
{
  const char *base = path_base (name);
  size_t n = strlen (base);

  if (strncmp (base, "gmblock", 7) == 0 && strpbrk (base, ".=") == NULL &&
      (base[7] == '\0' || base[7] == '-'))
    return true;
  return strncmp (base, "nbdkit-gmblock", 14) == 0 && n >= 24 &&
    (base[14] == '-') && strcmp (base + n - 10, "-plugin.so") == 0;
}

/* Whether NAME, a --filter argument, is nbdkit's ip filter. */
static bool
ip_filter (const char *name)
{
  const char *base = path_base (name);

  return strcmp (base, "ip") == 0 || strcmp (base, "nbdkit-ip-filter.so") == 0;
}

/* nbdkit's --tls values that refuse clients without TLS. */
static bool
tls_required (const char *v)
{
  return strcasecmp (v, "require") == 0 || strcasecmp (v, "required") == 0 ||
    strcasecmp (v, "force") == 0;
}

void
gm_nbdkit_args_parse (int argc, char **argv, struct gm_nbdkit_args *a)
{
  char **copy = malloc ((argc + 1) * sizeof *copy);   /* getopt permutes */
  int c, idx, saved_opterr = opterr;

  *a = (struct gm_nbdkit_args) { .gmblock_filters_only = false };
  if (copy == NULL)
    return;                     /* unknown: nothing is claimed */
  a->gmblock_filters_only = true;
  memcpy (copy, argv, argc * sizeof *copy);
  copy[argc] = NULL;
  opterr = 0;
  optind = 0;                   /* GNU: start afresh */
  while ((c = getopt_long (argc, copy, short_opts, long_opts, &idx)) != -1) {
    const char *name = c == 0 ? long_opts[idx].name : "";
    if (c == 'r')
      a->readonly = true;
    else if (strcmp (name, "filter") == 0) {
      if (!gmblock_filter (optarg))
        a->gmblock_filters_only = false;
      if (ip_filter (optarg) && a->access == NULL)
        a->access = "--filter=ip";
    }
    else if (strcmp (name, "tls") == 0 && tls_required (optarg) &&
             a->access == NULL)
      a->access = "--tls=require";
  }
  /* GNU getopt has moved the plugin, the first argument that is no
   * option, to optind. */
  if (optind < argc)
    a->gmblock_plugin = gmblock_plugin (copy[optind]);
  optind = 0;
  opterr = saved_opterr;
  free (copy);
}

void
gm_nbdkit_self (struct gm_nbdkit_args *a)
{
  FILE *f = fopen ("/proc/self/cmdline", "r");
  char *buf = NULL, **argv = NULL;
  size_t len = 0, cap = 0, n;
  int argc = 0;

  *a = (struct gm_nbdkit_args) { .gmblock_filters_only = false };
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
    gm_nbdkit_args_parse (argc, argv, a);
 out:
  fclose (f);
  free (argv);
  free (buf);
}

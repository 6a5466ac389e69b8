/* gmblock: where a module's counters go, and when (see statsout.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "overlap.h"            /* gm_now_ns */
#include "registry.h"
#include "sizes.h"
#include "statsout.h"

/* Each module is its own shared object with its own copy of this file,
 * so these are per module: one gm_stats_out each.
 */
static int wake[2] = { -1, -1 };        /* SIGUSR1 and stop -> thread */
static struct sigaction previous;
static atomic_bool stopping;
/* What the handler may use, for gm_stats_stop to take away: the write
 * end it wakes the thread by (-1: none), and the calls of the handler
 * under way.  Restoring the previous handler does not end a call that
 * another thread has already begun: holding the pipe's number, it
 * would write to whatever the process opens under that number once
 * the pipe is closed (a client's socket, a file).  So the stop clears
 * the number, then waits for the calls to end before it closes.
 * Lock-free atomics are async-signal-safe.
 */
static atomic_int handler_fd = -1;
static atomic_uint handler_calls;
_Static_assert (ATOMIC_INT_LOCK_FREE == 2,
                "the SIGUSR1 handler needs lock-free atomics");

/* The module after us in the chain may be nbdkit's default (which
 * would end the process) or another gmblock module's handler, which
 * must see the signal too.
 */
static void
on_sigusr1 (int sig, siginfo_t *info, void *ctx)
{
  int e = errno, fd;
  char b = 'u';

  /* Counted before the number is read (both sequentially consistent):
   * a stop that saw no call under way has cleared it for us.
   */
  atomic_fetch_add (&handler_calls, 1);
  fd = atomic_load (&handler_fd);
  if (fd >= 0 && write (fd, &b, 1) == -1) {
    /* full pipe: a summary is already due */
  }
  errno = e;
  if (previous.sa_flags & SA_SIGINFO)
    previous.sa_sigaction (sig, info, ctx);
  else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN)
    previous.sa_handler (sig);
  atomic_fetch_sub (&handler_calls, 1);
}

/* After the handler is off: no call of it uses the pipe any more. */
static void
quiesce_handler (void)
{
  const struct timespec ms = { .tv_nsec = 1000000 };

  atomic_store (&handler_fd, -1);
  while (atomic_load (&handler_calls) > 0)
    nanosleep (&ms, NULL);
}

int
gm_stats_config (struct gm_stats_out *s, const char *key, const char *value)
{
  size_t len = strlen (s->option);
  const char *why;
  unsigned v;

  if (strcmp (key, s->option) == 0) {
    free (s->path);
    s->path = NULL;
    if (*value == '\0') {
      s->error ("%s: %s= is empty: expected a file path", s->prefix, key);
      return -1;
    }
    /* Absolute now: in daemon mode nbdkit changes to / before we write. */
    s->path = s->absolute_path (value);
    return s->path ? 1 : -1;
  }
  if (strncmp (key, s->option, len) != 0 || strcmp (key + len, "-interval"))
    return 0;
  if (gm_parse_count (value, 1, GM_STATS_MAX_INTERVAL, &v, &why)) {
    s->error ("%s: %s=%s: expected whole seconds from 1 to %d",
              s->prefix, key, value, GM_STATS_MAX_INTERVAL);
    return -1;
  }
  s->interval = v;
  return 1;
}

int
gm_stats_config_complete (struct gm_stats_out *s)
{
  if (s->interval && s->path == NULL) {
    s->error ("%s: %s-interval=%u needs %s=FILE: the file to rewrite "
              "every %u s", s->prefix, s->option, s->interval,
              s->option, s->interval);
    return -1;
  }
  return 0;
}

static void
emit_prometheus (FILE *fp, void *opaque)
{
  gm_stats_print_prometheus (fp, opaque);
}

static void
emit_lines (FILE *fp, void *opaque)
{
  const struct gm_stats_out *s = opaque;

  if (s->refresh)
    s->refresh ();
  gm_counters_print (fp, s->prefix, s->c, s->n);
  if (s->extra)
    s->extra (fp, s->opaque);
}

static int
write_file (struct gm_stats_out *s)
{
  return gm_write_file_atomic (s->path,
                               s->interval ? emit_prometheus : emit_lines, s);
}

static void
summary_to_stderr (struct gm_stats_out *s)
{
  flockfile (stderr);
  emit_lines (stderr, s);
  fflush (stderr);
  funlockfile (stderr);
}

/* Report a failing file once, not every interval, until a write
 * succeeds again.
 */
static void
write_live (struct gm_stats_out *s)
{
  if (write_file (s) == -1) {
    if (!s->failing)
      s->error ("%s: %s=%s: %m (retrying every %u s)", s->prefix,
                s->option, s->path, s->interval);
    s->failing = true;
  }
  else
    s->failing = false;
}

static uint64_t
now_ms (void)
{
  return gm_now_ns () / 1000000;
}

static void *
stats_thread (void *arg)
{
  struct gm_stats_out *s = arg;
  uint64_t next = now_ms () + s->interval * 1000ull;

  while (!atomic_load (&stopping)) {
    struct pollfd p = { .fd = wake[0], .events = POLLIN };
    int timeout = -1;
    char b[16];
    ssize_t r;

    if (s->interval) {
      uint64_t t = now_ms ();
      timeout = next > t ? next - t : 0;
    }
    if (poll (&p, 1, timeout) > 0 && (r = read (wake[0], b, sizeof b)) > 0 &&
        memchr (b, 'u', r) && !atomic_load (&stopping))
      summary_to_stderr (s);
    if (s->interval && now_ms () >= next) {
      write_live (s);
      next += s->interval * 1000ull;
      if (next < now_ms ())     /* we were stopped: do not catch up */
        next = now_ms () + s->interval * 1000ull;
    }
  }
  return NULL;
}

/* The counters replace whatever path names (renamed over it): refuse
 * what must not be replaced, such as the file being served (the clients'
 * writes would go to the deleted old one) or a device node.  Before the
 * first write, so nothing was replaced yet.
 */
static int
check_target (struct gm_stats_out *s)
{
  char *served;
  struct stat st, sv;
  bool same;

  if (lstat (s->path, &st) == -1)
    return 0;                   /* made at the first write */
  if (!S_ISREG (st.st_mode) && !S_ISLNK (st.st_mode) && !S_ISDIR (st.st_mode)) {
    s->error ("%s: %s=%s: not a regular file (a device node, socket or "
              "FIFO): the counters would replace it; name a new or regular "
              "file", s->prefix, s->option, s->path);
    return -1;
  }
  /* The name itself (lstat): renamed over, a symlink goes, not what
   * it points to. */
  served = gm_registry_lookup (GM_REG_SERVED_FILE);
  same = served && stat (served, &sv) == 0 &&
    st.st_dev == sv.st_dev && st.st_ino == sv.st_ino;
  free (served);
  if (same) {
    s->error ("%s: %s=%s: that is the file being served: the counters "
              "would replace it; name another file", s->prefix, s->option,
              s->path);
    return -1;
  }
  return 0;
}

/* Two modules of one process must not share a file: each replaces the
 * whole file, so the last to write would leave only its own counters.
 * The modules' .get_ready run one after another (the plugin's first),
 * each claiming its path in the registry: "PREFIX OPTION=PATH" lines.
 */
/* PATH's name with its folder resolved (a file is renamed over its
 * name: a symlink itself is replaced, not what it points to), malloc'd;
 * NULL if the folder cannot be resolved.
 */
static char *
canonical_name (const char *path)
{
  const char *slash = strrchr (path, '/');
  char *dir, *real, *out = NULL;

  if (slash == NULL)
    return NULL;
  if ((dir = strndup (path, slash == path ? 1 : (size_t) (slash - path))) == NULL)
    return NULL;
  real = realpath (dir, NULL);
  free (dir);
  if (real && asprintf (&out, "%s/%s", strcmp (real, "/") ? real : "",
                        slash + 1) == -1)
    out = NULL;
  free (real);
  return out;
}

/* Whether two stats paths name one file.  Names, not inodes: a file
 * renamed over one of two hard links (or over a symlink) leaves the
 * other alone.
 */
static bool
same_name (const char *a, const char *b)
{
  char *ca, *cb;
  bool same;

  if (strcmp (a, b) == 0)
    return true;
  ca = canonical_name (a);
  cb = canonical_name (b);
  same = ca && cb && strcmp (ca, cb) == 0;
  free (ca);
  free (cb);
  return same;
}

static int
claim_path (struct gm_stats_out *s)
{
  char *claimed = gm_registry_lookup (GM_REG_STATS_FILES), *line, *save, *all;
  const char *eq;
  int r = -1;

  for (line = claimed ? strtok_r (claimed, "\n", &save) : NULL; line;
       line = strtok_r (NULL, "\n", &save)) {
    if ((eq = strchr (line, '=')) == NULL)
      continue;
    if (same_name (eq + 1, s->path)) {
      s->error ("%s: %s=%s: %s names that file too: each module needs a "
                "file of its own (the last to write it would replace the "
                "other's counters)", s->prefix, s->option, s->path, line);
      goto out;
    }
  }
  free (claimed);
  claimed = gm_registry_lookup (GM_REG_STATS_FILES);
  if (asprintf (&all, "%s%s %s=%s\n", claimed ? claimed : "", s->prefix,
                s->option, s->path) == -1) {
    s->error ("%s: %s=%s: %m", s->prefix, s->option, s->path);
    goto out;
  }
  r = gm_registry_publish (GM_REG_STATS_FILES, all);
  if (r == -1)
    s->error ("%s: %s=%s: publishing it: %m", s->prefix, s->option, s->path);
  free (all);
 out:
  free (claimed);
  return r;
}

int
gm_stats_ready (struct gm_stats_out *s)
{
  if (s->path && check_target (s) == -1)
    return -1;
  if (s->path && claim_path (s) == -1)
    return -1;
  if (s->path && gm_probe_file_atomic (s->path) == -1) {
    s->error ("%s: %s=%s: %m (expected a file the server can write its "
              "counters to, in a folder where it can make files)",
              s->prefix, s->option, s->path);
    return -1;
  }
  return 0;
}

int
gm_stats_start (struct gm_stats_out *s)
{
  bool summary = s->to_stderr && *s->to_stderr;
  int e;

  /* The first file at once (all zeros), now that nbdkit runs as the
   * user it serves as (-u, -g): a path that cannot be written shows at
   * start-up, not when the counters are lost at exit.
   */
  if (s->path && write_file (s) == -1) {
    s->error ("%s: %s=%s: %m", s->prefix, s->option, s->path);
    return -1;
  }
  if (!summary && !s->interval)
    return 0;
  if (pipe2 (wake, O_CLOEXEC | O_NONBLOCK) == -1) {
    s->error ("%s: statistics thread: pipe: %m", s->prefix);
    return -1;
  }
  atomic_store (&stopping, false);
  e = pthread_create (&s->thread, NULL, stats_thread, s);
  if (e) {
    errno = e;
    s->error ("%s: statistics thread: pthread_create: %m", s->prefix);
    goto fail;
  }
  s->running = true;
  if (summary) {
    struct sigaction sa = { .sa_sigaction = on_sigusr1,
                            .sa_flags = SA_SIGINFO | SA_RESTART };

    sigemptyset (&sa.sa_mask);
    atomic_store (&handler_fd, wake[1]);
    /* The link first, then the handler: sigaction (..., &sa, &previous)
     * fills previous in only after our handler is on, and a signal in
     * between would skip the modules below (or call a handler half
     * copied).  No other thread changes SIGUSR1: nbdkit runs the
     * modules' .after_fork one after another.
     */
    if (sigaction (SIGUSR1, NULL, &previous) == -1 ||
        sigaction (SIGUSR1, &sa, NULL) == -1) {
      s->error ("%s: SIGUSR1 summary not available: sigaction: %m",
                s->prefix);
      atomic_store (&handler_fd, -1);
    }
    else
      s->handler_installed = true;
  }
  return 0;

 fail:
  close (wake[0]);
  close (wake[1]);
  wake[0] = wake[1] = -1;
  return -1;
}

void
gm_stats_stop (struct gm_stats_out *s)
{
  char b = 's';

  if (s->handler_installed) {
    struct sigaction back = previous;

    /* The last module's handler off, SIGUSR1 is ignored rather than
     * fatal again: the shutdown goes on after .cleanup (the cache's
     * write-back of dirty blocks, the reports at exit), and a signal
     * sent for a summary must not cut it short.
     */
    if (!(back.sa_flags & SA_SIGINFO) && back.sa_handler == SIG_DFL)
      back.sa_handler = SIG_IGN;
    sigaction (SIGUSR1, &back, NULL);
    s->handler_installed = false;
  }
  quiesce_handler ();
  if (!s->running)
    return;
  atomic_store (&stopping, true);
  if (write (wake[1], &b, 1) == -1) {
    /* full pipe: the thread wakes anyway */
  }
  pthread_join (s->thread, NULL);
  s->running = false;
  close (wake[0]);
  close (wake[1]);
  wake[0] = wake[1] = -1;
}

void
gm_stats_final (struct gm_stats_out *s)
{
  gm_stats_stop (s);            /* in case .cleanup never ran */
  if (s->to_stderr && *s->to_stderr)
    emit_lines (stderr, s);
  if (s->path && write_file (s) == -1)
    s->error ("%s: %s=%s: %m", s->prefix, s->option, s->path);
  free (s->path);
  s->path = NULL;
}

/* Metric names are [a-zA-Z_:][a-zA-Z0-9_:]*: anything else becomes '_'. */
static void
put_name (FILE *fp, const char *name, size_t len)
{
  for (size_t i = 0; i < len; i++)
    fputc (isalnum ((unsigned char) name[i]) || name[i] == '_' ?
           name[i] : '_', fp);
}

/* Label values escape backslash, double quote and newline. */
static void
put_label_value (FILE *fp, const char *v, size_t len)
{
  for (size_t i = 0; i < len; i++) {
    if (v[i] == '\\' || v[i] == '"')
      fputc ('\\', fp);
    if (v[i] == '\n')
      fputs ("\\n", fp);
    else
      fputc (v[i], fp);
  }
}

static void
put_family (FILE *fp, const char *name, size_t len, const char *suffix,
            const char *kind, const char *type)
{
  fputs ("# HELP gmblock_", fp);
  put_name (fp, name, len);
  fprintf (fp, "%s gmblock %s '", suffix, kind);
  put_name (fp, name, len);
  fprintf (fp, "' of the module in label module "
           "(see its man page, nbdkit-gmblock-*(1))\n");
  fputs ("# TYPE gmblock_", fp);
  put_name (fp, name, len);
  fprintf (fp, "%s %s\n", suffix, type);
  fputs ("gmblock_", fp);
  put_name (fp, name, len);
  fputs (suffix, fp);
}

/* One derived "prefix.name value" line. */
static void
put_derived (FILE *fp, const struct gm_stats_out *s, const char *line,
             size_t len)
{
  const char *dot = memchr (line, '.', len);
  const char *sp = memchr (line, ' ', len);
  const char *name, *value;
  size_t nlen, vlen;
  char num[64], *end;
  double d;

  if (dot == NULL || sp == NULL || dot > sp)
    return;
  name = dot + 1;
  nlen = sp - name;
  value = sp + 1;
  vlen = line + len - value;
  if (nlen == 0 || vlen == 0)
    return;
  if (vlen < sizeof num) {
    memcpy (num, value, vlen);
    num[vlen] = '\0';
    d = strtod (num, &end);
    if (end != num && *end == '\0' && isfinite (d)) {
      put_family (fp, name, nlen, "", "value", "gauge");
      fprintf (fp, "{module=\"%s\"} %s\n", s->module, num);
      return;
    }
  }
  put_family (fp, name, nlen, "_info", "setting", "gauge");
  fprintf (fp, "{module=\"%s\",value=\"", s->module);
  put_label_value (fp, value, vlen);
  fputs ("\"} 1\n", fp);
}

void
gm_stats_print_prometheus (FILE *fp, const struct gm_stats_out *s)
{
  char *buf = NULL;
  size_t size = 0;
  FILE *mem;

  if (s->refresh)
    s->refresh ();
  for (size_t i = 0; i < s->n; i++) {
    const char *name = s->c[i].name;

    put_family (fp, name, strlen (name), "_total", "counter", "counter");
    fprintf (fp, "{module=\"%s\"} %llu\n", s->module,
             (unsigned long long) gm_counter_get (&s->c[i]));
  }
  if (s->extra == NULL || (mem = open_memstream (&buf, &size)) == NULL)
    return;
  s->extra (mem, s->opaque);
  if (fclose (mem) == 0) {
    for (char *p = buf, *nl; p < buf + size; p = nl + 1) {
      if ((nl = memchr (p, '\n', buf + size - p)) == NULL)
        nl = buf + size;
      put_derived (fp, s, p, nl - p);
    }
  }
  free (buf);
}

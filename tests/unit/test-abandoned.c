/* Unit test: common/abandoned.c, the bridge's broken connections that
 * the server must be told about before the next write.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "abandoned.h"

#define I1 0x1111
#define I2 0x2222

/* The state file's fdatasyncs (-Wl,--wrap): counted; failed on cue;
 * held on cue until released (sync_hold). */
int __real_fdatasync (int fd);
static _Atomic unsigned syncs;
static int sync_fails;                  /* errno to fail with, or 0 */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static enum { HOLD_OFF, HOLD_ARMED, HOLD_HELD } sync_hold;

int
__wrap_fdatasync (int fd)
{
  atomic_fetch_add (&syncs, 1);
  pthread_mutex_lock (&hold_lock);
  if (sync_hold == HOLD_ARMED) {
    sync_hold = HOLD_HELD;
    pthread_cond_broadcast (&hold_cv);
    while (sync_hold == HOLD_HELD)
      pthread_cond_wait (&hold_cv, &hold_lock);
  }
  pthread_mutex_unlock (&hold_lock);
  if (sync_fails) {
    errno = sync_fails;
    return -1;
  }
  return __real_fdatasync (fd);
}

/* The state file's pwrites (-Wl,--wrap): on cue the next writes at
 * most write_short bytes, and the one after fails with write_fails
 * (0: goes on). */
ssize_t __real_pwrite (int fd, const void *buf, size_t len, off_t off);
static size_t write_short;
static int write_fails;

ssize_t
__wrap_pwrite (int fd, const void *buf, size_t len, off_t off)
{
  if (write_short) {
    size_t n = write_short < len ? write_short : len;
    write_short = 0;
    return __real_pwrite (fd, buf, n, off);
  }
  if (write_fails) {
    errno = write_fails;
    write_fails = 0;
    return -1;
  }
  return __real_pwrite (fd, buf, len, off);
}

/* Tell every listed connection of instance as connection self would,
 * each told ok; how many. */
static unsigned
tell_all (struct gm_ab_node *self, uint64_t instance)
{
  struct gm_ab_node *n;
  uint64_t id;
  unsigned told = 0;

  while (gm_ab_take (self, instance, &id, &n)) {
    gm_ab_told (n, true);
    told++;
  }
  return told;
}

static void
basics (void)
{
  struct gm_ab_node *a = gm_ab_open (0xa), *b = gm_ab_open (0xb);
  struct gm_ab_node *n;
  uint64_t id = 0;

  CHECK (a && b);
  /* Nothing broke: nothing to tell. */
  CHECK (!gm_ab_take (b, I1, &id, &n));
  /* a broke with writes in flight: b names it, once. */
  gm_ab_broken (a, I1);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  CHECK (!gm_ab_take (a, I1, &id, &n));    /* its own: its reconnect tells */
  CHECK (!gm_ab_take (b, I2, &id, &n));    /* another server process */
  CHECK (!gm_ab_pending (a, I1));         /* the same for a write */
  CHECK (!gm_ab_pending (b, I2));
  CHECK (gm_ab_pending (b, I1));
  CHECK (gm_ab_take (b, I1, &id, &n));
  CHECK_EQ_U64 (id, 0xa);
  gm_ab_told (n, true);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  CHECK (!gm_ab_take (b, I1, &id, &n));
  /* A failed ABANDON leaves it for the next writer. */
  gm_ab_broken (a, I1);
  CHECK (gm_ab_take (b, I1, &id, &n));
  gm_ab_told (n, false);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  CHECK_EQ_U64 (tell_all (b, I1), 1);
  /* Breaking twice lists once. */
  gm_ab_broken (a, I1);
  gm_ab_broken (a, I1);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  CHECK_EQ_U64 (tell_all (b, I1), 1);
  gm_ab_close (a);
  gm_ab_close (b);
  gm_ab_close (NULL);
}

static void
connected (void)
{
  struct gm_ab_node *a = gm_ab_open (0xa), *b = gm_ab_open (0xb),
    *c = gm_ab_open (0xc);

  /* a's reconnect tells the server itself. */
  gm_ab_broken (a, I1);
  gm_ab_connected (a, I1);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  /* Another connection reaching the same instance changes nothing ... */
  gm_ab_broken (a, I1);
  gm_ab_broken (b, I1);
  gm_ab_connected (c, I1);
  CHECK_EQ_U64 (gm_ab_listed (), 2);
  /* ... a new instance: the old process and its writes are gone. */
  gm_ab_connected (c, I2);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  CHECK_EQ_U64 (tell_all (c, I1), 0);
  /* Listed for the instance it broke from, even after others moved. */
  gm_ab_broken (a, I2);
  CHECK_EQ_U64 (tell_all (c, I1), 0);
  CHECK_EQ_U64 (tell_all (c, I2), 1);
  gm_ab_close (a);
  gm_ab_close (b);
  gm_ab_close (c);
}

/* A connection that closes while listed is still told about; its node
 * is freed after (LeakSanitizer, valgrind: by make check's runs). */
static void
closed_while_listed (void)
{
  struct gm_ab_node *a = gm_ab_open (0xa), *b = gm_ab_open (0xb), *n;
  uint64_t id;

  gm_ab_broken (a, I1);
  gm_ab_close (a);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  CHECK (gm_ab_take (b, I1, &id, &n));
  CHECK_EQ_U64 (id, 0xa);
  gm_ab_told (n, true);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  /* Closed while being told, and unlisted meanwhile by a new instance. */
  a = gm_ab_open (0xa);
  gm_ab_broken (a, I1);
  CHECK (gm_ab_take (b, I1, &id, &n));
  gm_ab_close (a);
  gm_ab_connected (b, I2);
  gm_ab_told (n, true);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  gm_ab_close (b);
}

/* a broke, b tells; meanwhile a reconnected and broke again: that
 * second break was not told by b's ABANDON, so it stays listed. */
static void
broke_again_while_told (void)
{
  struct gm_ab_node *a = gm_ab_open (0xa), *b = gm_ab_open (0xb), *n;
  uint64_t id;

  gm_ab_broken (a, I1);
  CHECK (gm_ab_take (b, I1, &id, &n));
  gm_ab_connected (a, I1);
  gm_ab_broken (a, I1);
  gm_ab_told (n, true);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  CHECK_EQ_U64 (tell_all (b, I1), 1);
  gm_ab_close (a);
  gm_ab_close (b);
}

/* While b tells about a, c's write waits for that, and then has
 * nothing to tell (ok) or tells it itself (failed). */
static struct gm_ab_node *waiter_self;
static _Atomic int waiter_state;        /* 1 waiting, 2 nothing, 3 took */

/* A helper thread has started (its state is set), waited for up to
 * 10 s: on a loaded machine it may start late, and then pass for one
 * still waiting. */
static bool
started (_Atomic int *state)
{
  for (int i = 0; i < 1000 && atomic_load (state) == 0; i++)
    usleep (10 * 1000);
  return atomic_load (state) != 0;
}

static void *
waiter (void *arg)
{
  struct gm_ab_node *n;
  uint64_t id;

  atomic_store (&waiter_state, 1);
  if (gm_ab_take (waiter_self, I1, &id, &n)) {
    gm_ab_told (n, true);
    atomic_store (&waiter_state, 3);
  }
  else
    atomic_store (&waiter_state, 2);
  return NULL;
}

static void
one_tells_others_wait_for (bool ok)
{
  struct gm_ab_node *a = gm_ab_open (0xa), *b = gm_ab_open (0xb), *n;
  pthread_t t;
  uint64_t id;

  waiter_self = gm_ab_open (0xc);
  atomic_store (&waiter_state, 0);
  gm_ab_broken (a, I1);
  CHECK (gm_ab_take (b, I1, &id, &n));
  CHECK (pthread_create (&t, NULL, waiter, NULL) == 0);
  CHECK (started (&waiter_state));
  usleep (200 * 1000);
  CHECK_EQ_U64 (atomic_load (&waiter_state), 1);
  gm_ab_told (n, ok);
  pthread_join (t, NULL);
  CHECK_EQ_U64 (atomic_load (&waiter_state), ok ? 2 : 3);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  gm_ab_close (a);
  gm_ab_close (b);
  gm_ab_close (waiter_self);
}

static void
others_wait_ok (void)
{
  one_tells_others_wait_for (true);
}

static void
others_wait_failed (void)
{
  one_tells_others_wait_for (false);
}

/* A hello names its connection, so it must neither be overtaken by
 * an ABANDON naming it (that would drop the new link) nor let one be
 * skipped while it may not have arrived: a's hello waits while b tells
 * about a; c's write waits while a says hello, then has nothing to
 * tell (connected) or tells a itself (the connect failed). */
static struct gm_ab_node *hello_node;
static _Atomic int hello_state;         /* 1 waiting, 2 said */

static void *
hello_sayer (void *arg)
{
  atomic_store (&hello_state, 1);
  gm_ab_hello (hello_node);
  atomic_store (&hello_state, 2);
  return NULL;
}

static void
hello_vs_tell (bool connects)
{
  struct gm_ab_node *a = gm_ab_open (0xa), *b = gm_ab_open (0xb), *n;
  pthread_t t;
  uint64_t id;

  /* b tells about a: a's hello waits for the reply. */
  gm_ab_broken (a, I1);
  CHECK (gm_ab_take (b, I1, &id, &n));
  hello_node = a;
  atomic_store (&hello_state, 0);
  CHECK (pthread_create (&t, NULL, hello_sayer, NULL) == 0);
  CHECK (started (&hello_state));
  usleep (200 * 1000);
  CHECK_EQ_U64 (atomic_load (&hello_state), 1);
  gm_ab_told (n, false);        /* failed: a stays listed */
  pthread_join (t, NULL);
  CHECK_EQ_U64 (atomic_load (&hello_state), 2);
  /* a's hello is out: c's write waits for its outcome. */
  waiter_self = gm_ab_open (0xc);
  atomic_store (&waiter_state, 0);
  CHECK (pthread_create (&t, NULL, waiter, NULL) == 0);
  CHECK (started (&waiter_state));
  usleep (200 * 1000);
  CHECK_EQ_U64 (atomic_load (&waiter_state), 1);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  if (connects)
    gm_ab_connected (a, I1);
  else
    gm_ab_hello_failed (a);
  pthread_join (t, NULL);
  CHECK_EQ_U64 (atomic_load (&waiter_state), connects ? 2 : 3);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  /* Not listed, nobody telling: a hello does not wait, nor do writers. */
  gm_ab_hello (a);
  CHECK (!gm_ab_take (b, I1, &id, &n));
  gm_ab_hello_failed (a);
  gm_ab_close (a);
  gm_ab_close (b);
  gm_ab_close (waiter_self);
}

static void
hello_connects (void)
{
  hello_vs_tell (true);
}

static void
hello_fails (void)
{
  hello_vs_tell (false);
}

/* Wait up to 10 s (a loaded machine, TSan) for the waiter to end (not
 * just to start). */
static bool
waiter_ends (void)
{
  for (int i = 0; i < 1000 && atomic_load (&waiter_state) < 2; i++)
    usleep (10 * 1000);
  return atomic_load (&waiter_state) >= 2;
}

/* A hello that connected is over: when a's connection breaks again,
 * a writer tells it at once, not waiting for that hello's outcome. */
static void
broken_after_hello (void)
{
  struct gm_ab_node *a = gm_ab_open (0xa);
  pthread_t t;

  gm_ab_hello (a);
  gm_ab_connected (a, I1);
  gm_ab_broken (a, I1);
  waiter_self = gm_ab_open (0xc);
  atomic_store (&waiter_state, 0);
  CHECK (pthread_create (&t, NULL, waiter, NULL) == 0);
  CHECK (waiter_ends ());
  pthread_join (t, NULL);
  CHECK_EQ_U64 (atomic_load (&waiter_state), 3);
  gm_ab_close (a);
  gm_ab_close (waiter_self);
}

/* a's hello waits for the ABANDON naming a, not for any tell: c's
 * reply about d, which comes first, does not let it go. */
static void
hello_waits_its_tell (void)
{
  struct gm_ab_node *a = gm_ab_open (0xa), *b = gm_ab_open (0xb),
    *c = gm_ab_open (0xc), *d = gm_ab_open (0xd), *na, *nd;
  pthread_t t;
  uint64_t id;

  gm_ab_broken (a, I1);
  gm_ab_broken (d, I1);
  CHECK (gm_ab_take (c, I1, &id, &nd));         /* the latest listed */
  CHECK_EQ_U64 (id, 0xd);
  CHECK (gm_ab_take (b, I1, &id, &na));
  CHECK_EQ_U64 (id, 0xa);
  hello_node = a;
  atomic_store (&hello_state, 0);
  CHECK (pthread_create (&t, NULL, hello_sayer, NULL) == 0);
  CHECK (started (&hello_state));
  usleep (200 * 1000);
  gm_ab_told (nd, true);
  usleep (200 * 1000);
  CHECK_EQ_U64 (atomic_load (&hello_state), 1);
  gm_ab_told (na, false);
  pthread_join (t, NULL);
  CHECK_EQ_U64 (atomic_load (&hello_state), 2);
  gm_ab_connected (a, I1);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  gm_ab_close (a);
  gm_ab_close (b);
  gm_ab_close (c);
  gm_ab_close (d);
}

/* The state file (state=): what a killed bridge left is adopted, and
 * the file follows every connect, close and tell.  Last: it keeps the
 * file for the rest of the process. */
#define HDR "gmblock-rdma connections 1\n"
static int test_state_fd = -1;          /* once gm_ab_state has it */

static void
put (int fd, const char *text)
{
  CHECK (ftruncate (fd, 0) == 0);
  CHECK (pwrite (fd, text, strlen (text), 0) == (ssize_t) strlen (text));
}

static void
check_file (int fd, const char *want)
{
  char got[512] = "";
  ssize_t n = pread (fd, got, sizeof got - 1, 0);

  CHECK (n >= 0);
  got[n] = '\0';
  if (strcmp (got, want) != 0) {
    fprintf (stderr, "state file:\n%s---\nexpected:\n%s---\n", got, want);
    exit (1);
  }
}

static void
failed (int err)
{
  fprintf (stderr, "state file rewrite failed: %d\n", err);
  exit (1);
}

/* A new, empty state file for a case (unlinked), which keeps it. */
static int
temp_state (void)
{
  char path[] = "/tmp/test-abandoned.XXXXXX";
  int fd = mkstemp (path);

  CHECK (fd >= 0);
  unlink (path);
  test_state_fd = fd;
  return fd;
}

/* The same, and the module's from now on. */
static int
fresh_state (void)
{
  char why[160];
  int fd = temp_state ();

  CHECK (gm_ab_state (fd, failed, why, sizeof why) == 0);
  return fd;
}

static void
state_file (void)
{
  char why[160];
  int fd = temp_state ();
  struct gm_ab_node *c, *d, *r[3];
  uint64_t id;

  /* Refused whole: nothing adopted. */
  put (fd, "connections\n");
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == -1);
  CHECK (strstr (why, "not a gmblock-rdma state file") != NULL);
  check_file (fd, "connections\n");   /* not ours: left as it was */
  put (fd, HDR "00000000000000aa 0000000000001111\n"
       "00000000000000bb 0000000000000000\n");
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == -1);
  CHECK (strstr (why, "line 3 is not") != NULL);
  put (fd, HDR "00000000000000aa 0000000000001111\n00000000000000bb 1111\n");
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == -1);
  CHECK (strstr (why, "line 3 is not") != NULL);
  /* 16 hex digits each, nothing else: no sign, 0x or blanks. */
  put (fd, HDR "-000000000000001 0000000000001111\n");
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == -1);
  CHECK (strstr (why, "line 2 is not") != NULL);
  put (fd, HDR "0x000000000000aa 0000000000001111\n");
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == -1);
  put (fd, HDR "00000000000000aa +000000000001111\n");
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == -1);
  put (fd, HDR "00000000000000aa            1111\n");
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == -1);
  /* Each line ends where its second number does. */
  put (fd, HDR "00000000000000aa 0000000000001111 "
       "00000000000000bb 0000000000001111\n");
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == -1);
  CHECK (strstr (why, "line 2 is not") != NULL);
  check_file (fd, HDR "00000000000000aa 0000000000001111 "
              "00000000000000bb 0000000000001111\n");
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  /* A killed bridge's three connections, of two server instances. */
#define AA "00000000000000aa 0000000000001111\n"
#define BB "00000000000000bb 0000000000002222\n"
#define EE "00000000000000ee 0000000000001111\n"
#define CC "000000000000000c 0000000000001111\n"
  put (fd, HDR AA BB EE);
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == 0);
  CHECK_EQ_U64 (gm_ab_listed (), 3);
  /* New connections take their names, each once (the latest listed
   * first); connections closed before they connect give them back,
   * still listed. */
  CHECK ((r[0] = gm_ab_reuse (&id)) != NULL);
  CHECK_EQ_U64 (id, 0xee);
  CHECK ((r[1] = gm_ab_reuse (&id)) != NULL);
  CHECK_EQ_U64 (id, 0xbb);
  CHECK ((r[2] = gm_ab_reuse (&id)) != NULL);
  CHECK_EQ_U64 (id, 0xaa);
  CHECK (gm_ab_reuse (&id) == NULL);
  gm_ab_hello (r[0]);
  gm_ab_hello_failed (r[0]);
  for (int i = 0; i < 3; i++)
    gm_ab_close (r[i]);
  CHECK_EQ_U64 (gm_ab_listed (), 3);
  check_file (fd, HDR AA BB EE);
  /* The first connection reaches instance I1: bb died with I2. */
  c = gm_ab_open (0xc);
  check_file (fd, HDR AA BB EE);
  gm_ab_connected (c, I1);
  check_file (fd, HDR AA EE CC);
  /* The next takes ee's name: its hello replaced ee on the server, so
   * nobody tells it; its line stays while it is open. */
  CHECK ((r[0] = gm_ab_reuse (&id)) != NULL);
  CHECK_EQ_U64 (id, 0xee);
  gm_ab_hello (r[0]);
  gm_ab_connected (r[0], I1);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  check_file (fd, HDR AA EE CC);
  /* A write tells the server about aa, the name nobody took. */
  CHECK_EQ_U64 (tell_all (c, I1), 1);
  check_file (fd, HDR EE CC);
  CHECK (gm_ab_reuse (&id) == NULL);
  gm_ab_close (r[0]);
  check_file (fd, HDR CC);
  /* c breaks with writes and closes: listed, still in the file, until
   * another connection has told the server. */
  gm_ab_broken (c, I1);
  gm_ab_close (c);
  check_file (fd, HDR CC);
  CHECK (gm_ab_reuse (&id) == NULL);      /* only names from the file */
  d = gm_ab_open (0xd);
  gm_ab_connected (d, I1);
  CHECK_EQ_U64 (tell_all (d, I1), 1);
  check_file (fd, HDR "000000000000000d 0000000000001111\n");
  gm_ab_close (d);
  check_file (fd, HDR);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
}

/* Every hex digit is read, in either case, and written back in lower
 * case; every rewrite is synced, and one that fails is said (the
 * bridge logs it).  Keeps a file too. */
static int sync_err;

static void
note_failed (int err)
{
  sync_err = err;
}

static void
state_digits (void)
{
  char why[160];
  int fd = temp_state ();
  struct gm_ab_node *r[2];
  unsigned before;
  uint64_t id;

#define X1 "0123456789abcdef 00000000000fffff\n"
#define X2 "fedcba9876543210 00000000000fffff\n"
  put (fd, HDR X1 "FEDCBA9876543210 00000000000FFFFF\n");
  before = atomic_load (&syncs);
  CHECK (gm_ab_state (fd, note_failed, why, sizeof why) == 0);
  CHECK (atomic_load (&syncs) > before);
  check_file (fd, HDR X1 X2);
  CHECK_EQ_U64 (gm_ab_listed (), 2);
  CHECK ((r[0] = gm_ab_reuse (&id)) != NULL);
  CHECK_EQ_U64 (id, 0xfedcba9876543210ull);
  CHECK ((r[1] = gm_ab_reuse (&id)) != NULL);
  CHECK_EQ_U64 (id, 0x0123456789abcdefull);
  for (int i = 0; i < 2; i++) {
    gm_ab_hello (r[i]);
    before = atomic_load (&syncs);
    gm_ab_connected (r[i], 0xfffff);
    CHECK (atomic_load (&syncs) > before);
  }
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  sync_fails = EIO;
  gm_ab_close (r[0]);
  sync_fails = 0;
  CHECK_EQ_U64 (sync_err, EIO);
  gm_ab_close (r[1]);
  check_file (fd, HDR);
}

/* A rewrite cut short (the bridge killed within a pwrite of more than
 * a page: the kernel stops between pages; or a crash before its
 * fdatasync ended) leaves the new content's start over the old one's
 * end.  Every connection both name must still be named whole, wherever
 * the cut.  (One only in the new content had no write sent yet; one
 * only in the old one the server no longer holds.) */
#define NTORN 150                       /* lines: more than a page */

static char *
snapshot (int fd, size_t *len)
{
  static char buf[2][64 * 1024];
  static int which;
  char *b = buf[which++ % 2];
  ssize_t n = pread (fd, b, sizeof buf[0] - 1, 0);

  CHECK (n > 0);
  b[n] = '\0';
  *len = n;
  return b;
}

static bool
names (const char *text, size_t len, const char *line)
{
  for (size_t at = strlen (HDR); at + 34 <= len; at += 34)
    if (memcmp (text + at, line, 34) == 0)
      return true;
  return false;
}

static void
check_cuts (const char *old, size_t oldlen, const char *new, size_t newlen)
{
  static char torn[64 * 1024];
  size_t hl = strlen (HDR);

  for (size_t cut = hl; cut <= newlen; cut++) {
    size_t len = cut < oldlen ? oldlen : cut;
    memcpy (torn, new, cut);
    if (cut < oldlen)
      memcpy (torn + cut, old + cut, oldlen - cut);
    for (size_t at = hl; at + 34 <= oldlen; at += 34) {
      if (!names (new, newlen, old + at))
        continue;
      if (!names (torn, len, old + at)) {
        fprintf (stderr, "a rewrite cut at byte %zu loses '%.33s'\n", cut,
                 old + at);
        exit (1);
      }
    }
  }
}

static void
torn_rewrite (void)
{
  struct gm_ab_node *n[NTORN], *x, *y, *t;
  char *old, *new;
  size_t oldlen, newlen;
  uint64_t id;

  if (test_state_fd < 0)                /* run alone */
    fresh_state ();
  for (int i = 0; i < NTORN; i++) {
    n[i] = gm_ab_open (0x100 + i);
    gm_ab_connected (n[i], I1);
  }
  /* A connection opens (y opened before it, connects after it), */
  y = gm_ab_open (0xffe);
  old = snapshot (test_state_fd, &oldlen);
  x = gm_ab_open (0xfff);
  gm_ab_connected (x, I1);
  new = snapshot (test_state_fd, &newlen);
  check_cuts (old, oldlen, new, newlen);
  old = new, oldlen = newlen;
  gm_ab_connected (y, I1);
  new = snapshot (test_state_fd, &newlen);
  check_cuts (old, oldlen, new, newlen);
  /* one closes, */
  old = new, oldlen = newlen;
  gm_ab_close (n[NTORN / 3]);
  new = snapshot (test_state_fd, &newlen);
  check_cuts (old, oldlen, new, newlen);
  /* one closed with writes in flight is told. */
  gm_ab_broken (n[NTORN / 2], I1);
  gm_ab_close (n[NTORN / 2]);
  old = snapshot (test_state_fd, &oldlen);
  CHECK (gm_ab_take (x, I1, &id, &t));
  gm_ab_told (t, true);
  new = snapshot (test_state_fd, &newlen);
  check_cuts (old, oldlen, new, newlen);
  for (int i = 0; i < NTORN; i++)
    if (i != NTORN / 3 && i != NTORN / 2)
      gm_ab_close (n[i]);
  gm_ab_close (x);
  gm_ab_close (y);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
}

/* A bridge killed between a rewrite's pwrite and its ftruncate (after
 * a line went: the others moved up) leaves a line twice; a page cut
 * short can leave a name with the instance of another line.  Its
 * successor must not give one name to two of its connections: each
 * one's hello would drop the other's link on the server (and each
 * reconnect the other's again), failing their requests (EIO). */
static void
duplicate_lines (void)
{
  char why[160], torn[512];
  int fd = fresh_state ();
  struct gm_ab_node *a, *b, *r;
  size_t oldlen, newlen;
  char *old, *new;
  uint64_t id;

  a = gm_ab_open (0xa1);
  gm_ab_connected (a, I1);
  b = gm_ab_open (0xb1);
  gm_ab_connected (b, I1);
  old = snapshot (fd, &oldlen);
  gm_ab_close (a);
  new = snapshot (fd, &newlen);
  CHECK (newlen < oldlen && oldlen < sizeof torn);
  memcpy (torn, new, newlen);
  memcpy (torn + newlen, old + newlen, oldlen - newlen);
  torn[oldlen] = '\0';
#define B1 "00000000000000b1 0000000000001111\n"
  CHECK (strcmp (torn, HDR B1 B1) == 0);
  gm_ab_close (b);                      /* the bridge is killed */
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  /* Its successor: one connection takes b1, the next a new name. */
  put (fd, torn);
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == 0);
  CHECK ((r = gm_ab_reuse (&id)) != NULL);
  CHECK_EQ_U64 (id, 0xb1);
  CHECK (gm_ab_reuse (&id) == NULL);
  gm_ab_hello (r);
  gm_ab_connected (r, I1);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
  gm_ab_close (r);
  check_file (fd, HDR);
  /* A name with two instances: one is not its own, so an ABANDON
   * names it with each (the server ignores another's), and no
   * connection takes it. */
#define D1 "00000000000000d1 0000000000001111\n"
#define D2 "00000000000000d1 0000000000002222\n"
#define E1 "00000000000000e1 0000000000001111\n"
  put (fd, HDR D1 E1 D2);
  CHECK (gm_ab_state (fd, failed, why, sizeof why) == 0);
  CHECK_EQ_U64 (gm_ab_listed (), 3);
  CHECK ((r = gm_ab_reuse (&id)) != NULL);
  CHECK_EQ_U64 (id, 0xe1);
  CHECK (gm_ab_reuse (&id) == NULL);
  gm_ab_hello (r);
  gm_ab_connected (r, I1);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  CHECK_EQ_U64 (tell_all (r, I1), 1);
  gm_ab_close (r);
  check_file (fd, HDR);
  CHECK_EQ_U64 (gm_ab_listed (), 0);
}

/* A rewrite that grew the file, cut short within its new last line (a
 * full disk; a kill between two pages): that line is of a connection
 * that has sent nothing yet, and its successor adopts the rest (it
 * refused the file, and so would not start: a review finding).  A
 * short write goes on, and one that then fails says why, not a stale
 * errno.  Keeps a file too. */
static void
state_cut_short (void)
{
  char why[160];
  int fd = temp_state ();
  struct gm_ab_node *a, *b;

  put (fd, HDR AA "00000000000000bb 00000000");
  sync_err = 0;
  CHECK (gm_ab_state (fd, note_failed, why, sizeof why) == 0);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  check_file (fd, HDR AA);
  a = gm_ab_open (0xa2);
  write_short = 10;                     /* short, then the rest */
  gm_ab_connected (a, I1);
  CHECK_EQ_U64 (sync_err, 0);
  check_file (fd, HDR AA "00000000000000a2 0000000000001111\n");
  CHECK_EQ_U64 (tell_all (a, I1), 1);
  b = gm_ab_open (0xb2);
  write_short = 40;                     /* short, then a full disk */
  write_fails = ENOSPC;
  errno = ENOENT;                       /* what a stale errno says */
  gm_ab_connected (b, I1);
  CHECK_EQ_U64 (sync_err, ENOSPC);
  gm_ab_close (a);
  gm_ab_close (b);
  CHECK_EQ_U64 (sync_err, ENOSPC);
  check_file (fd, HDR);
}

/* The rewrite's fdatasync holds no lock others need: a connection
 * breaking, or a writer asking what to tell, go on while it waits on a
 * slow disk (they waited for it under the lock: a review finding). */
static struct gm_ab_node *held_node;

static void *
close_held (void *arg)
{
  (void) arg;
  gm_ab_close (held_node);
  return NULL;
}

static void
sync_not_under_lock (void)
{
  int fd = fresh_state ();
  struct gm_ab_node *a, *b, *c;
  pthread_t t;

  a = gm_ab_open (0xa3);
  gm_ab_connected (a, I1);
  b = gm_ab_open (0xb3);
  gm_ab_connected (b, I1);
  held_node = a;
  pthread_mutex_lock (&hold_lock);
  sync_hold = HOLD_ARMED;
  pthread_mutex_unlock (&hold_lock);
  CHECK (pthread_create (&t, NULL, close_held, NULL) == 0);
  pthread_mutex_lock (&hold_lock);
  while (sync_hold != HOLD_HELD)
    pthread_cond_wait (&hold_cv, &hold_lock);
  pthread_mutex_unlock (&hold_lock);
  /* a's close is in its fdatasync: b breaks meanwhile.  (Under the
   * lock this never returns: the test's timeout ends it.) */
  gm_ab_broken (b, I1);
  CHECK (gm_ab_pending (a, I1));
  pthread_mutex_lock (&hold_lock);
  sync_hold = HOLD_OFF;
  pthread_cond_broadcast (&hold_cv);
  pthread_mutex_unlock (&hold_lock);
  CHECK (pthread_join (t, NULL) == 0);
  gm_ab_close (b);
  CHECK_EQ_U64 (gm_ab_listed (), 1);
  c = gm_ab_open (0xc3);
  gm_ab_connected (c, I1);
  CHECK_EQ_U64 (tell_all (c, I1), 1);
  gm_ab_close (c);
  check_file (fd, HDR);
}

static const struct unit_case cases[] = {
  { "basics", basics },
  { "connected", connected },
  { "closed_while_listed", closed_while_listed },
  { "broke_again_while_told", broke_again_while_told },
  { "others_wait_ok", others_wait_ok },
  { "others_wait_failed", others_wait_failed },
  { "hello_connects", hello_connects },
  { "hello_fails", hello_fails },
  { "broken_after_hello", broken_after_hello },
  { "hello_waits_its_tell", hello_waits_its_tell },
  { "state_file", state_file },           /* keeps the file */
  { "torn_rewrite", torn_rewrite },
  { "duplicate_lines", duplicate_lines },  /* keeps a file too */
  { "state_digits", state_digits },        /* and this one */
  { "state_cut_short", state_cut_short },  /* and this one */
  { "sync_not_under_lock", sync_not_under_lock }, /* and this one */
};

int
main (int argc, char *argv[])
{
  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

/* gmblock: the RDMA bridge's broken connections the server must be told
 * about (see abandoned.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abandoned.h"

struct gm_ab_node {
  struct gm_ab_node *next;      /* in the list, while listed */
  struct gm_ab_node *all_next;  /* every node, for the state file */
  uint64_t conn_id;
  uint64_t instance;            /* the server process that may hold it */
  uint64_t gen;                 /* times listed: a tell covers one */
  uint64_t telling_gen;
  bool listed, telling, closed;
  bool hello;                   /* its connection's hello is out */
  bool adopted;                 /* from the state file, never connected
                                 * by us: gm_ab_reuse may take it */
  bool connected;               /* instance is known */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t told_cv = PTHREAD_COND_INITIALIZER;
static struct gm_ab_node *list, *all;
static _Atomic unsigned nlisted; /* read without the lock: the fast path */
static int state_fd = -1;        /* gm_ab_state: the state file */
static void (*state_failed) (int err);

#define STATE_HEADER "gmblock-rdma connections 1\n"
#define STATE_LINE 34            /* two 16-digit hex numbers, ' ', '\n' */
#define STATE_MAX (1 << 20)

/* The state file's new content, numbered in the order of the states
 * it shows; written by write_out, after the lock is let go. */
struct text {
  char *buf;
  size_t len;
  uint64_t gen;
};

static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t texts;          /* numbered so far (under lock) */
static uint64_t written;        /* the newest on disk (under write_lock) */

/* The state file's content: every connection the server may still hold
 * (open and connected, or listed).  Under the lock.
 */
static struct text
snapshot (void)
{
  struct text t = { NULL, 0, 0 };
  size_t n = 0;

  if (state_fd < 0)
    return t;
  for (struct gm_ab_node *x = all; x; x = x->all_next)
    n++;
  t.buf = malloc (sizeof STATE_HEADER + n * STATE_LINE + 1);
  if (t.buf == NULL) {
    state_failed (errno);
    return t;
  }
  t.len = strlen (strcpy (t.buf, STATE_HEADER));
  for (struct gm_ab_node *x = all; x; x = x->all_next)
    if (x->listed || (!x->closed && x->connected))
      t.len += sprintf (t.buf + t.len, "%016" PRIx64 " %016" PRIx64 "\n",
                        x->conn_id, x->instance);
  t.gen = ++texts;
  return t;
}

/* Rewrite the state file with t, unless a newer text is on disk:
 * either way t's state, or a later one, is on disk when this returns.
 * Not under the lock (review finding: the fdatasync held up every
 * connection that broke meanwhile, under its own lock), but one at a
 * time.  Written over the old content, then cut to length: a process
 * killed in between leaves lines too many, which cost an ABANDON each
 * and nothing else (a line it leaves twice is adopted once: load).  A
 * write cut short (a kill between two pages of it, a full disk, a
 * crash before the fdatasync) leaves the new content's start over the
 * old one's end, or, when the file grew, a last line cut short (load
 * drops it: the line a connection adds when it connects, before it
 * sends anything).  So lines keep their order (a node goes to the end
 * of all when it opens, and again when it first connects: a new line
 * is always the last), and one that both name moves only up, and only
 * when one before it went; wherever the cut, it is whole in the new
 * part or in the old one (or the same in both).
 */
static void
write_out (struct text *t)
{
  size_t done = 0;
  ssize_t w = 0;

  if (t->buf == NULL)
    return;
  pthread_mutex_lock (&write_lock);
  if (t->gen > written) {
    while (done < t->len) {
      w = pwrite (state_fd, t->buf + done, t->len - done, done);
      if (w <= 0)
        break;
      done += w;
    }
    if (done < t->len)
      state_failed (w == 0 ? EIO : errno);
    else if (ftruncate (state_fd, t->len) == -1 || fdatasync (state_fd) == -1)
      state_failed (errno);
    written = t->gen;
  }
  pthread_mutex_unlock (&write_lock);
  free (t->buf);
}

/* The list of every node, in the order of the state file's lines. */
static void
all_unlink (struct gm_ab_node *n)
{
  struct gm_ab_node **p = &all;

  while (*p != n)
    p = &(*p)->all_next;
  *p = n->all_next;
}

/* At the end: a new line is always the last (write_out). */
static void
all_append (struct gm_ab_node *n)
{
  struct gm_ab_node **p = &all;

  while (*p)
    p = &(*p)->all_next;
  n->all_next = NULL;
  *p = n;
}

/* Its connection has closed and nobody needs it any more. */
static void
maybe_free (struct gm_ab_node *n)
{
  if (!n->closed || n->listed || n->telling)
    return;
  all_unlink (n);
  free (n);
}

/* Whether listed node x is one a connection (node self) to 'instance'
 * must name before it writes.
 */
static bool
to_tell (const struct gm_ab_node *x, const struct gm_ab_node *self,
         uint64_t instance)
{
  return x != self && x->instance == instance;
}

static void
unlist (struct gm_ab_node *n)
{
  struct gm_ab_node **p = &list;

  while (*p != n)
    p = &(*p)->next;
  *p = n->next;
  n->listed = false;
  atomic_fetch_sub (&nlisted, 1);
  maybe_free (n);
}

struct gm_ab_node *
gm_ab_open (uint64_t conn_id)
{
  struct gm_ab_node *n = calloc (1, sizeof *n);

  if (n) {
    n->conn_id = conn_id;
    pthread_mutex_lock (&lock);
    all_append (n);
    pthread_mutex_unlock (&lock);
  }
  return n;
}

struct gm_ab_node *
gm_ab_reuse (uint64_t *conn_id)
{
  struct gm_ab_node *n;

  if (atomic_load (&nlisted) == 0)
    return NULL;
  pthread_mutex_lock (&lock);
  for (n = list; n; n = n->next)
    if (n->adopted && n->closed) {
      n->closed = false;        /* a connection's again */
      *conn_id = n->conn_id;
      break;
    }
  pthread_mutex_unlock (&lock);
  return n;
}

void
gm_ab_close (struct gm_ab_node *n)
{
  struct text t;

  if (n == NULL)
    return;
  pthread_mutex_lock (&lock);
  n->closed = true;
  maybe_free (n);
  t = snapshot ();
  pthread_mutex_unlock (&lock);
  write_out (&t);
}

void
gm_ab_broken (struct gm_ab_node *n, uint64_t instance)
{
  pthread_mutex_lock (&lock);
  n->instance = instance;
  n->gen++;                     /* a tell under way covers the old break */
  if (!n->listed) {
    n->listed = true;
    n->next = list;
    list = n;
    atomic_fetch_add (&nlisted, 1);
  }
  pthread_mutex_unlock (&lock);
}

void
gm_ab_connected (struct gm_ab_node *n, uint64_t instance)
{
  struct text t;

  pthread_mutex_lock (&lock);
  for (struct gm_ab_node *x = list, *next; x; x = next) {
    next = x->next;
    if (x == n || x->instance != instance)
      unlist (x);
  }
  n->hello = false;
  n->adopted = false;
  if (!n->connected) {
    all_unlink (n);             /* its line is new */
    all_append (n);
  }
  n->instance = instance;
  n->connected = true;
  t = snapshot ();
  /* Writers waiting for a tell may have nothing left to wait for. */
  pthread_cond_broadcast (&told_cv);
  pthread_mutex_unlock (&lock);
  write_out (&t);
}

void
gm_ab_hello (struct gm_ab_node *n)
{
  pthread_mutex_lock (&lock);
  /* Its teller holds a slot, so is not saying hello itself. */
  while (n->telling)
    pthread_cond_wait (&told_cv, &lock);
  n->hello = true;
  pthread_mutex_unlock (&lock);
}

void
gm_ab_hello_failed (struct gm_ab_node *n)
{
  pthread_mutex_lock (&lock);
  if (n->hello) {
    n->hello = false;
    pthread_cond_broadcast (&told_cv);
  }
  pthread_mutex_unlock (&lock);
}

bool
gm_ab_take (const struct gm_ab_node *self, uint64_t instance,
            uint64_t *id, struct gm_ab_node **told)
{
  if (atomic_load (&nlisted) == 0)
    return false;
  pthread_mutex_lock (&lock);
  for (;;) {
    struct gm_ab_node *n = NULL;
    bool others_tell = false;

    for (struct gm_ab_node *x = list; x && !n; x = x->next) {
      if (!to_tell (x, self, instance))
        continue;               /* another process: should self's
                                 * connection reconnect to it before
                                 * its write, gm_ab_pending says so */
      if (x->telling || x->hello)
        others_tell = true;     /* the server hears of it by them */
      else
        n = x;
    }
    if (n) {
      n->telling = true;
      n->telling_gen = n->gen;
      *id = n->conn_id;
      *told = n;
      pthread_mutex_unlock (&lock);
      return true;
    }
    if (!others_tell)
      break;
    /* A reply, a failed connection, a hello's outcome: each bounded. */
    pthread_cond_wait (&told_cv, &lock);
  }
  pthread_mutex_unlock (&lock);
  return false;
}

bool
gm_ab_pending (const struct gm_ab_node *self, uint64_t instance)
{
  bool found = false;

  if (atomic_load (&nlisted) == 0)
    return false;
  pthread_mutex_lock (&lock);
  for (struct gm_ab_node *x = list; x && !found; x = x->next)
    found = to_tell (x, self, instance);
  pthread_mutex_unlock (&lock);
  return found;
}

void
gm_ab_told (struct gm_ab_node *n, bool ok)
{
  struct text t = { NULL, 0, 0 };

  pthread_mutex_lock (&lock);
  n->telling = false;
  if (ok && n->listed && n->gen == n->telling_gen) {
    unlist (n);                 /* frees it if closed */
    t = snapshot ();
  }
  else
    maybe_free (n);
  pthread_cond_broadcast (&told_cv);
  pthread_mutex_unlock (&lock);
  write_out (&t);
}

unsigned
gm_ab_listed (void)
{
  return atomic_load (&nlisted);
}

/* Exactly 16 hex digits at s (sscanf's %x would also take a sign, a
 * 0x, blanks, fewer digits): whether they were, and their value.
 */
static bool
hex16 (const char *s, uint64_t *v)
{
  uint64_t x = 0;

  for (int i = 0; i < 16; i++) {
    char c = s[i];
    unsigned d;

    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    x = x << 4 | d;
  }
  *v = x;
  return true;
}

/* A line of a state file names conn_id id of instance inst: whether
 * it adds a connection (not when an earlier line named the same, left
 * by a rewrite killed before its ftruncate, see write_out); *twice when an
 * earlier one named id with another instance (a rewrite cut within a
 * line): then gm_ab_reuse takes neither, since one name must never be
 * on two connections (each one's hello would drop the other's link on
 * the server), and an ABANDON names each, with its instance (the
 * server ignores an ABANDON of another).  Before any connection opens:
 * every node is one adopted from the file.
 */
static bool
adoptable (uint64_t id, uint64_t inst, bool *twice)
{
  bool add = true;

  *twice = false;
  pthread_mutex_lock (&lock);
  for (struct gm_ab_node *x = all; x && add; x = x->all_next) {
    if (x->conn_id != id)
      continue;
    if (x->instance == inst)
      add = false;
    else {
      x->adopted = false;
      *twice = true;
    }
  }
  pthread_mutex_unlock (&lock);
  return add;
}

/* Adopt the connections a state file names: closed, listed.  Checked
 * whole first: a bad file adopts nothing.
 */
static int
load (const char *text, size_t len, char *why, size_t whylen)
{
  size_t hl = strlen (STATE_HEADER);

  if (len == 0)
    return 0;                   /* new */
  if (len < hl || memcmp (text, STATE_HEADER, hl) != 0) {
    snprintf (why, whylen, "not a gmblock-rdma state file (its first line "
              "is not '%.*s')", (int) hl - 1, STATE_HEADER);
    return -1;
  }
  for (int adopt = 0; adopt <= 1; adopt++) {
    size_t line = 2;
    for (size_t at = hl; at < len; at += STATE_LINE, line++) {
      uint64_t id, inst;
      struct gm_ab_node *n;
      bool twice;

      /* The last line, cut short: a connection that had just
       * connected, and sent nothing yet (write_out). */
      if (len - at < STATE_LINE && text[len - 1] != '\n')
        break;
      if (len - at < STATE_LINE || !hex16 (text + at, &id) ||
          text[at + 16] != ' ' || !hex16 (text + at + 17, &inst) ||
          text[at + 33] != '\n' || id == 0 || inst == 0) {
        snprintf (why, whylen, "line %zu is not 'CONN_ID INSTANCE' (two "
                  "nonzero 16-digit hex numbers)", line);
        return -1;
      }
      if (!adopt)
        continue;
      if (!adoptable (id, inst, &twice))
        continue;               /* the same line again */
      if ((n = gm_ab_open (id)) == NULL) {
        snprintf (why, whylen, "%s", strerror (errno));
        return -1;
      }
      n->closed = n->connected = true;
      n->adopted = !twice;
      gm_ab_broken (n, inst);
    }
  }
  return 0;
}

int
gm_ab_state (int fd, void (*failed) (int err), char *why, size_t whylen)
{
  char *text = malloc (STATE_MAX + 1);
  size_t len = 0;
  ssize_t r;
  int ret;

  if (text == NULL) {
    snprintf (why, whylen, "%s", strerror (errno));
    return -1;
  }
  while ((r = pread (fd, text + len, STATE_MAX + 1 - len, len)) > 0)
    len += r;
  if (r == -1) {
    snprintf (why, whylen, "read: %s", strerror (errno));
    free (text);
    return -1;
  }
  if (len > STATE_MAX) {
    snprintf (why, whylen, "larger than %d bytes", STATE_MAX);
    free (text);
    return -1;
  }
  text[len] = '\0';
  ret = load (text, len, why, whylen);
  free (text);
  if (ret == 0) {
    struct text t;

    pthread_mutex_lock (&lock);
    state_fd = fd;
    state_failed = failed;
    t = snapshot ();
    pthread_mutex_unlock (&lock);
    write_out (&t);
  }
  return ret;
}

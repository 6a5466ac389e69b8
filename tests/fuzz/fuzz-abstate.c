/* libFuzzer target: the RDMA bridge's state= file (common/abandoned.c,
 * gm_ab_state).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * An input is the file a killed bridge left: it goes into a memfd,
 * which gm_ab_state reads, then keeps up to date.  Checked, from
 * abandoned.h and the comments on the file's format there, not from the
 * code:
 *   - it is taken when empty, or when it is the header line, then
 *     "CONN_ID INSTANCE" lines (two nonzero 16-digit hex numbers, a
 *     blank, a newline), of which the last may be cut short (no
 *     newline: a write cut by a kill); anything else is refused, with
 *     a reason, and adopts nothing
 *   - taken, every distinct line is one connection listed as broken
 *     (a line named twice once), and the file is rewritten at once
 *     with those lines, in their order
 *   - gm_ab_reuse hands out each conn_id that the file names with one
 *     instance only, once; no other
 *   - telling every instance about its connections (gm_ab_take, then
 *     gm_ab_told) names each listed one of that instance exactly once,
 *     and leaves none listed and the file with the header alone
 *   - the callback for a failed rewrite is never called (a memfd)
 * Every run ends with nothing listed or allocated, as a new process.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "abandoned.h"

#define HEADER "gmblock-rdma connections 1\n"
#define LINE 34

static void
die (const char *what)
{
  fprintf (stderr, "invariant broken: %s\n", what);
  abort ();
}
#define ASSERT(c) do { if (!(c)) die (#c); } while (0)

static void
failed (int err)
{
  fprintf (stderr, "rewrite failed: %s\n", strerror (err));
  die ("a rewrite of a memfd failed");
}

static bool
hex16 (const uint8_t *p, uint64_t *v)
{
  *v = 0;
  for (int i = 0; i < 16; i++) {
    int d = p[i] >= '0' && p[i] <= '9' ? p[i] - '0' :
      p[i] >= 'a' && p[i] <= 'f' ? p[i] - 'a' + 10 :
      p[i] >= 'A' && p[i] <= 'F' ? p[i] - 'A' + 10 : -1;
    if (d < 0)
      return false;
    *v = *v << 4 | d;
  }
  return true;
}

struct pair {
  uint64_t id, inst;
};

/* The model: -1 (refused) or the number of distinct pairs, in p. */
static int
model (const uint8_t *d, size_t n, struct pair *p, size_t max)
{
  size_t hl = strlen (HEADER), np = 0;

  if (n == 0)
    return 0;
  if (n < hl || memcmp (d, HEADER, hl) != 0)
    return -1;
  for (size_t at = hl; at < n; at += LINE) {
    struct pair x;
    bool seen = false;

    if (n - at < LINE)          /* cut short: whole if it ended in \n */
      return d[n - 1] == '\n' ? -1 : (int) np;
    if (!hex16 (d + at, &x.id) || d[at + 16] != ' ' ||
        !hex16 (d + at + 17, &x.inst) || d[at + 33] != '\n' ||
        x.id == 0 || x.inst == 0)
      return -1;
    for (size_t i = 0; i < np; i++)
      seen |= p[i].id == x.id && p[i].inst == x.inst;
    if (!seen) {
      ASSERT (np < max);
      p[np++] = x;
    }
  }
  return np;
}

/* The whole file. */
static char *
contents (int fd, size_t *len)
{
  off_t end = lseek (fd, 0, SEEK_END);
  char *b = malloc (end + 1);

  ASSERT (end >= 0 && b);
  ASSERT (pread (fd, b, end, 0) == end);
  b[end] = '\0';
  *len = end;
  return b;
}

static void
expect_file (int fd, const struct pair *p, size_t np)
{
  size_t len, want = strlen (HEADER) + np * LINE;
  char *b = contents (fd, &len), *e = malloc (want + 1);

  strcpy (e, HEADER);
  for (size_t i = 0; i < np; i++)
    sprintf (e + strlen (e), "%016llx %016llx\n",
             (unsigned long long) p[i].id, (unsigned long long) p[i].inst);
  ASSERT (len == want && memcmp (b, e, want) == 0);
  free (b);
  free (e);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static struct pair p[4096], q[4096];
  char why[256] = "";
  int fd, r, np;
  size_t nq;

  if (size > (size_t) LINE * 4000)
    return 0;
  np = model (data, size, p, sizeof p / sizeof p[0]);
  fd = memfd_create ("state", MFD_CLOEXEC);
  ASSERT (fd >= 0);
  ASSERT (size == 0 || write (fd, data, size) == (ssize_t) size);

  r = gm_ab_state (fd, failed, why, sizeof why);
  ASSERT (r == 0 || r == -1);
  ASSERT (memchr (why, '\0', sizeof why));
  if (r == -1) {
    size_t len;
    char *b = contents (fd, &len);
    ASSERT (np == -1 && why[0] != '\0');
    ASSERT (gm_ab_listed () == 0);
    /* Left as it was. */
    ASSERT (len == size && memcmp (b, data, size) == 0);
    free (b);
    close (fd);
    return 0;
  }
  ASSERT (np >= 0);
  ASSERT (gm_ab_listed () == (unsigned) np);
  expect_file (fd, p, np);

  /* Adopted: each conn_id named with one instance only, once. */
  {
    struct gm_ab_node *got[4096];
    uint64_t got_id[4096];
    size_t ngot = 0;
    uint64_t id;
    struct gm_ab_node *n;

    while ((n = gm_ab_reuse (&id)) != NULL) {
      size_t with = 0;
      ASSERT (ngot < sizeof got / sizeof got[0]);
      for (int i = 0; i < np; i++)
        with += p[i].id == id;
      ASSERT (with == 1);
      for (size_t i = 0; i < ngot; i++)
        ASSERT (got[i] != n && got_id[i] != id);
      got_id[ngot] = id;
      got[ngot++] = n;
    }
    for (int i = 0; i < np; i++) {
      size_t with = 0;
      for (int j = 0; j < np; j++)
        with += p[j].id == p[i].id;
      if (with == 1) {
        bool found = false;
        for (size_t k = 0; k < ngot; k++)
          found |= got_id[k] == p[i].id;
        ASSERT (found);
      }
    }
    /* Closed again before they connect: the names go back. */
    for (size_t i = 0; i < ngot; i++)
      gm_ab_close (got[i]);
    ASSERT (gm_ab_listed () == (unsigned) np);
    expect_file (fd, p, np);
  }

  /* Tell each instance: a connection of its own (not listed) names
   * each of the others once; then nothing is left. */
  {
    struct gm_ab_node *self = gm_ab_open (0xffffffffffffffffull);
    ASSERT (self);
    memcpy (q, p, np * sizeof *p);
    nq = np;
    for (int i = 0; i < np; i++) {
      uint64_t id;
      struct gm_ab_node *told;

      while (gm_ab_take (self, p[i].inst, &id, &told)) {
        size_t k;
        for (k = 0; k < nq && !(q[k].id == id && q[k].inst == p[i].inst); k++)
          ;
        ASSERT (k < nq);        /* listed, and named only once */
        memmove (&q[k], &q[k + 1], (nq - k - 1) * sizeof *q);
        nq--;
        gm_ab_told (told, true);
        expect_file (fd, q, nq);
      }
      ASSERT (!gm_ab_pending (self, p[i].inst));
    }
    ASSERT (nq == 0 && gm_ab_listed () == 0);
    gm_ab_close (self);
    expect_file (fd, q, 0);
  }
  close (fd);
  return 0;
}

/* libFuzzer target: common/stripegeo (RAID geometry from sysfs text, a
 * device-mapper table, the registry, and the stream layout).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Byte 0 of an input picks what the rest is:
 *   0  a device-mapper table ('dmsetup table'), to gm_stripe_dm_parse
 *   1  md's sysfs values: 8 bytes chunk_size, 8 bytes layout, then
 *      level NUL raid_disks, to gm_stripe_from_md
 *   2  io_min, io_opt, physical block (8 bytes each), to
 *      gm_stripe_from_io_hints
 *   3  a geometry and a request (chunk, data disks, offset in the
 *      array, the request's offset, 8 bytes each; length 4; max
 *      pieces 1), to gm_stripe_layout
 *   4  a registry value, to gm_stripe_from_registry
 *   5  a fake sysfs tree (fake_tree below), to gm_stripe_detect
 * Text is given in a buffer of exactly its length (NUL-terminated).
 *
 * Checked, from the header's words (stripegeo.h) rather than the code:
 *   - a table is taken (1) only when each line is "START LENGTH TYPE"
 *     with unsigned sector numbers, linear or crypt, all on one
 *     device named MAJOR:MINOR and nothing else, at most 64 of them,
 *     and every START and sector below is in bytes exactly (no sign
 *     taken, no overflow of * 512)
 *   - an md geometry that stripes has a chunk that is a multiple of
 *     512 up to 1T, 1 to 4096 data disks, the level's parity, and a
 *     full stripe that does not wrap
 *   - io hints stripe only with io_min above the physical block and
 *     io_opt at least two whole io_min (then chunk io_min, io_opt / io_min
 *     data disks)
 *   - a layout's pieces cover the request in order, each within one
 *     chunk of the array and cut at every chunk boundary; a piece's
 *     stream is its data column's, numbered in order of first
 *     appearance; nstreams is how many there are; 0 only when more
 *     than max pieces would be needed (or nothing to lay out, or a
 *     byte past the array's 2^64th)
 *   - a registry value is taken only as "CHUNK:DISKS:PARITY:OFFSET",
 *     decimal digits, parity 0, 1, 2 or ?, chunk and disks nonzero, and
 *     what it gives lays out requests (disks up to 4096, a full stripe
 *     that does not wrap)
 *   - detection returns -1, 0 or 1; 1 with a geometry as above, and a
 *     reshape only with -1; every string it sets is terminated
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "registry.h"
#include "stripegeo.h"

static void
die (const char *what)
{
  fprintf (stderr, "invariant broken: %s\n", what);
  abort ();
}
#define ASSERT(c) do { if (!(c)) die (#c); } while (0)

static uint64_t
le (const uint8_t *p, size_t avail, unsigned n)
{
  uint64_t v = 0;
  for (unsigned i = 0; i < n && i < avail; i++)
    v |= (uint64_t) p[i] << (8 * i);
  return v;
}

/* The bytes as a string in a buffer of their length (NUL included). */
static char *
text (const uint8_t *d, size_t n)
{
  size_t len = strnlen ((const char *) d, n);
  char *s = malloc (len + 1);
  memcpy (s, d, len);
  s[len] = '\0';
  return s;
}

static bool
terminated (const char *s, size_t size)
{
  return memchr (s, '\0', size) != NULL;
}

/* An unsigned decimal number (digits only) at *p, then blanks; false
 * when none or past 2^64 - 1.
 */
static bool
number (const char **p, uint64_t *v)
{
  const char *s = *p;

  *v = 0;
  if (!isdigit ((unsigned char) *s))
    return false;
  for (; isdigit ((unsigned char) *s); s++) {
    if (*v > (UINT64_MAX - (*s - '0')) / 10)
      return false;
    *v = *v * 10 + (*s - '0');
  }
  *p = s;
  return true;
}

/* ---- 0: device-mapper tables ---- */

/* The i-th blank-separated word of line (up to its end), or NULL. */
static const char *
word (const char *line, int i, size_t *len)
{
  const char *p = line;

  for (int k = 0;; k++) {
    while (*p != '\n' && isspace ((unsigned char) *p))
      p++;
    if (*p == '\0' || *p == '\n')
      return NULL;
    *len = strcspn (p, " \t\n\v\f\r");
    if (k == i)
      return p;
    p += *len;
  }
}

static void
check_dm (const char *table)
{
  struct gm_dm_map m;
  char why[256] = "";
  int r = gm_stripe_dm_parse (table, &m, why, sizeof why);
  unsigned nseg = 0;

  ASSERT (r >= -1 && r <= 1);
  ASSERT (terminated (why, sizeof why));
  if (r != 1) {
    ASSERT (why[0] != '\0');
    return;
  }
  ASSERT (m.nseg >= 1 && m.nseg <= GM_DM_MAX_SEG);
  /* Each line, again: the segment the parser took from it. */
  for (const char *line = table; *line; nseg++) {
    size_t len, wl;
    const char *w, *end = line + strcspn (line, "\n");
    uint64_t start = 0, sectors = 0, below = 0;
    char dev[512];
    unsigned maj, min;
    int n = 0;

    ASSERT (nseg < m.nseg);
    w = word (line, 0, &len);
    ASSERT (w && number (&w, &start) &&
            (*w == '\0' || isspace ((unsigned char) *w)));
    w = word (line, 1, &len);
    ASSERT (w && number (&w, &sectors) &&
            (*w == '\0' || isspace ((unsigned char) *w)));
    w = word (line, 2, &wl);
    ASSERT (w && ((wl == 6 && memcmp (w, "linear", 6) == 0) ||
                  (wl == 5 && memcmp (w, "crypt", 5) == 0)));
    if (wl == 5) {              /* crypt CIPHER KEY IV_OFFSET DEVICE */
      w = word (line, 5, &len);
      ASSERT (w && number (&w, &below) &&
              (*w == '\0' || isspace ((unsigned char) *w)));
    }
    w = word (line, wl == 6 ? 3 : 6, &len);
    ASSERT (w && len < sizeof dev);
    memcpy (dev, w, len);
    dev[len] = '\0';
    /* MAJOR:MINOR and nothing else, each an unsigned number. */
    ASSERT (sscanf (dev, "%u:%u%n", &maj, &min, &n) == 2 && dev[n] == '\0');
    ASSERT (isdigit ((unsigned char) dev[0]) &&
            isdigit ((unsigned char) strchr (dev, ':')[1]));
    ASSERT (maj == m.maj && min == m.min);
    w = word (line, wl == 6 ? 4 : 7, &len);
    ASSERT (w && number (&w, &below) &&
            (*w == '\0' || isspace ((unsigned char) *w)));
    /* Sectors of 512 bytes, exactly. */
    ASSERT (start <= UINT64_MAX / 512 && below <= UINT64_MAX / 512);
    ASSERT (m.start[nseg] == start * 512 && m.below[nseg] == below * 512);
    line = *end ? end + 1 : end;
  }
  ASSERT (nseg == m.nseg);
}

/* ---- 1: md, 2: io hints ---- */

static void
check_geometry (const struct gm_stripe *s)
{
  ASSERT (s->chunk > 0 && s->data_disks >= 1 && s->data_disks <= 4096);
  ASSERT (s->chunk <= UINT64_MAX / s->data_disks);
  ASSERT (s->parity <= 2);
}

static void
check_md (const uint8_t *d, size_t n)
{
  uint64_t chunk = le (d, n, 8);
  long layout = (long) le (d + (n > 8 ? 8 : n), n > 8 ? n - 8 : 0, 8);
  size_t at = n > 16 ? 16 : n;
  char *level = text (d + at, n - at);
  size_t l = strlen (level);
  char *disks = text (d + at + (l < n - at ? l + 1 : l),
                      n - at - (l < n - at ? l + 1 : l));
  struct gm_stripe s;
  char why[256] = "";
  int r;

  memset (&s, 0xaa, sizeof s);
  r = gm_stripe_from_md (level, chunk, disks, layout, &s, why, sizeof why);
  ASSERT (r >= -1 && r <= 1);
  ASSERT (terminated (why, sizeof why));
  if (r == 1) {
    unsigned parity = strcmp (level, "raid6") == 0 ? 2 :
      strcmp (level, "raid5") == 0 || strcmp (level, "raid4") == 0 ? 1 : 0;
    check_geometry (&s);
    ASSERT (s.chunk == chunk && chunk % 512 == 0 && chunk <= 1ull << 40);
    ASSERT (s.parity == parity && s.parity_known && s.offset == 0);
  }
  else
    ASSERT (why[0] != '\0');
  free (level);
  free (disks);
}

static void
check_io_hints (const uint8_t *d, size_t n)
{
  uint64_t io_min = le (d, n, 8);
  uint64_t io_opt = le (d + (n > 8 ? 8 : n), n > 8 ? n - 8 : 0, 8);
  uint64_t pbs = le (d + (n > 16 ? 16 : n), n > 16 ? n - 16 : 0, 8);
  struct gm_stripe s;
  int r;

  memset (&s, 0xaa, sizeof s);
  r = gm_stripe_from_io_hints (io_min, io_opt, pbs, &s);
  ASSERT (r == 0 || r == 1);
  if (r == 1) {
    check_geometry (&s);
    ASSERT (s.chunk == io_min && io_min > (pbs ? pbs : 512));
    ASSERT (s.data_disks >= 2);
    ASSERT (io_opt / io_min >= 2 && io_opt % io_min == 0);
    ASSERT (s.data_disks == io_opt / io_min);
  }
}

/* ---- 3: layouts ---- */

static void
check_layout_of (const struct gm_stripe *s, uint64_t offset, uint32_t len,
                 unsigned max)
{
  struct gm_stripe_piece p[64];
  uint64_t col_of[64];
  unsigned nstreams = 12345, n, streams = 0;
  uint64_t a = offset + s->offset, need;

  if (max > 64)
    max = 64;
  n = gm_stripe_layout (s, offset, len, p, max, &nstreams);
  ASSERT (n <= max);
  if (len == 0 || s->chunk == 0 || s->data_disks == 0)
    return;
  /* How many chunks the request touches in the array; none past its
   * 2^64th byte. */
  if (a < offset || a + (len - 1) < a) {
    ASSERT (n == 0);
    return;
  }
  need = (a + (len - 1)) / s->chunk - a / s->chunk + 1;
  ASSERT ((n == 0) == (need > max));
  if (n == 0)
    return;
  ASSERT (n == need);
  for (unsigned i = 0, off = 0; i < n; i++) {
    uint64_t col = (a + p[i].off) / s->chunk % s->data_disks;
    unsigned st;

    ASSERT (p[i].off == off && p[i].len > 0);
    /* Within one chunk, and cut at each boundary. */
    ASSERT ((a + p[i].off) / s->chunk ==
            (a + p[i].off + p[i].len - 1) / s->chunk);
    ASSERT (i == n - 1 || (a + p[i].off + p[i].len) % s->chunk == 0);
    /* Its column's stream, numbered as they first appear. */
    for (st = 0; st < streams && col_of[st] != col; st++)
      ;
    if (st == streams)
      col_of[streams++] = col;
    ASSERT (p[i].stream == st);
    off += p[i].len;
    if (i == n - 1)
      ASSERT (off == len);
  }
  ASSERT (nstreams == streams);
}

static void
check_layout (const uint8_t *d, size_t n)
{
  struct gm_stripe s = { 0 };
  uint64_t offset;
  uint32_t len;
  unsigned max;

  s.chunk = le (d, n, 8);
  s.data_disks = le (d + (n > 8 ? 8 : n), n > 8 ? n - 8 : 0, 8) % 5000;
  s.offset = le (d + (n > 16 ? 16 : n), n > 16 ? n - 16 : 0, 8);
  offset = le (d + (n > 24 ? 24 : n), n > 24 ? n - 24 : 0, 8);
  len = le (d + (n > 32 ? 32 : n), n > 32 ? n - 32 : 0, 4);
  max = n > 36 ? d[36] % 70 : 64;
  check_layout_of (&s, offset, len, max);
}

/* ---- 4: the registry ---- */

static void
check_registry (const char *v)
{
  struct gm_stripe s;
  char why[256] = "";
  int r;
  const char *p = v;
  uint64_t chunk, dd, off;
  char parity = 0;
  bool ok;

  ASSERT (gm_registry_publish (GM_REG_STRIPE, v) == 0);
  memset (&s, 0xaa, sizeof s);
  r = gm_stripe_from_registry (&s, why, sizeof why);
  ASSERT (r == 1 || r == -1);
  ASSERT (terminated (why, sizeof why));
  ok = number (&p, &chunk) && *p++ == ':' && number (&p, &dd) &&
    *p++ == ':' && *p && strchr ("012?", parity = *p++) &&
    *p++ == ':' && number (&p, &off) && *p == '\0' &&
    chunk > 0 && dd > 0 && dd <= 4096 && chunk <= UINT64_MAX / dd;
  if (r == 1) {
    ASSERT (ok);
    ASSERT (s.chunk == chunk && s.data_disks == dd && s.offset == off);
    ASSERT (s.parity_known == (parity != '?'));
    ASSERT (terminated (s.source, sizeof s.source));
    check_geometry (&s);
  }
  else
    ASSERT (why[0] != '\0');
}

/* ---- 5: a fake sysfs tree ---- */

/* Block devices of the tree: the name of each (a partition, sda1, is
 * in its disk's folder) and its number.
 */
static const struct {
  const char *dir;
  unsigned maj, min;
} devs[] = {
  { "md0", 9, 0 }, { "dm-0", 253, 0 }, { "loop0", 7, 0 },
  { "nvme0n1", 259, 0 }, { "sda", 8, 0 }, { "sda/sda1", 8, 1 },
};
#define NDEVS (sizeof devs / sizeof devs[0])

/* The files the code reads in a block device's folder. */
static const char *const files[] = {
  "md/level", "md/raid_disks", "md/chunk_size", "md/layout",
  "md/reshape_position", "md/sync_action", "md/rd0/size", "md/rd1/size",
  "md/rd2/size", "dm/name", "dm/table", "loop/backing_file", "loop/offset",
  "queue/minimum_io_size", "queue/optimal_io_size",
  "queue/physical_block_size", "partition", "start",
};
#define NFILES (sizeof files / sizeof files[0])

static char root[PATH_MAX], sys[PATH_MAX], served[PATH_MAX], node[PATH_MAX];
static bool written[NDEVS][NFILES];
static dev_t served_dev;

static void
path_of (char *out, size_t len, unsigned d, unsigned f)
{
  snprintf (out, len, "%s/devices/virtual/block/%s/%s", sys, devs[d].dir,
            files[f]);
}

static void
mkdirs (const char *path)
{
  char p[PATH_MAX];

  snprintf (p, sizeof p, "%s", path);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      mkdir (p, 0755);
      *s = '/';
    }
  mkdir (p, 0755);
}

static void
make_tree (void)
{
  char p[PATH_MAX], t[PATH_MAX];
  struct stat st;
  int fd;

  const char *tmp = getenv ("FUZZ_TMPDIR");

  if (tmp == NULL)
    tmp = access ("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf (root, sizeof root, "%s/fuzz-stripegeo.%d", tmp, (int) getpid ());
  snprintf (sys, sizeof sys, "%s/sys", root);
  snprintf (served, sizeof served, "%s/served", root);
  snprintf (node, sizeof node, "%s/blk", root);
  for (unsigned d = 0; d < NDEVS; d++) {
    for (unsigned f = 0; f < NFILES; f++) {
      path_of (p, sizeof p, d, f);
      *strrchr (p, '/') = '\0';
      mkdirs (p);
    }
    snprintf (p, sizeof p, "%s/dev/block/%u:%u", sys, devs[d].maj,
              devs[d].min);
    snprintf (t, sizeof t, "%s/devices/virtual/block/%s", sys, devs[d].dir);
    *strrchr (p, '/') = '\0';
    mkdirs (p);
    snprintf (p, sizeof p, "%s/dev/block/%u:%u", sys, devs[d].maj,
              devs[d].min);
    if (symlink (t, p) == -1 && errno != EEXIST)
      die ("symlink");
  }
  fd = open (served, O_CREAT | O_WRONLY, 0644);
  if (fd == -1 || fstat (fd, &st) == -1)
    die ("the served file");
  close (fd);
  served_dev = st.st_dev;
}

static void
remove_tree (void)
{
  char cmd[PATH_MAX + 32];

  if (root[0] && strstr (root, "/fuzz-stripegeo.")) {
    snprintf (cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system (cmd) != 0)
      fprintf (stderr, "could not remove %s\n", root);
  }
}

/* Byte 0: bits 0-2 the device the served file lies on (dev/block/ of
 * its st_dev links there); bits 3-5 the device number the node blk
 * (a block device) stands for.  Then records: a byte for the device
 * (% 6), one for the file (% 18), a length byte, that many bytes of
 * content.  A loop/backing_file of "@" names the served file, "#" the
 * node blk (a regular file when mknod is not allowed).  The tree is
 * made once, in $FUZZ_TMPDIR (else /dev/shm, else /tmp), and removed
 * at exit.
 */
static void
check_detect (const uint8_t *d, size_t n)
{
  char p[PATH_MAX], t[PATH_MAX], why[512] = "";
  struct gm_stripe s;
  unsigned top;
  int r;

  if (n < 1)
    return;
  top = (d[0] & 7) % NDEVS;
  for (unsigned i = 0; i < NDEVS; i++)
    for (unsigned f = 0; f < NFILES; f++)
      if (written[i][f]) {
        path_of (p, sizeof p, i, f);
        unlink (p);
        written[i][f] = false;
      }
  snprintf (p, sizeof p, "%s/dev/block/%u:%u", sys, major (served_dev),
            minor (served_dev));
  snprintf (t, sizeof t, "%s/devices/virtual/block/%s", sys, devs[top].dir);
  unlink (p);
  if (symlink (t, p) == -1)
    die ("symlink");
  unlink (node);
  /* Not root (no mknod): a regular file, on the served file's device. */
  if (mknod (node, S_IFBLK | 0600,
             makedev (devs[((d[0] >> 3) & 7) % NDEVS].maj,
                      devs[((d[0] >> 3) & 7) % NDEVS].min)) == -1 &&
      mknod (node, S_IFREG | 0600, 0) == -1)
    die ("mknod");

  for (size_t at = 1; at + 3 <= n;) {
    unsigned dv = d[at] % NDEVS, f = d[at + 1] % NFILES;
    size_t len = d[at + 2];
    const char *content;
    FILE *fp;

    at += 3;
    if (len > n - at)
      len = n - at;
    content = (const char *) d + at;
    path_of (p, sizeof p, dv, f);
    if ((fp = fopen (p, "w")) == NULL)
      die ("fopen");
    if (strcmp (files[f], "loop/backing_file") == 0 && len == 1 &&
        (*content == '@' || *content == '#'))
      fprintf (fp, "%s\n", *content == '@' ? served : node);
    else
      fwrite (content, 1, len, fp);
    fclose (fp);
    written[dv][f] = true;
    at += len;
  }

  memset (&s, 0xaa, sizeof s);
  r = gm_stripe_detect (sys, served, &s, why, sizeof why);
  if (getenv ("FUZZ_TRACE"))    /* FUZZ_TRACE=1 ./fuzz-stripegeo FILE */
    fprintf (stderr, "detect: %d: %s\n", r, r == 1 ? s.source : why);
  ASSERT (r >= -1 && r <= 1);
  ASSERT (terminated (why, sizeof why));
  ASSERT (terminated (s.note, sizeof s.note));
  if (r == 1) {
    check_geometry (&s);
    ASSERT (terminated (s.source, sizeof s.source) && s.source[0] != '\0');
    ASSERT (!s.reshape);
  }
  else
    ASSERT (why[0] != '\0');
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static bool tree;
  char *s;

  if (size < 1)
    return 0;
  switch (data[0] % 6) {
  case 0:
    s = text (data + 1, size - 1);
    check_dm (s);
    free (s);
    break;
  case 1:
    check_md (data + 1, size - 1);
    break;
  case 2:
    check_io_hints (data + 1, size - 1);
    break;
  case 3:
    check_layout (data + 1, size - 1);
    break;
  case 4:
    s = text (data + 1, size - 1);
    check_registry (s);
    free (s);
    break;
  case 5:
    if (!tree) {
      make_tree ();
      atexit (remove_tree);
      tree = true;
    }
    check_detect (data + 1, size - 1);
    break;
  }
  return 0;
}

/* gmblock: RAID stripe geometry (see stripegeo.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <linux/dm-ioctl.h>

#include "registry.h"
#include "sizes.h"
#include "stripegeo.h"

/* dir/rel into path[PATH_MAX].  -1 when it does not fit: a cut path
 * names another file (dir comes from realpath, up to PATH_MAX - 1 long
 * under a deep stripe-sysfs= tree).
 */
static int
sub_path (char *path, const char *dir, const char *rel)
{
  int n = snprintf (path, PATH_MAX, "%s/%s", dir, rel);
  return n >= 0 && n < PATH_MAX ? 0 : -1;
}

static bool
sub_exists (const char *dir, const char *rel)
{
  char path[PATH_MAX];
  return sub_path (path, dir, rel) == 0 && access (path, F_OK) == 0;
}

/* One line of dir/rel without its newline.  Returns 0 or -1. */
static int
read_str (const char *dir, const char *rel, char *buf, size_t len)
{
  char path[PATH_MAX];
  FILE *fp;
  bool ok;

  if (sub_path (path, dir, rel) == -1 || (fp = fopen (path, "r")) == NULL)
    return -1;
  ok = fgets (buf, len, fp) != NULL;
  fclose (fp);
  if (!ok)
    return -1;
  buf[strcspn (buf, "\n")] = '\0';
  return 0;
}

static int
read_u64 (const char *dir, const char *rel, uint64_t *v)
{
  char buf[64];

  /* *v is left alone unless the whole line is a number: the callers
   * keep their default (0) for a value that is not one.
   */
  if (read_str (dir, rel, buf, sizeof buf) == -1)
    return -1;
  return gm_parse_u64 (buf, 10, v);
}

int
gm_stripe_from_md (const char *level, uint64_t chunk, const char *raid_disks,
                   long layout, struct gm_stripe *s, char *why, size_t whylen)
{
  unsigned long n;
  unsigned parity = 0, min_disks = 1, data;
  char *end;

  if (strcmp (level, "raid0") == 0)
    ;
  else if (strcmp (level, "raid4") == 0 || strcmp (level, "raid5") == 0)
    parity = 1, min_disks = 2;
  else if (strcmp (level, "raid6") == 0)
    parity = 2, min_disks = 4;
  else if (strcmp (level, "raid10") == 0)
    min_disks = 2;
  else {
    snprintf (why, whylen, "md level %s does not stripe%s", level,
              strcmp (level, "raid1") == 0 ? " (mirrors)" :
              strcmp (level, "linear") == 0 ? " (a concatenation)" : "");
    return 0;
  }

  errno = 0;
  n = strtoul (raid_disks, &end, 10);
  if (errno == 0 && end != raid_disks && *end == ' ') {
    /* md prints "N (OLD)" while a reshape changes the member count. */
    snprintf (why, whylen, "%s: a reshape is in progress (raid_disks %s)",
              level, raid_disks);
    return -1;
  }
  if (errno || end == raid_disks || *end || n < min_disks || n > 4096) {
    snprintf (why, whylen, "%s: raid_disks '%s' (expected at least %u)",
              level, raid_disks, min_disks);
    return -1;
  }
  /* md's chunk is an int of sectors: above that, sysfs lies, and a
   * full stripe (chunk times members) could wrap to 0 (a division by
   * zero in from_dm: review finding). */
  if (chunk == 0 || chunk % 512 || chunk > ((uint64_t) INT32_MAX + 1) * 512) {
    snprintf (why, whylen, "%s: chunk_size %" PRIu64
              " (expected a multiple of 512, at most 1T)", level, chunk);
    return -1;
  }
  data = n - parity;
  if (strcmp (level, "raid10") == 0) {
    /* As md's raid10_nr_stripes: near copies share a stripe, far and
     * offset copies do not make it narrower.
     */
    unsigned near = layout & 0xff, far = (layout >> 8) & 0xff;
    if (layout < 0 || near < 1 || far < 1) {
      snprintf (why, whylen, "raid10: layout %ld unknown", layout);
      return -1;
    }
    data = n % near ? n : n / near;
  }
  s->chunk = chunk;
  s->data_disks = data;
  s->parity = parity;
  s->parity_known = true;
  s->offset = 0;
  return 1;
}

int
gm_stripe_from_io_hints (uint64_t io_min, uint64_t io_opt,
                         uint64_t physical_block, struct gm_stripe *s)
{
  if (physical_block == 0)
    physical_block = 512;
  /* io_opt / io_min, not io_opt < 2 * io_min: that wraps for an io_min
   * of 2^63 or more, which then striped over one disk. */
  if (io_min <= physical_block || io_min % 512 || io_opt / io_min < 2 ||
      io_opt % io_min || io_opt / io_min > 4096)
    return 0;
  s->chunk = io_min;
  s->data_disks = io_opt / io_min;
  s->parity = 0;
  s->parity_known = false;      /* the hints do not say */
  s->offset = 0;
  return 1;
}

static int resolve (const char *root, unsigned maj, unsigned min, int depth,
                    struct gm_stripe *s, char *why, size_t whylen);

/* nvmeXnY, or nvmeXcZnY (a path of a multipath namespace). */
static bool
is_nvme_namespace (const char *name)
{
  unsigned a, b, c;
  int end = 0;

  return (sscanf (name, "nvme%un%u%n", &a, &b, &end) == 2 && !name[end]) ||
    (sscanf (name, "nvme%uc%un%u%n", &a, &b, &c, &end) == 3 && !name[end]);
}

/* md RAID0 over members of different sizes stripes in zones: all
 * members up to the smallest one's end, then those that are larger,
 * and so on (md's create_strip_zones, which rounds each member down to
 * whole chunks; md/rdN/size shows that, in KiB).  The stripe of all
 * members, md's own io_opt, holds in the first zone only: say where
 * that ends in s->note (left alone when the sizes cannot be read).
 */
static void
md_zones (const char *dir, const char *name, struct gm_stripe *s)
{
  uint64_t lo = UINT64_MAX, hi = 0, kib, chunks;
  char rel[64], a[32];

  /* lo and hi: the smallest and largest member, in whole chunks. */
  for (unsigned i = 0; i < s->data_disks; i++) {
    snprintf (rel, sizeof rel, "md/rd%u/size", i);
    if (read_u64 (dir, rel, &kib) == -1 || kib > UINT64_MAX / 1024)
      return;
    chunks = kib * 1024 / s->chunk;
    if (chunks < lo)
      lo = chunks;
    if (chunks > hi)
      hi = chunks;
  }
  if (lo != hi)
    snprintf (s->note, sizeof s->note, "%s: raid0 over members of "
              "different sizes: md stripes the first %s over all %u "
              "members, the rest over fewer (zones): the stripe holds "
              "there only", name,
              gm_format_size (lo * s->chunk * s->data_disks, a, sizeof a),
              s->data_disks);
}

static int
from_md_dir (const char *dir, const char *name, struct gm_stripe *s,
             char *why, size_t whylen)
{
  char level[32], disks[32], rp[64], act[32], ch[64], w[160];
  uint64_t chunk = 0, layout;
  int r;

  /* md shows a reshape in several places, not all at once: the
   * position once it runs, sync_action "reshape" from its request, and
   * "NEW (OLD)" in raid_disks or chunk_size while they change.
   */
  if (read_str (dir, "md/reshape_position", rp, sizeof rp) == 0 &&
      strcmp (rp, "none") != 0) {
    snprintf (why, whylen, "%s: a reshape is in progress (reshape_position "
              "%s): the geometry is changing", name, rp);
    s->reshape = true;
    return -1;
  }
  if (read_str (dir, "md/sync_action", act, sizeof act) == 0 &&
      strcmp (act, "reshape") == 0) {
    snprintf (why, whylen, "%s: a reshape is in progress (sync_action "
              "reshape): the geometry is changing", name);
    s->reshape = true;
    return -1;
  }
  if (read_str (dir, "md/chunk_size", ch, sizeof ch) == 0 &&
      strchr (ch, '(')) {
    snprintf (why, whylen, "%s: a reshape is in progress (chunk_size %s): "
              "the geometry is changing", name, ch);
    s->reshape = true;
    return -1;
  }
  if (read_str (dir, "md/level", level, sizeof level) == -1 ||
      read_str (dir, "md/raid_disks", disks, sizeof disks) == -1) {
    snprintf (why, whylen, "%s: md/level or md/raid_disks unreadable", name);
    return -1;
  }
  read_u64 (dir, "md/chunk_size", &chunk);
  r = gm_stripe_from_md (level, chunk, disks,
                         read_u64 (dir, "md/layout", &layout) == 0 &&
                         layout <= LONG_MAX ? (long) layout : -1,
                         s, w, sizeof w);
  if (r == -1 && strstr (w, "reshape"))
    s->reshape = true;
  if (r == 1 && strcmp (level, "raid0") == 0)
    md_zones (dir, name, s);
  if (r != 1)
    snprintf (why, whylen, "%s: %s", name, w);
  else
    snprintf (s->source, sizeof s->source, "%.63s %.31s", name, level);
  return r;
}

/* Device dev starts at byte 'at' of device 'of' (a partition, a loop
 * device's offset, a device-mapper segment), which moved s->offset:
 * said in s->offset_from after what moved it below, for messages.
 */
static void
offset_by (struct gm_stripe *s, const char *dev, uint64_t at, const char *of)
{
  size_t n = strlen (s->offset_from);

  if (at)
    snprintf (s->offset_from + n, sizeof s->offset_from - n,
              "%s%.63s starts at byte %" PRIu64 " of %.63s", n ? ", " : "",
              dev, at, of);
}

/* The offset found under a regular file is its file system's: the
 * file's own place in it is not known.  That is right when the file
 * system aligns its blocks to the stripe (mkfs.xfs and mkfs.ext4 do
 * so from md's io hints): say so in s->offset_from.
 */
static void
offset_of_file (struct gm_stripe *s)
{
  static const char said[] = ", where the file system holding the file "
    "starts (the file's own blocks are taken to lie on the stripes as the "
    "file system's do)";
  size_t n = strlen (s->offset_from);

  /* Once: a file on a loop device over a file says it already. */
  if (n && strstr (s->offset_from, said) == NULL)
    snprintf (s->offset_from + n, sizeof s->offset_from - n, "%s", said);
}

/* The device directory for MAJ:MIN, its name and, for a partition,
 * the parent's directory with *part_start set.
 */
static int
device_dir (const char *root, unsigned maj, unsigned min, char *dir,
            char *name, size_t namelen, uint64_t *part_start)
{
  char link[PATH_MAX];
  uint64_t start;

  snprintf (link, sizeof link, "%s/dev/block/%u:%u", root, maj, min);
  if (realpath (link, dir) == NULL)
    return -1;
  snprintf (name, namelen, "%s", strrchr (dir, '/') + 1);
  *part_start = 0;
  if (sub_exists (dir, "partition")) {
    if (read_u64 (dir, "start", &start) == 0)
      *part_start = start * 512;
    *strrchr (dir, '/') = '\0';
  }
  return 0;
}

static int resolve (const char *root, unsigned maj, unsigned min, int depth,
                    struct gm_stripe *s, char *why, size_t whylen);

/* A whole word of decimal digits (no sign, no blank: sscanf's %llu
 * and %u took "-1" as 2^64 - 1 and 2^32 - 1) up to max.
 */
static bool
dm_number (const char *w, uint64_t max, uint64_t *v)
{
  if (*w == '\0')
    return false;
  *v = 0;
  for (; *w; w++) {
    if (*w < '0' || *w > '9' || *v > (max - (*w - '0')) / 10)
      return false;
    *v = *v * 10 + (*w - '0');
  }
  return true;
}

int
gm_stripe_dm_parse (const char *table, struct gm_dm_map *m,
                    char *why, size_t whylen)
{
  const char *line = table;

  memset (m, 0, sizeof *m);
  for (int n = 1; *line; n++) {
    size_t len = strcspn (line, "\n");
    char rest[512], *w[8], *save = NULL, *dev, *maj_s;
    uint64_t start, sectors, off, maj, min;
    int nw = 0, at;

    if (len >= sizeof rest) {
      snprintf (why, whylen, "table line %d is too long", n);
      return -1;
    }
    memcpy (rest, line, len);
    rest[len] = '\0';
    line += len + (line[len] == '\n');
    /* The words, up to the eighth (a crypt segment's offset). */
    for (char *t = strtok_r (rest, " \t\v\f\r", &save); t && nw < 8;
         t = strtok_r (NULL, " \t\v\f\r", &save))
      w[nw++] = t;
    /* Sectors of 512 bytes: a start past 2^64 bytes is no table. */
    if (nw < 3 || !dm_number (w[0], UINT64_MAX / 512, &start) ||
        !dm_number (w[1], UINT64_MAX, &sectors)) {
      snprintf (why, whylen, "table line %d is not 'START LENGTH TYPE ...'",
                n);
      return -1;
    }
    /* LVM's linear volumes, LUKS and plain dm-crypt: the device below
     * and the sector there of this segment's start ("crypt CIPHER KEY
     * IV_OFFSET DEVICE OFFSET").
     */
    at = strcmp (w[2], "linear") == 0 ? 3 : strcmp (w[2], "crypt") == 0
      ? 6 : -1;
    if (at < 0) {
      snprintf (why, whylen, "a %.31s segment (only linear and crypt ones "
                "are followed)", w[2]);
      return 0;
    }
    if (nw < at + 2 || (at == 6 && !dm_number (w[5], UINT64_MAX, &off))) {
      snprintf (why, whylen, "a %s segment that is not 'START LENGTH %s'",
                w[2], at == 3 ? "linear DEVICE OFFSET"
                : "crypt CIPHER KEY IV_OFFSET DEVICE OFFSET");
      return 0;
    }
    dev = w[at];
    maj_s = strsep (&dev, ":");
    if (dev == NULL || !dm_number (maj_s, UINT_MAX, &maj) ||
        !dm_number (dev, UINT_MAX, &min)) {
      if (dev)
        dev[-1] = ':';
      snprintf (why, whylen, "a %.31s segment on '%.63s', not MAJOR:MINOR",
                w[2], w[at]);
      return 0;
    }
    if (!dm_number (w[at + 1], UINT64_MAX / 512, &off)) {
      snprintf (why, whylen, "a %.31s segment at sector '%.63s' below, not "
                "a number of sectors", w[2], w[at + 1]);
      return 0;
    }
    if (m->nseg == 0) {
      m->maj = maj;
      m->min = min;
    }
    else if (maj != m->maj || min != m->min) {
      snprintf (why, whylen, "segments on two devices (%u:%u and %u:%u)",
                m->maj, m->min, (unsigned) maj, (unsigned) min);
      return 0;
    }
    if (m->nseg == GM_DM_MAX_SEG) {
      snprintf (why, whylen, "more than %d segments", GM_DM_MAX_SEG);
      return 0;
    }
    m->start[m->nseg] = start * 512;
    m->below[m->nseg] = off * 512;
    m->nseg++;
  }
  if (m->nseg == 0) {
    snprintf (why, whylen, "an empty table");
    return 0;
  }
  return 1;
}

/* The table of device-mapper device maj:min as 'dmsetup table' prints
 * it, from the kernel (root only); under a fake sysfs (tests), from
 * its dm/table file.  0, or -1 with why set.
 */
static int
dm_table (const char *root, const char *dir, unsigned maj, unsigned min,
          char *out, size_t outlen, char *why, size_t whylen)
{
  size_t size = 16384, used = 0;
  struct dm_ioctl *io = NULL;
  int fd, ret = -1;

  if (strcmp (root, "/sys") != 0) {
    char path[PATH_MAX];
    FILE *fp;
    size_t n;

    if (sub_path (path, dir, "dm/table") == -1 ||
        (fp = fopen (path, "r")) == NULL) {
      snprintf (why, whylen, "no dm/table under %.200s", dir);
      return -1;
    }
    n = fread (out, 1, outlen - 1, fp);
    out[n] = '\0';
    fclose (fp);
    return 0;
  }
  fd = open ("/dev/mapper/control", O_RDWR | O_CLOEXEC);
  if (fd == -1) {
    snprintf (why, whylen, "/dev/mapper/control: %s", strerror (errno));
    return -1;
  }
  for (;;) {
    free (io);
    if ((io = calloc (1, size)) == NULL) {
      snprintf (why, whylen, "%s", strerror (errno));
      break;
    }
    io->version[0] = DM_VERSION_MAJOR;
    io->data_size = size;
    io->data_start = sizeof *io;
    io->dev = makedev (maj, min);
    io->flags = DM_STATUS_TABLE_FLAG;
    if (ioctl (fd, DM_TABLE_STATUS, io) == -1) {
      snprintf (why, whylen, "DM_TABLE_STATUS: %s", strerror (errno));
      break;
    }
    if (!(io->flags & DM_BUFFER_FULL_FLAG)) {
      const char *data = (const char *) io + io->data_start;
      size_t at = 0;

      ret = 0;
      out[0] = '\0';
      for (uint32_t i = 0; i < io->target_count && ret == 0; i++) {
        const struct dm_target_spec *t = (const void *) (data + at);
        int n = snprintf (out + used, outlen - used, "%llu %llu %.16s %s\n",
                          (unsigned long long) t->sector_start,
                          (unsigned long long) t->length, t->target_type,
                          (const char *) (t + 1));
        if (n < 0 || (size_t) n >= outlen - used) {
          snprintf (why, whylen, "its table is larger than %zu bytes",
                    outlen);
          ret = -1;
        }
        used += n;
        at = t->next;
      }
      break;
    }
    if ((size *= 2) > (1 << 20)) {
      snprintf (why, whylen, "its table is larger than 1M");
      break;
    }
  }
  free (io);
  close (fd);
  return ret;
}

/* Where segment i puts the mapped device's byte 0 in the array below
 * (which starts at 'base' in the stripes), modulo the full stripe.
 */
static uint64_t
seg_place (uint64_t base, const struct gm_dm_map *m, unsigned i,
           uint64_t width)
{
  uint64_t a = (base % width + m->below[i] % width) % width;

  return (a + width - m->start[i] % width) % width;
}

/* A device-mapper device: where its segments lie on the one device
 * below (linear, crypt), if that device stripes.  Returns like
 * resolve, or 2 when it cannot follow the mapping (why says why).
 */
static int
from_dm (const char *root, const char *dir, const char *name, unsigned maj,
         unsigned min, int depth, struct gm_stripe *s, char *why,
         size_t whylen)
{
  char table[8192], w[256], inner[sizeof s->source];
  struct gm_dm_map m;
  uint64_t width, first;
  int r;

  if (dm_table (root, dir, maj, min, table, sizeof table, w, sizeof w) == -1) {
    snprintf (why, whylen, "%.40s: cannot read its device-mapper table "
              "(%.150s): where it starts in the stripes below is not known",
              name, w);
    return 2;
  }
  if (gm_stripe_dm_parse (table, &m, w, sizeof w) != 1) {
    snprintf (why, whylen, "%.40s: device-mapper: %.150s: where it starts "
              "in the stripes below is not known", name, w);
    return 2;
  }
  if (depth >= 4) {
    snprintf (why, whylen, "%s: too deeply nested", name);
    return 0;
  }
  r = resolve (root, m.maj, m.min, depth + 1, s, why, whylen);
  if (r != 1)
    return r;
  /* Each segment's start in the array, modulo the full stripe, must be
   * the same: then one offset places all of them. */
  width = gm_stripe_width (s);
  first = seg_place (s->offset, &m, 0, width);
  for (unsigned i = 1; i < m.nseg; i++)
    if (seg_place (s->offset, &m, i, width) != first) {
      snprintf (why, whylen, "%s: its segments lie at different places in "
                "the stripes of the device below (segment %u)", name, i + 1);
      return 0;
    }
  /* Said of the mapped device itself (name is its partition's, when
   * the file is there), and of the device below: the first word of its
   * source.
   */
  snprintf (inner, sizeof inner, "%.*s", (int) strcspn (s->source, " "),
            s->source);
  if (m.nseg == 1 && m.start[0] == 0) {
    s->offset += m.below[0];    /* the true place, for messages */
    offset_by (s, strrchr (dir, '/') + 1, m.below[0], inner);
  }
  else {
    s->offset = first;
    s->offset_from[0] = '\0';
    if (first)
      snprintf (s->offset_from, sizeof s->offset_from, "%.63s's %u "
                "segments start at byte %" PRIu64 " of a full stripe of "
                "%.63s", strrchr (dir, '/') + 1, m.nseg, first, inner);
  }
  snprintf (inner, sizeof inner, "%s", s->source);
  snprintf (s->source, sizeof s->source, "%.31s over %.120s", name, inner);
  return 1;
}

static int
resolve (const char *root, unsigned maj, unsigned min, int depth,
         struct gm_stripe *s, char *why, size_t whylen)
{
  char dir[PATH_MAX], name[64], backing[PATH_MAX];
  uint64_t part_start, io_min = 0, io_opt = 0, pbs = 0;
  struct stat st;

  if (device_dir (root, maj, min, dir, name, sizeof name, &part_start) == -1) {
    snprintf (why, whylen, "%u:%u is not a block device in %s/dev/block "
              "(tmpfs, overlay or a network file system)", maj, min, root);
    return 0;
  }
  if (sub_exists (dir, "md/level")) {
    int r = from_md_dir (dir, name, s, why, whylen);
    s->offset = part_start;
    if (r == 1)
      offset_by (s, name, part_start, strrchr (dir, '/') + 1);
    return r;
  }
  if (read_str (dir, "loop/backing_file", backing, sizeof backing) == 0) {
    char inner[sizeof s->source];
    int r;

    if (depth > 0 || stat (backing, &st) == -1) {
      snprintf (why, whylen, "%s: backing file %s: %s", name, backing,
                depth > 0 ? "too deeply nested" : strerror (errno));
      return 0;
    }
    r = S_ISBLK (st.st_mode)
      ? resolve (root, major (st.st_rdev), minor (st.st_rdev), 1, s, why, whylen)
      : resolve (root, major (st.st_dev), minor (st.st_dev), 1, s, why, whylen);
    if (r == 1 && S_ISBLK (st.st_mode)) {
      /* Over a device, where the loop device (losetup -o) and this
       * partition of it start is known; in a file it is not.
       */
      const char *b = strrchr (backing, '/');
      uint64_t loop_off = 0;
      read_u64 (dir, "loop/offset", &loop_off);
      s->offset += loop_off + part_start;
      offset_by (s, strrchr (dir, '/') + 1, loop_off, b ? b + 1 : backing);
      offset_by (s, name, part_start, strrchr (dir, '/') + 1);
    }
    else if (r == 1)
      offset_of_file (s);
    if (r == 1) {
      snprintf (inner, sizeof inner, "%s", s->source);
      snprintf (s->source, sizeof s->source, "%.31s over %.120s", name, inner);
    }
    return r;
  }
  if (sub_exists (dir, "dm/name")) {
    char w[384];
    int r = from_dm (root, dir, name, maj, min, depth, s, w, sizeof w);

    if (r != 2) {
      if (r == 1) {
        s->offset += part_start;
        offset_by (s, name, part_start, strrchr (dir, '/') + 1);
      }
      else
        snprintf (why, whylen, "%s", w);
      return r;
    }
    /* dm-stripe's own stripes, or what the kernel stacked from below:
     * io hints, but where the device starts in the array is unknown. */
    snprintf (s->note, sizeof s->note, "%.200s", w);
    s->offset_unknown = true;
  }
  read_u64 (dir, "queue/minimum_io_size", &io_min);
  read_u64 (dir, "queue/optimal_io_size", &io_opt);
  read_u64 (dir, "queue/physical_block_size", &pbs);
  /* A partition's queue is its disk's (device_dir made dir the disk):
   * a partition of an NVMe namespace has the drive's hints too.
   */
  if (is_nvme_namespace (strrchr (dir, '/') + 1) &&
      gm_stripe_from_io_hints (io_min, io_opt, pbs, s)) {
    /* The kernel derives them from the drive's preferred write
     * granularity and optimal write size (NPWG, NOWS): one drive, whose
     * reads cut into "chunks" would only get slower. */
    snprintf (why, whylen, "%s (%u:%u) is an NVMe namespace, not a RAID: "
              "its io_min %" PRIu64 " and io_opt %" PRIu64 " are the drive's "
              "write granularity (NPWG, NOWS); give stripe-chunk= and "
              "stripe-data-disks= for a RAID behind an NVMe interface",
              name, maj, min, io_min, io_opt);
    memset (s, 0, sizeof *s);
    return 0;
  }
  if (gm_stripe_from_io_hints (io_min, io_opt, pbs, s)) {
    snprintf (s->source, sizeof s->source, "%s io_min/io_opt", name);
    s->offset = part_start;
    offset_by (s, name, part_start, strrchr (dir, '/') + 1);
    return 1;
  }
  snprintf (why, whylen, "%s (%u:%u) is not a RAID: no md/, io_min %" PRIu64
            ", io_opt %" PRIu64, name, maj, min, io_min, io_opt);
  return 0;
}

int
gm_stripe_detect (const char *sysroot, const char *path, struct gm_stripe *s,
                  char *why, size_t whylen)
{
  struct stat st;
  dev_t d;
  int r;

  s->reshape = false;
  s->note[0] = '\0';
  s->offset_unknown = false;
  s->offset_from[0] = '\0';
  if (stat (path, &st) == -1) {
    snprintf (why, whylen, "%s: %s", path, strerror (errno));
    return -1;
  }
  d = S_ISBLK (st.st_mode) ? st.st_rdev : st.st_dev;
  r = resolve (sysroot ? sysroot : "/sys", major (d), minor (d), 0,
               s, why, whylen);
  if (r == 1 && !S_ISBLK (st.st_mode))
    offset_of_file (s);
  return r;
}

/* Decimal digits at *p, then sep: the number into *v, *p past sep.
 * No sign, no blank, no overflow (sscanf's %llu and %u take "-1" as
 * 2^64 - 1 and 2^32 - 1, and skip blanks).
 */
static bool
decimal_field (const char **p, char sep, unsigned long long *v)
{
  const char *s = *p;

  *v = 0;
  if (*s < '0' || *s > '9')
    return false;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (*v > (ULLONG_MAX - (*s - '0')) / 10)
      return false;
    *v = *v * 10 + (*s - '0');
  }
  if (*s != sep)
    return false;
  *p = s + (sep != '\0');
  return true;
}

int
gm_stripe_from_registry (struct gm_stripe *s, char *why, size_t whylen)
{
  char *v = gm_registry_lookup (GM_REG_STRIPE);
  unsigned long long chunk, dd, off;
  char parity = 0;              /* '0', '1', '2', or '?': io hints only */
  const char *p = v;

  if (v == NULL)
    return 0;
  /* As detection and gmblock-stripe bound them: up to 4096 data disks
   * (gm_stripe_layout's streams), and a full stripe that does not wrap
   * (the layers above multiply the chunk by the disks: gmblock-cache's
   * write-back unit).
   */
  if (!decimal_field (&p, ':', &chunk) || !decimal_field (&p, ':', &dd) ||
      (parity = *p) == '\0' || strchr ("012?", parity) == NULL ||
      p[1] != ':' || (p += 2, !decimal_field (&p, '\0', &off)) ||
      chunk == 0 || dd == 0 || dd > 4096 || chunk > UINT64_MAX / dd) {
    snprintf (why, whylen, "malformed stripe geometry in the registry: "
              "\"%s\"", v);
    free (v);
    return -1;
  }
  free (v);
  memset (s, 0, sizeof *s);
  s->chunk = chunk;
  s->data_disks = dd;
  s->parity_known = parity != '?';
  s->parity = s->parity_known ? parity - '0' : 0;
  s->offset = off;
  snprintf (s->source, sizeof s->source, "gmblock-stripe: %llu x %llu, "
            "parity %s", chunk, dd,
            s->parity_known ? (char[2]) { parity } : "unknown");
  return 1;
}

unsigned
gm_stripe_layout (const struct gm_stripe *s, uint64_t offset, uint32_t len,
                  struct gm_stripe_piece *p, unsigned max, unsigned *nstreams)
{
  uint64_t a = offset + s->offset, col0 = 0;
  unsigned n = 0;

  /* Nothing past the array's 2^64th byte.  The end of a piece is
   * counted from its start: the chunk boundary after the last piece
   * may lie there ((a / chunk + 1) * chunk wrapped, and the loop went
   * on backwards, past p[max - 1]: fuzz-stripegeo).
   */
  if (len == 0 || s->chunk == 0 || s->data_disks == 0 || a < offset ||
      a > UINT64_MAX - (len - 1) ||
      (a + (len - 1)) / s->chunk - a / s->chunk + 1 > max)
    return 0;
  for (uint32_t done = 0; done < len; n++) {
    uint64_t at = a + done, room = s->chunk - at % s->chunk;
    uint64_t col = at / s->chunk % s->data_disks;
    uint32_t piece = room < len - done ? room : len - done;

    if (n == 0)
      col0 = col;
    p[n].off = done;
    p[n].len = piece;
    p[n].stream = (col + s->data_disks - col0) % s->data_disks;
    done += piece;
  }
  *nstreams = n < s->data_disks ? n : s->data_disks;
  return n;
}

/* Unit tests for common/stripegeo.c: md levels and layouts, io hints,
 * and detection in a small fake sysfs tree (md, a partition of it, a
 * loop device over a file on it, a reshape, a plain disk).
 */
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "registry.h"
#include "stripegeo.h"
#include "unit.h"

static char why[512];

static int
md (const char *level, uint64_t chunk, const char *disks, long layout,
    struct gm_stripe *s)
{
  memset (s, 0xaa, sizeof *s);
  why[0] = '\0';
  return gm_stripe_from_md (level, chunk, disks, layout, s, why, sizeof why);
}

static void
levels (void)
{
  struct gm_stripe s;

  CHECK (md ("raid0", 65536, "4", -1, &s) == 1);
  CHECK_EQ_U64 (s.chunk, 65536);
  CHECK_EQ_U64 (s.data_disks, 4);
  CHECK_EQ_U64 (s.parity, 0);
  CHECK (s.parity_known);
  CHECK_EQ_U64 (gm_stripe_width (&s), 262144);
  CHECK (md ("raid5", 524288, "4", 2, &s) == 1);
  CHECK_EQ_U64 (s.data_disks, 3);
  CHECK_EQ_U64 (s.parity, 1);
  CHECK (md ("raid4", 65536, "5", 0, &s) == 1 && s.data_disks == 4);
  CHECK (md ("raid6", 65536, "6", 2, &s) == 1);
  CHECK_EQ_U64 (s.data_disks, 4);
  CHECK_EQ_U64 (s.parity, 2);
  /* raid10: near copies narrow the stripe (4 disks n2: 2), unless they
   * do not divide the members (3 disks n2: md says 3); far copies and
   * offset layouts do not (as md's raid10_nr_stripes).
   */
  CHECK (md ("raid10", 65536, "4", 0x102, &s) == 1 && s.data_disks == 2);
  CHECK (md ("raid10", 65536, "3", 0x102, &s) == 1 && s.data_disks == 3);
  CHECK (md ("raid10", 65536, "4", 0x201, &s) == 1 && s.data_disks == 4);
  CHECK (md ("raid10", 65536, "4", 0x10201, &s) == 1 && s.data_disks == 4);
  CHECK (md ("raid10", 65536, "4", -1, &s) == -1 && strstr (why, "layout"));

  CHECK (md ("raid1", 0, "2", 0, &s) == 0 && strstr (why, "mirrors"));
  CHECK (md ("linear", 0, "2", 0, &s) == 0 && strstr (why, "concatenation"));
  CHECK (md ("", 0, "0", 0, &s) == 0);

  /* Impossible or changing geometries. */
  CHECK (md ("raid5", 65536, "4 (3)", 2, &s) == -1 && strstr (why, "reshape"));
  CHECK (md ("raid6", 65536, "3", 2, &s) == -1 && strstr (why, "at least 4"));
  CHECK (md ("raid5", 65536, "1", 2, &s) == -1);
  CHECK (md ("raid0", 65536, "x", 0, &s) == -1);
  CHECK (md ("raid0", 0, "2", 0, &s) == -1 && strstr (why, "chunk_size"));
  CHECK (md ("raid0", 1000, "2", 0, &s) == -1 && strstr (why, "512"));
  /* md's chunk is an int of sectors: no larger, and no full stripe
   * that wraps to 0. */
  CHECK (md ("raid0", 1ull << 40, "4096", 0, &s) == 1);
  CHECK (md ("raid0", (1ull << 40) + 512, "2", 0, &s) == -1 &&
         strstr (why, "at most 1T"));
  CHECK (md ("raid0", 1ull << 63, "2", 0, &s) == -1);
  /* md's own limit on members, and a raid10 layout without near
   * copies (the division by them must not be reached).
   */
  CHECK (md ("raid0", 65536, "4096", -1, &s) == 1 && s.data_disks == 4096);
  CHECK (md ("raid0", 65536, "4097", -1, &s) == -1 && strstr (why, "4097"));
  CHECK (md ("raid10", 65536, "4", 0x200, &s) == -1 && strstr (why, "layout"));
  CHECK (md ("raid10", 65536, "4", 0x002, &s) == -1 && strstr (why, "layout"));
}

static void
dm_tables (void)
{
  struct gm_dm_map m;

  CHECK (gm_stripe_dm_parse ("0 100 linear 8:16 2048\n", &m, why,
                             sizeof why) == 1);
  CHECK (m.maj == 8 && m.min == 16 && m.nseg == 1);
  CHECK_EQ_U64 (m.start[0], 0);
  CHECK_EQ_U64 (m.below[0], 1048576);
  CHECK (gm_stripe_dm_parse ("0 10 linear 8:16 0\n10 5 linear 8:16 99", &m,
                             why, sizeof why) == 1);
  CHECK (m.nseg == 2 && m.start[1] == 5120 && m.below[1] == 99 * 512);
  CHECK (gm_stripe_dm_parse ("0 10 linear 8:16 0\n10 5 linear 8:32 0", &m,
                             why, sizeof why) == 0 &&
         strstr (why, "two devices"));
  CHECK (gm_stripe_dm_parse ("0 10 linear /dev/sdb 0", &m, why,
                             sizeof why) == 0 && strstr (why, "MAJOR:MINOR"));
  CHECK (gm_stripe_dm_parse ("0 10 striped 2 128 8:16 0 8:32 0", &m, why,
                             sizeof why) == 0 && strstr (why, "striped"));
  CHECK (gm_stripe_dm_parse ("0 10 crypt aes 00 0 8:16", &m, why,
                             sizeof why) == 0);
  CHECK (gm_stripe_dm_parse ("", &m, why, sizeof why) == 0 &&
         strstr (why, "empty"));
  CHECK (gm_stripe_dm_parse ("linear", &m, why, sizeof why) == -1);
  /* Words of digits, in sectors that fit 64 bits as bytes, a device of
   * MAJOR:MINOR alone (fuzz-stripegeo: sscanf took signs, a start or
   * sector that wrapped times 512, junk after MAJOR:MINOR, and took
   * the sector below from the 64th character on of a long word). */
  CHECK (gm_stripe_dm_parse ("-8 10 linear 8:16 0", &m, why,
                             sizeof why) == -1);
  CHECK (gm_stripe_dm_parse ("36028797018963968 1 linear 8:16 0", &m, why,
                             sizeof why) == -1);
  CHECK (gm_stripe_dm_parse ("0 -10 linear 8:16 0", &m, why,
                             sizeof why) == -1);
  CHECK (gm_stripe_dm_parse ("0 10 linear 8:16 -1", &m, why,
                             sizeof why) == 0 && strstr (why, "sector"));
  CHECK (gm_stripe_dm_parse ("0 10 linear 8:16 36028797018963968", &m, why,
                             sizeof why) == 0);
  CHECK (gm_stripe_dm_parse ("0 10 linear 8:16 +1", &m, why,
                             sizeof why) == 0);
  CHECK (gm_stripe_dm_parse ("0 10 linear 8:16junk 0", &m, why,
                             sizeof why) == 0 && strstr (why, "MAJOR:MINOR"));
  CHECK (gm_stripe_dm_parse ("0 10 linear -8:16 0", &m, why,
                             sizeof why) == 0 && strstr (why, "MAJOR:MINOR"));
  CHECK (gm_stripe_dm_parse ("0 10 linear 8:4294967296 0", &m, why,
                             sizeof why) == 0 && strstr (why, "MAJOR:MINOR"));
  CHECK (gm_stripe_dm_parse ("0 10 linear 8:000000000000000000000000000000"
                             "0000000000000000000000000000000005 7", &m, why,
                             sizeof why) == 1);
  CHECK (m.maj == 8 && m.min == 5 && m.below[0] == 7 * 512);
  CHECK (gm_stripe_dm_parse ("36028797018963967\t10\tlinear\t8:16\t"
                             "36028797018963967\r\n", &m, why,
                             sizeof why) == 1);
  CHECK_EQ_U64 (m.start[0], UINT64_MAX - 511);
  CHECK_EQ_U64 (m.below[0], UINT64_MAX - 511);
  CHECK (gm_stripe_dm_parse ("0 409600 crypt aes-xts-plain64 "
                             ":64:logon:cryptsetup:0 0 9:0 32768", &m, why,
                             sizeof why) == 1);
  CHECK (m.maj == 9 && m.min == 0 && m.below[0] == 32768 * 512);
  CHECK (gm_stripe_dm_parse ("0 10 crypt aes 00 x 8:16 0", &m, why,
                             sizeof why) == 0 && strstr (why, "IV_OFFSET"));
  /* GM_DM_MAX_SEG segments fit; one more is not followed (the arrays
   * hold no more).
   */
  char table[4096] = "";
  for (int i = 0; i <= GM_DM_MAX_SEG; i++) {
    if (i == GM_DM_MAX_SEG) {
      CHECK (gm_stripe_dm_parse (table, &m, why, sizeof why) == 1);
      CHECK (m.nseg == GM_DM_MAX_SEG && m.start[i - 1] == (uint64_t) (i - 1) * 512);
    }
    snprintf (table + strlen (table), sizeof table - strlen (table),
              "%d 1 linear 8:16 %d\n", i, 2 * i);
  }
  CHECK (gm_stripe_dm_parse (table, &m, why, sizeof why) == 0 &&
         strstr (why, "more than 64 segments"));
}

static void
hints (void)
{
  struct gm_stripe s;

  CHECK (gm_stripe_from_io_hints (65536, 262144, 512, &s) == 1);
  CHECK_EQ_U64 (s.chunk, 65536);
  CHECK_EQ_U64 (s.data_disks, 4);
  CHECK (!s.parity_known);
  CHECK (gm_stripe_from_io_hints (65536, 196608, 4096, &s) == 1 && s.data_disks == 3);
  /* A plain disk: io_min is its physical block, or io_opt says nothing. */
  CHECK (gm_stripe_from_io_hints (4096, 131072, 4096, &s) == 0);
  CHECK (gm_stripe_from_io_hints (512, 0, 512, &s) == 0);
  CHECK (gm_stripe_from_io_hints (65536, 65536, 512, &s) == 0);
  CHECK (gm_stripe_from_io_hints (65536, 100000, 512, &s) == 0);
  /* A chunk that is no whole number of sectors; more than 4096 data
   * disks (as md's limit); the limit itself.
   */
  CHECK (gm_stripe_from_io_hints (6000, 24000, 512, &s) == 0);
  CHECK (gm_stripe_from_io_hints (1024, 1024 * 4097, 512, &s) == 0);
  CHECK (gm_stripe_from_io_hints (1024, 1024 * 4096, 512, &s) == 1 &&
         s.data_disks == 4096);
  /* io_opt is one io_min, not two: 2 * io_min wrapped for io_min 2^63
   * (fuzz-stripegeo: it "striped" over 1 data disk of 8 EiB chunks). */
  CHECK (gm_stripe_from_io_hints (UINT64_C (1) << 63, UINT64_C (1) << 63,
                                  512, &s) == 0);
  CHECK (gm_stripe_from_io_hints ((UINT64_C (1) << 63) + 512,
                                  (UINT64_C (1) << 63) + 512, 512, &s) == 0);
  CHECK (gm_stripe_from_io_hints (UINT64_C (1) << 62, UINT64_C (1) << 63,
                                  512, &s) == 1 && s.data_disks == 2);
}

/* A fake /sys under dir. */
static char root[256];

static void
put (const char *rel, const char *text)
{
  char path[512], cmd[1024];
  FILE *fp;

  snprintf (path, sizeof path, "%s/%s", root, rel);
  snprintf (cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
  CHECK (system (cmd) == 0);
  CHECK ((fp = fopen (path, "w")) != NULL);
  fprintf (fp, "%s\n", text);
  fclose (fp);
}

static void
link_dev (const char *devno, const char *target)
{
  char path[512];

  snprintf (path, sizeof path, "%s/dev/block/%s", root, devno);
  unlink (path);
  CHECK (symlink (target, path) == 0);
}

static int
detect (const char *path, struct gm_stripe *s)
{
  memset (s, 0, sizeof *s);
  why[0] = '\0';
  return gm_stripe_detect (root, path, s, why, sizeof why);
}

static void
tree (void)
{
  char file[512], devno[64], text[600];
  struct gm_stripe s;
  struct stat st;

  snprintf (root, sizeof root, "/var/tmp/test-stripegeo.XXXXXX");
  CHECK (mkdtemp (root) != NULL);
  snprintf (file, sizeof file, "%s/data", root);
  put ("data", "x");
  put ("dev/block/.keep", "");
  CHECK (stat (file, &st) == 0);
  snprintf (devno, sizeof devno, "%u:%u", major (st.st_dev), minor (st.st_dev));

  put ("devices/virtual/block/md0/md/level", "raid5");
  put ("devices/virtual/block/md0/md/chunk_size", "65536");
  put ("devices/virtual/block/md0/md/raid_disks", "4");
  put ("devices/virtual/block/md0/md/layout", "2");
  put ("devices/virtual/block/md0/md/reshape_position", "none");
  put ("devices/virtual/block/md0/md0p1/partition", "1");
  put ("devices/virtual/block/md0/md0p1/start", "2048");
  put ("devices/virtual/block/loop0/loop/backing_file", file);
  put ("devices/sda/queue/minimum_io_size", "512");
  put ("devices/sda/queue/optimal_io_size", "0");
  put ("devices/sda/queue/physical_block_size", "512");
  put ("devices/dm0/queue/minimum_io_size", "131072");
  put ("devices/dm0/queue/optimal_io_size", "524288");
  put ("devices/dm0/queue/physical_block_size", "4096");

  /* The file's own device is md0: */
  link_dev (devno, "../../devices/virtual/block/md0");
  CHECK (detect (file, &s) == 1);
  CHECK (s.chunk == 65536 && s.data_disks == 3 && s.parity == 1);
  CHECK_EQ_U64 (s.offset, 0);
  CHECK (strcmp (s.source, "md0 raid5") == 0);
  CHECK (s.offset_from[0] == '\0');

  /* ... a partition of md0, 1 MiB in: */
  link_dev (devno, "../../devices/virtual/block/md0/md0p1");
  CHECK (detect (file, &s) == 1 && s.data_disks == 3);
  CHECK_EQ_U64 (s.offset, 1048576);
  /* ... said, with what it means for a file (a message of the filter) */
  CHECK (strcmp (s.offset_from, "md0p1 starts at byte 1048576 of md0, where "
                 "the file system holding the file starts (the file's own "
                 "blocks are taken to lie on the stripes as the file "
                 "system's do)") == 0);

  /* ... a plain disk, and dm-stripe's io hints: */
  link_dev (devno, "../../devices/sda");
  CHECK (detect (file, &s) == 0 && strstr (why, "not a RAID"));
  link_dev (devno, "../../devices/dm0");
  CHECK (detect (file, &s) == 1 && s.chunk == 131072 && s.data_disks == 4);
  CHECK (strcmp (s.source, "dm0 io_min/io_opt") == 0);

  /* ... an NVMe drive whose NPWG/NOWS make io hints that look like a
   * stripe (16K x 8): one drive, not a RAID; multipath paths too. */
  put ("devices/pci0/nvme/nvme0/nvme0n1/queue/minimum_io_size", "16384");
  put ("devices/pci0/nvme/nvme0/nvme0n1/queue/optimal_io_size", "131072");
  put ("devices/pci0/nvme/nvme0/nvme0n1/queue/physical_block_size", "4096");
  link_dev (devno, "../../devices/pci0/nvme/nvme0/nvme0n1");
  CHECK (detect (file, &s) == 0 && strstr (why, "NVMe namespace, not a RAID"));
  CHECK (s.chunk == 0 && s.data_disks == 0);
  put ("devices/pci0/nvme/nvme0/nvme0c1n1/queue/minimum_io_size", "16384");
  put ("devices/pci0/nvme/nvme0/nvme0c1n1/queue/optimal_io_size", "131072");
  put ("devices/pci0/nvme/nvme0/nvme0c1n1/queue/physical_block_size", "4096");
  link_dev (devno, "../../devices/pci0/nvme/nvme0/nvme0c1n1");
  CHECK (detect (file, &s) == 0 && strstr (why, "NVMe namespace"));
  /* ... and a partition of one (a file system on nvme0n1p1, the
   * usual case): the hints read are the namespace's.
   */
  put ("devices/pci0/nvme/nvme0/nvme0n1/nvme0n1p1/partition", "1");
  put ("devices/pci0/nvme/nvme0/nvme0n1/nvme0n1p1/start", "2048");
  link_dev (devno, "../../devices/pci0/nvme/nvme0/nvme0n1/nvme0n1p1");
  CHECK (detect (file, &s) == 0 && strstr (why, "nvme0n1p1 (") &&
         strstr (why, "NVMe namespace, not a RAID"));
  /* The same hints on a SCSI disk are a hardware RAID's. */
  put ("devices/pci0/host0/sdb/queue/minimum_io_size", "16384");
  put ("devices/pci0/host0/sdb/queue/optimal_io_size", "131072");
  put ("devices/pci0/host0/sdb/queue/physical_block_size", "4096");
  link_dev (devno, "../../devices/pci0/host0/sdb");
  CHECK (detect (file, &s) == 1 && s.chunk == 16384 && s.data_disks == 8);

  /* ... device-mapper over md0 (an LVM volume, LUKS): its segments'
   * places in the array from the table, as 'dmsetup table' prints it. */
  link_dev ("9:0", "../../devices/virtual/block/md0");
  put ("devices/virtual/block/dm-1/dm/name", "vg-lv");
  put ("devices/virtual/block/dm-1/queue/minimum_io_size", "65536");
  put ("devices/virtual/block/dm-1/queue/optimal_io_size", "196608");
  put ("devices/virtual/block/dm-1/queue/physical_block_size", "512");
  link_dev (devno, "../../devices/virtual/block/dm-1");
  put ("devices/virtual/block/dm-1/dm/table", "0 8192 linear 9:0 2048");
  CHECK (detect (file, &s) == 1 && s.chunk == 65536 && s.data_disks == 3);
  CHECK_EQ_U64 (s.offset, 1048576);
  CHECK (strcmp (s.source, "dm-1 over md0 raid5") == 0);
  CHECK (strncmp (s.offset_from, "dm-1 starts at byte 1048576 of md0, where "
                  "the file system", 56) == 0);
  /* An impossible chunk below is no geometry, not a division by a
   * full stripe that wrapped to 0 (a review finding: SIGFPE). */
  put ("devices/virtual/block/md0/md/chunk_size", "9223372036854775808");
  put ("devices/virtual/block/md0/md/raid_disks", "3");
  CHECK (detect (file, &s) != 1 && strstr (why, "chunk_size"));
  put ("devices/virtual/block/md0/md/chunk_size", "65536");
  put ("devices/virtual/block/md0/md/raid_disks", "4");
  put ("devices/virtual/block/dm-1/dm/table",
       "0 8192 crypt aes-xts-plain64 :64:logon:cryptsetup:x 0 9:0 32768 1 "
       "allow_discards");
  CHECK (detect (file, &s) == 1 && s.data_disks == 3);
  CHECK_EQ_U64 (s.offset, 16777216);
  CHECK (strstr (s.offset_from, "dm-1 starts at byte 16777216 of md0"));
  /* Two segments placed alike in the stripes (1M + 64K mod 192K): */
  put ("devices/virtual/block/dm-1/dm/table",
       "0 8192 linear 9:0 2048\n8192 4096 linear 9:0 10624");
  CHECK (detect (file, &s) == 1 && s.data_disks == 3);
  CHECK_EQ_U64 (s.offset, 65536);
  CHECK (strstr (s.offset_from, "dm-1's 2 segments start at byte 65536 of "
                 "a full stripe of md0"));
  /* ... not alike: no one offset holds, and the io hints would lie. */
  put ("devices/virtual/block/dm-1/dm/table",
       "0 8192 linear 9:0 2048\n8192 4096 linear 9:0 10625");
  CHECK (detect (file, &s) == 0 && strstr (why, "different places"));
  /* Another mapping (thin, cache...): io hints, with a note saying the
   * place in the array is not known. */
  put ("devices/virtual/block/dm-1/dm/table", "0 8192 thin 253:2 1");
  CHECK (detect (file, &s) == 1 && s.data_disks == 3);
  CHECK (strcmp (s.source, "dm-1 io_min/io_opt") == 0);
  CHECK (strstr (s.note, "only linear and crypt") != NULL);
  /* A partition of a linear volume (kpartx makes dm devices instead,
   * but the kernel's own partitions of dm devices exist too). */
  put ("devices/virtual/block/dm-1/dm/table", "0 8192 linear 9:0 2048");
  put ("devices/virtual/block/dm-1/dm-1p1/partition", "1");
  put ("devices/virtual/block/dm-1/dm-1p1/start", "128");
  link_dev (devno, "../../devices/virtual/block/dm-1/dm-1p1");
  CHECK (detect (file, &s) == 1);
  CHECK_EQ_U64 (s.offset, 1048576 + 65536);
  CHECK (strstr (s.offset_from, "dm-1 starts at byte 1048576 of md0, "
                 "dm-1p1 starts at byte 65536 of dm-1, where the file"));
  /* A mapping onto itself (or a chain of them deeper than any real
   * stack) is not followed for ever.
   */
  put ("devices/virtual/block/dm-9/dm/name", "loopy");
  put ("devices/virtual/block/dm-9/dm/table", "0 8192 linear 253:9 0");
  link_dev ("253:9", "../../devices/virtual/block/dm-9");
  link_dev (devno, "../../devices/virtual/block/dm-9");
  CHECK (detect (file, &s) == 0 && strstr (why, "dm-9: too deeply nested"));

  /* ... a loop device whose backing file lives on md0 (a device node
   * 7:0 stands for the loop device; mknod needs CAP_MKNOD).
   */
  link_dev (devno, "../../devices/virtual/block/md0");
  link_dev ("7:0", "../../devices/virtual/block/loop0");
  snprintf (text, sizeof text, "%s/loop0", root);
  if (mknod (text, S_IFBLK | 0600, makedev (7, 0)) == 0) {
    CHECK (detect (text, &s) == 1 && s.data_disks == 3);
    CHECK (strcmp (s.source, "loop0 over md0 raid5") == 0);
    /* A loop device over md0 itself, 64K in (losetup -o), and its
     * partition 1 MiB into it: the stripes start where they are.
     */
    char md0[512], part[512];
    snprintf (md0, sizeof md0, "%s/md0", root);
    snprintf (part, sizeof part, "%s/loop0p1", root);
    if (mknod (md0, S_IFBLK | 0600, makedev (9, 0)) == 0 &&
        mknod (part, S_IFBLK | 0600, makedev (259, 9)) == 0) {
      link_dev ("9:0", "../../devices/virtual/block/md0");
      link_dev ("259:9", "../../devices/virtual/block/loop0/loop0p1");
      put ("devices/virtual/block/loop0/loop/backing_file", md0);
      put ("devices/virtual/block/loop0/loop/offset", "65536");
      put ("devices/virtual/block/loop0/loop0p1/partition", "1");
      put ("devices/virtual/block/loop0/loop0p1/start", "2048");
      CHECK (detect (text, &s) == 1 && s.data_disks == 3);
      CHECK_EQ_U64 (s.offset, 65536);
      CHECK (strcmp (s.offset_from, "loop0 starts at byte 65536 of md0") == 0);
      CHECK (detect (part, &s) == 1 && s.data_disks == 3);
      CHECK_EQ_U64 (s.offset, 65536 + 1048576);
      CHECK (strcmp (s.offset_from, "loop0 starts at byte 65536 of md0, "
                     "loop0p1 starts at byte 1048576 of loop0") == 0);
      put ("devices/virtual/block/loop0/loop/offset", "0");
      CHECK (detect (text, &s) == 1);
      CHECK_EQ_U64 (s.offset, 0);
      CHECK (s.offset_from[0] == '\0');
    }
    else
      printf ("loop over a device not checked: mknod: %m\n");
    put ("devices/virtual/block/loop0/loop/backing_file", file);
    /* A loop device over a loop device is not followed. */
    put ("devices/virtual/block/loop0/loop/backing_file", text);
    CHECK (detect (text, &s) == 0 && strstr (why, "nested"));
  }
  else
    printf ("loop case not checked: mknod: %m\n");

  /* A reshape, as md shows it in each of its files (s.reshape set:
   * try again later), and no device at all.
   */
  static const struct { const char *file, *during, *after, *why; } rs[] = {
    { "reshape_position", "1024", "none", "reshape_position 1024" },
    { "sync_action", "reshape", "idle", "sync_action reshape" },
    { "chunk_size", "131072 (65536)", "65536", "chunk_size 131072 (65536)" },
    { "raid_disks", "5 (4)", "4", "raid_disks 5 (4)" },
  };
  for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) {
    snprintf (text, sizeof text, "devices/virtual/block/md0/md/%s",
              rs[i].file);
    put (text, rs[i].during);
    CHECK (detect (file, &s) == -1 && strstr (why, rs[i].why) && s.reshape);
    put (text, rs[i].after);
  }
  put ("devices/virtual/block/md0/md/raid_disks", "5");
  CHECK (detect (file, &s) == 1 && s.data_disks == 4 && !s.reshape);

  /* RAID0 over members of different sizes stripes in zones (all three
   * members up to 8M each, then two): the stripe of all of them, with
   * a note of where it ends.  Sizes that differ by less than a chunk
   * are one zone (md rounds them down).
   */
  CHECK (s.note[0] == '\0');
  put ("devices/virtual/block/md0/md/level", "raid0");
  put ("devices/virtual/block/md0/md/raid_disks", "3");
  put ("devices/virtual/block/md0/md/rd0/size", "16384");
  put ("devices/virtual/block/md0/md/rd1/size", "16384");
  put ("devices/virtual/block/md0/md/rd2/size", "8192");
  CHECK (detect (file, &s) == 1 && s.data_disks == 3 && s.chunk == 65536);
  CHECK (strstr (s.note, "md0: raid0 over members of different sizes: md "
                 "stripes the first 24M over all 3 members") != NULL);
  /* ... whichever member is the smallest. */
  put ("devices/virtual/block/md0/md/rd2/size", "16384");
  put ("devices/virtual/block/md0/md/rd0/size", "8192");
  CHECK (detect (file, &s) == 1 && s.data_disks == 3);
  CHECK (strstr (s.note, "the first 24M over all 3 members") != NULL);
  put ("devices/virtual/block/md0/md/rd0/size", "16384");
  put ("devices/virtual/block/md0/md/rd2/size", "16440");
  CHECK (detect (file, &s) == 1 && s.data_disks == 3 && s.note[0] == '\0');
  /* RAID10 and parity RAID use the smallest member's size on all (a
   * data member smaller: no zones either). */
  put ("devices/virtual/block/md0/md/rd2/size", "8192");
  put ("devices/virtual/block/md0/md/rd0/size", "8192");
  put ("devices/virtual/block/md0/md/level", "raid5");
  CHECK (detect (file, &s) == 1 && s.data_disks == 2 && s.note[0] == '\0');
  put ("devices/virtual/block/md0/md/raid_disks", "5");
  put ("devices/virtual/block/md0/md/level", "raid9");
  CHECK (detect (file, &s) == 0 && !s.reshape);
  put ("devices/virtual/block/md0/md/level", "raid5");
  link_dev (devno, "../../nowhere");
  CHECK (detect (file, &s) == 0 && strstr (why, "not a block device"));
  CHECK (detect ("/nonexistent/file", &s) == -1);

  snprintf (text, sizeof text, "rm -rf '%s'", root);
  CHECK (system (text) == 0);
}

/* A stripe-sysfs= tree so deep that a device's directory, as realpath
 * gives it, nearly fills PATH_MAX: its files' paths do not fit.  They
 * were built with strcat into PATH_MAX buffers, past their end (ASan:
 * stack-buffer-overflow in device_dir).  Now such a device is just
 * not one detection can read; one a little less deep still is.
 */
static void
deep_tree (void)
{
  char top[64], file[128], link[128];
  char dir[PATH_MAX + 64], rel[PATH_MAX + 64], cmd[PATH_MAX + 160];
  const char *seg = "/ddddddddddddddddddddddddddddddddddddddddddddddddddd"
    "ddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
    "ddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
    "ddddddddddddddddddddddddddddddd";    /* 200 bytes */
  struct gm_stripe s;
  struct stat st;
  FILE *fp;

  snprintf (top, sizeof top, "/var/tmp/test-stripegeo-deep.XXXXXX");
  CHECK (mkdtemp (top) != NULL);
  snprintf (file, sizeof file, "%s/data", top);
  CHECK ((fp = fopen (file, "w")) != NULL);
  fclose (fp);
  CHECK (stat (file, &st) == 0);
  snprintf (dir, sizeof dir, "%s/dev/block", top);
  snprintf (cmd, sizeof cmd, "mkdir -p '%s'", dir);
  CHECK (system (cmd) == 0);
  snprintf (link, sizeof link, "%s/dev/block/%u:%u", top, major (st.st_dev),
            minor (st.st_dev));

  /* md0 at a path of 'len' bytes, with a raid5 in it. */
  for (size_t len = PATH_MAX - 196; len < PATH_MAX; len += 190) {
    static const char *const md[][2] = {
      { "level", "raid5" }, { "chunk_size", "65536" },
      { "raid_disks", "4" }, { "layout", "2" },
    };
    int r;

    /* top/devices/ddd.../mmm.../md0 and its link ../../devices/... */
    char tail[PATH_MAX] = "";
    size_t base = strlen (top) + strlen ("/devices"), pad, at;
    while (base + strlen (tail) + strlen (seg) + 64 < len)
      strcat (tail, seg);
    pad = len - base - strlen (tail) - strlen ("/") - strlen ("/md0");
    strcat (tail, "/");
    at = strlen (tail);
    memset (tail + at, 'm', pad);
    tail[at + pad] = '\0';
    strcat (tail, "/md0");
    snprintf (dir, sizeof dir, "%s/devices%s", top, tail);
    snprintf (rel, sizeof rel, "../../devices%s", tail);
    CHECK (strlen (dir) == len);
    snprintf (cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK (system (cmd) == 0);
    /* The files themselves, where they fit: the shallower tree. */
    for (size_t i = 0; i < 4; i++) {
      char path[PATH_MAX + 96];
      snprintf (path, sizeof path, "%s/md/%s", dir, md[i][0]);
      if (strlen (path) >= PATH_MAX)
        continue;
      snprintf (cmd, sizeof cmd, "mkdir -p '%s/md'", dir);
      CHECK (system (cmd) == 0);
      CHECK ((fp = fopen (path, "w")) != NULL);
      fprintf (fp, "%s\n", md[i][1]);
      fclose (fp);
    }
    unlink (link);
    CHECK (symlink (rel, link) == 0);
    memset (&s, 0, sizeof s);
    r = gm_stripe_detect (top, file, &s, why, sizeof why);
    if (len + strlen ("/md/chunk_size") < PATH_MAX)
      CHECK (r == 1 && s.data_disks == 3);
    else
      CHECK (r == 0 && strstr (why, "is not a RAID"));
  }
  snprintf (cmd, sizeof cmd, "rm -rf '%s'", top);
  CHECK (system (cmd) == 0);
}

int
main (void)
{
  levels ();
  hints ();
  dm_tables ();
  tree ();
  deep_tree ();
  /* Stream layouts. */
  {
    struct gm_stripe s = { .chunk = 65536, .data_disks = 4 };
    struct gm_stripe_piece p[16];
    unsigned ns = 0;

    /* 1M aligned on RAID0 of 4: 16 chunks, 4 streams by column. */
    CHECK_EQ_U64 (gm_stripe_layout (&s, 1 << 20, 1 << 20, p, 16, &ns), 16);
    CHECK_EQ_U64 (ns, 4);
    for (unsigned i = 0; i < 16; i++) {
      CHECK_EQ_U64 (p[i].off, i * 65536);
      CHECK_EQ_U64 (p[i].len, 65536);
      CHECK_EQ_U64 (p[i].stream, i % 4);
    }
    /* Unaligned: a cut first and last piece; streams from the first
     * piece's column (column 1 is stream 0). */
    CHECK_EQ_U64 (gm_stripe_layout (&s, 65536 + 4096, 3 * 65536, p, 16, &ns), 4);
    CHECK_EQ_U64 (p[0].off, 0);
    CHECK_EQ_U64 (p[0].len, 61440);
    CHECK_EQ_U64 (p[0].stream, 0);
    CHECK_EQ_U64 (p[3].off, 61440 + 2 * 65536);
    CHECK_EQ_U64 (p[3].len, 4096);
    CHECK_EQ_U64 (p[3].stream, 3);
    CHECK_EQ_U64 (ns, 4);
    /* RAID5 of 4 (3 data columns) on a partition 1M + 64K into the
     * array: the export's offset 0 is column 1. */
    s = (struct gm_stripe) { .chunk = 65536, .data_disks = 3,
                             .offset = (1 << 20) + 65536 };
    CHECK_EQ_U64 (gm_stripe_layout (&s, 0, 4 * 65536, p, 16, &ns), 4);
    CHECK_EQ_U64 (p[0].stream, 0);
    CHECK_EQ_U64 (p[1].stream, 1);
    CHECK_EQ_U64 (p[2].stream, 2);
    CHECK_EQ_U64 (p[3].stream, 0);
    CHECK_EQ_U64 (p[3].off, 3 * 65536);
    CHECK_EQ_U64 (ns, 3);
    /* One piece; too many pieces. */
    CHECK_EQ_U64 (gm_stripe_layout (&s, 100, 200, p, 16, &ns), 1);
    CHECK_EQ_U64 (ns, 1);
    CHECK_EQ_U64 (gm_stripe_layout (&s, 0, 17 * 65536, p, 16, &ns), 0);
    CHECK_EQ_U64 (gm_stripe_layout (&s, 0, 0, p, 16, &ns), 0);
    /* The array's last chunk, cut short by 2^64 (a chunk of 3M does not
     * divide it: 2^64 - 1M is a boundary): the next boundary wrapped
     * to 2M, and the loop went on from there, far past p[15]
     * (fuzz-stripegeo: a stack overflow under ASan, the RDMA server's
     * pieces with stripe-offset= near 2^63).  Ranges past 2^64 are
     * refused. */
    s = (struct gm_stripe) { .chunk = 3 << 20, .data_disks = 3,
                             .offset = UINT64_C (1) << 63 };
    CHECK_EQ_U64 (gm_stripe_layout (&s, (UINT64_C (1) << 63) - (1 << 20),
                                    1 << 19, p, 16, &ns), 1);
    CHECK_EQ_U64 (p[0].off, 0);
    CHECK_EQ_U64 (p[0].len, 1 << 19);
    CHECK_EQ_U64 (p[0].stream, 0);
    CHECK_EQ_U64 (ns, 1);
    CHECK_EQ_U64 (gm_stripe_layout (&s, (UINT64_C (1) << 63) - (1 << 20),
                                    1 << 20, p, 16, &ns), 1);
    CHECK_EQ_U64 (p[0].len, 1 << 20);
    CHECK_EQ_U64 (gm_stripe_layout (&s, (UINT64_C (1) << 63) - (1 << 20),
                                    (1 << 20) + 1, p, 16, &ns), 0);
    CHECK_EQ_U64 (gm_stripe_layout (&s, UINT64_C (1) << 63, 1, p, 16, &ns),
                  0);
    /* Cut at each boundary before it: 2 pieces, the second to 2^64. */
    CHECK_EQ_U64 (gm_stripe_layout (&s, (UINT64_C (1) << 63) - (2 << 20),
                                    2 << 20, p, 16, &ns), 2);
    CHECK_EQ_U64 (p[0].len, 1 << 20);
    CHECK_EQ_U64 (p[1].off, 1 << 20);
    CHECK_EQ_U64 (p[1].len, 1 << 20);
    CHECK_EQ_U64 (p[1].stream, 1);
    CHECK_EQ_U64 (ns, 2);
  }
  /* What gmblock-stripe publishes for the layers above it. */
  {
    struct gm_stripe s;
    char why[200];

    unsetenv ("GMBLOCK_REG_" GM_REG_STRIPE);
    CHECK (gm_stripe_from_registry (&s, why, sizeof why) == 0);
    CHECK (gm_registry_publish (GM_REG_STRIPE, "65536:3:1:1048576") == 0);
    CHECK (gm_stripe_from_registry (&s, why, sizeof why) == 1);
    CHECK_EQ_U64 (s.chunk, 65536);
    CHECK_EQ_U64 (s.data_disks, 3);
    CHECK_EQ_U64 (s.parity, 1);
    CHECK_EQ_U64 (s.offset, 1048576);
    CHECK (s.parity_known);
    CHECK_EQ_U64 (gm_stripe_width (&s), 196608);
    /* From io hints: parity unknown, not "parity 0". */
    CHECK (gm_registry_publish (GM_REG_STRIPE, "65536:3:?:0") == 0);
    CHECK (gm_stripe_from_registry (&s, why, sizeof why) == 1);
    CHECK (!s.parity_known);
    CHECK_EQ_U64 (s.parity, 0);
    CHECK_EQ_U64 (s.data_disks, 3);
    CHECK (strstr (s.source, "parity unknown") != NULL);
    /* Decimal digits only, in detection's bounds (fuzz-stripegeo:
     * sscanf took "-1" disks as 2^32 - 1, blanks, a "+", any count of
     * disks, and a full stripe that wraps). */
    CHECK (gm_registry_publish (GM_REG_STRIPE, "65536:4096:0:0") == 0);
    CHECK (gm_stripe_from_registry (&s, why, sizeof why) == 1);
    CHECK_EQ_U64 (s.data_disks, 4096);
    CHECK (gm_registry_publish (GM_REG_STRIPE,
                                "4503599627370495:4096:0:18446744073709551615") == 0);
    CHECK (gm_stripe_from_registry (&s, why, sizeof why) == 1);
    CHECK_EQ_U64 (gm_stripe_width (&s), UINT64_MAX - 4095);
    CHECK_EQ_U64 (s.offset, UINT64_MAX);
    const char *bad[] = { "65536:3:1", "0:3:1:0", "65536:0:1:0", "65536:3:3:0",
                          "65536:3:1:0x", "x", "65536:3:x:0", "65536:3:??:0",
                          "65536:-1:1:0", " 65536:3:1:0", "65536: 3:1:0",
                          "+65536:3:1:0", "65536:3:1:-1", "65536:3:1: 0",
                          "65536:4097:1:0", "65536:46553:1:0",
                          "65536:4294967299:1:0", "4503599627370496:4096:0:0",
                          "18446744073709551616:1:0:0",
                          "65536:3:1:18446744073709551616", "65536:3::0",
                          "65536:3:1:", ":3:1:0" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      CHECK (gm_registry_publish (GM_REG_STRIPE, bad[i]) == 0);
      CHECK (gm_stripe_from_registry (&s, why, sizeof why) == -1);
      CHECK (strstr (why, bad[i]) != NULL);
    }
    unsetenv ("GMBLOCK_REG_" GM_REG_STRIPE);
  }
  UNIT_DONE ();
}

/* gmblock: geometry queries (ioctls, statx, sysfs).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <linux/fs.h>

#include "dioalign.h"
#include "geometry.h"

int
gm_sysfs_block_u64 (unsigned major, unsigned minor, const char *rel,
                    uint64_t *v)
{
  static const char *const fmt[] = {
    "/sys/dev/block/%u:%u/%s", "/sys/dev/block/%u:%u/../%s",
  };
  for (size_t i = 0; i < 2; i++) {
    char path[256];
    FILE *fp;
    int ok;

    snprintf (path, sizeof path, fmt[i], major, minor, rel);
    fp = fopen (path, "r");
    if (fp == NULL)
      continue;
    ok = fscanf (fp, "%" SCNu64, v) == 1;
    fclose (fp);
    if (ok)
      return 0;
  }
  return -1;
}

static uint64_t
sysfs_u64 (const struct gm_geometry *g, const char *rel, uint64_t dflt)
{
  uint64_t v;
  return gm_sysfs_block_u64 (g->major, g->minor, rel, &v) == 0 ? v : dflt;
}

static uint32_t
sysfs_u32 (const struct gm_geometry *g, const char *rel, uint32_t dflt)
{
  uint64_t v = sysfs_u64 (g, rel, UINT64_MAX);
  return v <= UINT32_MAX ? v : dflt;
}

static void
probe_block (int fd, struct gm_geometry *g)
{
  int lbs = 0, pbs = 0;
  unsigned int iomin = 0, ioopt = 0;

  if (ioctl (fd, BLKSSZGET, &lbs) == 0 && lbs > 0)
    g->logical_block = lbs;
  if (ioctl (fd, BLKPBSZGET, &pbs) == 0 && pbs > 0)
    g->physical_block = pbs;
  if (ioctl (fd, BLKIOMIN, &iomin) == 0)
    g->io_min = iomin;
  if (ioctl (fd, BLKIOOPT, &ioopt) == 0)
    g->io_opt = ioopt;
  if (!g->dio_known) {
    /* Before Linux 6.11 statx says nothing for block devices: the
     * rule is the logical block size for offsets and the queue's DMA
     * alignment for memory.
     */
    g->dio_offset_align = g->logical_block;
    g->dio_mem_align = sysfs_u32 (g, "queue/dma_alignment", 511) + 1;
  }
  /* 64-bit: zram and many NVMe drives say 2 TiB (0 would mean "none"). */
  g->write_zeroes_max = sysfs_u64 (g, "queue/write_zeroes_max_bytes", 0);
  g->discard_max = sysfs_u64 (g, "queue/discard_max_bytes", 0);
}

int
gm_geometry_probe (int fd, struct gm_geometry *g, char *err, size_t errlen)
{
  struct stat st;
  uint64_t rot;

  memset (g, 0, sizeof *g);
  g->rotational = -1;
  if (fstat (fd, &st) == -1) {
    snprintf (err, errlen, "fstat: %s", strerror (errno));
    return -1;
  }
  if (S_ISBLK (st.st_mode)) {
    g->is_block = true;
    g->major = major (st.st_rdev);
    g->minor = minor (st.st_rdev);
    if (ioctl (fd, BLKGETSIZE64, &g->size) == -1) {
      snprintf (err, errlen, "ioctl BLKGETSIZE64: %s", strerror (errno));
      return -1;
    }
  }
  else if (S_ISREG (st.st_mode)) {
    g->major = major (st.st_dev);
    g->minor = minor (st.st_dev);
    g->size = st.st_size;
  }
  else {
    snprintf (err, errlen, "%s: expected a regular file or a block device",
              S_ISDIR (st.st_mode) ? "is a directory" :
              S_ISCHR (st.st_mode) ? "is a character device" :
              "is not a regular file");
    errno = S_ISDIR (st.st_mode) ? EISDIR : EINVAL;
    return -1;
  }

  g->dio_known = gm_dio_align (fd, &g->dio_mem_align, &g->dio_offset_align);
  /* Files: the backing device's logical block size, if it has a queue
   * (tmpfs and friends do not: 512 is what they accept anyway).
   */
  g->logical_block = sysfs_u32 (g, "queue/logical_block_size", 512);
  if (g->is_block)
    probe_block (fd, g);
  if (gm_sysfs_block_u64 (g->major, g->minor, "queue/rotational", &rot) == 0)
    g->rotational = rot != 0;
  return 0;
}

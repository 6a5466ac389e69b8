/* gmblock: what the storage behind a file descriptor looks like.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_GEOMETRY_H
#define GMBLOCK_GEOMETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gm_geometry {
  bool is_block;                /* block device, else regular file */
  uint64_t size;                /* bytes */
  uint32_t logical_block;       /* BLKSSZGET, or the backing device's */
  uint32_t physical_block;      /* BLKPBSZGET, 0 if unknown */
  uint32_t io_min, io_opt;      /* BLKIOMIN / BLKIOOPT, 0 if unknown */
  bool dio_known;               /* statx reported DIO alignment */
  uint32_t dio_mem_align;       /* buffer address alignment for O_DIRECT */
  uint32_t dio_offset_align;    /* offset and length alignment for O_DIRECT */
  int rotational;               /* 1, 0, or -1 unknown */
  uint64_t write_zeroes_max;    /* devices: 0 = no offload */
  uint64_t discard_max;         /* devices: 0 = no discard */
  unsigned major, minor;        /* the queue's device */
};

/* Probe an open file.  Returns 0, or -1 with errno set and a message
 * in err (for example when fd is neither a regular file nor a block
 * device).
 */
int gm_geometry_probe (int fd, struct gm_geometry *g, char *err, size_t errlen);

/* Read one unsigned number from /sys/dev/block/MAJ:MIN/<rel>, trying
 * the parent device too (partitions have no queue/ of their own).
 * Returns 0 and sets *v, or -1.
 */
int gm_sysfs_block_u64 (unsigned major, unsigned minor, const char *rel,
                        uint64_t *v);

#endif /* GMBLOCK_GEOMETRY_H */

/* gmblock: RAID stripe geometry of the storage under a file.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * From md's sysfs (md/level, chunk_size, raid_disks, layout) for md
 * arrays, partitions of them and loop devices over them; otherwise
 * from the queue's minimum_io_size and optimal_io_size (BLKIOMIN and
 * BLKIOOPT: what dm-stripe and most hardware RAID export).  Every
 * sysfs path is read under a root that stands for /sys, so the tests
 * can use fake trees (tests/fake-sysfs.py).
 */
#ifndef GMBLOCK_STRIPEGEO_H
#define GMBLOCK_STRIPEGEO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gm_stripe {
  uint64_t chunk;               /* bytes per member per stripe */
  unsigned data_disks;          /* members holding distinct data */
  unsigned parity;              /* 0, 1 (RAID4/5) or 2 (RAID6) */
  bool parity_known;            /* false from io_min/io_opt */
  uint64_t offset;              /* where the device starts in the array,
                                 * bytes (a partition's start), else 0 */
  bool reshape;                 /* -1 because md is reshaping: the
                                 * geometry is changing (try later) */
  char source[160];             /* where it came from, for messages */
  char note[256];               /* where it does not hold (RAID0 zones),
                                 * to be said at start-up; else "" */
  bool offset_unknown;          /* the note says offset is a guess (a
                                 * device-mapper mapping not followed) */
  char offset_from[320];        /* what made offset (a partition's start,
                                 * a loop device's offset, a device-mapper
                                 * table), for messages; "" when 0 */
};

/* Bytes of data in one full stripe. */
static inline uint64_t
gm_stripe_width (const struct gm_stripe *s)
{
  return s->chunk * s->data_disks;
}

/* Geometry of an md array from its sysfs values; layout is -1 when
 * unknown.  Returns 1 (striped: *s set, source left alone), 0 (a level
 * that does not stripe: raid1, linear...) or -1 (inconsistent values,
 * a reshape, a layout we cannot read); why says which.
 */
int gm_stripe_from_md (const char *level, uint64_t chunk,
                       const char *raid_disks, long layout,
                       struct gm_stripe *s, char *why, size_t whylen);

/* Geometry from BLKIOMIN/BLKIOOPT: striped when io_min is larger than
 * a physical block and io_opt is at least two whole io_min.  Returns
 * 1 or 0.
 */
int gm_stripe_from_io_hints (uint64_t io_min, uint64_t io_opt,
                             uint64_t physical_block, struct gm_stripe *s);

/* A device-mapper table ('dmsetup table'), when every segment is a
 * linear or crypt one on the same device below: that device, and each
 * segment's start in the mapped device and on the device below, bytes.
 * Returns 1, 0 (another mapping: why says what) or -1 (not a table).
 */
#define GM_DM_MAX_SEG 64
struct gm_dm_map {
  unsigned maj, min;
  unsigned nseg;
  uint64_t start[GM_DM_MAX_SEG], below[GM_DM_MAX_SEG];
};
int gm_stripe_dm_parse (const char *table, struct gm_dm_map *m,
                        char *why, size_t whylen);

/* The geometry under 'path' (a block device: its own; a regular file:
 * its file system's device), with sysroot standing for /sys (NULL =
 * "/sys").  Returns 1 (found: *s set), 0 (no striping: why says what
 * was found) or -1 (path or sysfs unreadable, or an md reshape in
 * progress: s->reshape set; why says which).  A partition's start (of
 * the file system's partition, for a file) is the offset: s->offset,
 * and s->offset_from says so.
 */
int gm_stripe_detect (const char *sysroot, const char *path,
                      struct gm_stripe *s, char *why, size_t whylen);

/* A piece of a request's stream layout: bytes [off, off + len) of the
 * request's buffer, read by stream 'stream'.
 */
struct gm_stripe_piece {
  uint32_t off, len;
  uint16_t stream;
};

/* The stream layout of [offset, offset + len) of the export: cut at the
 * array's chunk boundaries (s->offset is where the export starts in the
 * array), each piece in the stream of its data column (chunk index
 * modulo data disks; within a stripe every column is another member),
 * streams numbered from 0 in the order they first appear, a stream's
 * pieces in buffer order.  Fills at most max pieces: returns how many
 * (and the number of streams in *nstreams), or 0 when more than max
 * would be needed or the range ends past the array's 2^64th byte.
 */
unsigned gm_stripe_layout (const struct gm_stripe *s, uint64_t offset,
                           uint32_t len, struct gm_stripe_piece *p,
                           unsigned max, unsigned *nstreams);

/* The geometry gmblock-stripe published in the registry (registry.h,
 * GM_REG_STRIPE) for the layers above it.  Returns 1 (*s set, source
 * says so), 0 (none published) or -1 (malformed: why says what; that
 * includes a sign or a blank, more than 4096 data disks and a full
 * stripe past 2^64 - 1).
 */
int gm_stripe_from_registry (struct gm_stripe *s, char *why, size_t whylen);

#endif /* GMBLOCK_STRIPEGEO_H */

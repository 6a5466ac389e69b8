/* gmblock: direct I/O alignment as the kernel reports it (statx
 * STATX_DIOALIGN, Linux >= 6.1).  Kept apart because it needs the
 * kernel's struct statx, which clashes with glibc's <sys/stat.h>.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_DIOALIGN_H
#define GMBLOCK_DIOALIGN_H

#include <stdint.h>

/* Returns 1 and fills both when the kernel reported them (zeros mean
 * "direct I/O not supported"), 0 when the kernel cannot tell.
 */
int gm_dio_align (int fd, uint32_t *mem_align, uint32_t *offset_align);

#endif /* GMBLOCK_DIOALIGN_H */

/* gmblock: statx STATX_DIOALIGN.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/stat.h>

#include "dioalign.h"

int
gm_dio_align (int fd, uint32_t *mem_align, uint32_t *offset_align)
{
  struct statx stx;

  memset (&stx, 0, sizeof stx);
  if (syscall (SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == -1)
    return 0;
  if (!(stx.stx_mask & STATX_DIOALIGN))
    return 0;
  *mem_align = stx.stx_dio_mem_align;
  *offset_align = stx.stx_dio_offset_align;
  return 1;
}

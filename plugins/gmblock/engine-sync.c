/* gmblock plugin: ring=none, plain preadv2/pwritev2 (the baseline
 * that shows what io_uring buys).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <sys/uio.h>

#include "gmblock.h"

ssize_t
gm_sync_once (void *ctx, enum gm_rw op, int fd, void *buf, size_t len,
              uint64_t off, int rwf)
{
  struct iovec iov = { .iov_base = buf, .iov_len = len };
  ssize_t r = op == GM_READ ? preadv2 (fd, &iov, 1, off, rwf)
                            : pwritev2 (fd, &iov, 1, off, rwf);
  return r < 0 ? -errno : r;
}

/* gmblock-cache filter: the data callbacks.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_CACHE_OPS_H
#define GMBLOCK_CACHE_OPS_H

#include "cache.h"

int cache_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count,
                 uint64_t offset, uint32_t flags, int *err);
int cache_pwrite (nbdkit_next *next, void *handle, const void *buf,
                  uint32_t count, uint64_t offset, uint32_t flags, int *err);
int cache_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err);
int cache_trim (nbdkit_next *next, void *handle, uint32_t count,
                uint64_t offset, uint32_t flags, int *err);
int cache_zero (nbdkit_next *next, void *handle, uint32_t count,
                uint64_t offset, uint32_t flags, int *err);
int cache_cache (nbdkit_next *next, void *handle, uint32_t count,
                 uint64_t offset, uint32_t flags, int *err);
int cache_extents (nbdkit_next *next, void *handle, uint32_t count,
                   uint64_t offset, uint32_t flags,
                   struct nbdkit_extents *extents, int *err);

#endif /* GMBLOCK_CACHE_OPS_H */

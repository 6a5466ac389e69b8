/* gmblock: one large anonymous mapping, hugepage-backed when possible.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_HUGEMEM_H
#define GMBLOCK_HUGEMEM_H

#include <stdbool.h>
#include <stddef.h>

enum gm_huge_mode { GM_HUGE_OFF, GM_HUGE_AUTO, GM_HUGE_ON };

struct gm_mem {
  void *addr;           /* usable start, page (or hugepage) aligned */
  size_t len;           /* usable length */
  void *map;            /* what to munmap */
  size_t map_len;
  const char *backing;  /* "hugetlb 2M pages", "transparent hugepages", "4K pages" */
  bool locked;          /* lock_fd holds a raw BAR's resource file, */
  int lock_fd;          /* flock'd while it is mapped (see devmem.c) */
};

/* Parse "auto", "on", "off" (and nbdkit-style booleans). -1 if unknown. */
int gm_huge_mode_parse (const char *str, enum gm_huge_mode *mode);

/* Map and prefault len bytes.  With GM_HUGE_ON, fails unless hugetlb
 * pages are reserved; GM_HUGE_AUTO tries hugetlb, then transparent
 * hugepages, then small pages.  Returns 0, or -1 with errno set and a
 * message in err.
 */
int gm_mem_map (struct gm_mem *m, size_t len, enum gm_huge_mode mode,
                char *err, size_t errlen);
void gm_mem_unmap (struct gm_mem *m);

#endif /* GMBLOCK_HUGEMEM_H */

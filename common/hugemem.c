/* gmblock: hugepage-backed anonymous memory.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hugemem.h"
#include "sizes.h"

#define HUGE_2M (2u * 1024 * 1024)

int
gm_huge_mode_parse (const char *str, enum gm_huge_mode *mode)
{
  if (strcasecmp (str, "auto") == 0)
    *mode = GM_HUGE_AUTO;
  else if (strcasecmp (str, "on") == 0 || strcasecmp (str, "true") == 0 ||
           strcasecmp (str, "yes") == 0 || strcmp (str, "1") == 0)
    *mode = GM_HUGE_ON;
  else if (strcasecmp (str, "off") == 0 || strcasecmp (str, "false") == 0 ||
           strcasecmp (str, "no") == 0 || strcmp (str, "0") == 0)
    *mode = GM_HUGE_OFF;
  else
    return -1;
  return 0;
}

static int
map_hugetlb (struct gm_mem *m, size_t len)
{
  size_t l = gm_round_up (len, HUGE_2M);
  /* 2M pages named: without a size the system's default is used, which
   * default_hugepagesz=1G makes 1G (the 2M pages reserved go unused). */
  void *p = mmap (NULL, l, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE |
                  (21 << MAP_HUGE_SHIFT), -1, 0);
  if (p == MAP_FAILED)
    return -1;
  m->addr = m->map = p;
  m->len = len;
  m->map_len = l;
  m->backing = "hugetlb 2M pages";
  return 0;
}

/* Small pages, or transparent hugepages when 'thp' is set: the
 * mapping is over-allocated so the usable part starts on a 2M
 * boundary, which THP needs to back it with huge pages.
 */
static int
map_small (struct gm_mem *m, size_t len, int thp)
{
  size_t l = gm_round_up (len, HUGE_2M) + (thp ? HUGE_2M : 0);
  uintptr_t start;
  void *p = mmap (NULL, l, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return -1;
  start = gm_round_up ((uintptr_t) p, thp ? HUGE_2M : 4096);
  m->map = p;
  m->map_len = l;
  m->addr = (void *) start;
  m->len = len;
  m->backing = "4K pages";
  if (thp && madvise (m->addr, gm_round_up (len, HUGE_2M), MADV_HUGEPAGE) == 0)
    m->backing = "transparent hugepages";
  else if (!thp)
    madvise (m->addr, len, MADV_NOHUGEPAGE);
  /* Prefault now so the I/O path never takes page faults and RSS does
   * not change with load.
   */
  madvise (m->addr, len, MADV_POPULATE_WRITE);
  return 0;
}

int
gm_mem_map (struct gm_mem *m, size_t len, enum gm_huge_mode mode,
            char *err, size_t errlen)
{
  memset (m, 0, sizeof *m);
  if (mode != GM_HUGE_OFF && map_hugetlb (m, len) == 0)
    return 0;
  if (mode == GM_HUGE_ON) {
    int e = errno;
    snprintf (err, errlen,
              "hugetlb pages required, but %zu bytes of 2M ones could not "
              "be mapped (%s): reserve them with 'echo N > "
              "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages', or "
              "set it to auto",
              len, strerror (e));
    errno = e;
    return -1;
  }
  if (map_small (m, len, mode == GM_HUGE_AUTO) == 0)
    return 0;
  snprintf (err, errlen, "cannot map %zu bytes: %s", len, strerror (errno));
  return -1;
}

void
gm_mem_unmap (struct gm_mem *m)
{
  if (m->map)
    munmap (m->map, m->map_len);
  if (m->locked)
    close (m->lock_fd);
  memset (m, 0, sizeof *m);
}

/* Unit tests for common/uring.c, common/geometry.c, common/dioalign.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "geometry.h"
#include "pool.h"
#include "uring.h"
#include "unit.h"

#define LEN (1024 * 1024 + 1000)        /* not a multiple of a block */

int
main (void)
{
  char path[] = "/var/tmp/gmblock-unit-XXXXXX";
  char err[256], desc[128];
  struct gm_geometry g;
  struct gm_uring u;
  struct gm_pool *pool;
  unsigned char *ref, *buf;
  int fd, dfd;
  ssize_t r;

  fd = mkstemp (path);
  CHECK (fd >= 0);
  ref = malloc (LEN);
  for (size_t i = 0; i < LEN; i++)
    ref[i] = i * 7 + (i >> 9);
  CHECK (write (fd, ref, LEN) == LEN);
  close (fd);

  /* Geometry of a regular file. */
  dfd = open (path, O_RDWR | O_DIRECT);
  CHECK (dfd >= 0);
  CHECK (gm_geometry_probe (dfd, &g, err, sizeof err) == 0);
  CHECK (!g.is_block);
  CHECK_EQ_U64 (g.size, LEN);
  CHECK (g.logical_block >= 512);
  printf ("dio known %d mem %u offset %u, rotational %d\n",
          g.dio_known, g.dio_mem_align, g.dio_offset_align, g.rotational);

  /* Directories and character devices are refused with a reason. */
  fd = open ("/var/tmp", O_RDONLY);
  CHECK (gm_geometry_probe (fd, &g, err, sizeof err) == -1);
  CHECK (strstr (err, "directory") != NULL);
  close (fd);
  fd = open ("/dev/null", O_RDONLY);
  CHECK (gm_geometry_probe (fd, &g, err, sizeof err) == -1);
  CHECK (strstr (err, "character device") != NULL);
  close (fd);

  /* A ring, with the pool registered (fine as root; as a user with an
   * 8M memlock limit 4M still fits).
   */
  CHECK (gm_uring_init (&u, 8, GM_URING_SINGLE_ISSUER | GM_URING_COOP_TASKRUN |
                        GM_URING_REGISTER_FD) == 0);
  pool = gm_pool_create (4 * 1024 * 1024, GM_HUGE_AUTO, err, sizeof err);
  CHECK (pool != NULL);
  CHECK (gm_uring_register_buffer (&u, pool->mem.addr, pool->mem.len) == 0);
  printf ("ring: %s\n", gm_uring_describe (&u, desc, sizeof desc));

  /* O_DIRECT read through a fixed buffer, aligned. */
  buf = gm_pool_get (pool, 65536);
  r = gm_uring_rw (&u, GM_READ, dfd, buf, 65536, 4096, 0);
  CHECK_EQ_U64 (r, 65536);
  CHECK (memcmp (buf, ref + 4096, 65536) == 0);

  /* Reading the last, partial block stops at end of file. */
  r = gm_uring_rw (&u, GM_READ, dfd, buf, 4096, (LEN / 4096) * 4096, 0);
  CHECK_EQ_U64 (r, LEN % 4096);
  CHECK (memcmp (buf, ref + (LEN / 4096) * 4096, LEN % 4096) == 0);

  /* Past end of file: 0 bytes, not an error. */
  r = gm_uring_rw (&u, GM_READ, dfd, buf, 4096, 2 * 1024 * 1024, 0);
  CHECK_EQ_U64 (r, 0);

  /* Unaligned O_DIRECT is refused by the kernel with EINVAL. */
  r = gm_uring_rw (&u, GM_READ, dfd, buf, 4096, 100, 0);
  CHECK (r == -EINVAL);

  /* Write with RWF_DSYNC, read back through a plain (non-pool) buffer. */
  memset (buf, 0xab, 8192);
  r = gm_uring_rw (&u, GM_WRITE, dfd, buf, 8192, 65536, RWF_DSYNC);
  CHECK_EQ_U64 (r, 8192);
  {
    unsigned char *plain = aligned_alloc (4096, 8192);
    r = gm_uring_rw (&u, GM_READ, dfd, plain, 8192, 65536, 0);
    CHECK_EQ_U64 (r, 8192);
    for (int i = 0; i < 8192; i++)
      CHECK (plain[i] == 0xab);
    free (plain);
  }
  CHECK (gm_uring_fsync (&u, dfd, true) == 0);
  CHECK (gm_uring_fsync (&u, dfd, false) == 0);

  /* Errors come back as -errno. */
  CHECK (gm_uring_rw (&u, GM_READ, 9999, buf, 4096, 0, 0) == -EBADF);

  gm_pool_put (pool, buf, 65536);
  gm_uring_exit (&u);
  gm_pool_destroy (pool);
  close (dfd);
  unlink (path);
  free (ref);
  UNIT_DONE ();
}

/* Unit tests for common/pool.c and common/hugemem.c. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "pool.h"
#include "unit.h"

#define MB (1024 * 1024)

static struct gm_pool *pool;

/* Each thread fills its buffer with its own byte and checks that
 * nobody else wrote into it while it held it.
 */
static void *
hammer (void *arg)
{
  unsigned char id = (uintptr_t) arg;
  unsigned seed = id;

  for (int i = 0; i < 2000; i++) {
    size_t len = 1 + rand_r (&seed) % (256 * 1024);
    unsigned char *b = gm_pool_get (pool, len);
    CHECK (b != NULL);
    CHECK ((uintptr_t) b % GM_POOL_UNIT == 0);
    CHECK (gm_pool_contains (pool, b, len));
    memset (b, id, len);
    if (i % 64 == 0)
      usleep (100);
    for (size_t j = 0; j < len; j += 997)
      CHECK (b[j] == id);
    CHECK (b[len - 1] == id);
    gm_pool_put (pool, b, len);
  }
  return NULL;
}

int
main (void)
{
  char err[256];
  struct gm_pool_stats s;
  void *a, *b, *c;
  pthread_t th[8];
  enum gm_huge_mode m;

  CHECK (gm_huge_mode_parse ("auto", &m) == 0 && m == GM_HUGE_AUTO);
  CHECK (gm_huge_mode_parse ("off", &m) == 0 && m == GM_HUGE_OFF);
  CHECK (gm_huge_mode_parse ("on", &m) == 0 && m == GM_HUGE_ON);
  CHECK (gm_huge_mode_parse ("maybe", &m) == -1);

  CHECK (gm_pool_create (100, GM_HUGE_OFF, err, sizeof err) == NULL);
  CHECK (strstr (err, "smaller") != NULL);

  pool = gm_pool_create (4 * MB, GM_HUGE_OFF, err, sizeof err);
  CHECK (pool != NULL);
  CHECK (strcmp (pool->mem.backing, "4K pages") == 0);

  /* Bounds. */
  errno = 0;
  CHECK (gm_pool_get (pool, 0) == NULL && errno == EINVAL);
  CHECK (gm_pool_get (pool, 4 * MB + 1) == NULL && errno == EINVAL);

  /* First fit: freed low buffers are reused first. */
  a = gm_pool_get (pool, 4096);
  b = gm_pool_get (pool, 8192);
  c = gm_pool_get (pool, 1);
  CHECK (a == pool->mem.addr);
  CHECK ((char *) b == (char *) a + 4096);
  CHECK ((char *) c == (char *) b + 8192);
  gm_pool_put (pool, a, 4096);
  CHECK (gm_pool_get (pool, 100) == a);
  /* A run that does not fit in the hole goes after c. */
  gm_pool_put (pool, a, 100);
  CHECK ((char *) gm_pool_get (pool, 8192) == (char *) c + 4096);
  gm_pool_get_stats (pool, &s);
  CHECK_EQ_U64 (s.in_use, 8192 + 4096 + 8192);
  CHECK_EQ_U64 (s.size, 4 * MB);

  /* Full pool: tryget refuses instead of waiting. */
  gm_pool_put (pool, b, 8192);
  gm_pool_put (pool, c, 1);
  gm_pool_put (pool, (char *) c + 4096, 8192);
  a = gm_pool_get (pool, 4 * MB);
  CHECK (a != NULL);
  errno = 0;
  CHECK (gm_pool_tryget (pool, 1) == NULL && errno == EAGAIN);
  gm_pool_put (pool, a, 4 * MB);
  gm_pool_get_stats (pool, &s);
  CHECK_EQ_U64 (s.in_use, 0);
  CHECK_EQ_U64 (s.peak, 4 * MB);

  /* Many threads, more demand than memory: no overlap, no deadlock,
   * nothing leaked.
   */
  for (uintptr_t i = 0; i < 8; i++)
    CHECK (pthread_create (&th[i], NULL, hammer, (void *) (i + 1)) == 0);
  for (int i = 0; i < 8; i++)
    pthread_join (th[i], NULL);
  gm_pool_get_stats (pool, &s);
  CHECK_EQ_U64 (s.in_use, 0);
  CHECK (s.peak <= 4 * MB);
  gm_pool_destroy (pool);

  /* hugepages=auto always works (falls back); a pool is usable. */
  pool = gm_pool_create (3 * MB, GM_HUGE_AUTO, err, sizeof err);
  CHECK (pool != NULL);
  CHECK (((uintptr_t) pool->mem.addr) % GM_POOL_UNIT == 0);
  memset (pool->mem.addr, 1, pool->mem.len);
  printf ("hugepages=auto gave %s\n", pool->mem.backing);
  gm_pool_destroy (pool);

  /* hugepages=on without reserved pages fails with advice. */
  {
    FILE *fp = fopen ("/proc/sys/vm/nr_hugepages", "r");
    long n = -1;
    if (fp) {
      if (fscanf (fp, "%ld", &n) != 1)
        n = -1;
      fclose (fp);
    }
    if (n == 0) {
      CHECK (gm_pool_create (4 * MB, GM_HUGE_ON, err, sizeof err) == NULL);
      CHECK (strstr (err, "nr_hugepages") != NULL);
    }
  }
  UNIT_DONE ();
}

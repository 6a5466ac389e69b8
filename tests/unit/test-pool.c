/* Unit tests for common/pool.c and common/hugemem.c. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "overlap.h"            /* gm_now_ns */
#include "pool.h"
#include "unit.h"
#include "cond-waits.h"

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

/* Small requests that come and go all the time must not keep a large
 * one waiting forever: first-fit hands every freed run to whichever
 * thread wakes first, and the churners, already running, always won.
 */
#define NCHURN 5
static _Atomic bool stop_churn;

static void *
churn (void *arg)
{
  while (!atomic_load (&stop_churn)) {
    void *b = gm_pool_get (pool, 3 * GM_POOL_UNIT);
    CHECK (b != NULL);
    usleep (200);
    gm_pool_put (pool, b, 3 * GM_POOL_UNIT);
  }
  return NULL;
}

static void *
want_big (void *arg)
{
  void *b = gm_pool_get (pool, 8 * GM_POOL_UNIT);
  CHECK (b != NULL);
  *(_Atomic bool *) arg = true;
  gm_pool_put (pool, b, 8 * GM_POOL_UNIT);
  return NULL;
}

/* Five times: a half-pool request among five threads that hold three
 * units each (15 of 16) and take them again as soon as they give them
 * back.  First-fit alone made it wait 0.1-3.7 s, sometimes longer.
 */
static void
large_not_starved (void)
{
  char err[256];
  pthread_t th[NCHURN + 1];
  int worst = 0;

  pool = gm_pool_create (16 * GM_POOL_UNIT, GM_HUGE_OFF, err, sizeof err);
  CHECK (pool != NULL);
  atomic_store (&stop_churn, false);
  for (int i = 0; i < NCHURN; i++)
    CHECK (pthread_create (&th[i], NULL, churn, NULL) == 0);
  for (int trial = 0; trial < 5; trial++) {
    _Atomic bool got = false;
    int ms = 0;

    usleep (20 * 1000);
    CHECK (pthread_create (&th[NCHURN], NULL, want_big, &got) == 0);
    while (!atomic_load (&got) && ms < 1000) {
      usleep (1000);
      ms++;
    }
    /* Starved: stop the churners so the join below returns and the
     * check fails now rather than after however long it would wait. */
    if (!atomic_load (&got))
      atomic_store (&stop_churn, true);
    pthread_join (th[NCHURN], NULL);
    if (ms > worst)
      worst = ms;
  }
  printf ("a half-pool request among small ones waited %d ms at worst\n",
          worst);
  CHECK (worst < 1000);
  atomic_store (&stop_churn, true);
  for (int i = 0; i < NCHURN; i++)
    pthread_join (th[i], NULL);
  gm_pool_destroy (pool);
}

static void *
get_4_units (void *arg)
{
  void *b = gm_pool_get (pool, 4 * GM_POOL_UNIT);
  *(int *) arg = b ? 0 : errno;
  if (b)
    gm_pool_put (pool, b, 4 * GM_POOL_UNIT);
  return NULL;
}

/* A quarantined buffer (I/O abandoned by the kernel may still land in
 * it) is never handed out again, and a request that what is left can
 * never serve fails with EIO, waiting or not, instead of waiting for
 * ever; one that can still be served waits as before.
 */
static void
quarantine (void)
{
  char err[256];
  void *a, *b, *c;
  pthread_t t;
  int r = -1;
  struct gm_pool_stats st;

  pool = gm_pool_create (8 * GM_POOL_UNIT, GM_HUGE_OFF, err, sizeof err);
  CHECK (pool != NULL);
  a = gm_pool_get (pool, 2 * GM_POOL_UNIT);
  b = gm_pool_get (pool, 6 * GM_POOL_UNIT);
  /* Waits: the pool is full. */
  CHECK (pthread_create (&t, NULL, get_4_units, &r) == 0);
  usleep (20 * 1000);
  gm_pool_put (pool, b, 6 * GM_POOL_UNIT);
  pthread_join (t, NULL);
  CHECK (r == 0);               /* 6 free units: it was served */
  b = gm_pool_get (pool, 6 * GM_POOL_UNIT);
  CHECK (pthread_create (&t, NULL, get_4_units, &r) == 0);
  usleep (20 * 1000);
  gm_pool_quarantine (pool, b, 6 * GM_POOL_UNIT);
  pthread_join (t, NULL);
  CHECK (r == EIO);             /* 2 units left, for good */
  gm_pool_get_stats (pool, &st);
  CHECK (st.quarantined == 6 * GM_POOL_UNIT &&
         st.in_use == 8 * GM_POOL_UNIT);
  errno = 0;
  CHECK (gm_pool_get (pool, 3 * GM_POOL_UNIT) == NULL && errno == EIO);
  /* What is left still serves what fits, never the quarantined units. */
  gm_pool_put (pool, a, 2 * GM_POOL_UNIT);
  c = gm_pool_get (pool, 2 * GM_POOL_UNIT);
  CHECK (c == a);
  errno = 0;
  CHECK (gm_pool_tryget (pool, GM_POOL_UNIT) == NULL && errno == EAGAIN);
  gm_pool_put (pool, c, 2 * GM_POOL_UNIT);
  gm_pool_get_stats (pool, &st);
  CHECK (st.quarantined == 6 * GM_POOL_UNIT &&
         st.in_use == 6 * GM_POOL_UNIT);
  gm_pool_destroy (pool);

  /* A unit lost in the middle: a whole-pool request can never fit. */
  pool = gm_pool_create (8 * GM_POOL_UNIT, GM_HUGE_OFF, err, sizeof err);
  CHECK (pool != NULL);
  a = gm_pool_get (pool, 4 * GM_POOL_UNIT);
  b = gm_pool_get (pool, GM_POOL_UNIT);
  gm_pool_put (pool, a, 4 * GM_POOL_UNIT);
  gm_pool_quarantine (pool, b, GM_POOL_UNIT);
  CHECK ((a = gm_pool_get (pool, 4 * GM_POOL_UNIT)) != NULL);
  gm_pool_put (pool, a, 4 * GM_POOL_UNIT);
  errno = 0;
  CHECK (gm_pool_get (pool, 5 * GM_POOL_UNIT) == NULL && errno == EIO);
  gm_pool_destroy (pool);
}

static void *
get_put_unit (void *arg)
{
  void *b = gm_pool_get (pool, GM_POOL_UNIT);
  CHECK (b != NULL);
  gm_pool_put (pool, b, GM_POOL_UNIT);
  return NULL;
}

/* A thousand threads waiting for a small pool (64 clients with 16
 * requests each) cost the server 16 times the CPU: every release woke
 * every waiter, and all but one went back to sleep.  Now each release
 * wakes the first in line only: NW waiters for a one-unit pool, each
 * served in turn, wake about once each (a broadcast: NW * NW / 2).
 */
#define NW 64
static void
wakes_one (void)
{
  char err[256];
  pthread_t th[NW];
  struct gm_pool_stats st;
  unsigned long extra;
  void *b;

  pool = gm_pool_create (GM_POOL_UNIT, GM_HUGE_OFF, err, sizeof err);
  CHECK (pool != NULL);
  b = gm_pool_get (pool, GM_POOL_UNIT);
  for (int i = 0; i < NW; i++)
    CHECK (pthread_create (&th[i], NULL, get_put_unit, NULL) == 0);
  do {
    usleep (1000);
    gm_pool_get_stats (pool, &st);
  } while (st.waits < NW);
  /* All queued; each has called pthread_cond_wait once (or is about
   * to: it holds the lock until it does).  Count from here. */
  pthread_mutex_lock (&pool->lock);
  atomic_store (&cond_waits, 0);
  pthread_mutex_unlock (&pool->lock);
  gm_pool_put (pool, b, GM_POOL_UNIT);
  for (int i = 0; i < NW; i++)
    pthread_join (th[i], NULL);
  extra = atomic_load (&cond_waits);
  printf ("%d waiters served one by one went back to sleep %lu times\n",
          NW, extra);
  CHECK (extra < NW);
  gm_pool_get_stats (pool, &st);
  CHECK_EQ_U64 (st.in_use, 0);
  gm_pool_destroy (pool);
}

/* A waiter whose flag is set leaves the line when woken, from the
 * middle or the front of it; the others stay queued, in order. */
struct cwaiter {
  _Atomic bool cancel, done;
  void *buf;
  int err;
  size_t len;
};

static void *
get_cancellable (void *arg)
{
  struct cwaiter *w = arg;

  w->buf = gm_pool_get_cancellable (pool, w->len, &w->cancel);
  w->err = errno;
  atomic_store (&w->done, true);
  return NULL;
}

static void
queue_of (unsigned n)
{
  struct gm_pool_stats st;
  do {
    usleep (1000);
    gm_pool_get_stats (pool, &st);
  } while (st.waits < n);
}

static void
cancelled_waiters (void)
{
  char err[256];
  struct cwaiter w[3] = { { .len = 2 * GM_POOL_UNIT }, { .len = GM_POOL_UNIT },
                          { .len = GM_POOL_UNIT } };
  pthread_t th[3];
  void *b;

  pool = gm_pool_create (2 * GM_POOL_UNIT, GM_HUGE_OFF, err, sizeof err);
  CHECK (pool != NULL);
  b = gm_pool_get (pool, 2 * GM_POOL_UNIT);   /* never given back in time */
  for (int i = 0; i < 3; i++) {
    CHECK (pthread_create (&th[i], NULL, get_cancellable, &w[i]) == 0);
    queue_of (i + 1);           /* in this order */
  }
  /* The middle one: the others stay. */
  atomic_store (&w[1].cancel, true);
  gm_pool_wake (pool);
  pthread_join (th[1], NULL);
  CHECK (w[1].buf == NULL && w[1].err == ECANCELED);
  usleep (20000);
  CHECK (!atomic_load (&w[0].done) && !atomic_load (&w[2].done));
  /* The first: the last becomes first, and is not served (none free). */
  atomic_store (&w[0].cancel, true);
  gm_pool_wake (pool);
  pthread_join (th[0], NULL);
  CHECK (w[0].buf == NULL && w[0].err == ECANCELED);
  usleep (20000);
  CHECK (!atomic_load (&w[2].done));
  /* Memory back: the one left is served; the line is empty again. */
  gm_pool_put (pool, b, 2 * GM_POOL_UNIT);
  pthread_join (th[2], NULL);
  CHECK (w[2].buf != NULL);
  CHECK (pool->head == NULL && pool->tail == NULL);
  gm_pool_put (pool, w[2].buf, GM_POOL_UNIT);
  /* A flag set before the call: it still takes free memory at once,
   * and only a waiter gives up. */
  {
    _Atomic bool yes = true;
    b = gm_pool_get_cancellable (pool, GM_POOL_UNIT, &yes);
    CHECK (b != NULL);
    gm_pool_put (pool, b, GM_POOL_UNIT);
  }
  gm_pool_destroy (pool);
}

/* Churn: threads get and put random sizes from a 4-unit pool while
 * others' flags are set and the pool woken at random, for a second;
 * the line stays well formed (tail is its last), and once the cancels
 * stop every thread still gets served (a lost hand-over to the next in
 * line would leave one waiting for ever). */
#define CHURN_THREADS 12

static _Atomic bool churn_cancel[CHURN_THREADS], churn_done;
static _Atomic unsigned long churn_gets, churn_cancels;

static void *
cancel_churner (void *arg)
{
  int i = (int) (intptr_t) arg;
  unsigned seed = i * 7919 + 1;

  while (!atomic_load (&churn_done)) {
    size_t len = (rand_r (&seed) % 4 + 1) * GM_POOL_UNIT;
    void *b;
    atomic_store (&churn_cancel[i], false);
    b = gm_pool_get_cancellable (pool, len, &churn_cancel[i]);
    if (b) {
      atomic_fetch_add (&churn_gets, 1);
      if (rand_r (&seed) % 4 == 0)
        usleep (rand_r (&seed) % 200);
      gm_pool_put (pool, b, len);
    }
    else {
      CHECK (errno == ECANCELED);
      atomic_fetch_add (&churn_cancels, 1);
    }
  }
  return NULL;
}

static void
line_well_formed (void)
{
  struct gm_pool_waiter *w, *last = NULL;
  int n = 0;

  pthread_mutex_lock (&pool->lock);
  for (w = pool->head; w; w = w->next, n++)
    last = w;
  CHECK (n <= CHURN_THREADS);
  CHECK (last == pool->tail);
  pthread_mutex_unlock (&pool->lock);
}

static void
cancel_churn (void)
{
  char err[256];
  pthread_t th[CHURN_THREADS];
  unsigned seed = 42;
  uint64_t end = gm_now_ns () + 1000000000ull;
  struct timespec limit;
  struct gm_pool_stats st;

  pool = gm_pool_create (4 * GM_POOL_UNIT, GM_HUGE_OFF, err, sizeof err);
  CHECK (pool != NULL);
  for (intptr_t i = 0; i < CHURN_THREADS; i++)
    CHECK (pthread_create (&th[i], NULL, cancel_churner, (void *) i) == 0);
  while (gm_now_ns () < end) {
    atomic_store (&churn_cancel[rand_r (&seed) % CHURN_THREADS], true);
    line_well_formed ();
    gm_pool_wake (pool);
    usleep (rand_r (&seed) % 300);
  }
  atomic_store (&churn_done, true);
  clock_gettime (CLOCK_REALTIME, &limit);
  limit.tv_sec += 20;
  for (int i = 0; i < CHURN_THREADS; i++)
    CHECK (pthread_timedjoin_np (th[i], NULL, &limit) == 0);
  gm_pool_get_stats (pool, &st);
  printf ("cancel churn: %lu gets, %lu cancelled\n",
          atomic_load (&churn_gets), atomic_load (&churn_cancels));
  CHECK (atomic_load (&churn_gets) > 0 && atomic_load (&churn_cancels) > 0);
  CHECK_EQ_U64 (st.in_use, 0);
  CHECK (pool->head == NULL && pool->tail == NULL);
  gm_pool_destroy (pool);
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
  /* Rounded up, SIZE_MAX wrapped to 0 units: handed out unmarked. */
  CHECK (gm_pool_get (pool, SIZE_MAX) == NULL && errno == EINVAL);
  CHECK (gm_pool_tryget (pool, SIZE_MAX - 100) == NULL && errno == EINVAL);

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

  large_not_starved ();
  quarantine ();
  wakes_one ();
  cancelled_waiters ();
  cancel_churn ();

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

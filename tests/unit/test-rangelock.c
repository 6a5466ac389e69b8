/* Unit tests for common/rangelock.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "rangelock.h"
#include "unit.h"
#include "cond-waits.h"

static struct gm_rangelock rl;
static unsigned long shared_block[4];   /* one word per "block" */
static atomic_int inside;


static void *
hot_writer (void *arg)
{
  struct gm_range r;
  gm_range_lock (&rl, &r, 4096, 8192, true);
  shared_block[1]++;
  gm_range_unlock (&rl, &r);
  return NULL;
}

/* NW writers queued on one block behind a holder: each unlock must
 * wake the next one only.  A broadcast woke all of them at every
 * unlock (NW * NW / 2 needless wake-ups: a thousand requests queued on
 * one block cost the server 20 times the CPU, a review finding).
 */
#define NW 64
static void
wakes_next_only (void)
{
  struct gm_range hold;
  pthread_t th[NW];
  unsigned n;
  unsigned long extra;

  shared_block[1] = 0;
  gm_range_lock (&rl, &hold, 0, 1 << 20, true);
  for (int i = 0; i < NW; i++)
    CHECK (pthread_create (&th[i], NULL, hot_writer, NULL) == 0);
  /* Wait until all are queued: each queues and goes to sleep in one
   * hold of the lock, so once the lock is ours all are asleep. */
  do {
    usleep (1000);
    n = 0;
    pthread_mutex_lock (&rl.lock);
    for (struct gm_range *q = rl.head; q; q = q->next)
      n++;
    pthread_mutex_unlock (&rl.lock);
  } while (n < NW + 1);
  pthread_mutex_lock (&rl.lock);
  atomic_store (&cond_waits, 0);
  pthread_mutex_unlock (&rl.lock);
  gm_range_unlock (&rl, &hold);
  for (int i = 0; i < NW; i++)
    pthread_join (th[i], NULL);
  extra = atomic_load (&cond_waits);
  printf ("%d writers queued on one block went back to sleep %lu times\n",
          NW, extra);
  CHECK (extra < NW);
  CHECK_EQ_U64 (shared_block[1], NW);
  CHECK (rl.held == 0 && rl.head == NULL);
}

/* Non-atomic read-modify-write under an exclusive lock: a lost update
 * shows up as a wrong final count.
 */
static void *
rmw (void *arg)
{
  uintptr_t blk = (uintptr_t) arg % 4;
  for (int i = 0; i < 20000; i++) {
    struct gm_range r;
    /* Ranges of different lengths, all covering the block's first
     * byte, some reaching into the next blocks.
     */
    uint64_t start = blk * 4096 - (blk > 0 ? i % 7 : 0);
    gm_range_lock (&rl, &r, start, blk * 4096 + 1 + (i % 5000), true);
    unsigned long v = shared_block[blk];
    if (i % 1000 == 0)
      usleep (10);
    shared_block[blk] = v + 1;
    gm_range_unlock (&rl, &r);
  }
  return NULL;
}

static void *
shared_reader (void *arg)
{
  struct gm_range r;
  gm_range_lock (&rl, &r, 0, 100, false);
  atomic_fetch_add (&inside, 1);
  usleep (20000);
  atomic_fetch_sub (&inside, 1);
  gm_range_unlock (&rl, &r);
  return NULL;
}

static void *
late_writer (void *arg)
{
  struct gm_range r;
  gm_range_lock (&rl, &r, 50, 60, true);
  /* No reader may be inside while the writer holds the lock. */
  CHECK (atomic_load (&inside) == 0);
  gm_range_unlock (&rl, &r);
  return NULL;
}

int
main (void)
{
  struct gm_range a, b;
  pthread_t th[8];

  gm_rangelock_init (&rl);

  /* Non-overlapping exclusive ranges and overlapping shared ones are
   * granted at once (this would deadlock otherwise).
   */
  gm_range_lock (&rl, &a, 0, 4096, true);
  gm_range_lock (&rl, &b, 4096, 8192, true);
  gm_range_unlock (&rl, &a);
  gm_range_unlock (&rl, &b);
  gm_range_lock (&rl, &a, 0, 4096, false);
  gm_range_lock (&rl, &b, 0, 4096, false);
  CHECK (rl.held == 2);
  gm_range_unlock (&rl, &b);
  gm_range_unlock (&rl, &a);
  CHECK (rl.held == 0 && rl.head == NULL && rl.tail == NULL);

  /* Mutual exclusion under contention. */
  for (uintptr_t i = 0; i < 8; i++)
    pthread_create (&th[i], NULL, rmw, (void *) i);
  for (int i = 0; i < 8; i++)
    pthread_join (th[i], NULL);
  for (int i = 0; i < 4; i++)
    CHECK_EQ_U64 (shared_block[i], 2 * 20000);

  /* Readers and a writer: the writer waits for readers before it. */
  pthread_create (&th[0], NULL, shared_reader, NULL);
  pthread_create (&th[1], NULL, shared_reader, NULL);
  usleep (5000);
  pthread_create (&th[2], NULL, late_writer, NULL);
  for (int i = 0; i < 3; i++)
    pthread_join (th[i], NULL);
  CHECK (rl.held == 0);

  wakes_next_only ();
  gm_rangelock_destroy (&rl);
  UNIT_DONE ();
}

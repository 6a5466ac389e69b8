/* gmblock: which acknowledged writes a FLUSH can still cover.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * See unflushed.h for the rule.  Acknowledgements are numbered in the
 * order they arrive, over every connection: a FLUSH's mark is the count
 * when it was posted, and its reply covers every write up to it.
 */
#include <pthread.h>

#include "unflushed.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t current;        /* the server instance now (0: none yet) */
static uint64_t acked;          /* writes it acknowledged, numbered */
static uint64_t covered;        /* of those, up to here a FLUSH covered */
static uint64_t losses;         /* bumped by every loss */

void
gm_uf_open (struct gm_unflushed *u)
{
  pthread_mutex_lock (&lock);
  u->lost_seen = losses;
  pthread_mutex_unlock (&lock);
}

uint64_t
gm_uf_connected (uint64_t instance)
{
  uint64_t n = 0;

  pthread_mutex_lock (&lock);
  if (instance != current) {
    n = acked - covered;
    covered = acked;
    if (n)
      losses++;
    current = instance;
  }
  pthread_mutex_unlock (&lock);
  return n;
}

void
gm_uf_acked (uint64_t instance)
{
  pthread_mutex_lock (&lock);
  if (instance == current)
    acked++;
  else
    losses++;                   /* from a process already replaced */
  pthread_mutex_unlock (&lock);
}

uint64_t
gm_uf_flush_sent (void)
{
  uint64_t mark;

  pthread_mutex_lock (&lock);
  mark = acked;
  pthread_mutex_unlock (&lock);
  return mark;
}

void
gm_uf_flush_done (uint64_t mark, uint64_t instance)
{
  pthread_mutex_lock (&lock);
  /* A replaced instance's flush covers nothing that is still counted:
   * its writes were counted lost when it was replaced. */
  if (instance == current && mark > covered)
    covered = mark;
  pthread_mutex_unlock (&lock);
}

uint64_t
gm_uf_uncovered (void)
{
  uint64_t n;

  pthread_mutex_lock (&lock);
  n = acked - covered;
  pthread_mutex_unlock (&lock);
  return n;
}

bool
gm_uf_lost (struct gm_unflushed *u)
{
  bool lost;

  pthread_mutex_lock (&lock);
  lost = u->lost_seen != losses;
  u->lost_seen = losses;
  pthread_mutex_unlock (&lock);
  return lost;
}

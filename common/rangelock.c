/* gmblock: fair byte-range locks.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "rangelock.h"

void
gm_rangelock_init (struct gm_rangelock *rl)
{
  pthread_mutex_init (&rl->lock, NULL);
  pthread_cond_init (&rl->changed, NULL);
  rl->head = rl->tail = NULL;
  rl->held = 0;
}

void
gm_rangelock_destroy (struct gm_rangelock *rl)
{
  pthread_mutex_destroy (&rl->lock);
  pthread_cond_destroy (&rl->changed);
}

static bool
conflicts (const struct gm_range *a, const struct gm_range *b)
{
  return a->start < b->end && b->start < a->end &&
    (a->exclusive || b->exclusive);
}

/* Does any node queued before r conflict with it? */
static bool
blocked (const struct gm_range *r)
{
  for (const struct gm_range *p = r->prev; p; p = p->prev)
    if (conflicts (p, r))
      return true;
  return false;
}

void
gm_range_lock (struct gm_rangelock *rl, struct gm_range *r,
               uint64_t start, uint64_t end, bool exclusive)
{
  r->start = start;
  r->end = end;
  r->exclusive = exclusive;
  r->next = NULL;

  pthread_mutex_lock (&rl->lock);
  r->prev = rl->tail;
  if (rl->tail)
    rl->tail->next = r;
  else
    rl->head = r;
  rl->tail = r;
  while (blocked (r))
    pthread_cond_wait (&rl->changed, &rl->lock);
  rl->held++;
  pthread_mutex_unlock (&rl->lock);
}

void
gm_range_unlock (struct gm_rangelock *rl, struct gm_range *r)
{
  bool waiters;

  pthread_mutex_lock (&rl->lock);
  if (r->prev)
    r->prev->next = r->next;
  else
    rl->head = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    rl->tail = r->prev;
  rl->held--;
  /* Only nodes queued behind a conflicting one can be waiting. */
  waiters = rl->head != NULL;
  pthread_mutex_unlock (&rl->lock);
  if (waiters)
    pthread_cond_broadcast (&rl->changed);
}

/* gmblock: which acknowledged writes a FLUSH can still cover.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * See unflushed.h for the rule.  One lock for every connection: each
 * call is a few additions, and a new instance must be checked against
 * all connections at once.
 */
#include <pthread.h>
#include <stddef.h>

#include "unflushed.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gm_unflushed *all;
static uint64_t losses;         /* bumped by every loss */

/* u's uncovered writes die with their instance.  Under lock. */
static uint64_t
lose (struct gm_unflushed *u)
{
  uint64_t n = u->acked - u->covered;

  u->covered = u->acked;
  u->instance = 0;
  if (n)
    losses++;
  return n;
}

void
gm_uf_open (struct gm_unflushed *u)
{
  pthread_mutex_lock (&lock);
  u->acked = u->covered = u->instance = 0;
  u->lost_seen = losses;
  u->next = all;
  all = u;
  pthread_mutex_unlock (&lock);
}

uint64_t
gm_uf_close (struct gm_unflushed *u, bool broken)
{
  uint64_t n = 0;

  pthread_mutex_lock (&lock);
  for (struct gm_unflushed **p = &all; *p; p = &(*p)->next)
    if (*p == u) {
      *p = u->next;
      break;
    }
  if (broken)
    n = lose (u);
  pthread_mutex_unlock (&lock);
  return n;
}

void
gm_uf_acked (struct gm_unflushed *u, uint64_t instance)
{
  pthread_mutex_lock (&lock);
  u->acked++;
  u->instance = instance;
  pthread_mutex_unlock (&lock);
}

uint64_t
gm_uf_flush_sent (struct gm_unflushed *u)
{
  uint64_t mark;

  pthread_mutex_lock (&lock);
  mark = u->acked;
  pthread_mutex_unlock (&lock);
  return mark;
}

void
gm_uf_flush_done (struct gm_unflushed *u, uint64_t mark)
{
  pthread_mutex_lock (&lock);
  /* Not above acked: a loss in between already covered them. */
  if (mark > u->covered && mark <= u->acked)
    u->covered = mark;
  if (u->covered == u->acked)
    u->instance = 0;
  pthread_mutex_unlock (&lock);
}

uint64_t
gm_uf_connected (uint64_t instance)
{
  uint64_t n = 0;

  pthread_mutex_lock (&lock);
  for (struct gm_unflushed *o = all; o; o = o->next)
    if (o->instance != 0 && o->instance != instance)
      n += lose (o);
  pthread_mutex_unlock (&lock);
  return n;
}

uint64_t
gm_uf_uncovered (struct gm_unflushed *u)
{
  uint64_t n;

  pthread_mutex_lock (&lock);
  n = u->acked - u->covered;
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

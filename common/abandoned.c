/* gmblock: the RDMA bridge's broken connections the server must be told
 * about (see abandoned.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "abandoned.h"

struct gm_ab_node {
  struct gm_ab_node *next;      /* in the list, while listed */
  uint64_t conn_id;
  uint64_t instance;            /* the server process that may hold it */
  uint64_t gen;                 /* times listed: a tell covers one */
  uint64_t telling_gen;
  bool listed, telling, closed;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t told_cv = PTHREAD_COND_INITIALIZER;
static struct gm_ab_node *list;
static _Atomic unsigned nlisted; /* read without the lock: the fast path */

/* Its connection has closed and nobody needs it any more. */
static void
maybe_free (struct gm_ab_node *n)
{
  if (n->closed && !n->listed && !n->telling)
    free (n);
}

static void
unlist (struct gm_ab_node *n)
{
  struct gm_ab_node **p = &list;

  while (*p != n)
    p = &(*p)->next;
  *p = n->next;
  n->listed = false;
  atomic_fetch_sub (&nlisted, 1);
  maybe_free (n);
}

struct gm_ab_node *
gm_ab_open (uint64_t conn_id)
{
  struct gm_ab_node *n = calloc (1, sizeof *n);

  if (n)
    n->conn_id = conn_id;
  return n;
}

void
gm_ab_close (struct gm_ab_node *n)
{
  if (n == NULL)
    return;
  pthread_mutex_lock (&lock);
  n->closed = true;
  maybe_free (n);
  pthread_mutex_unlock (&lock);
}

void
gm_ab_broken (struct gm_ab_node *n, uint64_t instance)
{
  pthread_mutex_lock (&lock);
  n->instance = instance;
  n->gen++;                     /* a tell under way covers the old break */
  if (!n->listed) {
    n->listed = true;
    n->next = list;
    list = n;
    atomic_fetch_add (&nlisted, 1);
  }
  pthread_mutex_unlock (&lock);
}

void
gm_ab_connected (struct gm_ab_node *n, uint64_t instance)
{
  if (atomic_load (&nlisted) == 0)
    return;
  pthread_mutex_lock (&lock);
  for (struct gm_ab_node *x = list, *next; x; x = next) {
    next = x->next;
    if (x == n || x->instance != instance)
      unlist (x);
  }
  /* Writers waiting for a tell may have nothing left to wait for. */
  pthread_cond_broadcast (&told_cv);
  pthread_mutex_unlock (&lock);
}

bool
gm_ab_take (const struct gm_ab_node *self, uint64_t instance,
            uint64_t *id, struct gm_ab_node **told)
{
  if (atomic_load (&nlisted) == 0)
    return false;
  pthread_mutex_lock (&lock);
  for (;;) {
    struct gm_ab_node *n = NULL;
    bool others_tell = false;

    for (struct gm_ab_node *x = list; x && !n; x = x->next) {
      if (x == self || x->instance != instance)
        continue;               /* another process: a write here fails */
      if (x->telling)
        others_tell = true;
      else
        n = x;
    }
    if (n) {
      n->telling = true;
      n->telling_gen = n->gen;
      *id = n->conn_id;
      *told = n;
      pthread_mutex_unlock (&lock);
      return true;
    }
    if (!others_tell)
      break;
    /* Its reply comes, or its connection fails: bounded either way. */
    pthread_cond_wait (&told_cv, &lock);
  }
  pthread_mutex_unlock (&lock);
  return false;
}

void
gm_ab_told (struct gm_ab_node *n, bool ok)
{
  pthread_mutex_lock (&lock);
  n->telling = false;
  if (ok && n->listed && n->gen == n->telling_gen)
    unlist (n);                 /* frees it if closed */
  else
    maybe_free (n);
  pthread_cond_broadcast (&told_cv);
  pthread_mutex_unlock (&lock);
}

unsigned
gm_ab_listed (void)
{
  return atomic_load (&nlisted);
}

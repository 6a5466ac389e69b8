/* gmblock: the bounded buffer pool.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "sizes.h"

#define WORD_BITS 64

static inline bool
bit_set (const uint64_t *map, size_t i)
{
  return map[i / WORD_BITS] >> (i % WORD_BITS) & 1;
}

static inline bool
unit_used (const struct gm_pool *p, size_t i)
{
  return bit_set (p->bitmap, i);
}

static void
mark_map (uint64_t *map, size_t start, size_t n, bool set)
{
  for (size_t i = start; i < start + n; i++) {
    uint64_t bit = UINT64_C (1) << (i % WORD_BITS);
    if (set)
      map[i / WORD_BITS] |= bit;
    else
      map[i / WORD_BITS] &= ~bit;
  }
}

static void
mark (struct gm_pool *p, size_t start, size_t n, bool used)
{
  mark_map (p->bitmap, start, n, used);
}

/* First-fit search from unit 'from' for n units clear in map; full
 * words are skipped.
 */
static ssize_t
find_clear (const struct gm_pool *p, const uint64_t *map, size_t from, size_t n)
{
  size_t run = 0, start = 0;

  for (size_t i = from; i < p->nunits; ) {
    uint64_t w = map[i / WORD_BITS];
    if (i % WORD_BITS == 0 && w == UINT64_MAX) {
      run = 0;
      i += WORD_BITS;
      continue;
    }
    if (bit_set (map, i))
      run = 0;
    else if (run++ == 0)
      start = i;
    if (run == n)
      return start;
    i++;
  }
  return -1;
}

/* First-fit search for n free units. */
static ssize_t
find_run (const struct gm_pool *p, size_t n)
{
  return find_clear (p, p->bitmap, p->first_free, n);
}

/* The pool's bookkeeping for nunits units; the memory comes later. */
static struct gm_pool *
pool_alloc (size_t size, char *err, size_t errlen)
{
  struct gm_pool *p;
  size_t words;

  if (size < GM_POOL_UNIT) {
    snprintf (err, errlen, "pool size %zu is smaller than one %d-byte unit",
              size, GM_POOL_UNIT);
    errno = EINVAL;
    return NULL;
  }
  p = calloc (1, sizeof *p);
  if (p == NULL) {
    snprintf (err, errlen, "calloc: %s", strerror (errno));
    return NULL;
  }
  p->nunits = gm_round_up (size, GM_POOL_UNIT) / GM_POOL_UNIT;
  words = (p->nunits + WORD_BITS - 1) / WORD_BITS;
  p->bitmap = calloc (words, sizeof (uint64_t));
  p->lost_map = calloc (words, sizeof (uint64_t));
  if (p->bitmap == NULL || p->lost_map == NULL) {
    snprintf (err, errlen, "calloc: %s", strerror (errno));
    free (p->bitmap);
    free (p->lost_map);
    free (p);
    return NULL;
  }
  /* Units past the end of the pool in the last word stay "used". */
  for (size_t i = p->nunits; i < words * WORD_BITS; i++)
    p->bitmap[i / WORD_BITS] |= UINT64_C (1) << (i % WORD_BITS);
  pthread_mutex_init (&p->lock, NULL);
  return p;
}

struct gm_pool *
gm_pool_create (size_t size, enum gm_huge_mode mode, char *err, size_t errlen)
{
  struct gm_pool *p = pool_alloc (size, err, errlen);
  struct gm_mem mem;

  if (p == NULL)
    return NULL;
  if (gm_mem_map (&mem, p->nunits * GM_POOL_UNIT, mode, err, errlen) == -1) {
    int e = errno;
    gm_pool_destroy (p);
    errno = e;
    return NULL;
  }
  p->mem = mem;
  return p;
}

struct gm_pool *
gm_pool_create_on (struct gm_mem *mem, char *err, size_t errlen)
{
  struct gm_pool *p = pool_alloc (mem->len, err, errlen);

  if (p == NULL)
    return NULL;
  /* Whole units only: the tail of a mapping that is not one stays unused. */
  p->nunits = mem->len / GM_POOL_UNIT;
  for (size_t i = p->nunits; i < gm_round_up (mem->len, GM_POOL_UNIT) / GM_POOL_UNIT; i++)
    p->bitmap[i / WORD_BITS] |= UINT64_C (1) << (i % WORD_BITS);
  p->mem = *mem;
  memset (mem, 0, sizeof *mem);
  return p;
}

void
gm_pool_destroy (struct gm_pool *p)
{
  if (p == NULL)
    return;
  gm_mem_unmap (&p->mem);
  pthread_mutex_destroy (&p->lock);
  free (p->bitmap);
  free (p->lost_map);
  free (p);
}

/* Called with the lock held. */
static void *
take (struct gm_pool *p, size_t n)
{
  ssize_t start = find_run (p, n);
  if (start < 0)
    return NULL;
  mark (p, start, n, true);
  if ((size_t) start == p->first_free)
    while (p->first_free < p->nunits && unit_used (p, p->first_free))
      p->first_free++;
  p->in_use += n;
  if (p->in_use > p->peak)
    p->peak = p->in_use;
  p->gets++;
  return (char *) p->mem.addr + (size_t) start * GM_POOL_UNIT;
}

/* Waiters are served in the order they came: with first fit alone, a
 * large request could wait for ever while small ones, already running,
 * took every run freed before it woke.  A request that finds others
 * waiting queues behind them even if its own would fit.  Only the
 * first in line is woken (its own condition variable, signalled under
 * the lock: it lives on its owner's stack), and wakes the next once
 * served: a broadcast woke every waiter at every release, and with a
 * thousand threads waiting (64 clients, 16 requests each, a small
 * pool) the server spent 16 times the CPU and 5 times as long on the
 * same writes (a review finding).  Once buffers were quarantined, the
 * one in line fails (EIO) if no run of its size is left outside them:
 * it would wait for ever.
 */
static void *
get (struct gm_pool *p, size_t len, bool wait, const _Atomic bool *cancel)
{
  size_t n = gm_round_up (len, GM_POOL_UNIT) / GM_POOL_UNIT;
  struct gm_pool_waiter w = { .next = NULL }, **pp, *prev = NULL;
  void *buf = NULL;
  bool cancelled = false;

  /* len, not n: rounding a length near SIZE_MAX up wraps to 0 units
   * (and a len that fits rounds to at most nunits). */
  if (len == 0 || len > p->nunits * GM_POOL_UNIT) {
    errno = EINVAL;
    return NULL;
  }
  pthread_mutex_lock (&p->lock);
  if (p->head == NULL && (buf = take (p, n)) != NULL) {
    pthread_mutex_unlock (&p->lock);
    return buf;
  }
  if (!wait) {
    pthread_mutex_unlock (&p->lock);
    errno = EAGAIN;
    return NULL;
  }
  p->waits++;
  pthread_cond_init (&w.cond, NULL);
  if (p->tail)
    p->tail->next = &w;
  else
    p->head = &w;
  p->tail = &w;
  for (;;) {
    /* Read under the lock that gm_pool_wake takes: a flag set before
     * the wake is seen here, or the wake finds this one waiting. */
    if (cancel && atomic_load (cancel)) {
      cancelled = true;
      break;
    }
    if (p->head == &w) {
      if ((buf = take (p, n)) != NULL)
        break;
      if (p->lost > 0 && find_clear (p, p->lost_map, 0, n) < 0)
        break;
    }
    pthread_cond_wait (&w.cond, &p->lock);
  }
  /* Out of the line, wherever in it (a cancelled one may not be first). */
  for (pp = &p->head; *pp != &w; pp = &(*pp)->next)
    prev = *pp;
  *pp = w.next;
  if (p->tail == &w)
    p->tail = prev;
  if (prev == NULL && p->head)
    /* The next in line may fit in what is left. */
    pthread_cond_signal (&p->head->cond);
  pthread_mutex_unlock (&p->lock);
  pthread_cond_destroy (&w.cond);
  if (buf == NULL)
    errno = cancelled ? ECANCELED : EIO;
  return buf;
}

void *
gm_pool_get (struct gm_pool *p, size_t len)
{
  return get (p, len, true, NULL);
}

void *
gm_pool_get_cancellable (struct gm_pool *p, size_t len,
                         const _Atomic bool *cancel)
{
  return get (p, len, true, cancel);
}

void *
gm_pool_tryget (struct gm_pool *p, size_t len)
{
  return get (p, len, false, NULL);
}

void
gm_pool_wake (struct gm_pool *p)
{
  pthread_mutex_lock (&p->lock);
  for (struct gm_pool_waiter *w = p->head; w; w = w->next)
    pthread_cond_signal (&w->cond);
  pthread_mutex_unlock (&p->lock);
}

void
gm_pool_put (struct gm_pool *p, void *buf, size_t len)
{
  size_t n = gm_round_up (len, GM_POOL_UNIT) / GM_POOL_UNIT;
  size_t start = ((char *) buf - (char *) p->mem.addr) / GM_POOL_UNIT;

  pthread_mutex_lock (&p->lock);
  mark (p, start, n, false);
  if (start < p->first_free)
    p->first_free = start;
  p->in_use -= n;
  if (p->head)
    pthread_cond_signal (&p->head->cond);
  pthread_mutex_unlock (&p->lock);
}

void
gm_pool_quarantine (struct gm_pool *p, void *buf, size_t len)
{
  size_t n = gm_round_up (len, GM_POOL_UNIT) / GM_POOL_UNIT;
  size_t start = ((char *) buf - (char *) p->mem.addr) / GM_POOL_UNIT;

  /* Its units stay in use for good; waiters must learn what is left. */
  pthread_mutex_lock (&p->lock);
  mark_map (p->lost_map, start, n, true);
  p->lost += n;
  if (p->head)
    pthread_cond_signal (&p->head->cond);
  pthread_mutex_unlock (&p->lock);
}

void
gm_pool_get_stats (struct gm_pool *p, struct gm_pool_stats *s)
{
  pthread_mutex_lock (&p->lock);
  s->size = p->nunits * GM_POOL_UNIT;
  s->in_use = p->in_use * GM_POOL_UNIT;
  s->peak = p->peak * GM_POOL_UNIT;
  s->quarantined = p->lost * GM_POOL_UNIT;
  s->gets = p->gets;
  s->waits = p->waits;
  pthread_mutex_unlock (&p->lock);
}

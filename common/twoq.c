/* gmblock: 2Q replacement with ghost history.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdlib.h>

#include "sizes.h"
#include "twoq.h"

#define EMPTY_KEY UINT64_MAX

int
gm_2q_init (struct gm_2q *q, uint32_t nslots, uint32_t kin, uint32_t nghost)
{
  uint32_t nb = nghost ? (uint32_t) gm_next_power_of_2 (nghost) : 1;

  *q = (struct gm_2q) { .nslots = nslots, .kin = kin, .gcap = nghost,
                        .gmask = nb - 1 };
  q->prev = malloc (sizeof (uint32_t) * (nslots ? nslots : 1));
  q->next = malloc (sizeof (uint32_t) * (nslots ? nslots : 1));
  q->where = calloc (nslots ? nslots : 1, 1);
  q->ghost = malloc (sizeof *q->ghost * (nghost ? nghost : 1));
  q->gbucket = malloc (sizeof (uint32_t) * nb);
  if (!q->prev || !q->next || !q->where || !q->ghost || !q->gbucket) {
    gm_2q_free (q);
    errno = ENOMEM;
    return -1;
  }
  for (int l = 0; l < 3; l++)
    q->head[l] = q->tail[l] = GM_2Q_NONE;
  for (uint32_t i = 0; i < nghost; i++)
    q->ghost[i] = (struct gm_2q_ghost) { EMPTY_KEY, 0, GM_2Q_NONE };
  for (uint32_t i = 0; i < nb; i++)
    q->gbucket[i] = GM_2Q_NONE;
  return 0;
}

void
gm_2q_free (struct gm_2q *q)
{
  free (q->prev);
  free (q->next);
  free (q->where);
  free (q->ghost);
  free (q->gbucket);
  q->prev = q->next = q->gbucket = NULL;
  q->where = NULL;
  q->ghost = NULL;
}

static void
unlink_slot (struct gm_2q *q, uint32_t s)
{
  int l = q->where[s];
  uint32_t p = q->prev[s], n = q->next[s];

  if (p != GM_2Q_NONE) q->next[p] = n; else q->head[l] = n;
  if (n != GM_2Q_NONE) q->prev[n] = p; else q->tail[l] = p;
  q->len[l]--;
  q->where[s] = GM_2Q_FREE;
}

static void
push_front (struct gm_2q *q, uint32_t s, int l)
{
  q->prev[s] = GM_2Q_NONE;
  q->next[s] = q->head[l];
  if (q->head[l] != GM_2Q_NONE)
    q->prev[q->head[l]] = s;
  else
    q->tail[l] = s;
  q->head[l] = s;
  q->len[l]++;
  q->where[s] = l;
}

void
gm_2q_insert (struct gm_2q *q, uint32_t slot, enum gm_2q_list list)
{
  if (q->where[slot] != GM_2Q_FREE)
    unlink_slot (q, slot);
  push_front (q, slot, list);
}

void
gm_2q_touch (struct gm_2q *q, uint32_t slot)
{
  if (q->where[slot] == GM_2Q_AM && q->head[GM_2Q_AM] != slot) {
    unlink_slot (q, slot);
    push_front (q, slot, GM_2Q_AM);
  }
}

void
gm_2q_remove (struct gm_2q *q, uint32_t slot)
{
  if (q->where[slot] != GM_2Q_FREE)
    unlink_slot (q, slot);
}

static uint32_t
scan_list (struct gm_2q *q, int l, bool (*ok) (uint32_t, void *),
           void *opaque, uint32_t max_scan)
{
  uint32_t n = 0;
  for (uint32_t s = q->tail[l]; s != GM_2Q_NONE && n < max_scan;
       s = q->prev[s], n++)
    if (ok == NULL || ok (s, opaque))
      return s;
  return GM_2Q_NONE;
}

uint32_t
gm_2q_victim (struct gm_2q *q, bool (*ok) (uint32_t, void *), void *opaque,
              uint32_t max_scan)
{
  int first = q->len[GM_2Q_A1IN] > q->kin || q->len[GM_2Q_AM] == 0 ?
    GM_2Q_A1IN : GM_2Q_AM;
  uint32_t s = scan_list (q, first, ok, opaque, max_scan);
  if (s == GM_2Q_NONE)
    s = scan_list (q, first == GM_2Q_AM ? GM_2Q_A1IN : GM_2Q_AM, ok, opaque,
                   max_scan);
  return s;
}

/* Fibonacci hashing: sequential block numbers spread over buckets. */
static inline uint32_t
ghash (const struct gm_2q *q, uint64_t key)
{
  return (uint32_t) ((key * UINT64_C (0x9E3779B97F4A7C15)) >> 32) & q->gmask;
}

static uint32_t
gfind (const struct gm_2q *q, uint64_t key, uint32_t **link)
{
  uint32_t *l = &q->gbucket[ghash (q, key)];
  while (*l != GM_2Q_NONE && q->ghost[*l].key != key)
    l = &q->ghost[*l].hnext;
  if (link)
    *link = l;
  return *l;
}

static void
gdrop (struct gm_2q *q, uint32_t i)
{
  uint32_t *link;
  if (q->ghost[i].key == EMPTY_KEY)
    return;
  if (gfind (q, q->ghost[i].key, &link) == i)
    *link = q->ghost[i].hnext;
  q->ghost[i].key = EMPTY_KEY;
  q->gcount--;
}

void
gm_2q_ghost_add (struct gm_2q *q, uint64_t key, uint32_t tag)
{
  uint32_t i, h;

  if (q->gcap == 0 || key == EMPTY_KEY)
    return;
  if ((i = gfind (q, key, NULL)) != GM_2Q_NONE) {
    q->ghost[i].tag = tag;
    return;
  }
  i = q->gpos;
  q->gpos = (q->gpos + 1) % q->gcap;
  gdrop (q, i);                 /* the oldest memory goes */
  h = ghash (q, key);
  q->ghost[i] = (struct gm_2q_ghost) { key, tag, q->gbucket[h] };
  q->gbucket[h] = i;
  q->gcount++;
}

bool
gm_2q_ghost_peek (const struct gm_2q *q, uint64_t key, uint32_t *tag)
{
  uint32_t i;
  if (q->gcap == 0 || (i = gfind (q, key, NULL)) == GM_2Q_NONE)
    return false;
  if (tag)
    *tag = q->ghost[i].tag;
  return true;
}

bool
gm_2q_ghost_take (struct gm_2q *q, uint64_t key, uint32_t *tag)
{
  uint32_t i;
  if (q->gcap == 0 || (i = gfind (q, key, NULL)) == GM_2Q_NONE)
    return false;
  if (tag)
    *tag = q->ghost[i].tag;
  gdrop (q, i);
  return true;
}

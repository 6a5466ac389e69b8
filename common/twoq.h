/* gmblock: 2Q replacement (Johnson and Shasha, VLDB 1994) over a fixed
 * set of slots, with its ghost history.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Resident slots live on one of two lists:
 *   A1in  FIFO of blocks seen once: a long scan only ever churns here;
 *   Am    LRU of blocks referenced again after they left A1in (found in
 *         the ghost history) or admitted as proven-hot by the caller.
 * The ghost history remembers the keys of recently evicted (or, for an
 * admission policy, recently declined) blocks with a small tag, in a
 * FIFO ring with a hash index.
 *
 * Everything is allocated at init; no call allocates.  Not thread-safe:
 * the caller holds its own lock (one instance per cache shard).
 */
#ifndef GMBLOCK_TWOQ_H
#define GMBLOCK_TWOQ_H

#include <stdbool.h>
#include <stdint.h>

#define GM_2Q_NONE UINT32_MAX

enum gm_2q_list { GM_2Q_FREE = 0, GM_2Q_A1IN = 1, GM_2Q_AM = 2 };

struct gm_2q_ghost {
  uint64_t key;
  uint32_t tag;
  uint32_t hnext;               /* hash chain, GM_2Q_NONE ends it */
};

struct gm_2q {
  uint32_t nslots;
  uint32_t kin;                 /* A1in target length */
  uint32_t *prev, *next;        /* per slot; toward MRU is prev */
  uint8_t *where;               /* per slot: enum gm_2q_list */
  uint32_t head[3], tail[3], len[3];  /* head = most recent */

  uint32_t gcap;                /* ghost ring capacity (may be 0) */
  struct gm_2q_ghost *ghost;
  uint32_t gpos;                /* next ring entry to overwrite */
  uint32_t gcount;
  uint32_t *gbucket;
  uint32_t gmask;
};

/* kin: A1in target (2Q suggests 25% of nslots); nghost: ghost history
 * entries (2Q suggests 50%).  Returns 0, or -1 with errno = ENOMEM.
 */
int gm_2q_init (struct gm_2q *q, uint32_t nslots, uint32_t kin,
                uint32_t nghost);
void gm_2q_free (struct gm_2q *q);

/* Put a free slot on a list, as its most recent entry. */
void gm_2q_insert (struct gm_2q *q, uint32_t slot, enum gm_2q_list list);
/* A resident slot was referenced: Am moves it to the front, A1in keeps
 * FIFO order (a correlated re-reference is not proof of heat).
 */
void gm_2q_touch (struct gm_2q *q, uint32_t slot);
void gm_2q_remove (struct gm_2q *q, uint32_t slot);

static inline enum gm_2q_list
gm_2q_where (const struct gm_2q *q, uint32_t slot)
{
  return (enum gm_2q_list) q->where[slot];
}

/* Choose a victim: the oldest A1in entry while A1in is over its
 * target (or Am is empty), else the least recent Am entry.  Entries
 * for which ok() is false are skipped, at most max_scan per list; the
 * other list is tried before giving up.  Returns GM_2Q_NONE when
 * nothing qualifies.  The slot stays resident: the caller removes it.
 */
uint32_t gm_2q_victim (struct gm_2q *q, bool (*ok) (uint32_t slot, void *opaque),
                       void *opaque, uint32_t max_scan);

/* Ghost history.  add replaces an existing entry for the key. */
void gm_2q_ghost_add (struct gm_2q *q, uint64_t key, uint32_t tag);
/* Returns true and the tag if the key is remembered; take also forgets it. */
bool gm_2q_ghost_peek (const struct gm_2q *q, uint64_t key, uint32_t *tag);
bool gm_2q_ghost_take (struct gm_2q *q, uint64_t key, uint32_t *tag);

#endif /* GMBLOCK_TWOQ_H */

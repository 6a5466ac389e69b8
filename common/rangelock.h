/* gmblock: byte-range locks, shared or exclusive, granted in arrival order.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Used so that a read-modify-write of a partial block can never race
 * with another write of the same block.  The caller owns the node
 * (usually on its stack), so locking never allocates.  A request
 * waits only for earlier requests whose ranges overlap and conflict,
 * which makes the lock fair: a stream of readers cannot starve a writer.
 * A waiter sleeps on its own condition variable, and an unlock wakes
 * only those it was holding back that can now go.
 */
#ifndef GMBLOCK_RANGELOCK_H
#define GMBLOCK_RANGELOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct gm_range {
  uint64_t start, end;          /* [start, end) */
  bool exclusive;
  bool waiting;                 /* asleep on cond (initialised then) */
  pthread_cond_t cond;
  struct gm_range *prev, *next;
};

struct gm_rangelock {
  pthread_mutex_t lock;
  struct gm_range *head, *tail; /* in arrival order */
  unsigned held;
};

void gm_rangelock_init (struct gm_rangelock *rl);
void gm_rangelock_destroy (struct gm_rangelock *rl);

void gm_range_lock (struct gm_rangelock *rl, struct gm_range *r,
                    uint64_t start, uint64_t end, bool exclusive);
void gm_range_unlock (struct gm_rangelock *rl, struct gm_range *r);

#endif /* GMBLOCK_RANGELOCK_H */

/* gmblock-cache filter: what gets cached (admission).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Replacement is 2Q in every caching mode (blocks.c): a block enters
 * A1in (FIFO) on first use and is promoted to Am (LRU) only when it is
 * referenced again after leaving A1in, which the ghost history shows.
 *
 * Admission decides whether a missing block enters at all.  In the
 * read, writethrough and writeback modes every miss is admitted.  In
 * adaptive mode a block is cached only once it has proved worth it:
 *
 *   - shared:   another connection read it recently (ghost tag names a
 *               different connection): admitted;
 *   - repeated: this connection read it before, and this read is not
 *               part of a sequential scan: admitted into Am;
 *   - followed: this read is part of a scan that other connections'
 *               scans are following (they hit or asked for blocks this
 *               connection brought in, within the last FOLLOW_MS):
 *               admitted into A1in, so the followers hit;
 *   - NBD_CMD_CACHE (prefetch): always admitted;
 *   - otherwise the block bypasses the cache (read straight into the
 *     client's buffer) and only its number and reader are remembered
 *     in the ghost history.
 *
 * A scan is a run of reads on one connection, each starting where one
 * of its (STREAMS) recent streams ended or a little after, that has
 * reached adaptive-scan bytes.  A single-use scan therefore never
 * displaces the working set, however long it is.
 */
#include <string.h>
#include <time.h>

#include "cache.h"

#define FOLLOW_SLOTS 256
#define FOLLOW_MS 2000
#define GAP_FACTOR 8            /* forward gap allowed, in request sizes */

static _Atomic uint32_t next_conn_id = 1;
static _Atomic uint64_t followed_at[FOLLOW_SLOTS];

uint32_t
policy_new_conn (void)
{
  /* 0 means "no connection" (writes, prefetch from below). */
  uint32_t id = atomic_fetch_add (&next_conn_id, 1) & 0x7fffffff;
  return id ? id : policy_new_conn ();
}

static uint64_t
now_ms (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
mark_followed (uint32_t id)
{
  if (id)
    atomic_store_explicit (&followed_at[id % FOLLOW_SLOTS], now_ms (),
                           memory_order_relaxed);
}

static bool
is_followed (uint32_t id)
{
  uint64_t t = atomic_load_explicit (&followed_at[id % FOLLOW_SLOTS],
                                     memory_order_relaxed);
  return t && now_ms () - t < FOLLOW_MS;
}

void
conn_init (struct conn *c)
{
  memset (c, 0, sizeof *c);
  pthread_mutex_init (&c->lock, NULL);
}

void
conn_destroy (struct conn *c)
{
  pthread_mutex_destroy (&c->lock);
}

void
policy_note_read (struct conn *c, uint64_t offset, uint32_t count, bool *scan)
{
  unsigned i;

  /* One connection's requests run in parallel on several threads. */
  pthread_mutex_lock (&c->lock);
  for (i = 0; i < STREAMS; i++) {
    uint64_t next = c->stream[i].next;
    if (c->stream[i].run && offset >= next &&
        offset - next <= (uint64_t) GAP_FACTOR * count)
      break;
  }
  if (i == STREAMS) {
    i = c->stream_victim;
    c->stream_victim = (c->stream_victim + 1) % STREAMS;
    c->stream[i].run = 0;
  }
  c->stream[i].run += count;
  c->stream[i].next = offset + count;
  *scan = c->stream[i].run >= cfg.scan_bytes;
  pthread_mutex_unlock (&c->lock);
}

static inline uint32_t
tag_of (uint32_t id, bool scan)
{
  return id << 1 | scan;
}

/* Called with the shard lock held (the ghost history is per shard). */
enum admit
policy_admit (struct conn *c, uint64_t b, bool scan, bool prefetch,
              struct shard *sh)
{
  uint32_t id = c ? c->id : 0, tag;
  bool known = gm_2q_ghost_take (&sh->q, b, &tag);

  if (cfg.mode != MODE_ADAPTIVE || prefetch) {
    if (prefetch)
      CCOUNT (CS_ADMIT_PREFETCH, 1);
    return known ? ADMIT_AM : ADMIT_A1IN;
  }
  if (known && (tag >> 1) != id && (tag >> 1) != 0) {
    CCOUNT (CS_ADMIT_SHARED, 1);
    if (scan && (tag & 1)) {
      /* We scan behind another scan: let the leader cache for us. */
      mark_followed (tag >> 1);
      return ADMIT_A1IN;
    }
    return scan ? ADMIT_A1IN : ADMIT_AM;
  }
  if (known && !scan) {
    CCOUNT (CS_ADMIT_REPEAT, 1);
    return ADMIT_AM;
  }
  if (scan && is_followed (id)) {
    CCOUNT (CS_ADMIT_FOLLOWED, 1);
    return ADMIT_A1IN;
  }
  gm_2q_ghost_add (&sh->q, b, tag_of (id, scan));
  return ADMIT_NO;
}

void
policy_hit (struct conn *c, struct slot *sl, bool scan)
{
  /* A scan hitting blocks another connection brought in is following it. */
  if (cfg.mode == MODE_ADAPTIVE && scan && c && sl->filler != c->id)
    mark_followed (sl->filler);
}

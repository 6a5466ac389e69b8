/* gmblock-cache filter: the sharded block table.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A block is found by hashing its number to a shard, then to a bucket
 * chain inside the shard.  Each shard owns a fixed range of slots, its
 * own 2Q lists and its own free list, so two blocks in different
 * shards never share a lock.  A shard lock is held only to look at or
 * change slot state; I/O and copies run with it dropped, protected by
 * holds on the slot:
 *   excl    one owner: the thread filling it, or a writer changing it;
 *   shared  readers copying out, and a write-back in flight (so data is
 *           never changed while it is being written below).
 * Anyone who must wait sleeps on the shard's condition variable and
 * looks again from the start, because the slot may have been reused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "sizes.h"

#define NONE GM_2Q_NONE
#define VICTIM_SCAN 64          /* busy entries skipped when evicting */

struct table tbl;

static inline uint64_t
mix (uint64_t b)
{
  return b * UINT64_C (0x9E3779B97F4A7C15);
}

struct shard *
shard_of (uint64_t b)
{
  return &tbl.shards[(mix (b) >> 40) & (tbl.nshards - 1)];
}

static inline uint32_t *
bucket_of (struct shard *sh, uint64_t b)
{
  return &sh->bucket[(mix (b) >> 20) & sh->mask];
}

uint32_t
find_slot (struct shard *sh, uint64_t b)
{
  uint32_t s = *bucket_of (sh, b);
  while (s != NONE && tbl.slots[s].blk != b)
    s = tbl.slots[s].hnext;
  return s;
}

void
shard_wait (struct shard *sh)
{
  sh->waiters++;
  pthread_cond_wait (&sh->cond, &sh->lock);
  sh->waiters--;
}

void
shard_wake (struct shard *sh)
{
  if (sh->waiters)
    pthread_cond_broadcast (&sh->cond);
}

int
blocks_init (char *err, size_t errlen)
{
  uint64_t bs = cfg.block_size;
  uint32_t per;

  tbl.bs = bs;
  tbl.shift = __builtin_ctzll (bs);
  tbl.nblocks = (lower.size + bs - 1) / bs;
  tbl.nslots = cfg.size / bs;
  tbl.mem = gm_pool_get (tbl.pool, (size_t) tbl.nslots * bs);
  if (tbl.mem == NULL) {
    snprintf (err, errlen, "cannot take %u blocks from the cache pool",
              tbl.nslots);
    return -1;
  }
  /* Up to 64 shards, never fewer than 16 slots each, so that every
   * shard can still choose a victim that is not busy.
   */
  tbl.nshards = 64;
  while (tbl.nshards > 1 && tbl.nslots / tbl.nshards < 16)
    tbl.nshards /= 2;
  tbl.slots = calloc (tbl.nslots, sizeof *tbl.slots);
  tbl.shards = aligned_alloc (64, sizeof *tbl.shards * tbl.nshards);
  if (tbl.slots == NULL || tbl.shards == NULL) {
    snprintf (err, errlen, "out of memory for the block table");
    return -1;
  }
  /* All zero first: blocks_free after a failure part-way then finds
   * the shards not reached empty (a zero mutex is an initialised one). */
  memset (tbl.shards, 0, sizeof *tbl.shards * tbl.nshards);
  per = tbl.nslots / tbl.nshards;
  for (uint32_t k = 0; k < tbl.nshards; k++) {
    struct shard *sh = &tbl.shards[k];
    uint32_t n = k == tbl.nshards - 1 ? tbl.nslots - per * k : per;
    uint32_t nb = gm_next_power_of_2 (n);

    pthread_mutex_init (&sh->lock, NULL);
    pthread_cond_init (&sh->cond, NULL);
    sh->base = per * k;
    sh->nslots = n;
    sh->mask = nb - 1;
    sh->bucket = malloc (sizeof (uint32_t) * nb);
    /* 2Q's suggested sizes: A1in a quarter of the slots; the ghost
     * history is larger than 2Q's half because adaptive mode also
     * remembers blocks it declined to cache.
     */
    if (sh->bucket == NULL ||
        gm_2q_init (&sh->q, n, n / 4, 2 * n) == -1) {
      snprintf (err, errlen, "out of memory for the block table");
      return -1;
    }
    for (uint32_t i = 0; i < nb; i++)
      sh->bucket[i] = NONE;
    sh->free_head = NONE;
    for (uint32_t i = n; i-- > 0; ) {
      struct slot *sl = &tbl.slots[sh->base + i];
      sl->blk = UINT64_MAX;
      sl->state = S_FREE;
      sl->hnext = sh->free_head;
      sh->free_head = sh->base + i;
    }
  }
  return 0;
}

void
blocks_free (void)
{
  for (uint32_t k = 0; tbl.shards && k < tbl.nshards; k++) {
    gm_2q_free (&tbl.shards[k].q);
    free (tbl.shards[k].bucket);
    pthread_mutex_destroy (&tbl.shards[k].lock);
    pthread_cond_destroy (&tbl.shards[k].cond);
  }
  free (tbl.shards);
  free (tbl.slots);
  if (tbl.mem)
    gm_pool_put (tbl.pool, tbl.mem, (size_t) tbl.nslots * tbl.bs);
  gm_pool_destroy (tbl.pool);
  memset (&tbl, 0, sizeof tbl);
}

static void
hash_remove (struct shard *sh, uint32_t s)
{
  uint32_t *l = bucket_of (sh, tbl.slots[s].blk);
  while (*l != s)
    l = &tbl.slots[*l].hnext;
  *l = tbl.slots[s].hnext;
}

/* Forget a resident slot and put it on the free list. */
static void
drop_slot (struct shard *sh, uint32_t s)
{
  struct slot *sl = &tbl.slots[s];

  hash_remove (sh, s);
  gm_2q_remove (&sh->q, s - sh->base);
  if (sl->dirty) {
    sh->ndirty--;
    atomic_fetch_sub (&tbl.ndirty, 1);
  }
  *sl = (struct slot) { .blk = UINT64_MAX, .state = S_FREE,
                        .hnext = sh->free_head };
  sh->free_head = s;
}

static bool
idle_clean (uint32_t ls, void *opaque)
{
  struct shard *sh = opaque;
  struct slot *sl = &tbl.slots[sh->base + ls];
  return sl->state == S_VALID && !sl->excl && !sl->shared && !sl->dirty;
}

static bool
idle (uint32_t ls, void *opaque)
{
  struct shard *sh = opaque;
  struct slot *sl = &tbl.slots[sh->base + ls];
  return sl->state == S_VALID && !sl->excl && !sl->shared;
}

enum take { TAKEN, RETRY, FAILED };

/* Find a free slot, evicting if needed.  Called with the lock held.
 * RETRY means the lock was dropped on the way (a dirty victim was
 * written back, or everything was busy and we waited): the caller must
 * look its block up again.
 */
static enum take
take_slot (struct shard *sh, uint32_t *out, int *err)
{
  uint32_t v;

  if (sh->free_head == NONE) {
    v = gm_2q_victim (&sh->q, idle_clean, sh, VICTIM_SCAN);
    if (v != NONE) {
      struct slot *sl = &tbl.slots[sh->base + v];
      /* Leaving A1in unreferenced: remember it, so a second reference
       * soon after is recognised (and the block goes to Am).
       */
      if (gm_2q_where (&sh->q, v) == GM_2Q_A1IN)
        gm_2q_ghost_add (&sh->q, sl->blk, sl->filler << 1);
      drop_slot (sh, sh->base + v);
      CCOUNT (CS_EVICTIONS, 1);
    }
    else if ((v = gm_2q_victim (&sh->q, idle, sh, VICTIM_SCAN)) != NONE) {
      if (stripe_wb_evict (sh, sh->base + v, err) == -1)
        return FAILED;
      /* Counted once written back: a failed attempt made no room. */
      CCOUNT (CS_DIRTY_EVICTIONS, 1);
      return RETRY;
    }
    else {
      shard_wait (sh);
      return RETRY;
    }
  }
  *out = sh->free_head;
  sh->free_head = tbl.slots[*out].hnext;
  return TAKEN;
}

/* Make slot s resident for block b, held exclusively by the caller. */
static void
install (struct shard *sh, uint32_t s, uint64_t b, enum slot_state state,
         enum gm_2q_list list, uint32_t filler)
{
  struct slot *sl = &tbl.slots[s];
  uint32_t *l = bucket_of (sh, b);

  *sl = (struct slot) { .blk = b, .state = state, .excl = true,
                        .filler = filler, .hnext = *l };
  *l = s;
  gm_2q_insert (&sh->q, s - sh->base, list);
}

static int
fill (uint32_t s, uint64_t b, int *err)
{
  uint32_t len = blk_len (b);
  /* The slot is aligned pool memory and the offset a whole block: the
   * plugin's O_DIRECT read lands here with no bounce copy.
   */
  if (lower_pread (slot_mem (s), len, blk_off (b), err) == -1)
    return -1;
  CCOUNT (CS_FILLS, 1);
  CCOUNT (CS_FILL_BYTES, len);
  return 0;
}

int
block_read (struct conn *c, uint64_t b, uint32_t from, uint32_t to,
            char *dst, bool prefetch, bool scan, int *err)
{
  struct shard *sh = shard_of (b);
  int adm = -1, r;
  enum take t;
  uint32_t s;
  struct slot *sl;

  pthread_mutex_lock (&sh->lock);
  for (;;) {
    s = find_slot (sh, b);
    if (s != NONE) {
      sl = &tbl.slots[s];
      if (sl->excl) {
        CCOUNT (CS_FILL_WAITS, 1);
        shard_wait (sh);
        continue;
      }
      gm_2q_touch (&sh->q, s - sh->base);
      if (!prefetch) {
        policy_hit (c, sl, scan);
        CCOUNT (CS_HITS, 1);
        CCOUNT (CS_HIT_BYTES, to - from);
        if (scan)
          CCOUNT (CS_SCAN_HITS, 1);
      }
      if (dst == NULL)
        break;
      sl->shared++;
      pthread_mutex_unlock (&sh->lock);
      memcpy (dst, slot_mem (s) + from, to - from);
      CCOUNT (CS_MEMCPY_READ_BYTES, to - from);
      pthread_mutex_lock (&sh->lock);
      if (--sl->shared == 0)
        shard_wake (sh);
      break;
    }

    /* A miss.  Decide once: the ghost history is consumed by asking. */
    if (adm == -1) {
      adm = policy_admit (c, b, scan, prefetch, sh);
      if (!prefetch) {
        CCOUNT (CS_MISSES, 1);
        if (scan)
          CCOUNT (CS_SCAN_MISSES, 1);
      }
    }
    if (adm == ADMIT_NO) {
      pthread_mutex_unlock (&sh->lock);
      return 0;
    }
    t = take_slot (sh, &s, err);
    if (t == FAILED) {
      /* Every victim is dirty and cannot be written back (the disk
       * fails writes).  This block is healthy and not dirty: serve it
       * from below rather than fail it with a victim's error.
       */
      CCOUNT (CS_NO_SLOT, 1);
      pthread_mutex_unlock (&sh->lock);
      return 0;
    }
    if (t == RETRY)
      continue;
    install (sh, s, b, S_FILLING,
             adm == ADMIT_AM ? GM_2Q_AM : GM_2Q_A1IN, c ? c->id : 0);
    sl = &tbl.slots[s];
    pthread_mutex_unlock (&sh->lock);

    r = fill (s, b, err);
    if (r == 0 && dst) {
      memcpy (dst, slot_mem (s) + from, to - from);
      CCOUNT (CS_MEMCPY_READ_BYTES, to - from);
    }

    pthread_mutex_lock (&sh->lock);
    if (r == -1 || sl->stale) {
      /* A write went below while we read: our copy may be older, so it
       * only serves this (concurrent) read and is not kept.
       */
      if (sl->stale)
        CCOUNT (CS_STALE_FILLS, 1);
      drop_slot (sh, s);
    }
    else {
      sl->state = S_VALID;
      sl->excl = false;
    }
    shard_wake (sh);
    if (r == -1)
      goto fail;
    break;
  }
  pthread_mutex_unlock (&sh->lock);
  return 1;

 fail:
  pthread_mutex_unlock (&sh->lock);
  return -1;
}

/* Write [from, to) of block b below, then update any copy a reader
 * brought in meanwhile (the caller's range lock keeps other writers out).
 */
static int
write_through (uint64_t b, uint32_t from, uint32_t to, const char *src,
               int *err)
{
  if (lower_pwrite (src, to - from, blk_off (b) + from, 0, err) == -1) {
    blocks_forget_range (b, b);
    return -1;
  }
  block_update (b, from, to, src, false);
  return 0;
}

int
block_write_back (uint64_t b, uint32_t from, uint32_t to, const char *src,
                  int *err)
{
  struct shard *sh = shard_of (b);
  uint32_t s, len = blk_len (b);
  struct slot *sl;
  enum take t;
  int r = 0;                    /* the I/O's result only: 0 or -1 */

  pthread_mutex_lock (&sh->lock);
  for (;;) {
    s = find_slot (sh, b);
    if (s != NONE) {
      sl = &tbl.slots[s];
      /* Never change data being copied out or written below. */
      if (sl->excl || sl->shared) {
        shard_wait (sh);
        continue;
      }
      sl->excl = true;
      gm_2q_touch (&sh->q, s - sh->base);
      pthread_mutex_unlock (&sh->lock);
      break;
    }
    t = take_slot (sh, &s, err);
    if (t == FAILED) {
      /* No clean slot can be had: write this piece through below, so it
       * succeeds or fails on its own merits, not a victim's.
       */
      CCOUNT (CS_NO_SLOT, 1);
      pthread_mutex_unlock (&sh->lock);
      return write_through (b, from, to, src, err);
    }
    if (t == RETRY)
      continue;
    install (sh, s, b, S_FILLING,
             gm_2q_ghost_take (&sh->q, b, NULL) ? GM_2Q_AM : GM_2Q_A1IN, 0);
    sl = &tbl.slots[s];
    pthread_mutex_unlock (&sh->lock);
    if (from > 0 || to < len) {
      /* Partial write of a block we do not have: its other bytes must
       * come from below before it can be written back whole.
       */
      CCOUNT (CS_WRITE_FILLS, 1);
      if (fill (s, b, err) == -1) {
        pthread_mutex_lock (&sh->lock);
        drop_slot (sh, s);
        shard_wake (sh);
        r = -1;
        goto out;
      }
    }
    break;
  }

  memcpy (slot_mem (s) + from, src, to - from);
  CCOUNT (CS_MEMCPY_WRITE_BYTES, to - from);

  pthread_mutex_lock (&sh->lock);
  sl->state = S_VALID;
  if (!sl->dirty) {
    sl->dirty = true;
    sl->dirtied = dirty_clock ();
    sh->ndirty++;
    atomic_fetch_add (&tbl.ndirty, 1);
  }
  sl->excl = false;
  shard_wake (sh);
 out:
  pthread_mutex_unlock (&sh->lock);
  return r;
}

void
block_update (uint64_t b, uint32_t from, uint32_t to, const char *src,
              bool allocate)
{
  struct shard *sh = shard_of (b);
  uint32_t s;
  struct slot *sl;
  int err;

  pthread_mutex_lock (&sh->lock);
  for (;;) {
    s = find_slot (sh, b);
    if (s != NONE) {
      sl = &tbl.slots[s];
      if (sl->state == S_FILLING) {
        sl->stale = true;       /* the filler drops it */
        break;
      }
      if (sl->excl || sl->shared) {
        shard_wait (sh);
        continue;
      }
      sl->excl = true;
      gm_2q_touch (&sh->q, s - sh->base);
    }
    else {
      if (!allocate)
        break;
      /* No dirty blocks in these modes, so taking a slot cannot fail. */
      enum take t = take_slot (sh, &s, &err);
      if (t == RETRY)
        continue;
      if (t == FAILED)
        break;
      install (sh, s, b, S_VALID,
               gm_2q_ghost_take (&sh->q, b, NULL) ? GM_2Q_AM : GM_2Q_A1IN, 0);
      sl = &tbl.slots[s];
    }
    pthread_mutex_unlock (&sh->lock);
    memcpy (slot_mem (s) + from, src, to - from);
    CCOUNT (CS_MEMCPY_WRITE_BYTES, to - from);
    pthread_mutex_lock (&sh->lock);
    sl->excl = false;
    shard_wake (sh);
    break;
  }
  pthread_mutex_unlock (&sh->lock);
}

/* Call visit() on every resident block of [b0, b1] with its shard
 * locked; visit returns false when it waited (dropping the lock), and
 * is then called again if the block is still resident.
 */
void
visit_range (uint64_t b0, uint64_t b1,
             bool (*visit) (struct shard *sh, uint32_t s, void *opaque),
             void *opaque)
{
  if (b1 >= tbl.nblocks)
    b1 = tbl.nblocks - 1;
  if (b0 > b1)
    return;
  if (b1 - b0 < tbl.nslots) {
    for (uint64_t b = b0; ; b++) {
      struct shard *sh = shard_of (b);
      uint32_t s;
      pthread_mutex_lock (&sh->lock);
      while ((s = find_slot (sh, b)) != NONE && !visit (sh, s, opaque))
        ;
      pthread_mutex_unlock (&sh->lock);
      if (b == b1)
        break;
    }
    return;
  }
  /* A range larger than the cache: walk the slots instead. */
  for (uint32_t k = 0; k < tbl.nshards; k++) {
    struct shard *sh = &tbl.shards[k];
    pthread_mutex_lock (&sh->lock);
    for (uint32_t s = sh->base; s < sh->base + sh->nslots; s++) {
      uint64_t b = tbl.slots[s].blk;
      if (tbl.slots[s].state == S_FREE || b < b0 || b > b1)
        continue;
      while (!visit (sh, s, opaque) &&
             tbl.slots[s].state != S_FREE && tbl.slots[s].blk == b)
        ;
    }
    pthread_mutex_unlock (&sh->lock);
  }
}

static bool
hold_one (struct shard *sh, uint32_t s, void *opaque)
{
  struct slot *sl = &tbl.slots[s];

  if (sl->state == S_FILLING) {
    sl->stale = true;
    return true;
  }
  if (sl->held_by_range)
    return true;
  if (sl->excl || sl->shared) {
    shard_wait (sh);
    return false;
  }
  sl->excl = true;
  sl->held_by_range = true;
  return true;
}

void
blocks_hold_range (uint64_t b0, uint64_t b1)
{
  visit_range (b0, b1, hold_one, NULL);
}

struct release_args {
  uint64_t off, len;
  bool ok, keep_dirty;
};

static bool
release_one (struct shard *sh, uint32_t s, void *opaque)
{
  struct release_args *a = opaque;
  struct slot *sl = &tbl.slots[s];
  uint64_t start = blk_off (sl->blk), end = start + blk_len (sl->blk);
  uint64_t lo = a->off > start ? a->off : start;
  uint64_t hi = a->off + a->len < end ? a->off + a->len : end;

  if (sl->state == S_FILLING) {
    sl->stale = true;
    return true;
  }
  if (sl->held_by_range) {
    sl->held_by_range = false;
    sl->excl = false;
    if (!a->ok && sl->dirty) {
      shard_wake (sh);
      return true;
    }
    if (a->ok && sl->dirty && (a->keep_dirty || lo > start || hi < end)) {
      /* Dirty and partly covered: the bytes outside the range exist
       * only here, so keep the block and zero the covered part.  A
       * trim keeps even a wholly covered dirty block (zeroed): dropping
       * it would bring back the older data on the disk whenever the
       * trim below did not unmap (discard=ignore, partial blocks of a
       * device, a medium that cannot discard).
       */
      memset (slot_mem (s) + (lo - start), 0, hi - lo);
      shard_wake (sh);
      return true;
    }
    CCOUNT (CS_INVALIDATIONS, 1);
    drop_slot (sh, s);
    shard_wake (sh);
    return true;
  }
  /* Filled by a reader while the operation ran below: it may hold the
   * old contents.
   */
  if (sl->dirty)
    return true;
  if (sl->excl || sl->shared) {
    shard_wait (sh);
    return false;
  }
  CCOUNT (CS_INVALIDATIONS, 1);
  drop_slot (sh, s);
  shard_wake (sh);              /* a free slot: someone may wait for one */
  return true;
}

void
blocks_release_range (uint64_t b0, uint64_t b1, uint64_t off, uint64_t len,
                      bool ok, bool keep_dirty)
{
  struct release_args a = { off, len, ok, keep_dirty };
  visit_range (b0, b1, release_one, &a);
}

void
blocks_forget_range (uint64_t b0, uint64_t b1)
{
  blocks_hold_range (b0, b1);
  blocks_release_range (b0, b1, 0, 0, false, false);
}

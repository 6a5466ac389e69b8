/* gmblock: sequential stream detection and readahead windows.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <string.h>

#include "seqstream.h"
#include "sizes.h"

void
gm_seq_init (struct gm_seq_table *t, struct gm_seq_stream *streams,
             unsigned n, const struct gm_seq_config *cfg)
{
  memset (t, 0, sizeof *t);
  memset (streams, 0, n * sizeof *streams);
  t->cfg = *cfg;
  t->s = streams;
  t->n = n;
  t->next_win_id = 1;
}

uint64_t
gm_seq_first_window (const struct gm_seq_config *c, uint32_t len)
{
  uint64_t w = gm_next_power_of_2 ((uint64_t) len * 4);

  if (w < c->ra_min)
    w = c->ra_min;
  if (w > c->ra_max)
    w = c->ra_max;
  return w;
}

static inline uint64_t
overlap (uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
  uint64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
  return hi > lo ? hi - lo : 0;
}

static inline uint64_t
slack_for (const struct gm_seq_config *c, uint32_t len)
{
  uint64_t s = (uint64_t) len * c->slack_reqs;
  return s > c->slack_min ? s : c->slack_min;
}

/* Close a window's ledger: every byte it was queued for is classified
 * exactly once, then the slot is free.
 */
static void
retire (struct gm_seq_table *t, struct gm_seq_window *w)
{
  struct gm_seq_ledger *l = &t->ledger;
  /* Invalidated and failed bytes are counted already; together they
   * never exceed issued (gm_seq_invalidate, gm_seq_done).
   */
  uint64_t valid = w->issued - w->invalidated - w->failed;
  uint64_t useful = w->consumed < valid ? w->consumed : valid;

  l->useful += useful;
  l->wasted += valid - useful;
  l->cancelled += w->len - w->issued;
  memset (w, 0, sizeof *w);
}

static void
retire_if_finished (struct gm_seq_table *t, struct gm_seq_stream *s,
                    struct gm_seq_window *w)
{
  if (w->state == GM_WIN_QUEUED && w->pieces_left == 0) {
    retire (t, w);    /* every piece was skipped */
    return;
  }
  if (w->state != GM_WIN_DONE)
    return;
  /* Read, passed, orphaned, or nothing in it was prefetched. */
  if (w->orphan || w->failed == w->issued || w->consumed >= w->issued ||
      s->next >= w->start + w->len + t->cfg.slack_min)
    retire (t, w);
}

/* Windows with pieces in flight stay, orphaned, until those complete
 * (so that a failure still counts the piece's bytes); their other
 * pieces are skipped.  The rest are retired.
 */
static void
reset_stream (struct gm_seq_table *t, struct gm_seq_stream *s,
              uint64_t offset, uint32_t len)
{
  struct gm_seq_window keep[GM_SEQ_WINDOWS];
  unsigned nkeep = 0;

  for (unsigned i = 0; i < GM_SEQ_WINDOWS; i++) {
    struct gm_seq_window *w = &s->win[i];
    if (w->state == GM_WIN_FREE)
      continue;
    if (w->inflight_pieces > 0) {
      w->orphan = true;
      keep[nkeep++] = *w;
    }
    else
      retire (t, w);
  }
  memset (s, 0, sizeof *s);
  memcpy (s->win, keep, nkeep * sizeof *keep);
  s->live = true;
  s->next = offset + len;
  s->run = len;
  s->last_use = t->tick;
}

static bool
replaceable (const struct gm_seq_table *t, const struct gm_seq_stream *s)
{
  return s->hits < t->cfg.confirm || t->tick - s->last_use > t->cfg.stale_ticks;
}

/* A free slot; else the least recently used candidate or idle stream;
 * else the least recently used of all.  Sequential streams therefore
 * survive a storm of random reads that only churns candidates.
 */
static unsigned
pick_victim (const struct gm_seq_table *t)
{
  unsigned lru = 0, lru_weak = t->n;

  for (unsigned i = 0; i < t->n; i++) {
    const struct gm_seq_stream *s = &t->s[i];
    if (!s->live)
      return i;
    if (s->last_use < t->s[lru].last_use)
      lru = i;
    if (replaceable (t, s) &&
        (lru_weak == t->n || s->last_use < t->s[lru_weak].last_use))
      lru_weak = i;
  }
  return lru_weak < t->n ? lru_weak : lru;
}

/* Candidates must be continued closely (a few request sizes): random
 * reads landing near each other by chance then almost never confirm
 * one.  Confirmed streams tolerate the wider reordering of deep queues.
 */
static int
find_stream (const struct gm_seq_table *t, uint64_t offset, uint32_t len)
{
  uint64_t wide = slack_for (&t->cfg, len), best_dist = UINT64_MAX;
  uint64_t close = (uint64_t) len * GM_SEQ_CANDIDATE_REQS;
  int best = -1;

  for (unsigned i = 0; i < t->n; i++) {
    const struct gm_seq_stream *s = &t->s[i];
    uint64_t dist, slack = s->hits < t->cfg.confirm ? close : wide;
    if (!s->live || offset + slack < s->next || offset > s->next + slack)
      continue;
    dist = offset > s->next ? offset - s->next : s->next - offset;
    if (dist < best_dist) {
      best_dist = dist;
      best = i;
    }
  }
  return best;
}

/* Trim [*start, *start + *len) to what no live window of another
 * stream already covers.  Returns the bytes trimmed.
 */
static uint64_t
dedup (const struct gm_seq_table *t, unsigned self, uint64_t *start,
       uint64_t *len)
{
  uint64_t trimmed = 0;
  bool changed = true;

  while (changed && *len > 0) {
    changed = false;
    for (unsigned i = 0; i < t->n && *len > 0; i++) {
      if (i == self || !t->s[i].live)
        continue;
      for (unsigned j = 0; j < GM_SEQ_WINDOWS && *len > 0; j++) {
        const struct gm_seq_window *w = &t->s[i].win[j];
        uint64_t a = *start, b = *start + *len;
        uint64_t wa = w->start, wb = w->start + w->len;
        /* An orphan's queued pieces will be skipped: it covers nothing. */
        if (w->state == GM_WIN_FREE || w->orphan || overlap (a, b, wa, wb) == 0)
          continue;
        if (wa <= a) {          /* covers the front (or all) */
          uint64_t cut = (wb < b ? wb : b) - a;
          *start += cut;
          *len -= cut;
          trimmed += cut;
        }
        else if (wb >= b) {     /* covers the back */
          trimmed += b - wa;
          *len = wa - a;
        }
        else                    /* inside: cutting there would leave
                                 * [wb, b) never prefetched */
          continue;
        changed = true;
      }
    }
  }
  return trimmed;
}

static struct gm_seq_window *
free_slot (struct gm_seq_stream *s)
{
  for (unsigned i = 0; i < GM_SEQ_WINDOWS; i++)
    if (s->win[i].state == GM_WIN_FREE)
      return &s->win[i];
  return NULL;
}

static uint32_t
new_id (struct gm_seq_table *t)
{
  if (t->next_win_id == 0)      /* 0 is never an id */
    t->next_win_id++;
  return t->next_win_id++;
}

/* A slot for a new window; when all are taken, the oldest completed
 * window is retired to make room.
 */
static struct gm_seq_window *
free_window (struct gm_seq_table *t, struct gm_seq_stream *s)
{
  struct gm_seq_window *oldest = NULL;

  for (unsigned i = 0; i < GM_SEQ_WINDOWS; i++) {
    struct gm_seq_window *w = &s->win[i];
    if (w->state == GM_WIN_FREE)
      return w;
    if (w->state == GM_WIN_DONE && (oldest == NULL || w->start < oldest->start))
      oldest = w;
  }
  if (oldest)
    retire (t, oldest);
  return oldest;
}

bool
gm_seq_read (struct gm_seq_table *t, uint64_t offset, uint32_t len,
             uint64_t room, struct gm_seq_issue *issue)
{
  const struct gm_seq_config *c = &t->cfg;
  uint64_t end = offset + len, size, start, wlen;
  struct gm_seq_stream *s;
  struct gm_seq_window *w;
  int i;

  t->tick++;
  i = find_stream (t, offset, len);
  if (i < 0) {
    reset_stream (t, &t->s[pick_victim (t)], offset, len);
    return false;
  }
  s = &t->s[i];
  s->hits++;
  s->run += len;
  s->last_use = t->tick;
  if (end > s->next)
    s->next = end;
  t->seq_reads++;

  for (unsigned j = 0; j < GM_SEQ_WINDOWS; j++) {
    w = &s->win[j];
    if (w->state == GM_WIN_INFLIGHT || w->state == GM_WIN_DONE) {
      w->consumed += overlap (offset, end, w->start, w->start + w->len);
      if (w->consumed > w->len)
        w->consumed = w->len;
    }
    retire_if_finished (t, s, w);
  }

  if (s->hits < c->confirm)
    return false;
  if (!s->detected) {
    s->detected = true;
    t->detected++;
  }

  if (s->win_size == 0 || s->next > s->pf_end) {
    /* First window, or the reader outran the prefetch. */
    size = s->win_size ? s->win_size : gm_seq_first_window (c, len);
    start = gm_round_up (s->next, c->align);
  }
  else if (s->next > s->trigger) {
    size = s->win_size * 2 > c->ra_max ? c->ra_max : s->win_size * 2;
    start = s->pf_end;
  }
  else
    return false;

  if (start >= c->size)
    return false;
  wlen = size;
  if (wlen > c->size - start)
    wlen = c->size - start;
  if (wlen > room) {
    wlen = gm_round_down (room, c->align);
    if (wlen == 0)
      return false;             /* the queue is full: try again later */
  }
  w = free_window (t, s);
  if (w == NULL)
    return false;               /* all windows still in flight */

  s->win_size = size;
  s->pf_end = start + wlen;
  s->trigger = start;

  issue->stream = i;
  issue->win = NULL;
  issue->dedup = dedup (t, i, &start, &wlen);
  issue->start = start;
  issue->len = wlen;
  if (wlen == 0)
    return true;                /* another stream prefetches all of it */
  w->state = GM_WIN_QUEUED;
  w->start = start;
  w->len = wlen;
  w->id = new_id (t);
  issue->win = w;
  t->ledger.queued += wlen;
  return true;
}

static struct gm_seq_window *
lookup (struct gm_seq_table *t, unsigned stream, uint32_t id,
        struct gm_seq_stream **sp)
{
  struct gm_seq_stream *s;

  if (stream >= t->n)
    return NULL;
  s = &t->s[stream];
  for (unsigned i = 0; i < GM_SEQ_WINDOWS; i++)
    if (s->win[i].state != GM_WIN_FREE && s->win[i].id == id) {
      *sp = s;
      return &s->win[i];
    }
  return NULL;
}

bool
gm_seq_claim (struct gm_seq_table *t, unsigned stream, uint32_t id,
              uint64_t piece_off, uint64_t piece_len)
{
  struct gm_seq_stream *s;
  struct gm_seq_window *w = lookup (t, stream, id, &s);

  if (w == NULL)
    return false;               /* dropped: already accounted */
  if (w->orphan || s->next >= piece_off + piece_len ||
      t->tick - s->last_use > t->cfg.stale_ticks) {
    /* The reader got there first, or went away. */
    w->skipped += piece_len;
    w->pieces_left--;
    if (w->pieces_left == 0 && w->state == GM_WIN_INFLIGHT)
      w->state = GM_WIN_DONE;
    retire_if_finished (t, s, w);
    return false;
  }
  w->issued += piece_len;
  w->inflight += piece_len;
  w->inflight_pieces++;
  w->state = GM_WIN_INFLIGHT;
  return true;
}

void
gm_seq_done (struct gm_seq_table *t, unsigned stream, uint32_t id,
             uint64_t piece_len, enum gm_seq_outcome how)
{
  struct gm_seq_stream *s;
  struct gm_seq_window *w = lookup (t, stream, id, &s);

  if (w == NULL)
    return;
  if (w->inflight_pieces > 0) {
    uint64_t len = piece_len < w->inflight ? piece_len : w->inflight;
    w->inflight -= len;
    w->inflight_pieces--;
    if (how != GM_SEQ_OK) {
      /* Bytes that failed were never prefetched, so a write cannot have
       * invalidated them: take back what would count them twice.  The
       * window holds aborted bytes as failed too (neither is valid);
       * the ledger calls them cancelled.
       */
      if (w->invalidated + w->failed + len > w->issued) {
        uint64_t over = w->invalidated + w->failed + len - w->issued;
        w->invalidated -= over;
        t->ledger.invalidated -= over;
      }
      w->failed += len;
      if (how == GM_SEQ_ABORTED)
        t->ledger.cancelled += len;
      else
        t->ledger.failed += len;
    }
  }
  w->pieces_left--;
  if (w->pieces_left == 0)
    w->state = GM_WIN_DONE;
  retire_if_finished (t, s, w);
}

/* Whether a newer window of s than w (a refill queued by an earlier
 * write) covers [a, b): that window stands for those blocks now.
 */
static bool
superseded (const struct gm_seq_stream *s, const struct gm_seq_window *w,
            uint64_t a, uint64_t b)
{
  for (unsigned k = 0; k < GM_SEQ_WINDOWS; k++) {
    const struct gm_seq_window *o = &s->win[k];
    if (o != w && o->state != GM_WIN_FREE && !o->orphan &&
        (int32_t) (o->id - w->id) > 0 && o->start <= a && o->start + o->len >= b)
      return true;
  }
  return false;
}

unsigned
gm_seq_invalidate (struct gm_seq_table *t, uint64_t offset, uint64_t len,
                   uint64_t room, struct gm_seq_issue *refill,
                   unsigned max_refill, uint64_t *dropped)
{
  uint64_t end = offset + len, align = t->cfg.align;
  unsigned n = 0;

  *dropped = 0;
  for (unsigned i = 0; i < t->n; i++) {
    struct gm_seq_stream *s = &t->s[i];
    if (!s->live)
      continue;
    for (unsigned j = 0; j < GM_SEQ_WINDOWS; j++) {
      struct gm_seq_window *w = &s->win[j], *nw;
      uint64_t we = w->start + w->len, a, b, v, cost;

      /* Queued windows will read the new data anyway; what the reader
       * has passed no longer matters.
       */
      if ((w->state != GM_WIN_INFLIGHT && w->state != GM_WIN_DONE) ||
          w->orphan)
        continue;
      a = offset > w->start ? offset : w->start;
      if (a < s->next)
        a = s->next;
      b = end < we ? end : we;
      /* Pieces are claimed in queue order: those not claimed yet are
       * sent after this write and read its data (a review finding: they
       * were counted invalidated and fetched twice). */
      if (w->state == GM_WIN_INFLIGHT &&
          b > w->start + w->issued + w->skipped)
        b = w->start + w->issued + w->skipped;
      if (b <= a)
        continue;
      a = gm_round_down (a, align);
      if (a < w->start)
        a = w->start;
      b = gm_round_up (b, align);
      if (b > we)
        b = we;
      /* Invalidated and queued again by an earlier write: counting
       * them again, and queueing one more refill for every write to
       * the same block, filled the stream's window slots (later writes
       * then got no refill) and made the counters lie.
       */
      if (superseded (s, w, a, b))
        continue;
      v = b - a;
      if (v > w->issued - w->invalidated - w->failed)
        v = w->issued - w->invalidated - w->failed;
      w->invalidated += v;
      t->ledger.invalidated += v;
      *dropped += v;
      /* Fetch the changed blocks again, if there is room right now.
       * Each refill is queued as whole pieces: charge it that much, or
       * several small refills overrun the caller's queue.
       */
      cost = t->cfg.piece ? gm_round_up (b - a, t->cfg.piece) : b - a;
      if (n == max_refill || cost > room || (nw = free_slot (s)) == NULL)
        continue;
      nw->state = GM_WIN_QUEUED;
      nw->start = a;
      nw->len = b - a;
      nw->id = new_id (t);
      t->ledger.queued += b - a;
      room -= cost;
      refill[n++] = (struct gm_seq_issue) {
        .stream = i, .win = nw, .start = a, .len = b - a,
      };
    }
  }
  return n;
}

void
gm_seq_retire_all (struct gm_seq_table *t)
{
  for (unsigned i = 0; i < t->n; i++)
    for (unsigned j = 0; j < GM_SEQ_WINDOWS; j++)
      if (t->s[i].win[j].state != GM_WIN_FREE)
        retire (t, &t->s[i].win[j]);
}

/* gmblock: which acknowledged writes a FLUSH can still cover.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * See unflushed.h for the rule.  Acknowledgements are numbered 1, 2,
 * ... in the order they arrive; a set of them is kept as a range
 * (lo, hi], the numbers above lo up to hi.  Each loss is such a range
 * with a generation, 1, 2, ... in the order the losses happened (a
 * late reply from a replaced instance makes a range above live
 * writes, so the ranges are not in order of their numbers): what a
 * connection has reported is a generation, all losses up to it.
 */
#include <pthread.h>
#include <string.h>

#include "unflushed.h"

#define NONE UINT64_MAX
#define MAX_LOSSES 32

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gm_unflushed *all;        /* the open connections */
static uint64_t current;        /* the server instance now (0: none yet) */
static bool multi_conn;         /* it offers multi-conn */
static uint64_t acked;          /* acknowledgements numbered so far */
static uint64_t mc_covered;     /* with multi-conn, FLUSHes covered to here */
static uint64_t begun;          /* the newest NBD FLUSH came at this count */
/* Closed connections' acknowledgements no FLUSH covered: in (lo, hi]. */
static uint64_t orphan_lo = NONE, orphan_hi;
static uint64_t seen;           /* losses up to this generation reported */
static uint64_t generations;    /* losses so far */
/* The losses, oldest first. */
static struct { uint64_t lo, hi, gen; } loss[MAX_LOSSES];
static unsigned nloss;

static void
add_loss (uint64_t lo, uint64_t hi)
{
  if (nloss == MAX_LOSSES) {
    /* Merge the two oldest into one that covers both, as new as the
     * newer: more counts as lost, or as unreported, never less. */
    if (loss[0].lo < loss[1].lo)
      loss[1].lo = loss[0].lo;
    if (loss[0].hi > loss[1].hi)
      loss[1].hi = loss[0].hi;
    memmove (loss, loss + 1, (MAX_LOSSES - 1) * sizeof loss[0]);
    nloss--;
  }
  loss[nloss].lo = lo;
  loss[nloss].hi = hi;
  loss[nloss].gen = ++generations;
  nloss++;
}

/* A FLUSH that came when its connection had reported the losses up to
 * generation 'after', and 'mark' writes were acknowledged: whether a
 * later loss took one of those (it must fail), and up to which
 * generation it reports them all (*upto).  A loss that also took
 * writes acknowledged after the FLUSH came is not all its to report:
 * the next FLUSH, which came after them, must fail too, so *upto stops
 * below it.
 */
static bool
must_fail (uint64_t after, uint64_t mark, uint64_t *upto)
{
  bool fail = false, gap = false;

  *upto = after;
  for (unsigned i = 0; i < nloss; i++) {
    if (loss[i].gen <= after)
      continue;
    if (loss[i].lo < mark)
      fail = true;
    if (loss[i].hi > mark)
      gap = true;
    else if (!gap)
      *upto = loss[i].gen;
  }
  return fail;
}

/* Up to where a connection's acknowledgements (or the closed ones')
 * are covered, given what its own FLUSHes covered.
 */
static uint64_t
effective_covered (uint64_t own)
{
  return multi_conn && mc_covered > own ? mc_covered : own;
}

/* The lowest lo such that every acknowledgement no FLUSH covered is in
 * (lo, acked]; NONE when there is none.
 */
static uint64_t
lowest_uncovered (void)
{
  uint64_t lo = NONE, c;

  for (struct gm_unflushed *u = all; u; u = u->next) {
    c = effective_covered (u->covered);
    if (u->hi > c && c < lo)
      lo = c;
  }
  c = orphan_lo == NONE ? NONE : effective_covered (orphan_lo);
  if (orphan_hi > c && c < lo)
    lo = c;
  return lo;
}

/* Acknowledgements in (lo, hi] go where a closed connection's go. */
static void
orphan_range (uint64_t lo, uint64_t hi)
{
  if (hi > lo) {
    if (lo < orphan_lo)
      orphan_lo = lo;
    if (hi > orphan_hi)
      orphan_hi = hi;
  }
}

/* What u's FLUSHes cover starts afresh, at every acknowledgement so
 * far; what they covered before is kept for replies that came before
 * and are counted only now (gm_uf_acked).  Under lock.
 */
static void
reset (struct gm_unflushed *u)
{
  u->reset_inst = current;
  u->reset_covered = effective_covered (u->covered);
  u->resets++;
  u->covered = acked;
}

/* u no longer answers for its acknowledgements: they were handed on
 * or counted lost.  Under lock.
 */
static void
forget (struct gm_unflushed *u)
{
  u->hi = 0;
  reset (u);
}

/* u's acknowledgements no FLUSH covered go where a closed
 * connection's go.  Under lock.
 */
static void
orphan (struct gm_unflushed *u)
{
  orphan_range (effective_covered (u->covered), u->hi);
  forget (u);
}

void
gm_uf_open (struct gm_unflushed *u)
{
  pthread_mutex_lock (&lock);
  u->hi = 0;
  u->covered = acked;           /* nothing of its own before it opened */
  u->resets = 0;
  u->reported = seen;           /* losses no FLUSH reported are its too */
  u->next = all;
  all = u;
  pthread_mutex_unlock (&lock);
}

void
gm_uf_close (struct gm_unflushed *u)
{
  pthread_mutex_lock (&lock);
  for (struct gm_unflushed **p = &all; *p; p = &(*p)->next)
    if (*p == u) {
      *p = u->next;
      break;
    }
  /* Still the server's to lose: a FLUSH on another connection may
   * cover them (multi-conn), a new instance loses them. */
  orphan (u);
  pthread_mutex_unlock (&lock);
}

uint64_t
gm_uf_connected (struct gm_unflushed *u, uint64_t instance, bool mc)
{
  uint64_t n = 0, lo;

  pthread_mutex_lock (&lock);
  /* Reconnected to the same instance without multi-conn: a new
   * connection on the server, whose FLUSHes do not cover the old one's
   * writes, and no other connection's can.  Those no FLUSH covered are
   * lost as far as a FLUSH can tell, though the process may still
   * write them: the next FLUSH fails, never succeeds without them. */
  if (instance == current && !multi_conn) {
    if (u->hi > u->covered) {
      n = u->hi - u->covered;
      add_loss (u->covered, u->hi);
    }
    forget (u);
  }
  if (instance != current && current != 0) {
    lo = lowest_uncovered ();
    if (lo != NONE) {
      n = acked - lo;
      add_loss (lo, acked);
    }
    /* Nothing left to cover: all of it was flushed or is lost. */
    for (struct gm_unflushed *u = all; u; u = u->next)
      reset (u);
    mc_covered = acked;
    orphan_lo = NONE;
    orphan_hi = 0;
  }
  current = instance;
  multi_conn = mc;
  pthread_mutex_unlock (&lock);
  return n;
}

void
gm_uf_reply (struct gm_unflushed *u, uint64_t instance, struct gm_uf_ack *a)
{
  pthread_mutex_lock (&lock);
  a->hi = ++acked;
  if (instance != current)
    a->late = true;
  a->last = instance;
  if (a->lo == 0) {
    a->lo = a->hi;
    a->instance = instance;
    a->resets = u->resets;
  }
  if (instance == a->instance)
    a->first_hi = a->hi;
  pthread_mutex_unlock (&lock);
}

void
gm_uf_acked (struct gm_unflushed *u, const struct gm_uf_ack *a)
{
  uint64_t n;
  bool lost;

  if (a->hi == 0)
    return;                     /* no reply that counts (FUA) */
  pthread_mutex_lock (&lock);
  /* An NBD FLUSH that came after the first reply, before the client
   * heard of the write, must not report its loss: then it is numbered
   * again, after that FLUSH's mark. */
  n = a->lo > begun ? a->hi : ++acked;
  lost = a->late;               /* a reply from a process already gone */
  if (a->instance == current && a->resets == u->resets) {
    /* Nothing happened since the first reply: covered, or still to. */
    if (a->hi > effective_covered (u->covered) && n > u->hi)
      u->hi = n;
  }
  else if (a->resets + 1 == u->resets && a->instance == u->reset_inst &&
           a->hi <= u->reset_covered)
    ;                           /* a FLUSH covered it before the reset */
  else if (a->resets + 1 == u->resets && a->instance == u->reset_inst &&
           a->first_hi <= u->reset_covered && a->last == current) {
    /* Its pieces before the restart were covered (a goodbye that
     * flushed), the others went to the process now, after the reset:
     * as a write acknowledged now, which u's FLUSHes cover from here. */
    if (n > u->hi)
      u->hi = n;
  }
  else if (a->instance == current)
    /* Its connection was replaced by another to the same process
     * (without multi-conn): no FLUSH can cover it any more, lost as
     * the old connection's others were (gm_uf_connected). */
    lost = true;
  else {
    lost = true;                /* from a process replaced since */
    if (a->last == current)
      /* Its last pieces went to this one, on a connection of u's that
       * may have been replaced since: as a closed one's. */
      orphan_range (a->lo - 1, n);
  }
  if (lost)
    add_loss (n - 1, n);
  pthread_mutex_unlock (&lock);
}

uint64_t
gm_uf_flush_sent (void)
{
  uint64_t mark;

  pthread_mutex_lock (&lock);
  mark = acked;
  pthread_mutex_unlock (&lock);
  return mark;
}

void
gm_uf_flush_done (struct gm_unflushed *u, uint64_t mark, uint64_t instance)
{
  pthread_mutex_lock (&lock);
  /* A replaced instance's flush covers nothing still counted: what it
   * did not cover was counted lost when it was replaced. */
  if (instance == current) {
    if (mark > u->covered)
      u->covered = mark;
    if (multi_conn && mark > mc_covered)
      mc_covered = mark;
  }
  pthread_mutex_unlock (&lock);
}

void
gm_uf_flush_begin (struct gm_unflushed *u, struct gm_uf_flush *f)
{
  pthread_mutex_lock (&lock);
  f->mark = begun = acked;
  f->reported = u->reported;
  pthread_mutex_unlock (&lock);
}

bool
gm_uf_flush_end (struct gm_unflushed *u, const struct gm_uf_flush *f)
{
  uint64_t upto;
  bool fail;

  pthread_mutex_lock (&lock);
  fail = must_fail (f->reported, f->mark, &upto);
  if (upto > u->reported)
    u->reported = upto;
  if (u->reported > seen)
    seen = u->reported;
  pthread_mutex_unlock (&lock);
  return fail;
}

uint64_t
gm_uf_uncovered (void)
{
  uint64_t lo, n;

  pthread_mutex_lock (&lock);
  lo = lowest_uncovered ();
  n = lo == NONE ? 0 : acked - lo;
  pthread_mutex_unlock (&lock);
  return n;
}

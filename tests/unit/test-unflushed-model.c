/* Randomized differential test for common/unflushed.c against a model
 * that keeps every acknowledged write exactly.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Must hold: gm_uf_flush_end returns true when a write acknowledged
 * before the NBD FLUSH began is lost and no NBD FLUSH that began after
 * the write's acknowledgement has ended returning true after the loss,
 * on this connection (or on any, for a connection opened after the
 * acknowledgement).  Else a false success: fatal, shrunk to a minimal
 * step list on a fresh module.  True where the model need not fail is a
 * false EIO: counted only.  The module's state is never reset: a batch
 * of step lists runs in one child, module and model carried over; each
 * list ends with a tail after which no write the model kept matters.
 */
#include <stdbool.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unflushed.h"
#include "unit.h"

#define NSLOT 4                 /* connections open at once, at most */
#define NFL 4                   /* NBD FLUSHes in flight on one, at most */
#define STEPS 200
#define SEQS 2000
#define TAIL (NSLOT + 5)
#define NSTEPS (STEPS + TAIL)
#define MAXW (NSTEPS << NFL)

enum { S_OPEN, S_CLOSE, S_CONN_SAME, S_CONN_NEW, S_ACK, S_LATE_ACK,
       S_F_BEGIN, S_F_SEND, S_F_OK, S_F_END, S_PIECE, S_W_OK, S_W_FAIL,
       S_NOPS };
static const char *const op_name[S_NOPS] = {
  "open", "close", "connect-same", "connect-new", "ack", "late-ack",
  "flush-begin", "flush-send", "flush-ok", "flush-end", "piece",
  "write-ok", "write-fail",
};
static const unsigned weight[S_NOPS] = { 6, 3, 4, 5, 25, 6, 14, 12, 10, 12,
                                         12, 4, 2 };

/* One step: the operation, its connection slot, k: which FLUSH in
 * flight (modulo how many), or 1 << k late acknowledgements; piece:
 * a reply to a piece of the connection's split write (k odd: from the
 * previous instance), write-ok/write-fail: that write acknowledged to
 * the NBD client, or failed (its pieces never count).  A step
 * that does not apply is skipped: any sub-list is a step list. */
struct step { uint8_t op, slot, k; };

struct result {                 /* bad: the first false success's step */
  int bad;
  unsigned ends, must, false_eio, bound_bad;
};

/* The reference model. */
struct write {                  /* conn: its connection (an id per open) */
  int conn;                     /* at: when; epoch: conn's connects by then */
  uint64_t inst, at, epoch, lost_at;
  bool covered, lost;
  bool pending, dropped;        /* a piece: its write not acknowledged yet,
                                 * or failed */
  bool extra;                   /* a piece after its write's first: the
                                 * module's counts are of writes */
  uint64_t arr;                 /* when its reply came (at, if no piece) */
};
struct report { int conn; uint64_t begin, end; };  /* ended returning true */
struct nbd_flush {
  struct gm_uf_flush f;
  uint64_t begin;               /* when it came to the bridge */
  int state;                    /* 0 not sent, 1 sent, 2 replied ok */
  uint64_t mark, sent, inst, epoch;  /* of its SEND */
};
struct slot {
  struct gm_unflushed u;
  bool open;
  int id, nf;
  uint64_t opened, inst, epoch; /* inst: instance connected to, 0 none */
  struct nbd_flush fl[NFL];
  struct gm_uf_ack ack;         /* its split write's pieces so far */
};

/* Counted by the module: acknowledged to the NBD client. */
static bool
counted (const struct write *w)
{
  return !w->pending && !w->dropped;
}


static struct write wr[MAXW];
static struct report rep[NSTEPS];
static int nwr, nrep;
static struct slot slots[NSLOT];

/* s's split write ends: acknowledged (ok) or failed. */
static void
end_write (struct slot *s, bool ok, uint64_t now)
{
  for (int j = 0; j < nwr; j++)
    if (wr[j].pending && wr[j].conn == s->id) {
      wr[j].pending = false;
      wr[j].dropped = !ok;
      wr[j].at = now;
    }
  if (ok)
    gm_uf_acked (&s->u, &s->ack);
  s->ack = (struct gm_uf_ack) { 0 };
}

/* Must the NBD FLUSH that began at 'begin' on s fail now? */
static bool
model_must (const struct slot *s, uint64_t begin)
{
  for (int i = 0; i < nwr; i++) {
    const struct write *w = &wr[i];
    bool reported = false;

    if (!counted (w) || !w->lost || w->at >= begin)
      continue;
    for (int j = 0; j < nrep && !reported; j++)   /* to s, or to all */
      reported = rep[j].begin > w->at && rep[j].end > w->lost_at &&
                 (rep[j].conn == s->id || s->opened > w->at);
    if (!reported)
      return true;
  }
  return false;
}

static void
end_flush (struct slot *s, int j, uint64_t now, int step, struct result *r)
{
  struct nbd_flush *fl = &s->fl[j];
  bool must = model_must (s, fl->begin);
  bool got = gm_uf_flush_end (&s->u, &fl->f);

  r->ends++, r->must += must, r->false_eio += got && !must;
  if (!got && must && r->bad < 0)
    r->bad = step;
  if (got)
    rep[nrep++] = (struct report) { s->id, fl->begin, now };
  s->fl[j] = s->fl[--s->nf];
}

/* Time (one tick a step), the server instance now (0: none yet), the
 * connections opened so far: these carry over from one step list to
 * the next, as the module's state does. */
static uint64_t now, cur;
static int ids;

/* Run one step list on the module as it is. */
static void
run (const struct step *st, int n, bool mc, struct result *r)
{
  *r = (struct result) { .bad = -1 };
  for (int i = 0; i < n; i++) {
    struct slot *s = &slots[st[i].slot % NSLOT];
    struct nbd_flush *fl = s->nf ? &s->fl[st[i].k % s->nf] : NULL;
    uint64_t inst, lost = 0, unc = 0;

    now++;
    if (st[i].op != S_OPEN && !s->open)
      continue;
    switch (st[i].op) {
    case S_OPEN:
      if (s->open)
        continue;
      *s = (struct slot) { .open = true, .id = ++ids, .opened = now };
      gm_uf_open (&s->u);
      break;
    case S_CLOSE:               /* its FLUSHes in flight fail below */
      end_write (s, false, now);
      while (s->nf)
        end_flush (s, 0, now, i, r);
      gm_uf_close (&s->u);
      s->open = false;
      break;
    case S_CONN_SAME:
    case S_CONN_NEW:
      inst = cur == 0 || st[i].op == S_CONN_NEW ? cur + 1 : cur;
      for (int j = 0; j < nwr; j++)
        /* The old process died; or, without multi-conn, s's old
         * connection to it is replaced, and no FLUSH can cover what
         * that one's did not. */
        if (!wr[j].covered && !wr[j].lost && !wr[j].dropped &&
            (inst != cur ||
             (!mc && s->inst == cur && wr[j].conn == s->id &&
              wr[j].inst == cur && wr[j].epoch == s->epoch))) {
          wr[j].lost = true, wr[j].lost_at = now;
          lost += counted (&wr[j]) && !wr[j].extra;
        }
      cur = s->inst = inst;
      s->epoch++;
      for (int j = 0; j < s->nf; j++)   /* to be sent again */
        if (s->fl[j].state == 1)
          s->fl[j].state = 0;
      if (gm_uf_connected (&s->u, inst, mc) < lost)
        r->bound_bad++;
      break;
    case S_ACK:                 /* from the instance it is connected to */
      if (s->inst == 0)
        continue;
      wr[nwr++] = (struct write) { s->id, s->inst, now, s->epoch, now,
                                   false, s->inst != cur, .arr = now };
      gm_uf_acked_whole (&s->u, s->inst);
      break;
    case S_LATE_ACK:            /* 1, 2, 4 or 8 from the previous instance */
      if (cur < 2)
        continue;
      for (int j = 0; j < 1 << st[i].k; j++) {
        wr[nwr++] = (struct write) { s->id, cur - 1, now, s->epoch, now,
                                     false, true, .arr = now };
        gm_uf_acked_whole (&s->u, cur - 1);
      }
      break;
    case S_F_BEGIN:
      if (s->nf == NFL)
        continue;
      fl = &s->fl[s->nf++];
      *fl = (struct nbd_flush) { .begin = now };
      gm_uf_flush_begin (&s->u, &fl->f);
      break;
    case S_F_SEND:              /* first SEND, or a retry after a connect */
      if (!fl || fl->state != 0 || s->inst == 0)
        continue;
      fl->mark = gm_uf_flush_sent ();
      fl->sent = now, fl->inst = s->inst, fl->epoch = s->epoch;
      fl->state = 1;
      break;
    case S_F_OK:                /* from the instance it was sent to */
      if (!fl || fl->state != 1)
        continue;
      for (int j = 0; j < nwr; j++) {
        struct write *w = &wr[j];
        if (!w->lost && !w->dropped && w->inst == fl->inst &&
            w->arr < fl->sent &&
            (mc || (w->conn == s->id && w->epoch == fl->epoch)))
          w->covered = true;
      }
      gm_uf_flush_done (&s->u, fl->mark, fl->inst);
      fl->state = 2;
      break;
    case S_F_END:               /* not replied ok: it failed below */
      if (!fl)
        continue;
      end_flush (s, (int) (fl - s->fl), now, i, r);
      break;
    case S_PIECE:               /* k odd: a late one, from the old instance */
      inst = st[i].k & 1 ? cur - 1 : s->inst;
      if (s->inst == 0 || inst == 0)
        continue;
      wr[nwr++] = (struct write) { s->id, inst, now, s->epoch, now, false,
                                   inst != cur, true, false,
                                   s->ack.hi != 0, now };
      gm_uf_reply (&s->u, inst, &s->ack);
      break;
    case S_W_OK:
    case S_W_FAIL:
      end_write (s, st[i].op == S_W_OK, now);
      break;
    }
    for (int j = 0; j < nwr; j++)
      unc += counted (&wr[j]) && !wr[j].extra && !wr[j].covered &&
             !wr[j].lost;
    if (gm_uf_uncovered () < unc)
      r->bound_bad++;
  }
}

/* What a batch of step lists, module and model carried over from one
 * to the next, came to; where the first false success was. */
struct batch {
  struct result sum;
  unsigned bad;
  int seqs, seed, n;            /* its step list, cut after that step */
  struct step st[NSTEPS];
};

static int generate (uint64_t seed, struct step *st);
static void
batch (bool mc, int seqs, struct batch *b)
{
  *b = (struct batch) { .sum.bad = -1 };
  for (int seed = 1; seed <= seqs; seed++) {
    struct step st[NSTEPS];
    struct result r;
    int n = generate ((uint64_t) seed + (mc ? 0 : 1000003), st);

    run (st, n, mc, &r);
    b->sum.ends += r.ends, b->sum.must += r.must;
    b->sum.false_eio += r.false_eio, b->sum.bound_bad += r.bound_bad;
    b->seqs = seed;
    if (r.bad >= 0) {           /* the model no longer knows the state */
      b->bad = 1, b->seed = seed, b->n = r.bad + 1;
      memcpy (b->st, st, sizeof st);
      return;
    }
    /* The tail closed every connection, replaced the instance and
     * reported its losses on a connection opened after every write: no
     * write kept can make a FLUSH fail any more; forget them. */
    CHECK (!model_must (&(struct slot) { .id = -1, .opened = now }, now + 1));
    nwr = nrep = 0;
  }
}

/* A batch (seqs > 0), or one step list on a fresh module, in a child:
 * this process never calls the module. */
static void
in_child (bool mc, int seqs, const struct step *st, int n,
          void *out, size_t size)
{
  int fd[2], status;
  pid_t pid;

  CHECK (pipe (fd) == 0 && size <= 4096);
  fflush (NULL);
  pid = fork ();
  CHECK (pid >= 0);
  if (pid == 0) {
    close (fd[0]);
    if (seqs > 0)
      batch (mc, seqs, out);
    else
      run (st, n, mc, out);
    _exit (write (fd[1], out, size) == (ssize_t) size ? 0 : 1);
  }
  close (fd[1]);
  CHECK (read (fd[0], out, size) == (ssize_t) size && close (fd[0]) == 0);
  CHECK (waitpid (pid, &status, 0) == pid);
  CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
}

static bool
fails_fresh (const struct step *st, int n, bool mc)
{
  struct result r;

  in_child (mc, 0, st, n, &r, sizeof r);
  return r.bad >= 0;
}

static uint64_t rng;

static unsigned
rnd (unsigned n)
{
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (unsigned) (rng % n);
}

/* STEPS random steps, then a tail that closes everything, replaces
 * the instance and has a new connection's FLUSH report the losses. */
static int
generate (uint64_t seed, struct step *st)
{
  static const struct step tail[] = {
    { S_CLOSE, 0, 0 }, { S_CLOSE, 1, 0 }, { S_CLOSE, 2, 0 },
    { S_CLOSE, 3, 0 }, { S_OPEN, 0, 0 }, { S_CONN_NEW, 0, 0 },
    { S_F_BEGIN, 0, 0 }, { S_F_END, 0, 0 }, { S_CLOSE, 0, 0 },
  };
  unsigned total = 0;

  rng = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (int op = 0; op < S_NOPS; op++)
    total += weight[op];
  for (int i = 0; i < STEPS; i++) {
    unsigned x = rnd (total);
    int op = 0;

    while (x >= weight[op])
      x -= weight[op++];
    /* Mostly the first two connections, so they do things together. */
    st[i] = (struct step) { (uint8_t) op,
                            (uint8_t) (rnd (3) ? rnd (2) : rnd (NSLOT)),
                            (uint8_t) rnd (NFL) };
  }
  memcpy (st + STEPS, tail, sizeof tail);
  return STEPS + TAIL;
}

/* Remove chunks of steps, then single steps, while it still fails;
 * then make each k 0 where it still fails. */
static int
shrink (struct step *st, int n, bool mc)
{
  struct step t[NSTEPS];

  for (int chunk = n / 2; chunk >= 1; chunk = chunk > 1 ? chunk / 2 : 0)
    for (int at = 0; at + chunk <= n; ) {
      int m = 0;

      for (int i = 0; i < n; i++)
        if (i < at || i >= at + chunk)
          t[m++] = st[i];
      if (fails_fresh (t, m, mc)) {
        memcpy (st, t, m * sizeof t[0]);
        n = m;
      }
      else
        at += chunk;
    }
  for (int i = 0; i < n; i++) {
    uint8_t k = st[i].k;

    st[i].k = 0;
    if (k && !fails_fresh (st, n, mc))
      st[i].k = k;
  }
  return n;
}

static void
print_steps (const struct step *st, int n)
{
  for (int i = 0; i < n; i++)
    fprintf (stderr, "  %2d %-12s c%d k=%d\n", i, op_name[st[i].op],
             st[i].slot, st[i].k);
}

int
main (int argc, char **argv)
{
  int seqs = argc > 1 ? atoi (argv[1]) : SEQS;
  unsigned bad_total = 0, bound_total = 0;

  for (int pass = 0; pass < 2; pass++) {
    bool mc = pass == 0;
    struct batch b;
    unsigned need_not;

    in_child (mc, seqs, NULL, 0, &b, sizeof b);
    if (b.bad) {
      fprintf (stderr, "FALSE SUCCESS multi_conn=%d seed %d at step %d",
               mc, b.seed, b.n - 1);
      if (fails_fresh (b.st, b.n, mc)) {
        b.n = shrink (b.st, b.n, mc);
        fprintf (stderr, ", fresh, minimal (%d steps):\n", b.n);
      }
      else
        fprintf (stderr, " (not on a fresh module):\n");
      print_steps (b.st, b.n);
    }
    need_not = b.sum.ends - b.sum.must;
    printf ("multi_conn=%d: %d sequences, %u NBD FLUSH ends, %u must fail, "
            "%u false successes, %u false EIO (%.1f%% of the %u that need "
            "not fail), %u bound violations\n", mc, b.seqs, b.sum.ends,
            b.sum.must, b.bad, b.sum.false_eio,
            100.0 * b.sum.false_eio / (need_not ? need_not : 1), need_not,
            b.sum.bound_bad);
    unit_checks += b.sum.ends;
    bad_total += b.bad, bound_total += b.sum.bound_bad;
  }
  CHECK_EQ_U64 (bad_total, 0);
  CHECK_EQ_U64 (bound_total, 0);
  UNIT_DONE ();
}

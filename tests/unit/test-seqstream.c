/* Unit test: common/seqstream (stream detection, windows, ledger).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdint.h>

#include "seqstream.h"
#include "unit.h"

#define K 1024ull
#define M (1024ull * 1024)

static struct gm_seq_stream streams[8];
static struct gm_seq_table t;

static void
setup (uint64_t size)
{
  struct gm_seq_config c = {
    .ra_min = 64 * K, .ra_max = 1 * M, .align = 64 * K, .size = size,
    .slack_min = 128 * K, .slack_reqs = 32, .confirm = 2,
    .stale_ticks = 1000,
  };
  gm_seq_init (&t, streams, 8, &c);
}

/* Issue whatever a read asks for and complete it at once. */
static bool
read_and_complete (uint64_t off, uint32_t len, struct gm_seq_issue *is)
{
  if (!gm_seq_read (&t, off, len, UINT64_MAX, is))
    return false;
  if (is->win) {
    uint32_t id = is->win->id;
    is->win->pieces_left = 1;
    CHECK (gm_seq_claim (&t, is->stream, id, is->start, is->len));
    gm_seq_done (&t, is->stream, id, is->len, GM_SEQ_OK);
  }
  return true;
}

static void
check_ledger_balances (void)
{
  struct gm_seq_ledger *l = &t.ledger;
  CHECK_EQ_U64 (l->useful + l->wasted + l->cancelled + l->invalidated +
                l->failed, l->queued);
}

static void
test_sequential_windows (void)
{
  struct gm_seq_issue is;
  uint64_t expect_size = 64 * K, expect_start = 64 * K, windows = 0;

  setup (1024 * M);
  /* Two reads make a candidate and one continuation: no readahead yet. */
  CHECK (!read_and_complete (0, 4096, &is));
  CHECK (!read_and_complete (4096, 4096, &is));
  for (uint64_t off = 8192; off < 16 * M; off += 4096) {
    if (read_and_complete (off, 4096, &is)) {
      CHECK_EQ_U64 (is.start, expect_start);
      CHECK_EQ_U64 (is.len, expect_size);
      CHECK_EQ_U64 (is.start % (64 * K), 0);
      /* The next window is issued once the reader enters this one. */
      CHECK (off + 4096 > expect_start - expect_size || windows == 0);
      expect_start += expect_size;
      expect_size = expect_size * 2 > M ? M : expect_size * 2;
      windows++;
    }
  }
  CHECK_EQ_U64 (t.detected, 1);
  CHECK (windows >= 18);
  /* Prefetch stays ahead of the reader, by less than three windows. */
  CHECK (streams[0].pf_end > 16 * M && streams[0].pf_end <= 16 * M + 3 * M);
  gm_seq_retire_all (&t);
  check_ledger_balances ();
  CHECK (t.ledger.useful > 15 * M);
  CHECK (t.ledger.wasted <= 3 * M);
}

static void
test_first_window_from_request_size (void)
{
  struct gm_seq_issue is;

  setup (1024 * M);
  CHECK (!read_and_complete (0, 128 * K, &is));
  CHECK (!read_and_complete (128 * K, 128 * K, &is));
  CHECK (read_and_complete (256 * K, 128 * K, &is));
  CHECK_EQ_U64 (is.start, 384 * K);
  CHECK_EQ_U64 (is.len, 512 * K);        /* 4 x 128K */
  /* Unaligned end: the window starts at the next aligned offset. */
  setup (1024 * M);
  read_and_complete (1000, 3000, &is);
  read_and_complete (4000, 3000, &is);
  CHECK (read_and_complete (7000, 3000, &is));
  CHECK_EQ_U64 (is.start, 64 * K);
  CHECK_EQ_U64 (gm_seq_first_window (&t.cfg, 1), 64 * K);
  CHECK_EQ_U64 (gm_seq_first_window (&t.cfg, 4 * M), M);
}

static void
test_random_reads_never_prefetch (void)
{
  struct gm_seq_issue is;
  uint64_t x = 88172645463325252ull;

  setup (1024 * M);
  for (int i = 0; i < 100000; i++) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    CHECK (!read_and_complete ((x % (1024 * M / 4096)) * 4096, 4096, &is));
  }
  CHECK_EQ_U64 (t.ledger.queued, 0);
  CHECK_EQ_U64 (t.detected, 0);
}

static void
test_interleaved_and_reordered (void)
{
  struct gm_seq_issue is;
  uint64_t base[4] = { 0, 100 * M, 300 * M, 700 * M };
  uint64_t issued[4] = { 0 };

  setup (1024 * M);
  /* Four streams, round robin, each delivered in pairs swapped (as
   * queue depth does).
   */
  for (uint64_t k = 0; k < 512; k += 2)
    for (int s = 0; s < 4; s++) {
      uint64_t a = base[s] + k * 16 * K, b = a + 16 * K;
      if (read_and_complete (b, 16 * K, &is))
        issued[is.stream] += is.len;
      if (read_and_complete (a, 16 * K, &is))
        issued[is.stream] += is.len;
    }
  CHECK_EQ_U64 (t.detected, 4);
  for (int s = 0; s < 4; s++)
    CHECK (issued[s] >= 7 * M);     /* each read 8M */
  /* Nothing wasted while they run; at the end only the lead is. */
  CHECK_EQ_U64 (t.ledger.wasted, 0);
  gm_seq_retire_all (&t);
  check_ledger_balances ();
  CHECK (t.ledger.wasted <= 4 * 3 * M);
}

static void
test_sequential_survives_random_storm (void)
{
  struct gm_seq_issue is;
  uint64_t x = 2463534242ull, off = 0;
  unsigned windows = 0;

  setup (1024 * M);
  for (int i = 0; i < 2000; i++) {
    if (read_and_complete (off, 64 * K, &is))
      windows++;
    off += 64 * K;
    for (int r = 0; r < (i < 3 ? 0 : 20); r++) {      /* 20 random reads per step */
      x ^= x << 13; x ^= x >> 17; x ^= x << 5;
      read_and_complete (512 * M + (x % 65536) * 4096, 4096, &is);
    }
  }
  CHECK_EQ_U64 (t.detected, 1);
  CHECK (windows >= 120);               /* 125M read, 1M windows */
  CHECK_EQ_U64 (t.ledger.queued - 2 * M < 125 * M, 1);
}

/* Read 4K at a time to 96K: windows [64K,128K) and [128K,256K) are
 * prefetched.  Returns where the reader is.
 */
static uint64_t
prefetch_two_windows (void)
{
  struct gm_seq_issue is;
  uint64_t off;

  setup (1024 * M);
  for (off = 0; off < 96 * K; off += 4096)
    read_and_complete (off, 4096, &is);
  CHECK_EQ_U64 (streams[0].pf_end, 256 * K);
  return off;
}

/* Run a refill of [off, off + len) of stream 0 to its end. */
static void
complete_refill (struct gm_seq_issue *r, uint64_t off, uint64_t len)
{
  CHECK_EQ_U64 (r->start, off);
  CHECK_EQ_U64 (r->len, len);
  r->win->pieces_left = 1;
  CHECK (gm_seq_claim (&t, 0, r->win->id, off, len));
  gm_seq_done (&t, 0, r->win->id, len, GM_SEQ_OK);
}

static void
test_invalidate_refills (void)
{
  struct gm_seq_issue is, refill[4];
  uint64_t off = prefetch_two_windows (), dropped;

  /* A write behind the reader changes nothing. */
  CHECK_EQ_U64 (gm_seq_invalidate (&t, 0, 4096, M, refill, 4, &dropped), 0);
  CHECK_EQ_U64 (dropped, 0);
  /* A write ahead of it: its block is invalidated and queued again. */
  CHECK_EQ_U64 (gm_seq_invalidate (&t, 200 * K, 4096, M, refill, 4,
                                   &dropped), 1);
  CHECK_EQ_U64 (dropped, 64 * K);
  CHECK_EQ_U64 (t.ledger.invalidated, 64 * K);
  complete_refill (&refill[0], 192 * K, 64 * K);
  /* Across two windows, with no room: counted, not queued. */
  CHECK_EQ_U64 (gm_seq_invalidate (&t, 120 * K, 16 * K, 0, refill, 4,
                                   &dropped), 0);
  CHECK_EQ_U64 (dropped, 128 * K);
  /* The stream goes on as before. */
  for (; off < 300 * K; off += 4096)
    read_and_complete (off, 4096, &is);
  CHECK_EQ_U64 (streams[0].pf_end, M);
  gm_seq_retire_all (&t);
  check_ledger_balances ();
}

/* The same block ahead of the reader written four times, each refill
 * completing in between: one refill per write, each window's bytes
 * invalidated once.  Every write used to queue one refill more than
 * the last (1, 2, 3), then none: the stream's slots were full.
 */
static void
test_invalidate_same_block_again (void)
{
  struct gm_seq_issue is, refill[4];
  uint64_t off = prefetch_two_windows (), dropped;

  for (int i = 0; i < 4; i++) {
    CHECK_EQ_U64 (gm_seq_invalidate (&t, 200 * K, 4096, M, refill, 4,
                                     &dropped), 1);
    CHECK_EQ_U64 (dropped, 64 * K);
    complete_refill (&refill[0], 192 * K, 64 * K);
  }
  /* Queued, not yet read: a fifth write finds the refill will read the
   * new data anyway. */
  CHECK_EQ_U64 (gm_seq_invalidate (&t, 200 * K, 4096, M, refill, 4,
                                   &dropped), 1);
  CHECK_EQ_U64 (gm_seq_invalidate (&t, 200 * K, 4096, M, refill + 1, 3,
                                   &dropped), 0);
  CHECK_EQ_U64 (dropped, 0);
  complete_refill (&refill[0], 192 * K, 64 * K);
  /* The reader reads [96K,256K) from prefetched data, the last refill's
   * included: 192K useful; the window and four refills changed once
   * each: 320K invalidated. */
  for (; off < 256 * K; off += 4096)
    read_and_complete (off, 4096, &is);
  gm_seq_retire_all (&t);
  CHECK_EQ_U64 (t.ledger.invalidated, 320 * K);
  CHECK_EQ_U64 (t.ledger.useful, 192 * K);
  check_ledger_balances ();
}

/* A stream of three 4K reads from 0: its first window, [64K,128K), is
 * queued as one piece, not yet claimed.  Returns its id.
 */
static uint32_t
queue_first_window (void)
{
  struct gm_seq_issue is;

  setup (1024 * M);
  read_and_complete (0, 4096, &is);
  read_and_complete (4096, 4096, &is);
  CHECK (gm_seq_read (&t, 8192, 4096, UINT64_MAX, &is));
  CHECK (is.win != NULL);
  is.win->pieces_left = 1;
  return is.win->id;
}

static void
test_claim_skips_passed_and_dropped (void)
{
  struct gm_seq_issue is;
  uint32_t id;

  id = queue_first_window ();
  /* The reader runs past the queued window before a worker gets to it. */
  for (uint64_t off = 12288; off < 132 * K; off += 4096)
    gm_seq_read (&t, off, 4096, 0, &is);      /* room 0: nothing queued */
  CHECK (!gm_seq_claim (&t, 0, id, 64 * K, 64 * K));
  CHECK_EQ_U64 (t.ledger.cancelled, 64 * K);
  CHECK (!gm_seq_claim (&t, 0, id, 64 * K, 64 * K));  /* gone */
  check_ledger_balances ();
}

static void
test_dedup_and_failure (void)
{
  struct gm_seq_issue is;

  setup (1024 * M);
  /* Stream A prefetches [64K,128K). */
  read_and_complete (0, 4096, &is);
  read_and_complete (4096, 4096, &is);
  CHECK (read_and_complete (8192, 4096, &is));
  CHECK_EQ_U64 (is.start, 64 * K);
  /* Stream B, far enough behind to be another stream, would prefetch
   * the same window: it is trimmed away.
   */
  t.cfg.slack_min = 4096;
  t.cfg.slack_reqs = 1;
  gm_seq_read (&t, 20480, 4096, UINT64_MAX, &is);
  gm_seq_read (&t, 24576, 4096, UINT64_MAX, &is);
  CHECK (gm_seq_read (&t, 28672, 4096, UINT64_MAX, &is));
  CHECK_EQ_U64 (is.len, 0);
  CHECK_EQ_U64 (is.dedup, 64 * K);
  CHECK (is.win == NULL);
  /* A failed piece is counted as failed, never as useful. */
  setup (1024 * M);
  read_and_complete (0, 4096, &is);
  read_and_complete (4096, 4096, &is);
  CHECK (gm_seq_read (&t, 8192, 4096, UINT64_MAX, &is));
  is.win->pieces_left = 1;
  CHECK (gm_seq_claim (&t, is.stream, is.win->id, is.start, is.len));
  gm_seq_done (&t, is.stream, is.win->id, is.len, GM_SEQ_FAILED);
  CHECK_EQ_U64 (t.ledger.failed, 64 * K);
  check_ledger_balances ();
}

/* Another stream's window strictly inside the new one: trimming the
 * back there would leave the rest after it never prefetched, so the
 * new window is kept whole.
 */
static void
test_dedup_window_inside (void)
{
  struct gm_seq_issue is;
  uint64_t off;
  bool issued = false;

  setup (1024 * M);
  streams[5].live = true;
  streams[5].hits = 5;
  streams[5].next = 10 * M;
  streams[5].win[0] = (struct gm_seq_window) {
    .start = 320 * K, .len = 64 * K, .state = GM_WIN_DONE, .id = 999,
    .issued = 64 * K,
  };
  for (off = 0; off < 3 * 64 * K; off += 64 * K)
    if (gm_seq_read (&t, off, 64 * K, UINT64_MAX, &is) && is.win) {
      CHECK_EQ_U64 (is.start, 192 * K);
      CHECK_EQ_U64 (is.start + is.len, streams[is.stream].pf_end);
      CHECK_EQ_U64 (is.dedup, 0);
      issued = true;
    }
  CHECK (issued);
}

/* Queue a 256K window [192K,448K) for a stream read in 64K requests,
 * cut into pieces of piece bytes (the last one shorter if need be).
 */
static struct gm_seq_window *
queue_256k_window (struct gm_seq_issue *is, uint64_t piece)
{
  setup (1024 * M);
  read_and_complete (0, 64 * K, is);
  read_and_complete (64 * K, 64 * K, is);
  CHECK (gm_seq_read (&t, 128 * K, 64 * K, UINT64_MAX, is));
  CHECK_EQ_U64 (is->start, 192 * K);
  CHECK_EQ_U64 (is->len, 256 * K);
  is->win->pieces_left = (is->len + piece - 1) / piece;
  return is->win;
}

/* Claim the four 64K pieces of that window (queued with piece 64K). */
static void
claim_all_64k (uint32_t id)
{
  for (uint64_t off = 192 * K; off < 448 * K; off += 64 * K)
    CHECK (gm_seq_claim (&t, 0, id, off, 64 * K));
}

/* The reader reads all of that window, then everything retires. */
static void
read_window_and_retire (void)
{
  struct gm_seq_issue is;

  for (uint64_t off = 192 * K; off < 512 * K; off += 64 * K)
    gm_seq_read (&t, off, 64 * K, 0, &is);      /* room 0: no new windows */
  gm_seq_retire_all (&t);
}

/* Only the bytes of the pieces that failed count as failed: the pieces
 * that succeeded stay prefetched, and the reader's reads of them are
 * useful.
 */
static void
test_failed_piece_counts_only_itself (void)
{
  struct gm_seq_issue is;
  struct gm_seq_window *w = queue_256k_window (&is, 64 * K);
  uint32_t id = w->id;

  claim_all_64k (id);
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_OK);
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_FAILED);   /* one piece of four fails */
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_OK);
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_OK);
  CHECK_EQ_U64 (t.ledger.failed, 64 * K);
  read_window_and_retire ();
  CHECK_EQ_U64 (t.ledger.failed, 64 * K);
  CHECK_EQ_U64 (t.ledger.useful, 192 * K);
  CHECK_EQ_U64 (t.ledger.wasted, 0);
  check_ledger_balances ();

  /* Pieces of 96K: 96K, 96K and a last one of 64K.  Each failure counts
   * the length of the piece that failed, whichever completes first: here
   * the short last piece fails while a 96K piece is still in flight.
   */
  w = queue_256k_window (&is, 96 * K);
  id = w->id;
  CHECK (gm_seq_claim (&t, 0, id, 192 * K, 96 * K));
  CHECK (gm_seq_claim (&t, 0, id, 288 * K, 96 * K));
  gm_seq_done (&t, 0, id, 96 * K, GM_SEQ_FAILED);
  CHECK_EQ_U64 (t.ledger.failed, 96 * K);
  CHECK (gm_seq_claim (&t, 0, id, 384 * K, 64 * K));
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_FAILED);
  gm_seq_done (&t, 0, id, 96 * K, GM_SEQ_OK);
  CHECK_EQ_U64 (t.ledger.failed, 160 * K);
  read_window_and_retire ();
  CHECK_EQ_U64 (t.ledger.failed, 160 * K);
  CHECK_EQ_U64 (t.ledger.useful, 96 * K);
  check_ledger_balances ();

  /* A write changes a piece in flight, which then fails: its bytes were
   * never prefetched, so they count as failed, once.
   */
  {
    struct gm_seq_issue refill[4];
    uint64_t dropped;

    w = queue_256k_window (&is, 64 * K);
    id = w->id;
    claim_all_64k (id);
    CHECK_EQ_U64 (gm_seq_invalidate (&t, 0, 1024 * M, 0, refill, 4,
                                     &dropped), 0);
    CHECK_EQ_U64 (dropped, 256 * K);
    for (int i = 0; i < 4; i++)
      gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_FAILED);
    gm_seq_retire_all (&t);
    CHECK_EQ_U64 (t.ledger.failed, 256 * K);
    CHECK_EQ_U64 (t.ledger.invalidated, 0);
    check_ledger_balances ();
  }

  /* The stream is replaced while a piece is in flight: the window waits
   * for it, and its failure still counts; its pieces not yet sent are
   * cancelled.
   */
  w = queue_256k_window (&is, 64 * K);
  id = w->id;
  CHECK (gm_seq_claim (&t, 0, id, 192 * K, 64 * K));
  CHECK (gm_seq_claim (&t, 0, id, 256 * K, 64 * K));
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_OK);
  /* Far apart reads, until stream 0 is idle enough to be replaced. */
  for (uint64_t i = 0; streams[0].next < 512 * M; i++) {
    CHECK (i < 2000);
    gm_seq_read (&t, 512 * M + i * M, 4096, 0, &is);
  }
  CHECK_EQ_U64 (streams[0].hits, 0);
  CHECK (!gm_seq_claim (&t, 0, id, 320 * K, 64 * K));
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_FAILED);
  CHECK (!gm_seq_claim (&t, 0, id, 384 * K, 64 * K));  /* retired */
  CHECK_EQ_U64 (t.ledger.failed, 64 * K);
  CHECK_EQ_U64 (t.ledger.cancelled, 128 * K);
  gm_seq_retire_all (&t);
  CHECK_EQ_U64 (t.ledger.failed, 64 * K);
  check_ledger_balances ();
}

/* Pieces cut short by the server shutting down (ESHUTDOWN below) count
 * as cancelled, not failed; the pieces that completed stay useful.
 */
static void
test_aborted_piece_is_cancelled (void)
{
  struct gm_seq_issue is;
  struct gm_seq_window *w = queue_256k_window (&is, 64 * K);
  uint32_t id = w->id;
  uint64_t failed = t.ledger.failed, cancelled = t.ledger.cancelled;
  uint64_t useful = t.ledger.useful;

  claim_all_64k (id);
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_OK);
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_OK);
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_ABORTED);
  gm_seq_done (&t, 0, id, 64 * K, GM_SEQ_ABORTED);
  read_window_and_retire ();
  CHECK_EQ_U64 (t.ledger.failed - failed, 0);
  CHECK_EQ_U64 (t.ledger.cancelled - cancelled, 128 * K);
  CHECK_EQ_U64 (t.ledger.useful - useful, 128 * K);
  check_ledger_balances ();
}

static void
test_export_end_and_room (void)
{
  struct gm_seq_issue is;

  setup (100 * K);
  read_and_complete (0, 4096, &is);
  read_and_complete (4096, 4096, &is);
  CHECK (read_and_complete (8192, 4096, &is));
  CHECK_EQ_U64 (is.start + is.len, 100 * K);
  setup (1024 * M);
  read_and_complete (0, 64 * K, &is);
  read_and_complete (64 * K, 64 * K, &is);
  CHECK (gm_seq_read (&t, 128 * K, 64 * K, 100 * K, &is));
  CHECK_EQ_U64 (is.len, 64 * K);            /* room, rounded to align */
}

/* Refills are queued as whole pieces: room counts pieces, not bytes.
 * Two 64K refills with room for one 256K piece: only one is queued.
 */
static void
test_invalidate_room_in_pieces (void)
{
  struct gm_seq_issue is, refill[4];
  uint64_t off, dropped;

  setup (1024 * M);
  t.cfg.piece = 256 * K;
  for (off = 0; off < 96 * K; off += 4096)
    read_and_complete (off, 4096, &is);
  CHECK_EQ_U64 (streams[0].pf_end, 256 * K);
  /* Blocks [64K,128K) and [128K,192K), in two windows. */
  CHECK_EQ_U64 (gm_seq_invalidate (&t, 100 * K, 64 * K, 256 * K, refill, 4,
                                   &dropped), 1);
  CHECK_EQ_U64 (refill[0].len, 64 * K);
  refill[0].win->pieces_left = 1;
  gm_seq_retire_all (&t);
  check_ledger_balances ();
}

/* A window of four 64K pieces, only the first sent below: a write into
 * the fourth is read by that piece when it goes, after the write.
 * Nothing is invalidated and no refill is queued (it counted 4K
 * invalidated and fetched the block twice); a write into the first,
 * already sent, is invalidated and fetched again.
 */
static void
test_invalidate_unsent_piece (void)
{
  struct gm_seq_issue is, refill[4];
  uint64_t dropped;
  uint32_t id;

  setup (1024 * M);
  t.cfg.align = 4 * K;
  t.cfg.piece = 64 * K;
  t.cfg.ra_min = t.cfg.ra_max = 256 * K;
  read_and_complete (0, 4096, &is);
  read_and_complete (4096, 4096, &is);
  CHECK (gm_seq_read (&t, 8192, 4096, M, &is));
  CHECK (is.win != NULL);
  CHECK_EQ_U64 (is.len, 256 * K);
  id = is.win->id;
  is.win->pieces_left = 4;
  CHECK (gm_seq_claim (&t, is.stream, id, is.start, 64 * K));
  CHECK_EQ_U64 (gm_seq_invalidate (&t, is.start + 200 * K, 4096, M,
                                   refill, 4, &dropped), 0);
  CHECK_EQ_U64 (dropped, 0);
  CHECK_EQ_U64 (gm_seq_invalidate (&t, is.start + 16 * K, 4096, M,
                                   refill, 4, &dropped), 1);
  CHECK_EQ_U64 (dropped, 4 * K);
  refill[0].win->pieces_left = 1;
  for (int p = 1; p < 4; p++)
    CHECK (gm_seq_claim (&t, is.stream, id, is.start + p * 64 * K, 64 * K));
  gm_seq_retire_all (&t);
  CHECK_EQ_U64 (t.ledger.invalidated, 4 * K);
  check_ledger_balances ();
}

/* A stream idle for more than stale_ticks reads: its queued pieces are
 * not sent (cancelled), whatever else the table did meanwhile.
 */
static void
test_claim_skips_stale_stream (void)
{
  struct gm_seq_issue is;
  uint32_t id;

  id = queue_first_window ();
  /* Another reader, sequential far away (one stream slot: stream 0
   * keeps its own), for longer than stale_ticks; room 0 queues
   * nothing. */
  for (unsigned i = 0; i <= t.cfg.stale_ticks + 1; i++)
    gm_seq_read (&t, 512 * M + (uint64_t) i * 4096, 4096, 0, &is);
  CHECK (!streams[0].win[0].orphan);
  CHECK (!gm_seq_claim (&t, 0, id, 64 * K, 64 * K));
  CHECK_EQ_U64 (t.ledger.cancelled, 64 * K);
  gm_seq_retire_all (&t);
  check_ledger_balances ();
}

int
main (void)
{
  test_sequential_windows ();
  test_first_window_from_request_size ();
  test_random_reads_never_prefetch ();
  test_interleaved_and_reordered ();
  test_sequential_survives_random_storm ();
  test_invalidate_refills ();
  test_invalidate_room_in_pieces ();
  test_invalidate_same_block_again ();
  test_claim_skips_passed_and_dropped ();
  test_invalidate_unsent_piece ();
  test_claim_skips_stale_stream ();
  test_dedup_and_failure ();
  test_dedup_window_inside ();
  test_failed_piece_counts_only_itself ();
  test_aborted_piece_is_cancelled ();
  test_export_end_and_room ();
  UNIT_DONE ();
}

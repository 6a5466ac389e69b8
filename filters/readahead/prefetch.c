/* gmblock-readahead filter: background prefetch workers.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * ra-max-inflight workers, each with its own context into the layer
 * below opened in .after_fork, so that a prefetch depends on no client
 * connection (it may outlive the read that triggered it) and works
 * under plugins that serialise requests per connection.  The queue is
 * a fixed ring allocated once: a full queue makes a window wait for a
 * later read, never allocates.  Errors below are counted and dropped:
 * a prefetch is advice and no client ever sees its failure.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "readahead.h"
#include "sizes.h"

#define PIECE_MIN (256u << 10)  /* a window is cut into pieces this big */

uint64_t piece_size = PIECE_MIN;

struct worker {
  pthread_t tid;
  nbdkit_next *next;
  bool started;
};

static struct worker *workers;
static unsigned nworkers;
static struct ra_piece *ring;   /* the queue, under ra_lock */
static unsigned ring_cap, ring_head, ring_len;
static pthread_cond_t work_cond = PTHREAD_COND_INITIALIZER;
static bool stopping;

unsigned
prefetch_room (void)
{
  return ring_cap - ring_len;
}

void
prefetch_push (const struct ra_piece *p)
{
  ring[(ring_head + ring_len) % ring_cap] = *p;
  ring_len++;
}

void
prefetch_wake (void)
{
  pthread_cond_broadcast (&work_cond);
}

static void *
worker_run (void *arg)
{
  struct worker *w = arg;

  pthread_mutex_lock (&ra_lock);
  for (;;) {
    struct ra_piece p;
    enum gm_seq_outcome how;
    int err = 0, r;

    while (ring_len == 0 && !stopping)
      pthread_cond_wait (&work_cond, &ra_lock);
    if (stopping)
      break;
    p = ring[ring_head];
    ring_head = (ring_head + 1) % ring_cap;
    ring_len--;
    if (!gm_seq_claim (&table, p.stream, p.win_id, p.offset, p.len))
      continue;
    pthread_mutex_unlock (&ra_lock);

    r = w->next->cache (w->next, p.len, p.offset, 0, &err);
    RCOUNT (RS_PREFETCH_REQUESTS, 1);
    if (r == 0) {
      RCOUNT (RS_PREFETCH_BYTES, p.len);
      how = GM_SEQ_OK;
    }
    else if (err == ESHUTDOWN)
      /* A layer below that waits with nbdkit_nanosleep (the delay
       * filter, say) gives up when nbdkit begins to shut down: the
       * piece was cut short, nothing failed.
       */
      how = GM_SEQ_ABORTED;
    else {
      RCOUNT (RS_PREFETCH_ERRORS, 1);
      nbdkit_debug (RNAME ": prefetch %u bytes at %llu failed: %s "
                    "(ignored)", p.len, (unsigned long long) p.offset,
                    strerror (err ? err : EIO));
      how = GM_SEQ_FAILED;
    }

    pthread_mutex_lock (&ra_lock);
    gm_seq_done (&table, p.stream, p.win_id, p.len, how);
  }
  pthread_mutex_unlock (&ra_lock);
  return NULL;
}

static void
close_contexts (void)
{
  for (unsigned i = 0; i < nworkers; i++)
    if (workers[i].next) {
      workers[i].next->finalize (workers[i].next);
      nbdkit_next_context_close (workers[i].next);
      workers[i].next = NULL;
    }
}

/* Print once why readahead is off, and the stack that turns it on. */
static void
warn_no_cache (int can_cache)
{
  fprintf (stderr, "nbdkit: " RNAME ": warning: the layer below cannot "
           "cache (can_cache=%s): readahead is disabled and every read "
           "passes straight through.  Put a cache under this filter:\n"
           "    nbdkit --filter=gmblock-readahead --filter=gmblock-cache "
           "gmblock file=PATH\n"
           "(or serve through the page cache: gmblock file=PATH "
           "direct=false)\n",
           can_cache == NBDKIT_CACHE_EMULATE ? "emulate" : "none");
}

/* Open one context per worker and learn what is below.  Returns 1 when
 * the layer below caches natively, 0 when it does not, -1 on error.
 */
static int
open_contexts (nbdkit_backend *backend, uint64_t *size, uint64_t *align)
{
  for (unsigned i = 0; i < nworkers; i++) {
    nbdkit_next *n = nbdkit_next_context_open (backend, 1, "", 1);
    uint32_t bmin, bpref, bmax;
    int64_t sz;
    int cc;

    if (n == NULL) {
      nbdkit_error (RNAME ": cannot open a context to the layer below");
      return -1;
    }
    if (n->prepare (n) == -1) {
      nbdkit_next_context_close (n);
      return -1;
    }
    workers[i].next = n;
    /* nbdkit insists each context is asked these before it is used. */
    sz = n->get_size (n);
    cc = n->can_cache (n);
    if (sz == -1 || cc == -1 || n->block_size (n, &bmin, &bpref, &bmax) == -1)
      return -1;
    if (cc != NBDKIT_CACHE_NATIVE) {
      warn_no_cache (cc);
      return 0;
    }
    *size = sz;
    *align = bpref;
  }
  return 1;
}

int
prefetch_start (nbdkit_backend *backend)
{
  uint64_t size = 0, align = 0;
  int r;

  nworkers = cfg.max_inflight;
  workers = calloc (nworkers, sizeof *workers);
  if (workers == NULL) {
    nbdkit_error (RNAME ": calloc: %m");
    return -1;
  }
  r = open_contexts (backend, &size, &align);
  if (r <= 0) {
    close_contexts ();
    return r;
  }
  /* Windows align to the preferred block size below (the cache block,
   * a RAID chunk), within what the window bounds allow.
   */
  if (align < 4096 || (align & (align - 1)))
    align = 4096;
  if (align > cfg.ra_max) {
    /* Windows smaller than one cache block prefetch what the next
     * read would fetch anyway: say so, the fix is the user's. */
    char a[32], b[32];
    fprintf (stderr, "nbdkit: " RNAME ": warning: the block below (%s, "
             "e.g. cache-block-size=) is larger than ra-max=%s: windows are "
             "cut to ra-max and prefetch little; set ra-max to at least the "
             "block size\n", gm_format_size (align, a, sizeof a),
             gm_format_size (cfg.ra_max, b, sizeof b));
    align = cfg.ra_max;
  }
  piece_size = align > PIECE_MIN ? align : PIECE_MIN;
  /* Room for every worker's pieces of two full windows. */
  ring_cap = 2 * (cfg.ra_max / piece_size + 1) * 4 + nworkers;
  ring = calloc (ring_cap, sizeof *ring);
  if (ring == NULL) {
    nbdkit_error (RNAME ": calloc: %m");
    close_contexts ();
    return -1;
  }
  streams_init (size, align);
  for (unsigned i = 0; i < nworkers; i++) {
    int e = pthread_create (&workers[i].tid, NULL, worker_run, &workers[i]);
    if (e) {
      errno = e;
      nbdkit_error (RNAME ": pthread_create: %m");
      prefetch_stop ();
      return -1;
    }
    workers[i].started = true;
  }
  nbdkit_debug (RNAME ": %u workers, windows %llu..%llu aligned to %llu, "
                "pieces of %llu, queue of %u", nworkers,
                (unsigned long long) table.cfg.ra_min,
                (unsigned long long) cfg.ra_max, (unsigned long long) align,
                (unsigned long long) piece_size, ring_cap);
  return 1;
}

void
prefetch_stop (void)
{
  if (workers == NULL)
    return;
  pthread_mutex_lock (&ra_lock);
  stopping = true;
  pthread_cond_broadcast (&work_cond);
  pthread_mutex_unlock (&ra_lock);
  for (unsigned i = 0; i < nworkers; i++)
    if (workers[i].started) {
      pthread_join (workers[i].tid, NULL);
      workers[i].started = false;
    }
  close_contexts ();
  free (workers);
  workers = NULL;
  free (ring);
  ring = NULL;
  ring_len = 0;
}

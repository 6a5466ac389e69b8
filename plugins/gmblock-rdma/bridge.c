/* gmblock-rdma plugin: the client bridge.  Serves a gmblock RDMA
 * server (the gmblock-rdma filter, docs/rdma-protocol.md) as an
 * ordinary NBD export, for nbd-client, qemu-nbd, QEMU and libnbd tools.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Thread model PARALLEL: each NBD connection has one RC connection
 * (conn.c) with up to credits= requests in flight, from any of nbdkit's
 * threads.  A READ or WRITE longer than the server's max_request goes
 * as pieces, all in flight at once as far as the credits allow.  Each
 * piece's data moves straight between the server and nbdkit's buffer
 * when the device pages on demand (zero copy, mem.c), else through the
 * process-wide registered bounce pool (counted in bytes_copied).
 *
 * When the server goes away, the requests in flight fail with EIO, the
 * next request reconnects, and a READ, FLUSH or CACHE that failed for
 * the transport is retried once on the new connection.  A FLUSH fails
 * once if writes acknowledged and not yet flushed were lost with a
 * server process that restarted (conn.c, common/unflushed.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "bridge.h"
#include "hugemem.h"
#include "sizes.h"
#include "version.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
#define DEFAULT_CREDITS 16
#define DEFAULT_POOL (16u << 20)
#define MIN_POOL (64u << 10)
#define MAX_POOL (1ull << 30)
#define MAX_TIMEOUT 86400        /* timeout=: a day */

GM_DEBUG_FLAG (gmblock_rdma_debug_stats, "gmblock-rdma_debug_stats");

struct gm_counter bstats[BC_COUNT] = {
  GM_COUNTER (BC_CONNECTS, "connects", "RDMA connections established"),
  GM_COUNTER (BC_RECONNECTS, "reconnects", "connections re-established after a failure"),
  GM_COUNTER (BC_REQUESTS, "requests", "requests sent to the server (pieces of split ones counted each)"),
  GM_COUNTER (BC_READ_BYTES, "read_bytes", "bytes read from the server"),
  GM_COUNTER (BC_WRITE_BYTES, "write_bytes", "bytes written to the server"),
  GM_COUNTER (BC_COPIED, "bytes_copied", "bytes copied through the bounce pool"),
  GM_COUNTER (BC_ZERO_COPY, "bytes_zero_copy", "bytes moved straight to or from nbdkit's buffer (ODP)"),
  GM_COUNTER (BC_ODP_HITS, "odp_hits", "pieces whose buffer an ODP MR already covered"),
  GM_COUNTER (BC_ODP_MISSES, "odp_misses", "ODP registrations made"),
  GM_COUNTER (BC_POOL_WAITS, "pool_waits", "pieces that found no free bounce buffer"),
  GM_COUNTER (BC_CREDIT_WAITS, "credit_waits", "pieces that found no free credit"),
  GM_COUNTER (BC_ERRORS, "error_replies", "requests the server answered with an error"),
  GM_COUNTER (BC_TRANSPORT_ERRORS, "transport_errors", "NBD requests failed with EIO: the connection broke, or could not be made"),
  GM_COUNTER (BC_RETRIES, "retries", "idempotent requests retried after a reconnect"),
  GM_COUNTER (BC_LOST_FLUSHES, "lost_write_flushes", "flushes failed because acknowledged, unflushed writes died with a restarted server"),
  GM_COUNTER (BC_PROBES, "probes", "liveness probes: zero-length RDMA WRITEs sent after a silence with requests in flight"),
  GM_COUNTER (BC_GOODBYES, "goodbyes", "server shutdowns announced by a goodbye (writes flushed or not)"),
  GM_COUNTER (BC_RESENT, "resent", "requests the server did not serve before its goodbye, sent again after a reconnect"),
  GM_COUNTER (BC_ABANDONS, "abandons", "connections broken with writes in flight that another connection named to the server (ABANDON) before writing"),
  GM_COUNTER (BC_NAMES_TAKEN, "names_taken", "connections that took the name of one a killed bridge left open on the server (state=): their hello replaced it there"),
  GM_COUNTER (BC_TIMEOUTS, "timeouts", "connections broken because a request was unanswered for timeout= seconds"),
  GM_COUNTER (BC_EXPOSED, "bytes_exposed", "bytes of buffers never used again: lent to a connection that broke with its queue pair neither in the error state nor disconnected (a dead device), so the server might still reach them"),
};

static struct gm_stats_out bstats_out =
  GM_STATS_OUT ("bridge", NAME, "stats", bstats, BC_COUNT, NULL,
                &gmblock_rdma_debug_stats);

struct gm_rdma_addr server;
unsigned opt_credits = DEFAULT_CREDITS;
unsigned opt_timeout;
uint64_t opt_pool = DEFAULT_POOL;
enum zc_mode opt_zero_copy = ZC_AUTO;
static bool have_server;
static char *opt_state;          /* state=: absolute path, or NULL */

static int
bridge_config (const char *key, const char *value)
{
  char why[160];
  const char *w;

  if (strcmp (key, "server") == 0) {
    if (gm_rdma_addr_parse (value, &server, why, sizeof why) == -1) {
      nbdkit_error (NAME ": server=%s: %s", value, why);
      return -1;
    }
    have_server = true;
    return 0;
  }
  if (strcmp (key, "credits") == 0) {
    if (gm_parse_count (value, 1, GM_RP_MAX_CREDITS, &opt_credits, &w)) {
      nbdkit_error (NAME ": credits=%s: expected a number from 1 to %d "
                    "(requests in flight per connection)", value,
                    GM_RP_MAX_CREDITS);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "timeout") == 0) {
    double s;
    w = NULL;
    if (gm_parse_seconds (value, 0, MAX_TIMEOUT, &s, &w) == 0 &&
        s != (unsigned) s)
      w = "not a whole number";
    if (w == NULL) {
      opt_timeout = s;
      return 0;
    }
    nbdkit_error (NAME ": timeout=%s: %s (expected whole seconds from 0, "
                  "no timeout, to %d)", value, w, MAX_TIMEOUT);
    return -1;
  }
  if (strcmp (key, "pool") == 0) {
    if (gm_parse_size_range (value, MIN_POOL, MAX_POOL, &opt_pool, &w)) {
      nbdkit_error (NAME ": pool=%s: %s (expected a size from 64K to 1G, "
                    "such as 16M)", value, w);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "zero-copy") == 0) {
    enum gm_huge_mode m;        /* the same auto/on/off parser */
    if (gm_huge_mode_parse (value, &m) == -1) {
      nbdkit_error (NAME ": zero-copy=%s: expected auto, on or off", value);
      return -1;
    }
    opt_zero_copy = m == GM_HUGE_ON ? ZC_ON : m == GM_HUGE_OFF ? ZC_OFF
      : ZC_AUTO;
    return 0;
  }
  if (strcmp (key, "state") == 0) {
    free (opt_state);
    /* nbdkit's daemon mode changes directory to /. */
    opt_state = value[0] ? nbdkit_absolute_path (value) : NULL;
    if (opt_state == NULL) {
      nbdkit_error (NAME ": state=%s: expected a file name", value);
      return -1;
    }
    return 0;
  }
  switch (gm_stats_config (&bstats_out, key, value)) {
  case 1: return 0;
  case -1: return -1;
  }
  nbdkit_error (NAME ": unknown parameter '%s' (expected server=HOST[:PORT], "
                "credits=N, pool=SIZE, zero-copy=auto|on|off, state=FILE, timeout=SECONDS, "
                "stats=FILE or stats-interval=SECONDS)", key);
  return -1;
}

static int
bridge_config_complete (void)
{
  if (!have_server) {
    nbdkit_error (NAME ": server=HOST[:PORT] is required (the gmblock RDMA "
                  "server, default port %d)", GM_RDMA_DEFAULT_PORT);
    return -1;
  }
  return gm_stats_config_complete (&bstats_out);
}

static void
state_failed (int err)
{
  errno = err;
  nbdkit_error (NAME ": state=%s: cannot record the open connections: %m; "
                "a bridge restarted after this one is killed may not name "
                "them all to the server", opt_state);
}

/* state=FILE: the connections a killed bridge left open on the server
 * (abandoned.h), named to it before this one writes.  The file stays
 * open and locked: two bridges on one state file would name each
 * other's live connections.
 */
static int
open_state (void)
{
  char why[256];
  int fd;

  fd = open (opt_state, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd == -1) {
    nbdkit_error (NAME ": state=%s: %m", opt_state);
    return -1;
  }
  if (flock (fd, LOCK_EX | LOCK_NB) == -1) {
    if (errno == EWOULDBLOCK)
      nbdkit_error (NAME ": state=%s: in use by another gmblock-rdma bridge "
                    "(each bridge needs a state file of its own)", opt_state);
    else
      nbdkit_error (NAME ": state=%s: flock: %m", opt_state);
    close (fd);
    return -1;
  }
  if (gm_ab_state (fd, state_failed, why, sizeof why) == -1) {
    nbdkit_error (NAME ": state=%s: %s", opt_state, why);
    close (fd);
    return -1;
  }
  return 0;
}

/* A bridge that cannot reach any server, or cannot have the zero copy
 * it was told to have, should say so at start-up.
 */
static int
bridge_get_ready (void)
{
  char why[256];

  if (gm_stats_ready (&bstats_out) == -1)
    return -1;
  if (opt_state && open_state () == -1)
    return -1;
  if (gm_rdma_have_device (why, sizeof why) == -1) {
    nbdkit_error (NAME ": server=%s:%s: %s", server.host, server.port, why);
    return -1;
  }
  if (opt_zero_copy == ZC_ON && mem_check_odp (why, sizeof why) == -1) {
    nbdkit_error (NAME ": zero-copy=on: %s; zero copy needs on-demand-paging "
                  "MRs (zero-copy=auto falls back to the bounce pool)", why);
    return -1;
  }
  return 0;
}

#define BRIDGE_CONFIG_HELP \
  "server=HOST[:PORT]      The gmblock RDMA server (port 10810).\n" \
  "credits=N               Requests in flight per connection (16, 1 to 128).\n" \
  "pool=SIZE               Registered bounce pool for all connections (16M).\n" \
  "zero-copy=auto|on|off   Use nbdkit's buffers by ODP MRs (auto).\n" \
  "state=FILE              Name a killed bridge's connections to the server.\n" \
  "timeout=SECONDS         Break a connection whose request waits longer (0: never).\n" \
  "stats=FILE              Write counters to FILE at exit.\n" \
  "stats-interval=SECONDS  Also rewrite FILE every SECONDS (Prometheus)."

static int
bridge_after_fork (void)
{
  return gm_stats_start (&bstats_out);
}

static void
bridge_cleanup (void)
{
  gm_stats_stop (&bstats_out);
  conn_stop_all ();
}

static void
bridge_unload (void)
{
  gm_stats_final (&bstats_out);
  mem_unload ();
  free (opt_state);
}

static void *
bridge_open (int readonly)
{
  return conn_open ();
}

static void
bridge_close (void *handle)
{
  conn_close (handle);
}

/* ---- Requests. */

/* A piece in flight: its slot, its data and where it went. */
struct piece {
  int slot;
  char *user;
  struct buf_ref b;
};

/* The worse of two outcomes: a connection broken by timeout= or by
 * nbdkit's shutdown (CONN_TIMEDOUT: never sent again, even when another piece found the
 * connection already dead, -1), then another transport failure (-1: a
 * write may or may not have landed), then a request not served
 * (CONN_UNSERVED: safe to send again), then the server's error, then
 * success.
 */
static int
badness (int e)
{
  return e == CONN_TIMEDOUT ? 4 : e == -1 ? 3 : e == CONN_UNSERVED ? 2
    : e > 0 ? 1 : 0;
}

static int
worse (int a, int b)
{
  return badness (b) > badness (a) ? b : a;
}

/* Wait for the piece and account for it; *res keeps the worst outcome
 * (worse), the first error of a kind.
 */
static void
collect (struct conn *c, struct piece *p, uint8_t op, int *res)
{
  bool exposed;
  int e = conn_collect (c, p->slot, &exposed);

  if (e == 0 && op == GM_RP_READ) {
    if (p->b.bounce) {
      memcpy (p->user, p->b.addr, p->b.len);
      COUNT (BC_COPIED, p->b.len);
    }
    else
      COUNT (BC_ZERO_COPY, p->b.len);
    COUNT (BC_READ_BYTES, p->b.len);
  }
  else if (e == 0 && op == GM_RP_WRITE) {
    if (!p->b.bounce)
      COUNT (BC_ZERO_COPY, p->b.len);
    COUNT (BC_WRITE_BYTES, p->b.len);
  }
  if ((op == GM_RP_READ || op == GM_RP_WRITE) && exposed)
    mem_put_exposed (&p->b);
  else if (op == GM_RP_READ || op == GM_RP_WRITE)
    mem_put (&p->b);
  *res = worse (*res, e);
}

/* What run returns when a WRITE, TRIM or ZERO found, with its first
 * slot reserved, a broken connection of its server instance still to
 * be named (tell_abandoned asked about another instance: its
 * connection was dead, and reconnected to a restarted server only as
 * that slot was reserved).  Nothing was sent; request tells, then
 * runs it again.  Not one of conn.c's codes.
 */
#define RUN_TELL (-4)
/* How many times: each one follows a reconnect or a new break. */
#define MAX_TELLS 8

/* Whether a write about to go out on c, which holds a slot (so c does
 * not reconnect meanwhile), must wait for tell_abandoned.
 */
static bool
must_tell (struct conn *c)
{
  struct gm_ab_node *self;
  uint64_t instance;

  if (gm_ab_listed () == 0)
    return false;               /* the hot path: one atomic load */
  self = conn_ab (c, &instance);
  return gm_ab_pending (self, instance);
}

/* One request: READ and WRITE as pieces of at most max_request, as
 * many in flight as the credits allow (the oldest is collected when a
 * credit or a bounce buffer is missing: a request never waits on
 * something it holds itself).  Returns 0, a positive errno, -1 when
 * the transport failed, or RUN_TELL.  Every piece has ended when it
 * returns.
 */
/* run ()'s ring of pieces: up to every credit's piece in flight, and
 * the one being set up beside them (a review finding: with 128 credits
 * granted, the 129th piece overwrote the oldest one's entry). */
#define WINDOW (GM_RP_MAX_CREDITS + 1)

static int
run (struct conn *c, uint8_t op, uint16_t flags, char *buf, uint32_t count,
     uint64_t offset)
{
  bool data = op == GM_RP_READ || op == GM_RP_WRITE;
  struct piece win[WINDOW];
  struct gm_uf_ack ack = { 0 };
  unsigned head = 0, n = 0;
  int res = 0;
  /* The piece being sent waited for a credit, for a bounce buffer:
   * each counted once, however many times it tries again. */
  bool credit_waited = false, pool_waited = false;
  bool first = true;

  if (data && count == 0)
    return 0;
  do {
    struct piece *p = &win[(head + n) % WINDOW];
    const struct gm_rp_limits *l = conn_limits (c);
    /* Whole minimum blocks, as the client's request (the max request
     * asked, min(4M, pool=), and so the one granted, may be any size):
     * a piece off the block grid costs the server a read-modify-write
     * at each seam, or an EINVAL from a stack that enforces it. */
    uint32_t max = l->max_request - l->max_request % l->min_block;
    uint32_t len = data && count > max ? max : count;
    struct gm_rp_request r = { .op = op, .flags = flags, .length = len,
                               .offset = offset };
    bool waited = false;
    int e;

    p->slot = conn_reserve (c, n == 0, &waited);
    if ((waited || p->slot == -2) && !credit_waited) {
      COUNT (BC_CREDIT_WAITS, 1);
      credit_waited = true;
    }
    if (p->slot == -1 || p->slot == CONN_UNSERVED) {
      res = worse (res, p->slot);
      break;
    }
    /* The first slot pins c's connection, maybe just made: now its
     * instance is the one the write goes to. */
    if (first && p->slot >= 0 && gm_rp_op_writes (op) && must_tell (c)) {
      conn_unreserve (c, p->slot);
      return RUN_TELL;
    }
    first = false;
    if (p->slot == -2) {
      collect (c, &win[head], op, &res);
      head = (head + 1) % WINDOW;
      n--;
      continue;
    }
    if (data) {
      p->user = buf;
      if (mem_get (buf, len, false, &p->b) == -1) {
        if (!pool_waited)
          COUNT (BC_POOL_WAITS, 1);
        pool_waited = true;
        if (n > 0) {
          conn_unreserve (c, p->slot);
          collect (c, &win[head], op, &res);
          head = (head + 1) % WINDOW;
          n--;
          continue;
        }
        if (mem_get (buf, len, true, &p->b) == -1) {
          /* max_request fits the pool: only buffers quarantined after
           * a dead device (mem_put_exposed) leave no run of len. */
          nbdkit_error (NAME ": no pool buffer of %" PRIu32 " bytes: %m",
                        len);
          conn_unreserve (c, p->slot);
          res = EIO;
          break;
        }
      }
      if (op == GM_RP_WRITE && p->b.bounce) {
        memcpy (p->b.addr, buf, len);
        COUNT (BC_COPIED, len);
      }
      r.addr = (uintptr_t) p->b.addr;
      r.rkey = p->b.rkey;
      r.buf_len = len;
    }
    e = conn_post (c, p->slot, &r, &ack);
    if (e != 0) {
      if (data)
        mem_put (&p->b);
      res = worse (res, e);
      break;
    }
    n++;
    credit_waited = pool_waited = false;
    if (data)
      buf += len;
    count -= len;
    offset += len;
  } while (data && count > 0 && res == 0);

  while (n > 0) {
    collect (c, &win[head], op, &res);
    head = (head + 1) % WINDOW;
    n--;
  }
  /* A write is acknowledged to the client only when every piece
   * succeeded: else the pieces that did are no acknowledged writes. */
  if (res == 0)
    conn_acked (c, &ack);
  return res;
}

/* 0, or -1 with nbdkit's error set from e (a positive errno, or -1:
 * the transport failed, EIO), and said: which request, and why (the
 * connection's messages name no request, and the server's errors
 * were not said at all).
 */
static int
outcome (int e, uint8_t op, uint16_t flags, uint32_t count, uint64_t offset)
{
  const char *name = gm_rp_op_name (op);

  if (e == 0)
    return 0;
  if (e < 0) {
    COUNT (BC_TRANSPORT_ERRORS, 1);
    nbdkit_error (NAME ": %s at %" PRIu64 " length %" PRIu32 ": %s", name,
                  offset, count, e == CONN_UNSERVED
                  ? "not served by a server that shut down, and not by one "
                  "after it: failed with EIO"
                  : e == CONN_TIMEDOUT
                  ? "its connection was broken by timeout= or by nbdkit's "
                  "shutdown (see above): failed with EIO, not sent again"
                  : "the connection to the server failed: failed with EIO "
                  "(see above)");
    e = EIO;
  }
  else if (!(e == ENOTSUP && (flags & GM_RP_FLAG_FAST_ZERO))) {
    /* ENOTSUP to a fast zero is an answer, not a failure. */
    errno = e;                  /* the server's answer, mostly */
    nbdkit_error (NAME ": %s at %" PRIu64 " length %" PRIu32 ": %m", name,
                  offset, count);
  }
  nbdkit_set_error (e);
  return -1;
}

/* A request the server did not do because it shuts down is sent again
 * (any op: a write sent again is still the same write, NBD orders no
 * writes in flight), up to this many times (each waits for its goodbye,
 * or LEAVE_S, and a reconnect).
 */
#define MAX_RESENDS 4

/* Whether a request that ended with e goes out again: one the server
 * did not do, up to MAX_RESENDS times; an idempotent one whose
 * connection broke, once (on a new connection).  Counts it.
 */
static bool
again (int e, bool idempotent, int *resends, bool *retried)
{
  if (e == CONN_UNSERVED && *resends < MAX_RESENDS)
    (*resends)++;
  else if (e == -1 && idempotent && !*retried)
    *retried = true;
  else
    return false;
  COUNT (e == CONN_UNSERVED ? BC_RESENT : BC_RETRIES, 1);
  return true;
}

/* Before a WRITE, TRIM or ZERO: the server must know of every broken
 * connection that may still have writes in its storage (abandoned.h),
 * or one of them could land after this one.  0, or the error of an
 * ABANDON, which becomes this request's.  Each ABANDON is chosen while
 * c holds the slot it goes out on: c cannot reconnect meanwhile (its
 * hello would wait for this very tell, gm_ab_hello), and the instance
 * it names is the one c is connected to; should the server restart
 * before it arrives, the new one ignores it (the connection died with
 * the old process).
 */
static int
tell_abandoned (struct conn *c)
{
  struct gm_ab_node *n, *self;
  uint64_t id, instance;
  bool waited;
  int slot, e = 0;

  if (gm_ab_listed () == 0)
    return 0;                   /* the hot path: one atomic load */
  while (e == 0) {
    waited = false;
    slot = conn_reserve (c, true, &waited);
    if (waited)
      COUNT (BC_CREDIT_WAITS, 1);
    if (slot < 0)
      return slot == CONN_UNSERVED ? slot : -1;
    self = conn_ab (c, &instance);
    if (!gm_ab_take (self, instance, &id, &n)) {
      conn_unreserve (c, slot);
      break;
    }
    struct gm_rp_request r = { .op = GM_RP_ABANDON, .offset = id,
                               .addr = instance };
    e = conn_post (c, slot, &r, NULL);
    if (e == 0)
      e = conn_collect (c, slot, NULL);
    gm_ab_told (n, e == 0);
    if (e == 0)
      COUNT (BC_ABANDONS, 1);
    else
      nbdkit_debug (NAME ": ABANDON of connection 0x%" PRIx64 " failed "
                    "(%d): the write after it fails too", id, e);
  }
  return e;
}

/* run, sent again as again () says.  Returns 0 or -1 with the nbdkit
 * error set.
 */
static int
request (struct conn *c, uint8_t op, uint16_t flags, void *buf,
         uint32_t count, uint64_t offset, bool idempotent)
{
  int e, resends = 0, tells = 0;
  bool retried = false;

  do {
    e = gm_rp_op_writes (op) ? tell_abandoned (c) : 0;
    if (e == 0)
      e = run (c, op, flags, buf, count, offset);
    if (e == RUN_TELL && ++tells == MAX_TELLS)
      e = -1;                   /* nothing was sent: EIO */
  } while (e == RUN_TELL || again (e, idempotent, &resends, &retried));
  return outcome (e, op, flags, count, offset);
}

static int64_t
bridge_get_size (void *handle)
{
  return conn_limits (handle)->size;
}

static int
bridge_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                   uint32_t *maximum)
{
  const struct gm_rp_limits *l = conn_limits (handle);

  *minimum = l->min_block;
  *preferred = l->pref_block;
  *maximum = l->max_block;
  return 0;
}

#define FLAG(c, f) ((conn_limits (c)->flags & (f)) != 0)

static int
bridge_can_write (void *handle)
{
  return !FLAG (handle, GM_RP_TF_READ_ONLY);
}

static int
bridge_can_flush (void *handle)
{
  return FLAG (handle, GM_RP_TF_FLUSH);
}

static int
bridge_can_fua (void *handle)
{
  return FLAG (handle, GM_RP_TF_FUA) ? NBDKIT_FUA_NATIVE : NBDKIT_FUA_NONE;
}

static int
bridge_can_trim (void *handle)
{
  return FLAG (handle, GM_RP_TF_TRIM);
}

static int
bridge_can_zero (void *handle)
{
  /* 0: nbdkit emulates ZERO with pwrite. */
  return FLAG (handle, GM_RP_TF_ZERO);
}

static int
bridge_can_fast_zero (void *handle)
{
  return FLAG (handle, GM_RP_TF_FAST_ZERO);
}

static int
bridge_can_cache (void *handle)
{
  return FLAG (handle, GM_RP_TF_CACHE) ? NBDKIT_CACHE_NATIVE
    : NBDKIT_CACHE_NONE;
}

static int
bridge_can_multi_conn (void *handle)
{
  return FLAG (handle, GM_RP_TF_MULTI_CONN);
}

static int
bridge_is_rotational (void *handle)
{
  return FLAG (handle, GM_RP_TF_ROTATIONAL);
}

static int
bridge_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
              uint32_t flags)
{
  return request (handle, GM_RP_READ, 0, buf, count, offset, true);
}

static int
bridge_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
               uint32_t flags)
{
  /* Not retried after a transport failure (it may have landed, and NBD
   * clients retry failed writes themselves); sent again when the server
   * said it did not serve it.  The server only RDMA-READs from buf.
   */
  return request (handle, GM_RP_WRITE,
                  (flags & NBDKIT_FLAG_FUA) ? GM_RP_FLAG_FUA : 0,
                  (void *) buf, count, offset, false);
}

static int
bridge_flush (void *handle, uint32_t flags)
{
  struct gm_uf_flush f;
  int r;

  conn_flush_begin (handle, &f);
  r = request (handle, GM_RP_FLUSH, 0, NULL, 0, 0, true);
  /* Succeeding here, after a server restart, would claim writes that
   * died with the old server's caches are on stable storage.  Failed
   * or not, this FLUSH reports the loss, once. */
  if (conn_flush_lost (handle, &f) && r == 0) {
    COUNT (BC_LOST_FLUSHES, 1);
    nbdkit_error (NAME ": flush: writes acknowledged and not flushed may "
                  "be lost: the server restarted");
    nbdkit_set_error (EIO);
    return -1;
  }
  return r;
}

static int
bridge_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  return request (handle, GM_RP_TRIM,
                  (flags & NBDKIT_FLAG_FUA) ? GM_RP_FLAG_FUA : 0,
                  NULL, count, offset, false);
}

static int
bridge_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  uint16_t fl = 0;

  if (flags & NBDKIT_FLAG_FUA)
    fl |= GM_RP_FLAG_FUA;
  if (!(flags & NBDKIT_FLAG_MAY_TRIM))
    fl |= GM_RP_FLAG_NO_HOLE;
  if (flags & NBDKIT_FLAG_FAST_ZERO)
    fl |= GM_RP_FLAG_FAST_ZERO;
  return request (handle, GM_RP_ZERO, fl, NULL, count, offset, false);
}

static int
bridge_cache (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  return request (handle, GM_RP_CACHE, 0, NULL, count, offset, true);
}

static int
bridge_can_extents (void *handle)
{
  return !!(conn_limits (handle)->flags & GM_RP_TF_BLOCK_STATUS);
}

/* BLOCK_STATUS: the server RDMA-WRITEs up to EXTENTS_MAX extents into
 * a bounce buffer; they are checked (gm_rp_check_extents) before
 * nbdkit gets them.  Once, retried after a reconnect like READ.
 */
#define EXTENTS_MAX 512

static int
extents_once (struct conn *c, uint32_t count, uint64_t offset, bool one,
              struct nbdkit_extents *ex)
{
  struct gm_rp_request r = {
    .op = GM_RP_BLOCK_STATUS, .flags = one ? GM_RP_FLAG_REQ_ONE : 0,
    .length = count, .offset = offset,
  };
  struct buf_ref b;
  uint32_t n = 0, len = (one ? 1 : EXTENTS_MAX) * GM_RP_EXTENT_SIZE;
  uint64_t pos = offset;
  bool waited = false, exposed = false;
  char why[160];
  int slot, e;

  slot = conn_reserve (c, true, &waited);
  if (waited)
    COUNT (BC_CREDIT_WAITS, 1);
  if (slot < 0)
    return -1;
  if (len > mem_max_request ())
    len = mem_max_request () / GM_RP_EXTENT_SIZE * GM_RP_EXTENT_SIZE;
  if (mem_get_bounce (len, false, &b) == -1) {
    COUNT (BC_POOL_WAITS, 1);
    /* len fits the pool: it waits, and fails only when buffers
     * quarantined after a dead device (mem_put_exposed) leave no run
     * of len. */
    if (mem_get_bounce (len, true, &b) == -1) {
      nbdkit_error (NAME ": BLOCK_STATUS at %" PRIu64 ": no pool buffer "
                    "of %" PRIu32 " bytes: %m", offset, len);
      conn_unreserve (c, slot);
      return EIO;
    }
  }
  r.addr = (uintptr_t) b.addr;
  r.rkey = b.rkey;
  r.buf_len = len;
  e = conn_post (c, slot, &r, NULL);
  if (e == 0)
    e = conn_collect_count (c, slot, &n, &exposed);
  if (e == 0 && gm_rp_check_extents (b.addr, n, &r, why, sizeof why) == -1) {
    nbdkit_error (NAME ": BLOCK_STATUS at %" PRIu64 ": %s", offset, why);
    e = EIO;
  }
  for (uint32_t i = 0; e == 0 && i < n; i++) {
    struct gm_rp_extent x;
    gm_rp_decode_extent ((uint8_t *) b.addr + i * GM_RP_EXTENT_SIZE,
                         GM_RP_EXTENT_SIZE, &x, why, sizeof why);
    if (nbdkit_add_extent (ex, pos, x.length, x.flags) == -1)
      e = errno ? errno : EIO;
    pos += x.length;
  }
  if (exposed)
    mem_put_exposed (&b);
  else
    mem_put (&b);
  return e;
}

static int
bridge_extents (void *handle, uint32_t count, uint64_t offset, uint32_t flags,
                struct nbdkit_extents *ex)
{
  bool one = flags & NBDKIT_FLAG_REQ_ONE, retried = false;
  int e, resends = 0;

  /* A failed try has added no extent. */
  do
    e = extents_once (handle, count, offset, one, ex);
  while (again (e, true, &resends, &retried));
  return outcome (e, GM_RP_BLOCK_STATUS, 0, count, offset);
}

static struct nbdkit_plugin plugin = {
  .name = NAME,
  .longname = "gmblock RDMA client bridge",
  .version = GMBLOCK_VERSION,
  .config = bridge_config,
  .config_complete = bridge_config_complete,
  .config_help = BRIDGE_CONFIG_HELP,
  .magic_config_key = "server",
  .get_ready = bridge_get_ready,
  .after_fork = bridge_after_fork,
  .cleanup = bridge_cleanup,
  .unload = bridge_unload,
  .open = bridge_open,
  .close = bridge_close,
  .get_size = bridge_get_size,
  .block_size = bridge_block_size,
  .can_write = bridge_can_write,
  .can_flush = bridge_can_flush,
  .can_fua = bridge_can_fua,
  .can_trim = bridge_can_trim,
  .can_zero = bridge_can_zero,
  .can_fast_zero = bridge_can_fast_zero,
  .can_cache = bridge_can_cache,
  .can_multi_conn = bridge_can_multi_conn,
  .is_rotational = bridge_is_rotational,
  .pread = bridge_pread,
  .pwrite = bridge_pwrite,
  .flush = bridge_flush,
  .trim = bridge_trim,
  .zero = bridge_zero,
  .cache = bridge_cache,
  .can_extents = bridge_can_extents,
  .extents = bridge_extents,
  .errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN (plugin)

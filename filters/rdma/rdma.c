/* gmblock-rdma filter: serves the stack below it to RDMA clients.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A top filter: NBD/TCP clients pass through untouched, and RDMA
 * clients (the gmblock-rdma bridge, docs/rdma-protocol.md) get each a
 * context of their own on the same stack below (cache, readahead,
 * plugin), opened with nbdkit_next_context_open.  docs/rdma-design.md
 * says why and how.
 *
 * This file: options, start-up, the listener thread (RDMA CM events:
 * connect requests, disconnects) and accepting clients.  serve.c
 * serves a client; stats.c counts.  Buffers come from one registered
 * pool shared by all clients (rdma-pool=).
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbdkitargs.h"
#include "rdma.h"
#include "rdmaaddr.h"
#include "trialopen.h"
#include "once.h"
#include "registry.h"
#include "sizes.h"
#include "stripegeo.h"
#include "topology.h"

GM_DEBUG_FLAG (gmblock_rdma_debug_stats, "gmblock-rdma_debug_stats");
GM_DEBUG_FLAG (gmblock_rdma_debug_trace, "gmblock-rdma_debug_trace");
/* -D gmblock-rdma.drain_delay_ms=N: a test holds the shutdown that long
 * after the clients began to drain, so requests surely arrive then (and
 * are left undone). */
GM_DEBUG_FLAG (gmblock_rdma_debug_drain_delay_ms,
               "gmblock-rdma_debug_drain_delay_ms");

#define DEFAULT_POOL (32u << 20)
#define MIN_POOL (1u << 20)
#define MAX_POOL (4ull << 30)
#define MAX_REQUEST (1u << 20)  /* largest READ/WRITE offered */
#define CREDITS 16              /* offered per client at most */
#define ACK_TIMEOUT 18          /* our QP's: 4.096 us x 2^18, about 1 s */
#define DEFAULT_THREADS 8        /* two piece reads per member of a 4-disk array */
#define MAX_THREADS 64
#define DEFAULT_MAX_CLIENTS 64   /* each: a context below, 1 + rdma-threads threads */
#define MAX_MAX_CLIENTS 4096
/* rdma-keepalive=: a client host that died, or a network cut for good,
 * leaves an idle client here for ever (nothing is sent to it), holding
 * its context below, its threads and a place in rdma-max-clients. */
#define DEFAULT_KEEPALIVE 60
#define MAX_KEEPALIVE 86400
#define DEFAULT_PIECE (256u << 10)

/* Configuration. */
static struct gm_rdma_addr listen_addr;
static bool have_addr;
static uint64_t pool_size = DEFAULT_POOL;
static bool piece_set;          /* rdma-piece= given */
static bool insecure;           /* rdma-insecure=true */
struct rdma_settings gm_rdma_set = {
  .threads = DEFAULT_THREADS, .piece = DEFAULT_PIECE, .pool_stage = true,
  .max_clients = DEFAULT_MAX_CLIENTS, .keepalive = DEFAULT_KEEPALIVE,
};

/* Process-wide RDMA state, from .after_fork to .cleanup. */
static struct rdma_event_channel *cm_ch;
static struct rdma_cm_id *listen_id;
static struct ibv_pd *pd;
/* Its device's limits (read once; zero if the query failed). */
static struct ibv_device_attr dev_attr;
static nbdkit_backend *backend;
static pthread_t listener;
static bool listener_started;
static int wake_pipe[2] = { -1, -1 };

struct client *gm_rdma_clients;  /* under gm_rdma_clients_lock */
pthread_mutex_t gm_rdma_clients_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- Options. */

/* A whole number from 1 to max for key, or a message saying so. */
static int
parse_count (const char *key, const char *value, unsigned max,
             const char *what, unsigned *out)
{
  const char *why;

  if (gm_parse_count (value, 1, max, out, &why)) {
    nbdkit_error (NAME ": %s=%s: expected a number of %s from 1 to %u",
                  key, value, what, max);
    return -1;
  }
  return 0;
}

static int
rdma_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
             const char *key, const char *value)
{
  char why[160];

  if (strcmp (key, "rdma") == 0) {
    if (gm_rdma_addr_parse (value, &listen_addr, why, sizeof why) == -1) {
      nbdkit_error (NAME ": rdma=%s: %s", value, why);
      return -1;
    }
    have_addr = true;
    return 0;
  }
  if (strcmp (key, "rdma-pool") == 0) {
    const char *w;
    char a[32], b[32];
    if (gm_parse_size_range (value, MIN_POOL, MAX_POOL, &pool_size, &w)) {
      nbdkit_error (NAME ": rdma-pool=%s: %s (expected a size from %s to %s, "
                    "such as 32M)", value, w,
                    gm_format_size (MIN_POOL, a, sizeof a),
                    gm_format_size (MAX_POOL, b, sizeof b));
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "rdma-threads") == 0)
    return parse_count (key, value, MAX_THREADS,
                        "request workers per RDMA client", &gm_rdma_set.threads);
  if (strcmp (key, "rdma-max-clients") == 0)
    return parse_count (key, value, MAX_MAX_CLIENTS,
                        "RDMA clients served at once", &gm_rdma_set.max_clients);
  if (strcmp (key, "rdma-keepalive") == 0) {
    const char *w = NULL;
    double s;
    if (gm_parse_seconds (value, 0, MAX_KEEPALIVE, &s, &w) == 0 &&
        s != (unsigned) s)
      w = "not a whole number";
    if (w) {
      nbdkit_error (NAME ": rdma-keepalive=%s: %s (expected whole seconds "
                    "from 0, never, to %d)", value, w, MAX_KEEPALIVE);
      return -1;
    }
    gm_rdma_set.keepalive = s;
    return 0;
  }
  if (strcmp (key, "rdma-piece") == 0) {
    const char *w;
    uint64_t n;

    if (gm_parse_size (value, &n, &w) == -1 ||
        (n != 0 &&
         gm_parse_pow2_size (value, 4096, MAX_REQUEST, &n, &w) == -1)) {
      nbdkit_error (NAME ": rdma-piece=%s: %s (expected 0, to send each "
                    "READ whole, or a power of two from 4K to 1M)", value, w);
      return -1;
    }
    gm_rdma_set.piece = n;
    piece_set = true;
    return 0;
  }
  if (strcmp (key, "rdma-split") == 0) {
    if (strcmp (value, "alone") == 0)
      gm_rdma_set.split_always = false;
    else if (strcmp (value, "always") == 0)
      gm_rdma_set.split_always = true;
    else {
      nbdkit_error (NAME ": rdma-split=%s: expected alone (split a READ "
                    "only while it is its client's one request in service) "
                    "or always", value);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "rdma-pool-memory") == 0) {
    if (strcmp (value, "host") == 0)
      gm_rdma_set.pool_device = false;
    else if (strcmp (value, "p2pmem") == 0 ||
             strcmp (value, "p2pmem:auto") == 0) {
      gm_rdma_set.pool_device = true;
      *gm_rdma_set.pool_bdf = '\0';
    }
    else if (strncmp (value, "p2pmem:", 7) == 0 &&
             gm_parse_bdf (value + 7, strlen (value + 7), gm_rdma_set.pool_bdf,
                           sizeof gm_rdma_set.pool_bdf) == 0)
      gm_rdma_set.pool_device = true;
    else {
      nbdkit_error (NAME ": rdma-pool-memory=%s: expected host, p2pmem, "
                    "p2pmem:auto or p2pmem:BDF, where BDF is a PCI address "
                    "such as 0000:04:00.0 (gmblock-topology lists them)",
                    value);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "rdma-insecure") == 0) {
    int b = nbdkit_parse_bool (value);
    if (b == -1) {
      nbdkit_error (NAME ": rdma-insecure=%s: expected true or false", value);
      return -1;
    }
    insecure = b;
    return 0;
  }
  if (strcmp (key, "rdma-pool-fallback") == 0) {
    if (strcmp (value, "stage") == 0 || strcmp (value, "refuse") == 0) {
      gm_rdma_set.pool_stage = strcmp (value, "stage") == 0;
      return 0;
    }
    nbdkit_error (NAME ": rdma-pool-fallback=%s: expected stage or refuse",
                  value);
    return -1;
  }
  switch (gm_stats_config (&gm_rdma_stats_out, key, value)) {
  case 1: return 0;
  case -1: return -1;
  }
  return next (nxdata, key, value);
}

/* gmblock-stripe below publishes its geometry: then a READ's pieces
 * are its chunks, one stream per data disk (unless rdma-piece= says
 * otherwise), so each member's data is sent as it lands.
 */
static int
stripe_streams (void)
{
  struct gm_stripe g;
  char why[256];
  int r = gm_stripe_from_registry (&g, why, sizeof why);

  if (r == -1) {
    nbdkit_error (NAME ": %s", why);
    return -1;
  }
  if (r == 0 || piece_set)
    return 0;
  if (g.chunk < 4096 || g.chunk > MAX_REQUEST) {
    nbdkit_debug (NAME ": %s: chunks that do not fit a piece, pieces of %u "
                  "bytes", g.source, gm_rdma_set.piece);
    return 0;
  }
  gm_rdma_set.piece = g.chunk;
  gm_rdma_set.streams = g.data_disks;
  gm_rdma_set.stripe_offset = g.offset;
  return 0;
}

static int
rdma_config_complete (nbdkit_next_config_complete *next,
                      nbdkit_backend *nxdata)
{
  struct gm_nbdkit_args args;

  /* Both instances would share one shared object's state (once.h). */
  if (!gm_first_instance ()) {
    nbdkit_error (NAME ": --filter=gmblock-rdma is given twice: the "
                  "stack can hold it once (one RDMA listener and pool "
                  "per process)");
    return -1;
  }
  if (!have_addr) {
    nbdkit_error (NAME ": rdma=ADDR[:PORT] is required (the address to "
                  "listen on for RDMA clients, default port %d)",
                  GM_RDMA_DEFAULT_PORT);
    return -1;
  }
  if (gm_stats_config_complete (&gm_rdma_stats_out) == -1 ||
      next (nxdata) == -1)
    return -1;
  /* nbdkit applies its -r to the contexts it opens for its clients, not
   * to those this filter opens for RDMA clients: their writes reached
   * the disk of a read-only server. */
  gm_nbdkit_self (&args);
  gm_rdma_set.readonly = args.readonly;
  if (gm_rdma_set.readonly)
    nbdkit_debug (NAME ": nbdkit -r: RDMA clients are served read-only too");
  /* Nor do nbdkit's access controls reach them: a server that turns
   * away TCP clients without TLS, or by address, would serve anyone on
   * the RDMA network unless the user says that is meant. */
  if (args.access && !insecure) {
    nbdkit_error (NAME ": nbdkit runs with %s, which RDMA clients bypass "
                  "(the RDMA transport has no TLS, and nbdkit does not see "
                  "its clients): add rdma-insecure=true to serve them "
                  "anyway, on a network only trusted hosts reach",
                  args.access);
    return -1;
  }
  return stripe_streams ();
}

#define RDMA_CONFIG_HELP \
  "rdma=ADDR[:PORT]        Listen for RDMA clients there (port 10810).\n" \
  "rdma-pool=SIZE          Registered buffer pool shared by RDMA clients (32M).\n" \
  "rdma-threads=N          Request workers per RDMA client (8).\n" \
  "rdma-max-clients=N      RDMA clients served at once (64).\n" \
  "rdma-keepalive=SECONDS  Probe a client silent that long; drop it if gone (60).\n" \
  "rdma-piece=SIZE         Send READs in pieces as they land (256K; 0: whole).\n" \
  "rdma-split=alone|always Split a READ only when alone in service (alone).\n" \
  "rdma-pool-memory=host|p2pmem[:auto|:BDF]  Where requests' data lands (host).\n" \
  "rdma-pool-fallback=stage|refuse  If the NIC cannot register it (stage).\n" \
  "rdma-insecure=true      Serve RDMA clients under --tls=require or the ip filter.\n" \
  "rdma-stats=FILE         Write counters to FILE at exit.\n" \
  "rdma-stats-interval=SECONDS  Also rewrite FILE every SECONDS (Prometheus)."

static int
rdma_get_ready (int thread_model)
{
  char why[256];

  if (gm_stats_ready (&gm_rdma_stats_out) == -1)
    return -1;
  if (thread_model < NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS) {
    nbdkit_error (NAME ": the plugin serialises all requests, but RDMA "
                  "clients are served by threads of their own: use a plugin "
                  "that allows concurrent requests");
    return -1;
  }
  /* One request at a time on a context: no workers side by side. */
  gm_rdma_set.serial = thread_model < NBDKIT_THREAD_MODEL_PARALLEL;
  if (gm_rdma_have_device (why, sizeof why) == -1) {
    nbdkit_error (NAME ": rdma=%s:%s: %s", listen_addr.host, listen_addr.port,
                  why);
    return -1;
  }
  if (gm_rdma_bind_trial (&listen_addr, why, sizeof why) == -1) {
    nbdkit_error (NAME ": %s", why);
    return -1;
  }
  return 0;
}

/* ---- Accepting and freeing clients (listener thread). */

/* Connection ids in rdma_destroy_id: Linux's CM holds it while a
 * message of the connection is still being retried, uninterruptibly,
 * and nothing ends the process before it returns: a REP left retried
 * by a DREQ sent too early (disconnect.c) held one for about a minute
 * (lab, CI of b16e0ca: a server 30 s past SIGTERM, its one busy thread
 * in cm_destroy_id, after clients dropped on their first request).  A
 * shutdown that waits for it says so. */
static _Atomic unsigned destroying;
#define SLOW_S 10               /* a shutdown phase this long says why */

static void
client_free (struct client *c)
{
  if (c->thread_started)
    pthread_join (c->tid, NULL);
  gm_rdma_client_release (c);
  if (c->next) {
    c->next->finalize (c->next);
    nbdkit_next_context_close (c->next);
  }
  if (c->id) {
    uint64_t t0 = gm_now_ns (), took;
    atomic_fetch_add (&destroying, 1);
    rdma_destroy_id (c->id);
    atomic_fetch_sub (&destroying, 1);
    took = (gm_now_ns () - t0) / 1000000000u;
    if (took >= SLOW_S)
      nbdkit_debug (NAME ": %s: rdma_destroy_id took %" PRIu64 " s (the "
                    "kernel's connection manager)", c->peer, took);
  }
  free (c);
}

static void *
free_run (void *c)
{
  client_free (c);
  return NULL;
}

/* Free every client of list (linked by next_client), all at once: a
 * client_free can block for seconds (rdma_destroy_id in the 6.1 CM's
 * TIMEWAIT, up to 10 s), and freed one after the other the dozen
 * connections of a bridge that just left could keep a shutdown
 * waiting for minutes.  Returns once all are freed. */
#define FREE_AT_ONCE 64

static void
free_clients (struct client *list)
{
  while (list) {
    pthread_t t[FREE_AT_ONCE];
    bool threaded[FREE_AT_ONCE];
    unsigned n;

    for (n = 0; list && n < FREE_AT_ONCE; n++) {
      struct client *c = list;
      list = c->next_client;
      threaded[n] = pthread_create (&t[n], NULL, free_run, c) == 0;
      if (!threaded[n])
        client_free (c);        /* no thread to spare: here, in turn */
    }
    for (unsigned i = 0; i < n; i++)
      if (threaded[i])
        pthread_join (t[i], NULL);
  }
}

/* Open c's context on the stack below and learn what it offers. */
/* This server process, in every welcome: a bridge that sees another
 * instance knows the writes this one acknowledged and did not flush
 * may be gone (docs/rdma-protocol.md).
 */
static uint64_t instance;

static int
open_below (struct client *c, struct gm_rp_limits *l)
{
  nbdkit_next *n;
  uint32_t bmin, bpref, bmax;
  int64_t size;
  int w, fl, fua, tr, z, fz, ca, mc, rot, ex;

  n = nbdkit_next_context_open (backend, gm_rdma_set.readonly, "", 1);
  if (n == NULL)
    return -1;
  if (n->prepare (n) == -1) {
    nbdkit_next_context_close (n);
    return -1;
  }
  c->next = n;
  size = n->get_size (n);
  w = n->can_write (n);
  fl = n->can_flush (n);
  fua = n->can_fua (n);
  tr = n->can_trim (n);
  z = n->can_zero (n);
  fz = n->can_fast_zero (n);
  ca = n->can_cache (n);
  mc = n->can_multi_conn (n);
  rot = n->is_rotational (n);
  ex = n->can_extents (n);
  if (size < 0 || w < 0 || fl < 0 || fua < 0 || tr < 0 || z < 0 || fz < 0 ||
      ca < 0 || mc < 0 || rot < 0 || ex < 0 ||
      n->block_size (n, &bmin, &bpref, &bmax) == -1)
    return -1;
  if (bmin == 0) {              /* no constraints */
    bmin = 1;
    bpref = 4096;
    bmax = 0xffffffff;
  }
  if (bpref < 512)
    bpref = 512;
  memset (l, 0, sizeof *l);
  l->size = size;
  l->min_block = bmin;
  l->pref_block = bpref;
  l->max_block = bmax;
  l->max_request = gm_round_down (bmax < MAX_REQUEST ? bmax : MAX_REQUEST, bmin);
  l->credits = CREDITS;
  l->instance = instance;
  if (!w)
    l->flags |= GM_RP_TF_READ_ONLY;
  if (fl)
    l->flags |= GM_RP_TF_FLUSH;
  if (w && fua != NBDKIT_FUA_NONE)
    l->flags |= GM_RP_TF_FUA;
  if (rot)
    l->flags |= GM_RP_TF_ROTATIONAL;
  if (w && tr)
    l->flags |= GM_RP_TF_TRIM;
  if (w && z != NBDKIT_ZERO_NONE) {
    l->flags |= GM_RP_TF_ZERO;
    if (fz)
      l->flags |= GM_RP_TF_FAST_ZERO;
  }
  if (mc)
    l->flags |= GM_RP_TF_MULTI_CONN;
  if (ca != NBDKIT_CACHE_NONE)
    l->flags |= GM_RP_TF_CACHE;
  if (ex)
    l->flags |= GM_RP_TF_BLOCK_STATUS;
  return 0;
}

static void
refuse (struct rdma_cm_id *id, struct gm_rp_welcome *w, const char *peer)
{
  uint8_t msg[GM_RP_WELCOME_SIZE];

  nbdkit_debug (NAME ": refusing %s: %s", peer, w->reason);
  COUNT (RC_REFUSED, 1);
  gm_rp_encode_welcome (w, msg);
  rdma_reject (id, msg, sizeof msg);
  rdma_destroy_id (id);
}

static void
peer_name (struct rdma_cm_id *id, char *buf, size_t len)
{
  struct sockaddr *sa = rdma_get_peer_addr (id);
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";

  getnameinfo (sa, sa->sa_family == AF_INET6 ? sizeof (struct sockaddr_in6)
               : sizeof (struct sockaddr_in), host, sizeof host,
               port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
  snprintf (buf, len, "%s:%s", host, port);
}

/* A connect request on id (a new cm_id owned by us from now on). */
static void
on_connect_request (struct rdma_cm_id *id, const struct rdma_conn_param *cp)
{
  struct client *c;
  struct gm_rp_limits offer;
  struct gm_rp_welcome w;
  struct gm_rp_hello h;
  uint64_t conn_id = 0;
  struct rdma_conn_param accept;
  uint8_t msg[GM_RP_WELCOME_SIZE];
  char why[160];
  char peer[64];
  unsigned n;

  peer_name (id, peer, sizeof peer);
  if (id->verbs != pd->context) {
    gm_rp_welcome_refusal (&w, GM_RP_ENOTSUP,
                           "connected through another RDMA device");
    refuse (id, &w, peer);
    return;
  }
  /* Each client holds a context below and its own threads: bounded.
   * A connection this one replaces (its bridge connecting again after a
   * network failure we did not notice) is not counted: it is dropped
   * below, and refusing the new one would keep the dead one for ever.
   * The hello is judged in full later.
   */
  if (gm_rp_decode_hello (cp->private_data, cp->private_data_len, &h,
                          why, sizeof why) == 0 && h.version >= 4)
    conn_id = h.conn_id;
  pthread_mutex_lock (&gm_rdma_clients_lock);
  n = 0;
  for (struct client *o = gm_rdma_clients; o; o = o->next_client)
    if (!gm_rdma_is_predecessor (o, peer, conn_id))
      n++;
  pthread_mutex_unlock (&gm_rdma_clients_lock);
  if (n >= gm_rdma_set.max_clients) {
    snprintf (why, sizeof why, "too many RDMA clients (rdma-max-clients=%u)",
              gm_rdma_set.max_clients);
    nbdkit_error (NAME ": refusing %s: %s", peer, why);
    gm_rp_welcome_refusal (&w, GM_RP_ENOSPC, why);
    refuse (id, &w, peer);
    return;
  }
  c = gm_rdma_client_new ();
  if (c == NULL) {
    gm_rp_welcome_refusal (&w, GM_RP_ENOMEM, "out of memory");
    refuse (id, &w, peer);
    return;
  }
  strcpy (c->peer, peer);
  gm_rp_conn_init (&c->rp, GM_RP_SERVER);
  if (open_below (c, &offer) == -1) {
    gm_rp_welcome_refusal (&w, GM_RP_EIO, "cannot open the export");
    goto refused;
  }
  if (gm_rp_conn_accept_hello (&c->rp, cp->private_data,
                               cp->private_data_len, &offer, &w,
                               why, sizeof why) == -1) {
    nbdkit_error (NAME ": %s: bad hello: %s", peer, why);
    COUNT (RC_PROTO_ERRORS, 1);
    goto refused;
  }
  c->id = id;
  /* Before it is listed: an ABANDON received before now never names
   * it (fence.c). */
  c->accepted_ns = gm_now_ns ();
  gm_rdma_fence_predecessor (c);
  if (gm_rdma_client_setup (c) == -1)
    goto failed;
  gm_rp_encode_welcome (&w, msg);
  memset (&accept, 0, sizeof accept);
  accept.private_data = msg;
  accept.private_data_len = sizeof msg;
  accept.initiator_depth = cp->responder_resources ? cp->responder_resources : 1;
  accept.responder_resources = cp->initiator_depth;
  /* Within what this device takes too (librdmacm refuses the accept
   * otherwise): a client on another NIC may offer more. */
  if (dev_attr.max_qp_init_rd_atom > 0 &&
      accept.initiator_depth > (unsigned) dev_attr.max_qp_init_rd_atom)
    accept.initiator_depth = dev_attr.max_qp_init_rd_atom;
  if (dev_attr.max_qp_rd_atom > 0 &&
      accept.responder_resources > (unsigned) dev_attr.max_qp_rd_atom)
    accept.responder_resources = dev_attr.max_qp_rd_atom;
  accept.rnr_retry_count = 7;
  /* Our QP's ACK timeout comes from the client's request, up to 31
   * (4.096 us x 2^31: over two hours a retry): a client gone silent
   * would keep our RDMA READ, and its buffer, that long.  18 (about 1 s,
   * RoCE's default) bounds it; the watchdog drops the client anyway. */
  {
    uint8_t t = ACK_TIMEOUT;
    if (rdma_set_option (id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                         &t, sizeof t))
      nbdkit_debug (NAME ": %s: cannot cap the ACK timeout: %m", peer);
  }
  if (rdma_accept (id, &accept))
    goto failed;
  id->context = c;
  if (pthread_create (&c->tid, NULL, gm_rdma_client_run, c))
    gm_rdma_disconnect (c);
  else
    c->thread_started = true;
  pthread_mutex_lock (&gm_rdma_clients_lock);
  c->next_client = gm_rdma_clients;
  gm_rdma_clients = c;
  pthread_mutex_unlock (&gm_rdma_clients_lock);
  COUNT (RC_CLIENTS, 1);
  nbdkit_debug (NAME ": accepted %s: %u credits, max request %u, "
                "%u workers", peer, c->rp.lim.credits,
                c->rp.lim.max_request, c->nworkers);
  return;

 failed:
  nbdkit_error (NAME ": %s: cannot set up the connection: %m", peer);
  gm_rp_welcome_refusal (&w, GM_RP_ENOMEM, "out of resources");
 refused:
  {
    uint8_t m[GM_RP_WELCOME_SIZE];
    COUNT (RC_REFUSED, 1);
    gm_rp_encode_welcome (&w, m);
    rdma_reject (id, m, sizeof m);
    c->id = id;
    client_free (c);
  }
}

/* The client on id is gone (or never got established): disconnecting
 * flushes its QP, so its thread ends soon; reap frees it then.  The
 * listener never waits for a client's thread (which may be waiting for
 * a pool slot or the storage), so connects are always answered.
 * A client gets more than one such event (DISCONNECTED, then
 * TIMEWAIT_EXIT): after the first it may be with the reaper, its QP
 * and lock destroyed; only its memory and id are still there (the
 * event is not acked yet: listener_run).
 */
static void
on_gone (struct rdma_cm_id *id)
{
  struct client *c = id->context;

  if (c == NULL || c->gone)
    return;
  /* Fenced before the disconnect, so before the client can see the
   * break, and before the next connect request is taken (fence.c): a
   * bridge restarted at once must find this one fenced. */
  gm_rdma_client_ending (c);
  rdma_disconnect (id);
  c->gone = true;
  nbdkit_debug (NAME ": %s disconnected", c->peer);
}

/* Clients are freed by a thread of their own: client_free can block
 * for long (rdma_destroy_id: the 6.1 kernel's CM waits up to 10 s for a
 * connection in TIMEWAIT; the stack below finalizing the client's
 * context), and connect requests must be answered meanwhile (a CI run
 * saw a connect unanswered for 20 s while the listener freed two
 * dropped clients).
 */
static pthread_t reaper;
static bool reaper_started, reaper_stop;
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dead_cv = PTHREAD_COND_INITIALIZER;
static struct client *dead;     /* unlinked, to be freed */

static void *
reaper_run (void *arg)
{
  pthread_mutex_lock (&dead_lock);
  for (;;) {
    struct client *list = dead;

    if (list == NULL) {
      if (reaper_stop)
        break;
      pthread_cond_wait (&dead_cv, &dead_lock);
      continue;
    }
    dead = NULL;
    pthread_mutex_unlock (&dead_lock);
    free_clients (list);
    pthread_mutex_lock (&dead_lock);
  }
  pthread_mutex_unlock (&dead_lock);
  return NULL;
}

/* Unlink the clients whose threads have returned (gone ones only, or
 * any once shutting down) and hand them to the reaper; whether there
 * were any.  Unlinked under the clients lock: workers of the others
 * look through the list (fence.c).
 */
static bool
reap_finished (bool gone_only)
{
  struct client **p = &gm_rdma_clients, *c, *list = NULL;

  pthread_mutex_lock (&gm_rdma_clients_lock);
  while ((c = *p) != NULL) {
    if ((c->gone || !gone_only) && !gm_rdma_held (c) &&
        (!c->thread_started || atomic_load (&c->finished))) {
      *p = c->next_client;
      c->next_client = list;
      list = c;
    }
    else
      p = &c->next_client;
  }
  pthread_mutex_unlock (&gm_rdma_clients_lock);
  if (list == NULL)
    return false;
  if (!reaper_started) {        /* a failed start-up: no reaper */
    free_clients (list);
    return true;
  }
  pthread_mutex_lock (&dead_lock);
  while (list) {
    c = list;
    list = c->next_client;
    c->next_client = dead;
    dead = c;
  }
  pthread_cond_signal (&dead_cv);
  pthread_mutex_unlock (&dead_lock);
  return true;
}

static void *
listener_run (void *arg)
{
  for (;;) {
    struct pollfd fds[2] = {
      { .fd = cm_ch->fd, .events = POLLIN },
      { .fd = wake_pipe[0], .events = POLLIN },
    };
    struct rdma_cm_event *ev;
    struct rdma_cm_id *id;
    enum rdma_cm_event_type type;

    int n = poll (fds, 2, 200);

    if (n == -1 && errno != EINTR)
      break;
    reap_finished (true);
    gm_rdma_release_held ();
    if (n <= 0)
      continue;
    if (fds[1].revents)
      break;
    if (rdma_get_cm_event (cm_ch, &ev)) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      break;
    }
    id = ev->id;
    type = ev->event;
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      struct rdma_conn_param cp = ev->param.conn;
      uint8_t hello[256];       /* private_data_len is a uint8_t */
      size_t len = cp.private_data_len;
      /* The private data lives in the event: copy it, ack, then act. */
      if (cp.private_data)
        memcpy (hello, cp.private_data, len);
      cp.private_data = hello;
      cp.private_data_len = len;
      rdma_ack_cm_event (ev);
      on_connect_request (id, &cp);
      continue;
    }
    /* Acked after it is handled: the reaper's rdma_destroy_id waits
     * for every event of its id to be acked, so the id and its client
     * are still there while on_gone looks at them (acked first, a
     * client's second event could find both freed). */
    switch (type) {
    case RDMA_CM_EVENT_ESTABLISHED:
      if (id != listen_id && id->context)
        gm_rdma_established (id->context);
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      if (id != listen_id)
        on_gone (id);
      break;
    default:
      break;
    }
    rdma_ack_cm_event (ev);
  }
  return NULL;
}

/* ---- Shutting down. */

#define DRAIN_S 30              /* requests in service at shutdown */
#define BYE_MS 2000             /* a goodbye's completion */

static bool
before (uint64_t deadline)
{
  return gm_now_ns () < deadline;
}

/* A shutdown phase waiting SLOW_S says once what for, so that a server
 * slow to exit (or killed for it) always leaves a reason in its log:
 * twice a server killed 30 s after SIGTERM left none. */
static void
say_waiting (const char *what, uint64_t since, bool *said)
{
  char line[2048] = "";

  if (*said || gm_now_ns () - since < SLOW_S * 1000000000ull)
    return;
  *said = true;
  for (struct client *c = gm_rdma_clients; c; c = c->next_client)
    if (!atomic_load (&c->finished))
      gm_rdma_client_describe (c, line, sizeof line);
  nbdkit_error (NAME ": shutdown: %d s waiting %s: %s", SLOW_S, what,
                line[0] ? line : "no client unfinished");
}

/* Shutting down with clients connected (docs/rdma-protocol.md,
 * "Goodbye"): every request a client sent until now is served and
 * answered, later ones are not served; then the stack below is flushed
 * and the client told, so that it sends what was not served to the
 * next server and knows that a restart lost nothing it acknowledged.
 * All clients drain before the first flush: with multi-conn a
 * goodbye's flush answers for every connection, so no write may be
 * acknowledged after it.  A client still busy after DRAIN_S is
 * disconnected without a goodbye, as a version 2 one is at once.
 */
static void
say_goodbyes (void)
{
  uint64_t started = gm_now_ns (), deadline = started + DRAIN_S * 1000000000ull;
  struct client *c;
  bool said = false;

  /* The listener is gone: a client that leaves now is found by its
   * poller (failed completions), not by a CM event. */
  for (c = gm_rdma_clients; c; c = c->next_client)
    c->farewell = c->thread_started && !atomic_load (&c->finished) &&
      gm_rdma_client_drain (c);
  if (gmblock_rdma_debug_drain_delay_ms > 0)
    usleep ((useconds_t) gmblock_rdma_debug_drain_delay_ms * 1000u);
  /* Clients that end meanwhile are freed meanwhile: one may hold, in a
   * reply whose completion never comes, the pool memory a request of
   * another still being drained waits for (a review finding: the drain
   * then waited its full DRAIN_S). */
  for (;;) {
    bool busy = false;
    reap_finished (false);
    for (c = gm_rdma_clients; c && !busy; c = c->next_client)
      busy = c->farewell && !gm_rdma_client_drained (c);
    if (!busy || !before (deadline))
      break;
    say_waiting ("for requests in service to be answered", started, &said);
    usleep (10000);
  }
  for (c = gm_rdma_clients; c; c = c->next_client) {
    if (c->farewell && !gm_rdma_client_drained (c)) {
      nbdkit_error (NAME ": %s: requests still in service %d s into the "
                    "shutdown: disconnected without a goodbye (they fail)",
                    c->peer, DRAIN_S);
      c->farewell = false;
      gm_rdma_disconnect (c);
    }
  }
  for (c = gm_rdma_clients; c; c = c->next_client) {
    bool flushed = false;
    int err = 0;

    if (c->farewell && atomic_load (&c->finished))
      c->farewell = false;      /* it left while the others drained */
    if (!c->farewell)
      continue;
    /* Unbounded, as any flush: nbdkit's own shutdown waits for its
     * requests too, and the client's probes find the server alive. */
    if (c->rp.lim.flags & GM_RP_TF_FLUSH) {
      flushed = c->next->flush (c->next, 0, &err) == 0;
      if (!flushed) {
        errno = err;
        nbdkit_error (NAME ": %s: flush at shutdown: %m: the goodbye does "
                      "not say the writes are flushed", c->peer);
      }
    }
    if (gm_rdma_client_goodbye (c, flushed) == -1)
      c->farewell = false;
    else if (flushed)
      COUNT (RC_GOODBYES, 1);
  }
  deadline = gm_now_ns () + BYE_MS * 1000000ull;
  for (c = gm_rdma_clients; c; c = c->next_client)
    while (c->farewell && gm_rdma_client_bye (c) == BYE_POSTED &&
           !atomic_load (&c->finished) && before (deadline))
      usleep (5000);
  for (c = gm_rdma_clients; c; c = c->next_client)
    if (c->farewell)
      nbdkit_debug (NAME ": %s: goodbye %s", c->peer,
                    gm_rdma_client_bye (c) == BYE_SENT ? "delivered"
                    : "not delivered");
}

/* ---- Life cycle. */

static void rdma_cleanup (nbdkit_backend *b);

static int
rdma_after_fork (nbdkit_backend *b)
{
  char why[256];

  backend = b;
  /* Before any verbs resource: the trial forks. */
  if (gm_trial_open_below (NAME, b, gm_rdma_set.readonly) == -1)
    return -1;
  if (instance == 0 && gm_rp_random_id (&instance) == -1) {
    nbdkit_error (NAME ": getrandom: %m");
    return -1;
  }
  if (gm_rdma_bind (&listen_addr, &cm_ch, &listen_id, why, sizeof why)) {
    nbdkit_error (NAME ": %s", why);
    goto fail;
  }
  pd = ibv_alloc_pd (listen_id->verbs);
  if (pd == NULL) {
    nbdkit_error (NAME ": ibv_alloc_pd: %m");
    goto fail;
  }
  if (ibv_query_device (listen_id->verbs, &dev_attr))
    memset (&dev_attr, 0, sizeof dev_attr);
  if (gm_rdma_memory_setup (pd, pool_size) == -1 ||
      gm_rdma_memory_probe (b) == -1)
    goto fail;
  if (rdma_listen (listen_id, 64)) {
    nbdkit_error (NAME ": rdma_listen on %s:%s: %m", listen_addr.host,
                  listen_addr.port);
    goto fail;
  }
  if ((errno = pthread_create (&reaper, NULL, reaper_run, NULL))) {
    nbdkit_error (NAME ": cannot start the reaper: %m");
    goto fail;
  }
  reaper_started = true;
  if (pipe2 (wake_pipe, O_CLOEXEC) || pthread_create (&listener, NULL,
                                                      listener_run, NULL)) {
    nbdkit_error (NAME ": cannot start the listener: %m");
    goto fail;
  }
  listener_started = true;
  /* The statistics thread after the pools: its refresh reads
   * gm_rdma_pool and send_pool, which its pthread_create publishes.
   */
  if (gm_stats_start (&gm_rdma_stats_out) == -1)
    goto fail;
  nbdkit_debug (NAME ": listening on %s:%s (device %s), pool %zu bytes of %s, "
                "%u workers per client, pieces of %u bytes (%s)%s",
                listen_addr.host, listen_addr.port,
                ibv_get_device_name (listen_id->verbs->device),
                gm_rdma_pool->mem.len, gm_rdma_memory_desc (),
                gm_rdma_set.serial ? 1 : gm_rdma_set.threads,
                gm_rdma_set.piece,
                gm_rdma_set.split_always ? "every READ" : "READs alone",
                gm_rdma_set.streams ? ", one stream per stripe data disk" : "");
  return 0;

 fail:
  rdma_cleanup (b);
  return -1;
}

static void
rdma_cleanup (nbdkit_backend *b)
{
  gm_stats_stop (&gm_rdma_stats_out);
  if (listener_started) {
    char x = 0;
    if (write (wake_pipe[1], &x, 1) != 1)
      nbdkit_debug (NAME ": wake the listener: %m");
    pthread_join (listener, NULL);
    listener_started = false;
  }
  /* No more connects: a client reconnecting after its goodbye is
   * refused at once (and tries again) rather than left unanswered. */
  if (listen_id) {
    rdma_destroy_id (listen_id);
    listen_id = NULL;
  }
  say_goodbyes ();
  /* Every client first: a worker of one may be waiting for pool memory
   * that another's requests hold until their completions flush. */
  for (struct client *c = gm_rdma_clients; c; c = c->next_client)
    gm_rdma_disconnect (c);
  /* Each client is freed once its poller has ended, whichever comes
   * first: a worker of one may be waiting for pool memory that another,
   * already ended, holds until it is freed (a reply that could not be
   * posted keeps its buffer until the QP is destroyed).  Freeing them in
   * list order joined the waiting one first: for ever.
   */
  {
    uint64_t started = gm_now_ns ();
    bool said = false;
    while (gm_rdma_clients) {
      gm_rdma_release_held ();  /* no listener: by time alone */
      if (!reap_finished (false)) {
        say_waiting ("for clients' threads to end", started, &said);
        usleep (10 * 1000);
      }
    }
  }
  /* The reaper frees what it has, then ends. */
  if (reaper_started) {
    unsigned n = atomic_load (&destroying);
    if (n > 0)
      nbdkit_error (NAME ": shutdown: waiting for the kernel to release "
                    "%u connection id%s of clients that left "
                    "(rdma_destroy_id: Linux's connection manager holds one "
                    "while a message of its connection is being retried)",
                    n, n == 1 ? "" : "s");
    pthread_mutex_lock (&dead_lock);
    reaper_stop = true;
    pthread_cond_signal (&dead_cv);
    pthread_mutex_unlock (&dead_lock);
    pthread_join (reaper, NULL);
    reaper_started = false;
  }
  if (listen_id) {
    rdma_destroy_id (listen_id);
    listen_id = NULL;
  }
  gm_rdma_memory_free ();
  if (pd) {
    ibv_dealloc_pd (pd);
    pd = NULL;
  }
  if (cm_ch) {
    rdma_destroy_event_channel (cm_ch);
    cm_ch = NULL;
  }
  for (int i = 0; i < 2; i++)
    if (wake_pipe[i] >= 0) {
      close (wake_pipe[i]);
      wake_pipe[i] = -1;
    }
}

static void
rdma_unload (void)
{
  gm_stats_final (&gm_rdma_stats_out);
}

/* ---- TCP clients pass through; their writes respect fence.c. */

static int
rdma_pwrite (nbdkit_next *next, void *handle, const void *buf,
             uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  gm_rdma_fence_wait (NULL, offset, count);
  return next->pwrite (next, buf, count, offset, flags, err);
}

static int
rdma_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
           uint32_t flags, int *err)
{
  gm_rdma_fence_wait (NULL, offset, count);
  return next->trim (next, count, offset, flags, err);
}

static int
rdma_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
           uint32_t flags, int *err)
{
  gm_rdma_fence_wait (NULL, offset, count);
  return next->zero (next, count, offset, flags, err);
}

static struct nbdkit_filter filter = {
  .name = NAME,
  .longname = "gmblock RDMA transport (server side)",
  .config = rdma_config,
  .config_complete = rdma_config_complete,
  .config_help = RDMA_CONFIG_HELP,
  .get_ready = rdma_get_ready,
  .after_fork = rdma_after_fork,
  .cleanup = rdma_cleanup,
  .unload = rdma_unload,
  .pwrite = rdma_pwrite,
  .trim = rdma_trim,
  .zero = rdma_zero,
};

NBDKIT_REGISTER_FILTER (filter)

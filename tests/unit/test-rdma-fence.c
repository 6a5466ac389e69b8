/* Unit test: filters/rdma/fence.c, the rule that a gone RDMA client's
 * writes still in the storage land before later writes over them.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Clients and their request slots are made by hand (no verbs): a gone
 * client's begun WRITE, TRIM or ZERO holds every overlapping write of
 * a live client, RDMA or TCP, until it ends; nothing else holds one.
 * A connect naming a connection still open from the same host replaces
 * it.  The lab's rdma-restart and rdma-netloss scenarios check both
 * end to end.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "unit.h"

#include "../../filters/rdma/fence.c"

struct gm_counter gm_rdma_stats[RC_COUNT];
struct client *gm_rdma_clients;
pthread_mutex_t gm_rdma_clients_lock = PTHREAD_MUTEX_INITIALIZER;

/* What fence.c calls of the rest of the filter (serve.c, nbdkit). */
static struct rdma_cm_id *disconnected[4];
static unsigned ndisconnected;

void
gm_rdma_disconnect (struct client *c)
{
  CHECK (ndisconnected < 4);
  disconnected[ndisconnected++] = c->id;
}

void
gm_rdma_client_ending (struct client *c)
{
  int live = GM_FENCE_LIVE;

  if (atomic_compare_exchange_strong (&c->fence, &live, GM_FENCE_ENDING))
    atomic_fetch_add (&gm_rdma_ending, 1);
}

void
nbdkit_debug (const char *fs, ...)
{
}

#define K 1024

static struct req slots[3][4];
static struct client cl[3];     /* 0 live, 1 and 2 gone as a case says */

static void
setup (void)
{
  memset (slots, 0, sizeof slots);
  memset (cl, 0, sizeof cl);
  gm_rdma_clients = NULL;
  for (int i = 2; i >= 0; i--) {
    pthread_mutex_init (&cl[i].lock, NULL);
    cl[i].reqs = slots[i];
    cl[i].rp.lim.credits = 4;
    cl[i].next_client = gm_rdma_clients;
    gm_rdma_clients = &cl[i];
  }
  atomic_store (&gm_rdma_ending, 0);
  gm_rdma_stats[RC_FENCE_WAITS].value = 0;
  gm_rdma_stats[RC_REPLACED].value = 0;
}

static void
gone (int i)
{
  atomic_store (&cl[i].fence, GM_FENCE_ENDING);
  atomic_fetch_add (&gm_rdma_ending, 1);
}

static void
begun (int i, int slot, uint8_t op, uint64_t off, uint32_t len)
{
  pthread_mutex_lock (&cl[i].lock);
  slots[i][slot] = (struct req) { .state = RQ_SETUP,
                                  .r = { .op = op, .offset = off,
                                         .length = len } };
  pthread_mutex_unlock (&cl[i].lock);
}

static void
ended (int i, int slot)
{
  pthread_mutex_lock (&cl[i].lock);
  slots[i][slot].state = RQ_REPLIED;
  pthread_mutex_unlock (&cl[i].lock);
}

struct waiter {
  const struct client *self;
  uint64_t off, len;
  pthread_t t;
  _Atomic bool done;
};

static void *
wait_run (void *arg)
{
  struct waiter *w = arg;

  gm_rdma_fence_wait (w->self, w->off, w->len);
  atomic_store (&w->done, true);
  return NULL;
}

static void
start (struct waiter *w, const struct client *self, uint64_t off,
       uint64_t len)
{
  w->self = self;
  w->off = off;
  w->len = len;
  atomic_store (&w->done, false);
  CHECK (pthread_create (&w->t, NULL, wait_run, w) == 0);
}

static uint64_t
waits (void)
{
  return gm_counter_get (&gm_rdma_stats[RC_FENCE_WAITS]);
}

/* Waiting (the n'th waiter counted: up to 10 s, a thread may start
 * late on a loaded machine), and still after 100 ms. */
static bool
held (struct waiter *w, uint64_t n)
{
  for (int i = 0; i < 1000 && waits () < n; i++)
    usleep (10 * 1000);
  usleep (100 * 1000);
  return !atomic_load (&w->done);
}

/* Nobody gone: no wait, whatever the slots say. */
static void
idle (void)
{
  setup ();
  begun (1, 0, GM_RP_WRITE, 0, 64 * K);
  gm_rdma_fence_wait (&cl[0], 0, 64 * K);
  CHECK_EQ_U64 (waits (), 0);
}

/* A gone client's begun WRITE holds an overlapping WRITE of a live
 * client, and of a TCP client, until it has ended; once. */
static void
holds_overlap (void)
{
  struct waiter rdma, tcp;

  setup ();
  gone (1);
  begun (1, 2, GM_RP_WRITE, 64 * K, 64 * K);
  start (&rdma, &cl[0], 127 * K, 4 * K);        /* its last 1K */
  start (&tcp, NULL, 0, 64 * K + 1);            /* its first byte */
  CHECK (held (&rdma, 1));
  CHECK (held (&tcp, 2));
  ended (1, 2);
  pthread_join (rdma.t, NULL);
  pthread_join (tcp.t, NULL);
  CHECK_EQ_U64 (waits (), 2);
}

/* Not held: ranges beside it, its reads, what it only queued, what
 * has ended, and its TRIM and ZERO only once begun. */
static void
passes (void)
{
  struct waiter w;

  setup ();
  gone (1);
  begun (1, 0, GM_RP_WRITE, 64 * K, 64 * K);
  gm_rdma_fence_wait (&cl[0], 0, 64 * K);          /* ends where it starts */
  gm_rdma_fence_wait (NULL, 128 * K, 4 * K);       /* starts where it ends */
  ended (1, 0);
  begun (1, 1, GM_RP_READ, 0, 1024 * K);
  begun (1, 2, GM_RP_CACHE, 0, 1024 * K);
  begun (1, 3, GM_RP_WRITE, 0, 1024 * K);
  slots[1][3].state = RQ_QUEUED;                   /* never begins */
  gm_rdma_fence_wait (&cl[0], 0, 1024 * K);
  CHECK_EQ_U64 (waits (), 0);
  for (int i = 0; i < 2; i++) {
    begun (1, 0, i ? GM_RP_ZERO : GM_RP_TRIM, 0, 4 * K);
    start (&w, &cl[0], 0, 4 * K);
    CHECK (held (&w, i + 1));
    ended (1, 0);
    pthread_join (w.t, NULL);
  }
  CHECK_EQ_U64 (waits (), 2);
}

/* A gone client's own requests never wait: not for its own, not for
 * another gone one's (two that died waiting on each other's would wait
 * for ever); and a live waiter whose client goes stops waiting. */
static void
gone_never_wait (void)
{
  struct waiter w;

  setup ();
  gone (1);
  gone (2);
  begun (1, 0, GM_RP_WRITE, 0, 64 * K);
  begun (2, 0, GM_RP_WRITE, 0, 64 * K);
  gm_rdma_fence_wait (&cl[1], 0, 64 * K);
  gm_rdma_fence_wait (&cl[2], 0, 64 * K);
  start (&w, &cl[0], 0, 64 * K);
  CHECK (held (&w, 1));
  atomic_store (&cl[0].fence, GM_FENCE_ENDING);
  pthread_join (w.t, NULL);
  /* A live client is not held by its own begun writes either. */
  setup ();
  gone (2);
  begun (0, 0, GM_RP_WRITE, 0, 64 * K);
  gm_rdma_fence_wait (&cl[0], 0, 64 * K);
}

/* A client done (its workers all left) holds nothing, even with slots
 * that still say begun. */
static void
done_holds_nothing (void)
{
  setup ();
  gone (1);
  begun (1, 0, GM_RP_WRITE, 0, 64 * K);
  atomic_store (&cl[1].fence, GM_FENCE_DONE);
  gm_rdma_fence_wait (&cl[0], 0, 64 * K);
  CHECK_EQ_U64 (waits (), 0);
}

/* A client connecting again from the same host with a connection's
 * identity replaces it: dropped and fenced.  Not another host's, not
 * one already gone, not without an identity (version 2 and 3). */
static void
replaces (void)
{
  struct client nc = { .rp.conn_id = 7, .id = (struct rdma_cm_id *) &nc };

  setup ();
  ndisconnected = 0;
  for (int i = 0; i < 3; i++)
    cl[i].id = (struct rdma_cm_id *) &cl[i];
  strcpy (nc.peer, "10.77.0.2:40002");
  strcpy (cl[0].peer, "10.77.0.2:40001");       /* its old connection */
  cl[0].rp.conn_id = 7;
  strcpy (cl[1].peer, "10.77.0.3:40001");       /* another host's 7 */
  cl[1].rp.conn_id = 7;
  strcpy (cl[2].peer, "10.77.0.2:40003");       /* another connection */
  cl[2].rp.conn_id = 8;
  /* What the listener's capacity check leaves out of its count. */
  CHECK (gm_rdma_is_predecessor (&cl[0], nc.peer, 7));
  CHECK (!gm_rdma_is_predecessor (&cl[1], nc.peer, 7));
  CHECK (!gm_rdma_is_predecessor (&cl[2], nc.peer, 7));
  strcpy (cl[1].peer, "10.77.0.21:40001");      /* a host it prefixes */
  CHECK (!gm_rdma_is_predecessor (&cl[1], nc.peer, 7));
  strcpy (cl[1].peer, "10.77.0.3:40001");
  CHECK (!gm_rdma_is_predecessor (&cl[0], nc.peer, 0));
  gm_rdma_fence_predecessor (&nc);
  CHECK (!gm_rdma_is_predecessor (&cl[0], nc.peer, 7));
  CHECK_EQ_U64 (ndisconnected, 1);
  CHECK (disconnected[0] == cl[0].id);
  CHECK (atomic_load (&cl[0].fence) == GM_FENCE_ENDING);
  CHECK (atomic_load (&cl[1].fence) == GM_FENCE_LIVE);
  CHECK (atomic_load (&cl[2].fence) == GM_FENCE_LIVE);
  CHECK_EQ_U64 (atomic_load (&gm_rdma_ending), 1);
  CHECK_EQ_U64 (gm_counter_get (&gm_rdma_stats[RC_REPLACED]), 1);
  /* Again: that one is gone already. */
  gm_rdma_fence_predecessor (&nc);
  CHECK_EQ_U64 (ndisconnected, 1);
  /* No identity: nothing replaced, even an identity-less old one. */
  nc.rp.conn_id = 0;
  cl[2].rp.conn_id = 0;
  gm_rdma_fence_predecessor (&nc);
  CHECK_EQ_U64 (ndisconnected, 1);
  /* IPv6: the host is all before the last colon. */
  setup ();
  cl[0].id = (struct rdma_cm_id *) &cl[0];
  strcpy (nc.peer, "fd00::2:40002");
  nc.rp.conn_id = 9;
  strcpy (cl[0].peer, "fd00::2:40001");
  cl[0].rp.conn_id = 9;
  strcpy (cl[1].peer, "fd00::3:40001");
  cl[1].rp.conn_id = 9;
  gm_rdma_fence_predecessor (&nc);
  CHECK_EQ_U64 (ndisconnected, 2);
  CHECK (disconnected[1] == cl[0].id);
  CHECK (atomic_load (&cl[1].fence) == GM_FENCE_LIVE);
}

static const struct unit_case cases[] = {
  { "idle", idle },
  { "holds_overlap", holds_overlap },
  { "passes", passes },
  { "gone_never_wait", gone_never_wait },
  { "done_holds_nothing", done_holds_nothing },
  { "replaces", replaces },
};

int
main (int argc, char *argv[])
{
  UNIT_RUN_CASES (cases, argc, argv);
  UNIT_DONE ();
}

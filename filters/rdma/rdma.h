/* gmblock-rdma filter: what its files share.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * rdma.c    options, start-up, the listener thread, accepting clients
 * serve.c   one client: its completion poller and its request workers
 * memory.c  request memory: host, or device memory (registered or staged)
 * stats.c   counters, and the overlap of disk and network per size
 * bind.c    binding the listener's address (and a trial before the fork)
 * fence.c   a gone client's writes land before later ones overlapping them
 */
#ifndef GMBLOCK_RDMA_FILTER_H
#define GMBLOCK_RDMA_FILTER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-filter.h>

#include "counters.h"
#include "statsout.h"
#include "overlap.h"
#include "pool.h"
#include "rdmaaddr.h"
#include "rdmaproto.h"
#include "stripegeo.h"

#define NAME "gmblock-rdma"

#define MAX_PIECES 16           /* a READ is sent in at most this many */

enum {
  RC_CLIENTS, RC_REFUSED, RC_DROPPED, RC_PROTO_ERRORS, RC_REQUESTS,
  RC_READ_BYTES, RC_WRITE_BYTES, RC_RDMA_WRITES, RC_RDMA_READS,
  RC_ERROR_REPLIES, RC_POOL_WAITS, RC_SPLIT_READS, RC_PIECES,
  RC_DEVICE_MR, RC_STAGED_BYTES, RC_EXTENTS,
  RC_WHOLE_BUSY, RC_GOODBYES, RC_UNSERVED, RC_FENCE_WAITS, RC_REPLACED,
  RC_ABANDONED, RC_KEEPALIVE_PROBES, RC_KEEPALIVE_DROPS, RC_COUNT
};
extern struct gm_counter gm_rdma_stats[RC_COUNT];
#define COUNT(id, n) gm_count (&gm_rdma_stats[id], (n))

/* Settings (rdma.c), fixed once the server runs. */
struct rdma_settings {
  unsigned threads;             /* request workers per client */
  unsigned max_clients;         /* RDMA clients at once */
  unsigned keepalive;           /* seconds a client may be silent before
                                 * it is probed; 0: never */
  uint32_t piece;               /* split READs into pieces this big; 0: no */
  uint32_t streams;             /* stripe data disks: pieces per stream
                                 * by chunk column; 0: a stream a piece */
  uint64_t stripe_offset;       /* where the export starts in the array */
  bool serial;                  /* the stack below serialises requests */
  bool readonly;                /* nbdkit -r: RDMA clients too */
  bool split_always;            /* rdma-split=always, else only alone */
  bool pool_device;             /* rdma-pool-memory=p2pmem[:BDF] */
  bool pool_stage;              /* rdma-pool-fallback=stage */
  char pool_bdf[16];            /* "" = auto */
  char pool_paths[512];         /* for messages */
};
extern struct rdma_settings gm_rdma_set;

/* Request memory (memory.c): gm_rdma_pool is where the stack below
 * reads into; gm_rdma_pool_mr registers what the NIC sends from.
 */
extern struct gm_pool *gm_rdma_pool;
extern struct ibv_mr *gm_rdma_pool_mr;
struct req;
int gm_rdma_memory_setup (struct ibv_pd *pd, uint64_t size);
int gm_rdma_memory_probe (nbdkit_backend *b);
void gm_rdma_memory_free (void);
void gm_rdma_memory_stats (void);
const char *gm_rdma_memory_desc (void);
/* A request's buffer (and its staging one), waiting while the pools are
 * full; 0, or -1 (errno = ECANCELED) once *cancel is set and
 * gm_rdma_mem_wake called: a waiter of a client that ended.  cancel may
 * be NULL. */
int gm_rdma_mem_get (struct req *q, const _Atomic bool *cancel);
int gm_rdma_mem_get_len (struct req *q, size_t len,
                         const _Atomic bool *cancel);
void gm_rdma_mem_wake (void);
void gm_rdma_mem_put (struct req *q);
void gm_rdma_mem_stage (struct req *q, uint32_t off, uint32_t len,
                        bool to_send);


enum req_state { RQ_FREE, RQ_SETUP, RQ_QUEUED, RQ_ACTIVE, RQ_REPLIED };

/* One request being served.  A client has 'credits' of them. */
struct req {
  enum req_state state;
  struct gm_rp_request r;
  uint32_t error;               /* wire error; the first failure wins */
  uint32_t count;               /* BLOCK_STATUS extents */
  void *buf;                    /* from the pool while it is served */
  void *sbuf;                   /* what the NIC uses: buf, or staging */
  size_t buflen;
  unsigned npieces;
  unsigned next_piece;          /* next piece a worker may claim */
  unsigned pieces_left;         /* the worker ending the last replies */
  struct gm_stripe_piece piece[MAX_PIECES]; /* read, then RDMA-WRITten */
  bool rread_done, rread_ok;    /* WRITE: the RDMA READ's completion */
  bool data_with_reply;         /* READ read whole: finish () sends it */
  uint64_t t0;                  /* when its receive completed */
  uint64_t replied_ns;          /* its reply was posted (watchdog) */
  uint64_t rread_ns;            /* WRITE: its RDMA READ was posted, 0
                                 * once completed (watchdog) */
  struct gm_span disk[MAX_PIECES], net[MAX_PIECES];
};

enum bye_state { BYE_NONE, BYE_POSTED, BYE_SENT, BYE_FAILED };

/* A request received while every req slot was busy. */
struct gm_rdma_deferred {
  struct gm_rp_request r;
  uint32_t error;
  uint64_t t0;                  /* when it was received */
};

/* A client's place in fence.c's rule: served; gone (its CM id saw the
 * end, or its poller did) with work maybe still in the storage; its
 * poller finished. */
enum { GM_FENCE_LIVE, GM_FENCE_ENDING, GM_FENCE_DONE };

/* Where a client's CM handshake is, for a disconnect (disconnect.c):
 * its ESTABLISHED event not seen yet; seen (or established before a
 * notice); a disconnect telling the CM it is established; the DREQ
 * held until that event. */
enum { CM_WAIT, CM_SEEN, CM_NOTIFYING, CM_HELD };

struct client {
  struct client *next_client;
  struct rdma_cm_id *id;
  struct ibv_comp_channel *cc;
  struct ibv_cq *cq;
  struct ibv_mr *recv_mr;
  uint8_t *recv_buf;            /* credits * GM_RP_REQUEST_SIZE */
  nbdkit_next *next;
  char peer[64];
  bool gone;                    /* listener: its CM id saw the end */
  bool thread_started;
  pthread_t tid;                /* the poller */
  _Atomic bool finished;        /* the poller has returned */
  _Atomic int fence;            /* GM_FENCE_*: fence.c */
  uint64_t accepted_ns;         /* set before it is listed: fence.c */
  _Atomic int cm;               /* CM_*: disconnect.c */
  _Atomic uint64_t held_ns;     /* when its DREQ was held */

  /* Shared by the poller and the workers, under lock. */
  pthread_mutex_t lock;
  pthread_cond_t work;          /* workers: something to do */
  pthread_cond_t rread;         /* a WRITE's RDMA READ completed */
  struct gm_rp_conn rp;
  struct req *reqs;             /* [credits] */
  unsigned *queue, qhead, qlen; /* ring of request indexes [credits] */
  struct gm_rdma_deferred *deferred; /* taken while no req was free */
  unsigned ndeferred;
  _Atomic bool stop;            /* workers: leave (set under lock; the
                                 * poller reads it without, while the
                                 * listener may set it: fence.c) */
  bool closing;                 /* DISCONNECT: answer the rest, then end */
  bool draining;                /* shutting down: serve no new request */
  bool farewell;                /* rdma.c's cleanup: drained, to be told */
  enum bye_state bye;           /* its goodbye (under lock) */
  bool probing;                 /* poller only: a keepalive probe is out */
  bool probe_late;              /* poller only: found unanswered at a
                                 * watch already */
  uint64_t probe_ns;            /* poller only: when it was posted */
  unsigned nworkers, nstarted, running;
  pthread_t *workers;
  int wake_fd;                  /* eventfd: a worker left */
};

/* disconnect.c: disconnect c (any thread, any number of times); the
 * listener's ESTABLISHED event for c; whether c's DREQ is held (not to
 * be reaped yet); send the DREQs held too long. */
void gm_rdma_disconnect (struct client *c);
void gm_rdma_established (struct client *c);
bool gm_rdma_held (const struct client *c);
void gm_rdma_release_held (void);

/* serve.c */
struct client *gm_rdma_client_new (void);
int gm_rdma_client_setup (struct client *c);   /* after accept_hello */
void *gm_rdma_client_run (void *c);            /* the poller thread */
void gm_rdma_client_release (struct client *c); /* its serve.c parts */
/* c is gone: its workers begin nothing more, and fence.c makes later
 * writes over its writes still in the storage wait for them. */
void gm_rdma_client_ending (struct client *c);
/* Shutting down (rdma.c's cleanup): drain, then after a flush below,
 * say goodbye (docs/rdma-protocol.md).  drain returns false for a
 * client that cannot take a goodbye (protocol version 2).
 */
bool gm_rdma_client_drain (struct client *c);
void gm_rdma_client_describe (struct client *c, char *buf, size_t len);
bool gm_rdma_client_drained (struct client *c);
int gm_rdma_client_goodbye (struct client *c, bool flushed);
enum bye_state gm_rdma_client_bye (struct client *c);

/* bind.c: bind a's address to a new CM id *id on a new channel *ch (the
 * caller destroys both, whatever the result).  -1 with why a sentence.
 * The trial does the same in a child process: -1 with why if it failed.
 */
int gm_rdma_bind (const struct gm_rdma_addr *a, struct rdma_event_channel **ch,
                  struct rdma_cm_id **id, char *why, size_t whylen);
int gm_rdma_bind_trial (const struct gm_rdma_addr *a, char *why,
                        size_t whylen);

/* rdma.c: every client, until reaped. */
extern struct client *gm_rdma_clients;
extern pthread_mutex_t gm_rdma_clients_lock;

/* fence.c: wait while a gone client other than self (NULL: a TCP
 * client) still has a WRITE, TRIM or ZERO over [offset, offset+len) in
 * the storage below. */
extern _Atomic unsigned gm_rdma_ending;
void gm_rdma_fence_wait (const struct client *self, uint64_t offset,
                         uint64_t len);
/* Listener, c's hello accepted: a connection of c's bridge from the
 * same host with its conn_id, still open here, is dropped and fenced
 * (its bridge gave up on it and connects again). */
void gm_rdma_fence_predecessor (struct client *c);
/* Worker, c's ABANDON (version 5), received at 'received' (gm_now_ns):
 * the same for the connection of c's bridge named conn_id, which that
 * bridge gave up on with writes in flight, before c or another
 * connection writes over them.  Only a connection accepted before the
 * ABANDON came: one accepted since is that connection's reconnect,
 * which the ABANDON (kept waiting here, while c broke and the bridge
 * let the reconnect go) does not mean. */
void gm_rdma_fence_abandoned (struct client *c, uint64_t conn_id,
                              uint64_t received);
/* Whether o is such a connection, that a connect request from peer
 * naming conn_id replaces (the clients lock held). */
bool gm_rdma_is_predecessor (const struct client *o, const char *peer,
                             uint64_t conn_id);

/* stats.c */
void gm_rdma_overlap_add (const struct req *q, uint64_t t_end);
extern int gmblock_rdma_debug_stats;
extern int gmblock_rdma_debug_trace;
extern struct gm_stats_out gm_rdma_stats_out;

#endif /* GMBLOCK_RDMA_FILTER_H */

/* gmblock: the RDMA transport's wire protocol, version 5 (no verbs here).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * docs/rdma-protocol.md is the specification; this is its code.  Every
 * message has a fixed size and a struct whose fields sit at their wire
 * offsets (asserted in rdmaproto.c), so the struct is the layout table.
 * On the wire every field is little-endian; the codec moves bytes one
 * at a time and never casts a buffer pointer, so buffers need no
 * alignment.
 *
 * Three layers, each usable alone by the server filter and the client
 * bridge:
 *   codec    gm_rp_encode_* / gm_rp_decode_*: bytes <-> structs; decode
 *            checks only sizes, and never reads past the given length
 *   checks   gm_rp_check_*: every field against the protocol and the
 *            negotiated limits
 *   conn     struct gm_rp_conn: handshake state, credits, handles in
 *            flight; one per connection, on either side
 *
 * Return convention of the checks and of the conn functions that take
 * a request: 0 valid; -1 malformed, a protocol error: the peer is
 * dropped (why says what was wrong); a positive GM_RP_E* value: the
 * request is well formed but refused, and is answered with that error.
 * Not thread-safe: the caller serialises calls on one conn.
 */
#ifndef GMBLOCK_RDMAPROTO_H
#define GMBLOCK_RDMAPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GM_RP_VERSION        5
#define GM_RP_VERSION_MIN    2             /* the oldest a server serves */
#define GM_RP_HELLO_MAGIC    0x48524d47u   /* "GMRH" on the wire */
#define GM_RP_WELCOME_MAGIC  0x57524d47u   /* "GMRW" on the wire */
#define GM_RP_GOODBYE_MAGIC  0x42524d47u   /* "GMRB" on the wire */
#define GM_RP_MAX_CREDITS    128           /* requests in flight per conn */
#define GM_RP_REASON_LEN     48

/* Wire sizes.  Handshake messages travel in RDMA CM private data,
 * which InfiniBand and RoCE pad with zeros to a fixed size: the hello
 * must fit a connect request (56 bytes), the welcome a reject (148).
 */
#define GM_RP_HELLO_SIZE     32
#define GM_RP_WELCOME_SIZE   96
#define GM_RP_REQUEST_SIZE   40
#define GM_RP_REPLY_SIZE     16
#define GM_RP_GOODBYE_SIZE   24            /* differs from a reply's */
#define GM_RP_EXTENT_SIZE    8

/* Opcodes: NBD's command numbers, and one of ours (version 5):
 * ABANDON names, in its offset field, the conn_id of a connection of
 * this client that broke with writes in flight, and in its addr field
 * the server instance that connection had; that server drops it and
 * fences what it has in the storage before it replies.
 */
enum gm_rp_op {
  GM_RP_READ = 0, GM_RP_WRITE = 1, GM_RP_DISCONNECT = 2, GM_RP_FLUSH = 3,
  GM_RP_TRIM = 4, GM_RP_CACHE = 5, GM_RP_ZERO = 6, GM_RP_BLOCK_STATUS = 7,
  GM_RP_ABANDON = 8,
};
#define GM_RP_OP_COUNT 9

/* Request flags: NBD's command flag bits. */
#define GM_RP_FLAG_FUA        (1u << 0)
#define GM_RP_FLAG_NO_HOLE    (1u << 1)
#define GM_RP_FLAG_REQ_ONE    (1u << 3)
#define GM_RP_FLAG_FAST_ZERO  (1u << 4)

/* Transmission flags of the export: NBD's bits where NBD has one. */
#define GM_RP_TF_READ_ONLY    (1u << 1)
#define GM_RP_TF_FLUSH        (1u << 2)
#define GM_RP_TF_FUA          (1u << 3)
#define GM_RP_TF_ROTATIONAL   (1u << 4)
#define GM_RP_TF_TRIM         (1u << 5)
#define GM_RP_TF_ZERO         (1u << 6)
#define GM_RP_TF_MULTI_CONN   (1u << 8)
#define GM_RP_TF_CACHE        (1u << 10)
#define GM_RP_TF_FAST_ZERO    (1u << 11)
#define GM_RP_TF_BLOCK_STATUS (1u << 15)  /* ours: base:allocation */

/* Block status extent flags (NBD base:allocation). */
#define GM_RP_EXTENT_HOLE     (1u << 0)
#define GM_RP_EXTENT_ZERO     (1u << 1)

/* Error values on the wire: NBD's. */
#define GM_RP_EPERM      1
#define GM_RP_EIO        5
#define GM_RP_ENOMEM     12
#define GM_RP_EINVAL     22
#define GM_RP_ENOSPC     28
#define GM_RP_EOVERFLOW  75
#define GM_RP_ENOTSUP    95
#define GM_RP_ESHUTDOWN  108

/* Client -> server, first.  credits: how many requests it wants in
 * flight; max_request: the largest READ/WRITE it will send.
 */
struct gm_rp_hello {
  uint32_t magic;
  uint16_t version;
  uint16_t credits;
  uint32_t max_request;
  /* Version 4 (before: reserved, zero).  At offset 12: unaligned. */
  uint64_t conn_id __attribute__ ((packed));
  uint8_t reserved[12];
};

/* Server -> client, the answer: accepted when error is 0, else the
 * fields other than magic, version, error and reason are zero.
 */
struct gm_rp_welcome {
  uint32_t magic;
  uint16_t version;
  uint16_t credits;
  uint32_t error;
  uint32_t flags;               /* GM_RP_TF_* */
  uint64_t size;
  uint32_t min_block, pref_block, max_block;
  uint32_t max_request;
  uint64_t instance;            /* the server process (nonzero, random):
                                 * a new one lost what the old one had
                                 * acknowledged and not flushed */
  char reason[GM_RP_REASON_LEN]; /* printable, NUL-padded */
};

/* Client -> server by SEND.  addr/rkey/buf_len describe the client's
 * registered buffer for READ, WRITE and BLOCK_STATUS (zero otherwise).
 */
struct gm_rp_request {
  uint8_t op;
  uint8_t reserved;
  uint16_t flags;               /* GM_RP_FLAG_* */
  uint32_t length;
  uint64_t handle;
  uint64_t offset;
  uint64_t addr;
  uint32_t rkey;
  uint32_t buf_len;
};

/* Server -> client by SEND: one per request except DISCONNECT. */
struct gm_rp_reply {
  uint64_t handle;
  uint32_t error;               /* GM_RP_E*, 0: success */
  uint32_t count;               /* BLOCK_STATUS: extents written */
};

/* Server -> client by SEND, its last message (version 3): it is
 * shutting down, has answered every request it serves and will serve
 * no other; with GM_RP_BYE_FLUSHED, everything it acknowledged on this
 * connection (with multi-conn: on every one) is flushed below.
 */
#define GM_RP_BYE_FLUSHED     (1u << 0)
struct gm_rp_goodbye {
  uint32_t magic;
  uint32_t flags;               /* GM_RP_BYE_* */
  uint64_t instance;            /* the welcome's */
  uint8_t reserved[8];
};

/* BLOCK_STATUS: the server RDMA-WRITEs an array of these. */
struct gm_rp_extent {
  uint32_t length;
  uint32_t flags;               /* GM_RP_EXTENT_* */
};

/* What a connection may do, fixed by the handshake. */
struct gm_rp_limits {
  uint64_t size;
  uint32_t flags;               /* GM_RP_TF_* */
  uint32_t min_block, pref_block, max_block;
  uint32_t max_request;         /* largest READ/WRITE length */
  uint16_t credits;             /* requests in flight at most */
  uint64_t instance;            /* the welcome's (server: its own) */
  uint16_t version;             /* negotiated: the hello's */
};

/* Codec.  encode writes exactly the message size into buf.  decode
 * needs exactly the size for SEND messages (request, reply, extent);
 * handshake messages may be followed by zero padding up to len.
 * They return 0, or -1 with why set.
 */
void gm_rp_encode_hello (const struct gm_rp_hello *m, void *buf);
void gm_rp_encode_welcome (const struct gm_rp_welcome *m, void *buf);
void gm_rp_encode_request (const struct gm_rp_request *m, void *buf);
void gm_rp_encode_reply (const struct gm_rp_reply *m, void *buf);
void gm_rp_encode_extent (const struct gm_rp_extent *m, void *buf);
void gm_rp_encode_goodbye (const struct gm_rp_goodbye *m, void *buf);
int gm_rp_decode_hello (const void *buf, size_t len, struct gm_rp_hello *m,
                        char *why, size_t whylen);
int gm_rp_decode_welcome (const void *buf, size_t len, struct gm_rp_welcome *m,
                          char *why, size_t whylen);
int gm_rp_decode_request (const void *buf, size_t len, struct gm_rp_request *m,
                          char *why, size_t whylen);
int gm_rp_decode_reply (const void *buf, size_t len, struct gm_rp_reply *m,
                        char *why, size_t whylen);
int gm_rp_decode_extent (const void *buf, size_t len, struct gm_rp_extent *m,
                         char *why, size_t whylen);
int gm_rp_decode_goodbye (const void *buf, size_t len, struct gm_rp_goodbye *m,
                          char *why, size_t whylen);

/* Checks. */
int gm_rp_check_limits (const struct gm_rp_limits *l, char *why, size_t whylen);
int gm_rp_check_request (const struct gm_rp_request *r,
                         const struct gm_rp_limits *l, char *why, size_t whylen);
/* A reply to req (error known, count within req's buffer). */
int gm_rp_check_reply (const struct gm_rp_reply *rep,
                       const struct gm_rp_request *req, char *why, size_t whylen);
/* The count extents a BLOCK_STATUS reply left in the client's buffer. */
int gm_rp_check_extents (const void *buf, uint32_t count,
                         const struct gm_rp_request *req,
                         char *why, size_t whylen);

/* Errors: host errno <-> wire value (an unknown host errno becomes
 * EINVAL, as nbdkit does over NBD); gm_rp_error_known says whether a
 * wire value is one of the GM_RP_E* set.
 */
uint32_t gm_rp_error_to_wire (int host_errno);
int gm_rp_error_from_wire (uint32_t wire);
bool gm_rp_error_known (uint32_t wire);
const char *gm_rp_op_name (unsigned op);
/* Whether op changes the export (WRITE, TRIM, ZERO): refused read-only,
 * fenced after a gone client's (filters/rdma/fence.c), counted unflushed.
 */
bool gm_rp_op_writes (unsigned op);

/* The connection state machine.  Server: init, accept_hello, then
 * take_request per SEND received and request_end per reply sent.
 * Client: init, hello, take_welcome, then request_begin before each
 * SEND and take_reply per reply received.  Version 3: the server's
 * goodbye (gm_rp_conn_goodbye, once nothing is in flight) and the
 * client's take_goodbye end it, GONE.  Any -1 leaves the conn FAILED
 * (except gm_rp_conn_goodbye's: the state stays), and every later call
 * fails: close the connection.
 */
enum gm_rp_role { GM_RP_SERVER, GM_RP_CLIENT };
enum gm_rp_state {
  GM_RP_HANDSHAKE,              /* server: awaiting hello; client: to send it */
  GM_RP_WELCOME_WAIT,           /* client: hello sent */
  GM_RP_READY,
  GM_RP_CLOSING,                /* DISCONNECT seen: only replies from now */
  GM_RP_GONE,                   /* goodbye sent or taken: nothing more */
  GM_RP_FAILED,
};

struct gm_rp_conn {
  enum gm_rp_role role;
  enum gm_rp_state state;
  struct gm_rp_limits lim;      /* valid from READY on */
  struct gm_rp_hello sent;      /* client: the hello it sent */
  uint64_t conn_id;             /* client: set before hello, sent in it;
                                 * server: the hello's (0: none) */
  uint16_t in_use;              /* credits taken = requests in flight */
  struct gm_rp_request inflight[GM_RP_MAX_CREDITS]; /* [0, in_use) */
};

void gm_rp_conn_init (struct gm_rp_conn *c, enum gm_rp_role role);

/* A random identifier, never 0 (which the protocol reserves for
 * "none"): a server's instance, a client connection's conn_id.
 * 0, or -1 with errno set (getrandom failed).
 */
int gm_rp_random_id (uint64_t *id);

/* Server: judge the hello in buf (CM private data) against what this
 * server offers.  Fills *w, the welcome to send: accepted (0, READY,
 * the negotiated limits) or refused (-1, FAILED, w->error and
 * w->reason say why; send it in the reject).
 */
int gm_rp_conn_accept_hello (struct gm_rp_conn *c, const void *buf, size_t len,
                             const struct gm_rp_limits *offer,
                             struct gm_rp_welcome *w, char *why, size_t whylen);

/* Server: a refusal (ENOSPC beyond its clients, ENOMEM when out of
 * resources), for a hello it does not pass to accept_hello.
 */
void gm_rp_welcome_refusal (struct gm_rp_welcome *w, uint32_t error,
                            const char *reason);

/* Client: fills *h, the hello to send, asking for credits and
 * max_request (the server may grant less of both), with c->conn_id.
 */
int gm_rp_conn_hello (struct gm_rp_conn *c, uint16_t credits,
                      uint32_t max_request, struct gm_rp_hello *h,
                      char *why, size_t whylen);
/* Client: the server's answer.  0: READY, c->lim holds the limits. */
int gm_rp_conn_take_welcome (struct gm_rp_conn *c, const void *buf, size_t len,
                             char *why, size_t whylen);
/* Client: the private data of a rejected connect request.  0: a
 * well-formed refusal (magic, a nonzero error, a printable NUL-padded
 * reason, which may then be printed), in *w; -1 with why set: anything
 * else (the reason is the server's, and goes to the client's log).
 */
int gm_rp_take_refusal (const void *buf, size_t len, struct gm_rp_welcome *w,
                        char *why, size_t whylen);

/* Either side: a request goes in flight.  Needs READY and a free
 * credit, and a handle not already in flight.  DISCONNECT takes no
 * credit for good (it has no reply) and moves the conn to CLOSING.
 * Returns like gm_rp_check_request.  On a positive error the server
 * keeps the credit until it has sent the error reply; the client takes
 * none (it fails the request locally and sends nothing).
 */
int gm_rp_conn_request_begin (struct gm_rp_conn *c,
                              const struct gm_rp_request *r,
                              char *why, size_t whylen);
/* Server: decode a received SEND, then request_begin. */
int gm_rp_conn_take_request (struct gm_rp_conn *c, const void *buf, size_t len,
                             struct gm_rp_request *r, char *why, size_t whylen);

/* Either side: the reply for handle is sent (server) or received
 * (client): gives back its credit and, in *r if not NULL, its request.
 * An unknown handle is a protocol error.
 */
int gm_rp_conn_request_end (struct gm_rp_conn *c, uint64_t handle,
                            struct gm_rp_request *r, char *why, size_t whylen);
/* Client: decode a received reply, check it against its request, end
 * it.  *r gets the request it answers.
 */
int gm_rp_conn_take_reply (struct gm_rp_conn *c, const void *buf, size_t len,
                           struct gm_rp_reply *rep, struct gm_rp_request *r,
                           char *why, size_t whylen);

/* Server: the goodbye to send when shutting down, once it has answered
 * every request it served (flushed: what it acknowledged is flushed
 * below).  -1 when the conn cannot take one: a version 2 client, not
 * READY/CLOSING, or a request still in flight (its reply would come
 * after the flush began).  The conn is GONE after it.
 */
int gm_rp_conn_goodbye (struct gm_rp_conn *c, bool flushed,
                        struct gm_rp_goodbye *g, char *why, size_t whylen);
/* Client: a received goodbye (a SEND of GM_RP_GOODBYE_SIZE bytes).
 * 0: valid, the conn is GONE: every request still in flight was not
 * served.
 */
int gm_rp_conn_take_goodbye (struct gm_rp_conn *c, const void *buf, size_t len,
                             struct gm_rp_goodbye *g, char *why, size_t whylen);

static inline unsigned
gm_rp_conn_credits_free (const struct gm_rp_conn *c)
{
  return c->state == GM_RP_READY ? (unsigned) c->lim.credits - c->in_use : 0;
}

/* CLOSING and nothing in flight: the connection may be closed. */
static inline bool
gm_rp_conn_drained (const struct gm_rp_conn *c)
{
  return c->state == GM_RP_CLOSING && c->in_use == 0;
}

#endif /* GMBLOCK_RDMAPROTO_H */

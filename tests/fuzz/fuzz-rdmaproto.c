/* libFuzzer target: common/rdmaproto (RDMA wire protocol).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * An input is a 16-byte header that sets the server's offer and the
 * client's hello (bit 7 of byte 4: an older client, whose hello says
 * version 2, or 3 with bit 0 set, and carries no connection identity;
 * else version 5 with bytes 8-15 as its identity), then records: an action byte, a length byte and that
 * many bytes of message.  The actions drive a server and a client conn
 * through the handshake, requests, replies and the server's goodbye,
 * with arbitrary bytes wherever bytes arrive from the network.  Every
 * message is copied to a buffer of exactly its length, so ASan sees
 * any read past it.
 *
 * Invariants checked after every action:
 *   - credits in use never exceed the negotiated credits (<= 128)
 *   - the handles in flight are distinct
 *   - negotiated limits pass gm_rp_check_limits and grant no more than
 *     was offered and asked; the negotiated version is the hello's, 2
 *     to 5, and so is the server's connection identity (0 before 4)
 *   - every request in flight is well formed, and the ones accepted
 *     (not refused with an error) obey the limits: written out here
 *     again from docs/rdma-protocol.md, not by calling the checker
 *   - both sides give the same verdict on the same request
 *   - the server makes a goodbye exactly when its conn is READY or
 *     CLOSING in version 3 or later, and a refusal leaves the conn as it was;
 *     the client takes exactly the goodbyes the protocol page allows
 *     (checked against the bytes, not by calling the decoder), is GONE
 *     after one and FAILED after any other
 *   - a GONE conn takes no request or reply (each fails) and its
 *     credits stay as they were; it never becomes READY or CLOSING
 *   - FAILED is final; decode(encode(x)) == x
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmaproto.h"

#define HEADER 16

enum action {
  HELLO,        /* server takes a hello (len 0: the client's own) */
  WELCOME,      /* client takes a welcome (len 0: the server's last) */
  REQUEST,      /* server takes a request */
  END,          /* server replies to a handle (1 byte: the index of one
                 * in flight; 8 bytes: any handle) */
  BEGIN,        /* client sends a request */
  REPLY,        /* client takes a reply (bytes after it: the extents) */
  BOTH,         /* client sends a request, the server takes its bytes */
  CODEC,        /* every decoder on the bytes; re-encoding gives them back */
  GOODBYE,      /* server makes a goodbye (1st byte: bit 0 flushed; bit 1:
                 * ask the client conn instead, which must refuse; bit 2:
                 * the server conn is given the last one, and fails) */
  BYE,          /* client takes a goodbye (len 0: the server's last; 1-3:
                 * it mutated, see below; more: the bytes themselves) */
  N_ACTIONS
};

static void
die (const char *what)
{
  fprintf (stderr, "invariant broken: %s\n", what);
  abort ();
}
#define ASSERT(c) do { if (!(c)) die (#c); } while (0)

static uint64_t
le (const uint8_t *p, unsigned n)
{
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++)
    v |= (uint64_t) p[i] << (8 * i);
  return v;
}

/* Does an accepted request obey the negotiated limits?  The rules of
 * the protocol page, in the order it gives them.
 */
static void
assert_obeys (const struct gm_rp_request *r, const struct gm_rp_limits *l)
{
  uint64_t buf_need = 0;

  switch (r->op) {
  case GM_RP_READ:
    ASSERT (r->flags == 0);
    buf_need = r->length;
    break;
  case GM_RP_WRITE:
    ASSERT (!(l->flags & GM_RP_TF_READ_ONLY));
    ASSERT ((r->flags & ~GM_RP_FLAG_FUA) == 0);
    buf_need = r->length;
    break;
  case GM_RP_TRIM: case GM_RP_ZERO:
    ASSERT (!(l->flags & GM_RP_TF_READ_ONLY));
    ASSERT (l->flags & (r->op == GM_RP_TRIM ? GM_RP_TF_TRIM : GM_RP_TF_ZERO));
    ASSERT (r->op == GM_RP_ZERO || (r->flags & ~GM_RP_FLAG_FUA) == 0);
    ASSERT (!(r->flags & GM_RP_FLAG_FAST_ZERO) ||
            (l->flags & GM_RP_TF_FAST_ZERO));
    break;
  case GM_RP_FLUSH:
    ASSERT (l->flags & GM_RP_TF_FLUSH);
    ASSERT (r->flags == 0 && r->offset == 0 && r->length == 0);
    break;
  case GM_RP_CACHE:
    ASSERT ((l->flags & GM_RP_TF_CACHE) && r->flags == 0);
    break;
  case GM_RP_BLOCK_STATUS:
    ASSERT (l->flags & GM_RP_TF_BLOCK_STATUS);
    ASSERT ((r->flags & ~GM_RP_FLAG_REQ_ONE) == 0);
    buf_need = GM_RP_EXTENT_SIZE;
    break;
  case GM_RP_ABANDON:
    /* A conn_id and a server instance, nothing of the export. */
    ASSERT (l->version >= 5 && r->reserved == 0 && r->flags == 0);
    ASSERT (r->length == 0 && r->offset != 0 && r->addr != 0);
    ASSERT (r->rkey == 0 && r->buf_len == 0);
    return;
  default:
    die ("accepted an unknown opcode or a DISCONNECT in flight");
  }
  ASSERT (r->reserved == 0);
  ASSERT (!(r->flags & GM_RP_FLAG_FUA) || (l->flags & GM_RP_TF_FUA));
  if (r->op != GM_RP_FLUSH) {
    ASSERT (r->length > 0);
    ASSERT (r->offset <= l->size && r->length <= l->size - r->offset);
  }
  if (r->op == GM_RP_READ || r->op == GM_RP_WRITE)
    ASSERT (r->length <= l->max_request);
  if (buf_need) {
    ASSERT (r->addr != 0 && r->rkey != 0 && r->buf_len >= buf_need);
    ASSERT (r->addr + r->buf_len >= r->addr);
  }
  else
    ASSERT (r->addr == 0 && r->rkey == 0 && r->buf_len == 0);
}

/* asked: the hello the conn sent (client) or accepted (server). */
static void
assert_conn (const struct gm_rp_conn *c, const struct gm_rp_limits *offer,
             const struct gm_rp_hello *asked)
{
  ASSERT (c->in_use <= GM_RP_MAX_CREDITS);
  /* GONE only follows READY or CLOSING: its limits are still those. */
  if (c->state != GM_RP_READY && c->state != GM_RP_CLOSING &&
      c->state != GM_RP_GONE)
    return;
  ASSERT (gm_rp_check_limits (&c->lim, NULL, 0) == 0);
  ASSERT (c->in_use <= c->lim.credits);
  ASSERT (gm_rp_conn_credits_free (c) <= c->lim.credits);
  ASSERT (c->lim.credits <= asked->credits &&
          c->lim.max_request <= asked->max_request);
  /* The version is the hello's, one of 2 to 5; so is the connection
   * identity, which only version 4 and later may carry. */
  ASSERT (c->lim.version == asked->version);
  ASSERT (c->lim.version >= 2 && c->lim.version <= 5);
  ASSERT (c->conn_id == asked->conn_id);
  ASSERT (c->lim.version >= 4 || c->conn_id == 0);
  if (c->role == GM_RP_SERVER)
    ASSERT (c->lim.credits <= offer->credits &&
            c->lim.max_request <= offer->max_request &&
            c->lim.size == offer->size && c->lim.flags == offer->flags);
  for (unsigned i = 0; i < c->in_use; i++) {
    for (unsigned j = 0; j < i; j++)
      ASSERT (c->inflight[i].handle != c->inflight[j].handle);
    /* Refused requests stay in flight on the server till their error
     * reply: they are well formed, not necessarily within limits.
     */
    int verdict = gm_rp_check_request (&c->inflight[i], &c->lim, NULL, 0);
    ASSERT (verdict >= 0);
    if (verdict == 0)
      assert_obeys (&c->inflight[i], &c->lim);
  }
}

/* The extents in their own buffer; accepted ones cover at most the
 * range asked, each at least a byte.
 */
static void
check_extents (const uint8_t *d, uint32_t count, const struct gm_rp_request *r)
{
  size_t n = (size_t) count * GM_RP_EXTENT_SIZE;
  uint8_t *copy = malloc (n ? n : 1);
  uint64_t sum = 0;

  memcpy (copy, d, n);
  if (gm_rp_check_extents (copy, count, r, NULL, 0) == 0) {
    for (uint32_t i = 0; i < count; i++) {
      uint32_t len = le (copy + i * GM_RP_EXTENT_SIZE, 4);
      ASSERT (len > 0);
      sum += len;
    }
    ASSERT (sum <= r->length);
  }
  free (copy);
}

static bool
same_limits (const struct gm_rp_limits *a, const struct gm_rp_limits *b)
{
  return a->size == b->size && a->flags == b->flags &&
    a->max_request == b->max_request && a->credits == b->credits;
}

/* decode(bytes) ok => encode gives the same bytes back. */
static void
codec_round_trip (const uint8_t *d, size_t n)
{
  union {
    struct gm_rp_hello hello; struct gm_rp_welcome welcome;
    struct gm_rp_request request; struct gm_rp_reply reply;
    struct gm_rp_extent extent; struct gm_rp_goodbye goodbye;
  } m;
  uint8_t out[GM_RP_WELCOME_SIZE];

#define ROUND(type, size) do {                                          \
    if (gm_rp_decode_##type (d, n, &m.type, NULL, 0) == 0) {            \
      ASSERT (n >= (size));                                             \
      gm_rp_encode_##type (&m.type, out);                               \
      ASSERT (memcmp (out, d, (size)) == 0);                            \
    }                                                                   \
  } while (0)
  ROUND (hello, GM_RP_HELLO_SIZE);
  ROUND (welcome, GM_RP_WELCOME_SIZE);
  ROUND (request, GM_RP_REQUEST_SIZE);
  ROUND (reply, GM_RP_REPLY_SIZE);
  ROUND (extent, GM_RP_EXTENT_SIZE);
  ROUND (goodbye, GM_RP_GOODBYE_SIZE);
}

/* Would a client conn in this state take these bytes as a goodbye?
 * The rules of the protocol page, on the bytes.
 */
static bool
goodbye_ok (const struct gm_rp_conn *c, enum gm_rp_state before,
            const uint8_t *b, size_t len)
{
  if (c->role != GM_RP_CLIENT ||
      (before != GM_RP_READY && before != GM_RP_CLOSING) ||
      c->lim.version < 3 || len != 24)
    return false;
  if (le (b, 4) != 0x42524d47 /* "GMRB" */ || (le (b + 4, 4) & ~1u) ||
      le (b + 8, 8) != c->lim.instance)
    return false;
  for (unsigned i = 16; i < 24; i++)
    if (b[i])
      return false;
  return true;
}

/* FUZZ_TRACE=1 ./fuzz-rdmaproto FILE: what each action did. */
static int trace = -1;
static const char *const action_names[] = {
  "HELLO", "WELCOME", "REQUEST", "END", "BEGIN", "REPLY", "BOTH", "CODEC",
  "GOODBYE", "BYE",
};
static const char *const state_names[] = {
  [GM_RP_HANDSHAKE] = "handshake", [GM_RP_WELCOME_WAIT] = "welcome-wait",
  [GM_RP_READY] = "ready", [GM_RP_CLOSING] = "closing",
  [GM_RP_GONE] = "gone", [GM_RP_FAILED] = "FAILED",
};

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  struct gm_rp_conn sv, cl;
  struct gm_rp_limits offer;
  struct gm_rp_hello hello;     /* the client's */
  struct gm_rp_hello sv_hello = { 0 }; /* the one the server accepted */
  struct gm_rp_welcome welcome;
  uint8_t hello_b[GM_RP_HELLO_SIZE], welcome_b[GM_RP_WELCOME_SIZE] = { 0 };
  size_t welcome_len = 0;
  bool own_hello = false;       /* the welcome answers the client's hello */
  /* The server's last goodbye; before it makes one, what it would. */
  struct gm_rp_goodbye bye = { .magic = GM_RP_GOODBYE_MAGIC,
                               .flags = GM_RP_BYE_FLUSHED, .instance = 0x5eed };
  uint8_t bye_b[GM_RP_GOODBYE_SIZE + 8] = { 0 };
  char why[256];

  if (trace < 0)
    trace = getenv ("FUZZ_TRACE") != NULL;
  if (size < HEADER)
    return 0;
  why[0] = '\0';
  offer = (struct gm_rp_limits) {
    .credits = data[0], .flags = le (data + 2, 2),
    .min_block = 1u << ((data[4] & 0x7f) % 18),
    .pref_block = 1u << (data[5] % 27),
    .max_block = data[6] == 255 ? UINT32_MAX : 1u << (data[6] % 32),
    .max_request = 1u << (data[7] % 32), .size = le (data + 8, 8),
    .instance = 0x5eed,         /* a server's, never 0 */
  };
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  /* An older client (version 2, or 3 with bit 0 set) has no identity. */
  cl.conn_id = data[4] & 0x80 ? 0 : le (data + 8, 8);
  ASSERT (gm_rp_conn_hello (&cl, data[1], 1u << ((data[7] + (data[1] >> 4)) % 32),
                            &hello, why, sizeof why) == 0);
  ASSERT (hello.version == GM_RP_VERSION && hello.conn_id == cl.conn_id);
  if (data[4] & 0x80)           /* an older client: its hello and all */
    hello.version = cl.sent.version = 2 + (data[4] & 1);
  gm_rp_encode_hello (&hello, hello_b);
  gm_rp_encode_goodbye (&bye, bye_b);

  for (size_t at = HEADER; at + 2 <= size;) {
    enum action act = data[at] % N_ACTIONS;
    size_t len = data[at + 1];
    if (len > size - at - 2)
      len = size - at - 2;
    /* The message alone in a buffer of its size. */
    uint8_t *msg = malloc (len ? len : 1);
    memcpy (msg, data + at + 2, len);
    at += 2 + len;

    bool sv_failed = sv.state == GM_RP_FAILED;
    bool cl_failed = cl.state == GM_RP_FAILED;
    bool cl_waiting = cl.state == GM_RP_WELCOME_WAIT;
    bool sv_gone = sv.state == GM_RP_GONE;
    bool cl_gone = cl.state == GM_RP_GONE;
    unsigned sv_in_use = sv.in_use, cl_in_use = cl.in_use;
    enum gm_rp_state sv_before = sv.state, cl_before = cl.state;
    struct gm_rp_request r, r2;
    struct gm_rp_reply rep;
    struct gm_rp_goodbye g;
    int ret, ret2;

    switch (act) {
    case HELLO:
      ret = len ? gm_rp_conn_accept_hello (&sv, msg, len, &offer, &welcome,
                                           why, sizeof why)
        : gm_rp_conn_accept_hello (&sv, hello_b, sizeof hello_b, &offer,
                                   &welcome, why, sizeof why);
      ASSERT ((ret == 0) == (welcome.error == 0));
      ASSERT (welcome.error == 0 || gm_rp_error_known (welcome.error));
      gm_rp_encode_welcome (&welcome, welcome_b);
      welcome_len = sizeof welcome_b;
      own_hello = len == 0;
      if (ret == 0)
        gm_rp_decode_hello (len ? msg : hello_b, len ? len : sizeof hello_b,
                            &sv_hello, NULL, 0);
      break;
    case WELCOME:
      if (len) {
        /* The same bytes as a rejection's: a refusal that passes has a
         * reason the bridge may print with %s. */
        struct gm_rp_welcome rf;
        if (gm_rp_take_refusal (msg, len, &rf, why, sizeof why) == 0)
          ASSERT (rf.error && strnlen (rf.reason, GM_RP_REASON_LEN)
                  < GM_RP_REASON_LEN);
        ret = gm_rp_conn_take_welcome (&cl, msg, len, why, sizeof why);
      }
      else if (welcome_len)
        ret = gm_rp_conn_take_welcome (&cl, welcome_b, welcome_len,
                                       why, sizeof why);
      else
        break;
      /* The client accepts what a server accepting its hello sends. */
      if (!len && own_hello && cl_waiting)
        ASSERT ((ret == 0) == (welcome.error == 0));
      if (ret == 0)
        ASSERT (cl.state == GM_RP_READY);
      break;
    case REQUEST:
      ret = gm_rp_conn_take_request (&sv, msg, len, &r, why, sizeof why);
      if (ret == 0 && r.op != GM_RP_DISCONNECT)
        assert_obeys (&r, &sv.lim);
      ASSERT (!sv_gone || ret == -1);
      break;
    case END:
      if (len == 1 && sv.in_use)
        ret = gm_rp_conn_request_end (&sv,
                                      sv.inflight[msg[0] % sv.in_use].handle,
                                      &r, why, sizeof why);
      else
        ret = gm_rp_conn_request_end (&sv, le (msg, len < 8 ? len : 8), &r,
                                      why, sizeof why);
      ASSERT (!sv_gone || ret == -1);
      break;
    case BEGIN:
      if (gm_rp_decode_request (msg, len, &r, why, sizeof why) == 0) {
        unsigned before = cl.in_use;
        ret = gm_rp_conn_request_begin (&cl, &r, why, sizeof why);
        ASSERT (ret <= 0 || cl.in_use == before);  /* refused: no credit */
        ASSERT (!cl_gone || ret == -1);
      }
      break;
    case REPLY:
      /* Bytes after a reply are the extents it left in the buffer. */
      ret = gm_rp_conn_take_reply (&cl, msg, len > GM_RP_REPLY_SIZE
                                   ? GM_RP_REPLY_SIZE : len, &rep, &r,
                                   why, sizeof why);
      if (ret == 0 && r.op == GM_RP_BLOCK_STATUS && rep.error == 0 &&
          (size_t) rep.count * GM_RP_EXTENT_SIZE <= len - GM_RP_REPLY_SIZE)
        check_extents (msg + GM_RP_REPLY_SIZE, rep.count, &r);
      ASSERT (!cl_gone || ret == -1);
      break;
    case BOTH:
      if (gm_rp_decode_request (msg, len, &r, why, sizeof why) == 0 &&
          cl.state == GM_RP_READY && sv.state == GM_RP_READY &&
          gm_rp_conn_credits_free (&cl) && gm_rp_conn_credits_free (&sv)) {
        uint8_t b[GM_RP_REQUEST_SIZE];
        bool dup = false;
        for (unsigned i = 0; i < sv.in_use; i++)
          dup |= sv.inflight[i].handle == r.handle;
        for (unsigned i = 0; i < cl.in_use; i++)
          dup |= cl.inflight[i].handle == r.handle;
        if (dup)
          break;
        ret = gm_rp_conn_request_begin (&cl, &r, why, sizeof why);
        gm_rp_encode_request (&r, b);
        ret2 = gm_rp_conn_take_request (&sv, b, sizeof b, &r2, why, sizeof why);
        /* Same limits on both sides (the usual case: the server took
         * the client's own hello), so the same verdict.
         */
        if (same_limits (&cl.lim, &sv.lim))
          ASSERT (ret == ret2);
        ASSERT (memcmp (&r, &r2, sizeof r) == 0);
      }
      break;
    case CODEC:
      codec_round_trip (msg, len);
      break;
    case GOODBYE:
      if (len && (msg[0] & 2)) {
        /* Only a server says goodbye: refused, the client as it was. */
        memset (&g, 0x5a, sizeof g);
        ASSERT (gm_rp_conn_goodbye (&cl, true, &g, why, sizeof why) == -1);
        ASSERT (cl.state == cl_before);
        break;
      }
      if (len && (msg[0] & 4)) {
        /* Only a client takes one: the server conn is broken. */
        ASSERT (gm_rp_conn_take_goodbye (&sv, bye_b, GM_RP_GOODBYE_SIZE, &g,
                                         why, sizeof why) == -1);
        ASSERT (sv.state == GM_RP_FAILED);
        break;
      }
      ret = gm_rp_conn_goodbye (&sv, len ? msg[0] & 1 : true, &g,
                                why, sizeof why);
      ASSERT (ret == 0 || ret == -1);
      ASSERT ((ret == 0) == ((sv_before == GM_RP_READY ||
                              sv_before == GM_RP_CLOSING) &&
                             sv.lim.version >= 3 && sv_in_use == 0));
      if (ret) {
        ASSERT (sv.state == sv_before);
        break;
      }
      ASSERT (sv.state == GM_RP_GONE && sv.in_use == sv_in_use);
      ASSERT (g.magic == GM_RP_GOODBYE_MAGIC && g.instance == sv.lim.instance);
      ASSERT (g.flags == (len && !(msg[0] & 1) ? 0 : GM_RP_BYE_FLUSHED));
      for (unsigned i = 0; i < sizeof g.reserved; i++)
        ASSERT (g.reserved[i] == 0);
      bye = g;
      memset (bye_b, 0, sizeof bye_b);
      gm_rp_encode_goodbye (&bye, bye_b);
      break;
    case BYE: {
      /* len 1-3, the server's goodbye mutated: byte msg[0] % 24 xor
       * msg[1] (else 1); with a 3rd byte, msg[2] % 33 bytes of it
       * (zeros past its 24).
       */
      uint8_t b[sizeof bye_b];
      const uint8_t *p = b;
      size_t blen = GM_RP_GOODBYE_SIZE;
      memcpy (b, bye_b, sizeof b);
      if (len >= 1 && len <= 3) {
        b[msg[0] % GM_RP_GOODBYE_SIZE] ^= len >= 2 ? msg[1] : 1;
        if (len == 3)
          blen = msg[2] % (sizeof b + 1);
      }
      else if (len > 3) {
        p = msg;
        blen = len;
      }
      /* The goodbye alone in a buffer of its size, like msg. */
      uint8_t *copy = malloc (blen ? blen : 1);
      memcpy (copy, p, blen);
      bool ok = goodbye_ok (&cl, cl_before, copy, blen);
      memset (&g, 0x5a, sizeof g);
      ret = gm_rp_conn_take_goodbye (&cl, copy, blen, &g, why, sizeof why);
      ASSERT (ret == 0 || ret == -1);
      ASSERT ((ret == 0) == ok);
      if (ret == 0) {
        ASSERT (cl.state == GM_RP_GONE && cl.in_use == cl_in_use);
        ASSERT (g.instance == cl.lim.instance && g.magic == GM_RP_GOODBYE_MAGIC);
        ASSERT ((g.flags & ~GM_RP_BYE_FLUSHED) == 0);
        ASSERT (g.flags == le (copy + 4, 4));
      }
      else
        ASSERT (cl.state == GM_RP_FAILED);
      /* The server's own goodbye, unchanged, to the client it welcomed:
       * taken whenever the client's state and version allow one.
       */
      if (len == 0 && cl.lim.instance == bye.instance &&
          cl.lim.version >= 3 &&
          (cl_before == GM_RP_READY || cl_before == GM_RP_CLOSING))
        ASSERT (ret == 0);
      free (copy);
      break;
    }
    case N_ACTIONS:
      die ("unreachable");
    }
    free (msg);
    if (trace)
      fprintf (stderr, "%-8s len %3zu: server %s %u in flight, client %s %u"
               " in flight%s%s\n", action_names[act], len,
               state_names[sv.state], sv.in_use, state_names[cl.state],
               cl.in_use, sv.state == GM_RP_FAILED || cl.state == GM_RP_FAILED
               ? ": " : "", sv.state == GM_RP_FAILED || cl.state == GM_RP_FAILED
               ? why : "");

    /* FAILED is final; GONE leads only to FAILED, credits untouched. */
    ASSERT (!sv_failed || sv.state == GM_RP_FAILED);
    ASSERT (!cl_failed || cl.state == GM_RP_FAILED);
    ASSERT (!sv_gone || sv.state == GM_RP_GONE || sv.state == GM_RP_FAILED);
    ASSERT (!cl_gone || cl.state == GM_RP_GONE || cl.state == GM_RP_FAILED);
    ASSERT (!sv_gone || sv.in_use == sv_in_use);
    ASSERT (!cl_gone || cl.in_use == cl_in_use);
    assert_conn (&sv, &offer, &sv_hello);
    assert_conn (&cl, &offer, &hello);
  }
  return 0;
}

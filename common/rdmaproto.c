/* gmblock: the RDMA transport's wire protocol, version 5.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "rdmaproto.h"
#include "sizes.h"

/* The structs are the wire layout: no padding (their sizes are the
 * wire sizes), each field at the offset docs/rdma-protocol.md gives
 * (the field tables below name it, and the compiler checks it).
 */
_Static_assert (sizeof (struct gm_rp_hello) == GM_RP_HELLO_SIZE, "hello");
_Static_assert (sizeof (struct gm_rp_welcome) == GM_RP_WELCOME_SIZE, "welcome");
_Static_assert (sizeof (struct gm_rp_request) == GM_RP_REQUEST_SIZE, "request");
_Static_assert (sizeof (struct gm_rp_reply) == GM_RP_REPLY_SIZE, "reply");
_Static_assert (sizeof (struct gm_rp_extent) == GM_RP_EXTENT_SIZE, "extent");
_Static_assert (sizeof (struct gm_rp_goodbye) == GM_RP_GOODBYE_SIZE, "goodbye");
_Static_assert (GM_RP_HELLO_SIZE <= 56, "hello fits a CM connect request");
_Static_assert (GM_RP_WELCOME_SIZE <= 148, "welcome fits a CM reject");

/* Write a formatted reason into why (if any) and return ret. */
static int __attribute__((format (printf, 4, 5)))
say (int ret, char *why, size_t whylen, const char *fmt, ...)
{
  va_list ap;

  if (why && whylen) {
    va_start (ap, fmt);
    vsnprintf (why, whylen, fmt, ap);
    va_end (ap);
  }
  return ret;
}

/* ---- codec ---------------------------------------------------------- */

/* A field: count little-endian integers of width bytes at off, both in
 * the struct and on the wire.
 */
struct field { uint8_t off, width, count; };
/* off, if the member is there; else the array size is negative and
 * the build fails.
 */
#define AT(type, m, off) \
  ((off) + 0 * sizeof (char[offsetof (struct type, m) == (off) ? 1 : -1]))
#define F(type, m, off) { AT (type, m, off), sizeof ((struct type *) 0)->m, 1 }
#define BYTES(type, m, off) { AT (type, m, off), 1, sizeof ((struct type *) 0)->m }

struct layout {
  const char *name;
  size_t size;
  bool padded;                  /* may be followed by zero padding */
  const struct field *f;
  size_t n;
};

static const struct field hello_f[] = {
  F (gm_rp_hello, magic, 0), F (gm_rp_hello, version, 4),
  F (gm_rp_hello, credits, 6), F (gm_rp_hello, max_request, 8),
  F (gm_rp_hello, conn_id, 12), BYTES (gm_rp_hello, reserved, 20),
};
static const struct field welcome_f[] = {
  F (gm_rp_welcome, magic, 0), F (gm_rp_welcome, version, 4),
  F (gm_rp_welcome, credits, 6), F (gm_rp_welcome, error, 8),
  F (gm_rp_welcome, flags, 12), F (gm_rp_welcome, size, 16),
  F (gm_rp_welcome, min_block, 24), F (gm_rp_welcome, pref_block, 28),
  F (gm_rp_welcome, max_block, 32), F (gm_rp_welcome, max_request, 36),
  F (gm_rp_welcome, instance, 40), BYTES (gm_rp_welcome, reason, 48),
};
static const struct field request_f[] = {
  F (gm_rp_request, op, 0), F (gm_rp_request, reserved, 1),
  F (gm_rp_request, flags, 2), F (gm_rp_request, length, 4),
  F (gm_rp_request, handle, 8), F (gm_rp_request, offset, 16),
  F (gm_rp_request, addr, 24), F (gm_rp_request, rkey, 32),
  F (gm_rp_request, buf_len, 36),
};
static const struct field reply_f[] = {
  F (gm_rp_reply, handle, 0), F (gm_rp_reply, error, 8),
  F (gm_rp_reply, count, 12),
};
static const struct field extent_f[] = {
  F (gm_rp_extent, length, 0), F (gm_rp_extent, flags, 4),
};
static const struct field goodbye_f[] = {
  F (gm_rp_goodbye, magic, 0), F (gm_rp_goodbye, flags, 4),
  F (gm_rp_goodbye, instance, 8), BYTES (gm_rp_goodbye, reserved, 16),
};

#define LAYOUT(name, size, padded, f) \
  { name, size, padded, f, sizeof f / sizeof f[0] }
static const struct layout hello_l =
  LAYOUT ("hello", GM_RP_HELLO_SIZE, true, hello_f);
static const struct layout welcome_l =
  LAYOUT ("welcome", GM_RP_WELCOME_SIZE, true, welcome_f);
static const struct layout request_l =
  LAYOUT ("request", GM_RP_REQUEST_SIZE, false, request_f);
static const struct layout reply_l =
  LAYOUT ("reply", GM_RP_REPLY_SIZE, false, reply_f);
static const struct layout extent_l =
  LAYOUT ("extent", GM_RP_EXTENT_SIZE, false, extent_f);
static const struct layout goodbye_l =
  LAYOUT ("goodbye", GM_RP_GOODBYE_SIZE, false, goodbye_f);

/* A struct member of width bytes, read and written through memcpy
 * (no cast of a uint8_t pointer to a wider type).
 */
static uint64_t
load (const uint8_t *p, unsigned width)
{
  uint8_t v8; uint16_t v16; uint32_t v32; uint64_t v64;

  switch (width) {
  case 1: memcpy (&v8, p, 1); return v8;
  case 2: memcpy (&v16, p, 2); return v16;
  case 4: memcpy (&v32, p, 4); return v32;
  default: memcpy (&v64, p, 8); return v64;
  }
}

static void
store (uint8_t *p, unsigned width, uint64_t v)
{
  uint8_t v8 = v; uint16_t v16 = v; uint32_t v32 = v;

  switch (width) {
  case 1: memcpy (p, &v8, 1); break;
  case 2: memcpy (p, &v16, 2); break;
  case 4: memcpy (p, &v32, 4); break;
  default: memcpy (p, &v, 8); break;
  }
}

static void
encode (const struct layout *l, const void *m, void *buf)
{
  const uint8_t *src = m;
  uint8_t *dst = buf;

  for (size_t i = 0; i < l->n; i++) {
    const struct field *f = &l->f[i];
    for (unsigned k = 0; k < f->count; k++) {
      size_t at = f->off + (size_t) k * f->width;
      uint64_t v = load (src + at, f->width);
      for (unsigned b = 0; b < f->width; b++)
        dst[at + b] = (uint8_t) (v >> (8 * b));
    }
  }
}

static int
decode (const struct layout *l, const void *buf, size_t len, void *m,
        char *why, size_t whylen)
{
  const uint8_t *src = buf;
  uint8_t *dst = m;

  if (len < l->size || (!l->padded && len != l->size))
    return say (-1, why, whylen, "a %s is %zu bytes, got %zu",
                l->name, l->size, len);
  for (size_t i = l->size; i < len; i++)
    if (src[i] != 0)
      return say (-1, why, whylen, "padding after the %s is not zero",
                  l->name);
  for (size_t i = 0; i < l->n; i++) {
    const struct field *f = &l->f[i];
    for (unsigned k = 0; k < f->count; k++) {
      size_t at = f->off + (size_t) k * f->width;
      uint64_t v = 0;
      for (unsigned b = 0; b < f->width; b++)
        v |= (uint64_t) src[at + b] << (8 * b);
      store (dst + at, f->width, v);
    }
  }
  return 0;
}

#define CODEC(msg)                                                      \
  void gm_rp_encode_##msg (const struct gm_rp_##msg *m, void *buf)      \
  { encode (&msg##_l, m, buf); }                                        \
  int gm_rp_decode_##msg (const void *buf, size_t len,                  \
                          struct gm_rp_##msg *m, char *why, size_t whylen) \
  { return decode (&msg##_l, buf, len, m, why, whylen); }
CODEC (hello)
CODEC (welcome)
CODEC (request)
CODEC (reply)
CODEC (extent)
CODEC (goodbye)

/* ---- names and errors ----------------------------------------------- */

static const char *const op_names[GM_RP_OP_COUNT] = {
  [GM_RP_READ] = "READ", [GM_RP_WRITE] = "WRITE",
  [GM_RP_DISCONNECT] = "DISCONNECT", [GM_RP_FLUSH] = "FLUSH",
  [GM_RP_TRIM] = "TRIM", [GM_RP_CACHE] = "CACHE", [GM_RP_ZERO] = "ZERO",
  [GM_RP_BLOCK_STATUS] = "BLOCK_STATUS", [GM_RP_ABANDON] = "ABANDON",
};

const char *
gm_rp_op_name (unsigned op)
{
  return op < GM_RP_OP_COUNT ? op_names[op] : "unknown";
}

/* Wire value and host errno side by side (equal on Linux, not assumed). */
static const struct { uint32_t wire; int host; } errors[] = {
  { GM_RP_EPERM, EPERM }, { GM_RP_EIO, EIO }, { GM_RP_ENOMEM, ENOMEM },
  { GM_RP_EINVAL, EINVAL }, { GM_RP_ENOSPC, ENOSPC },
  { GM_RP_EOVERFLOW, EOVERFLOW }, { GM_RP_ENOTSUP, ENOTSUP },
  { GM_RP_ESHUTDOWN, ESHUTDOWN },
};

uint32_t
gm_rp_error_to_wire (int host_errno)
{
  if (host_errno == 0)
    return 0;
  if (host_errno == EROFS)
    return GM_RP_EPERM;
  if (host_errno == EFBIG || host_errno == EDQUOT)   /* as nbdkit does */
    return GM_RP_ENOSPC;
  if (host_errno == EOPNOTSUPP)  /* may differ from ENOTSUP elsewhere */
    return GM_RP_ENOTSUP;
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].host == host_errno)
      return errors[i].wire;
  return GM_RP_EINVAL;
}

int
gm_rp_error_from_wire (uint32_t wire)
{
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].wire == wire)
      return errors[i].host;
  return wire == 0 ? 0 : EIO;
}

bool
gm_rp_error_known (uint32_t wire)
{
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].wire == wire)
      return true;
  return false;
}

/* ---- checks --------------------------------------------------------- */

#define TF_KNOWN (GM_RP_TF_READ_ONLY | GM_RP_TF_FLUSH | GM_RP_TF_FUA |    \
                  GM_RP_TF_ROTATIONAL | GM_RP_TF_TRIM | GM_RP_TF_ZERO |   \
                  GM_RP_TF_MULTI_CONN | GM_RP_TF_CACHE |                  \
                  GM_RP_TF_FAST_ZERO | GM_RP_TF_BLOCK_STATUS)
#define FLAGS_KNOWN (GM_RP_FLAG_FUA | GM_RP_FLAG_NO_HOLE |                \
                     GM_RP_FLAG_REQ_ONE | GM_RP_FLAG_FAST_ZERO)

/* Per opcode: the flags it accepts, what it needs, its export flag,
 * the protocol version that has it.  CONN_ID: the offset field holds
 * a conn_id and the addr field a server instance (both nonzero), no
 * offset in the export and no buffer.
 */
enum { NEEDS_LENGTH = 1, DATA = 2, BUFFER = 4, WRITES = 8, CONN_ID = 16 };
static const struct {
  uint16_t flags;
  uint8_t needs;
  uint32_t tf;                  /* export flag it needs, 0: none */
  uint16_t since;               /* version, 0: every one */
} ops[GM_RP_OP_COUNT] = {
  [GM_RP_READ] = { 0, NEEDS_LENGTH | DATA | BUFFER, 0, 0 },
  [GM_RP_WRITE] = { GM_RP_FLAG_FUA, NEEDS_LENGTH | DATA | BUFFER | WRITES,
                    0, 0 },
  [GM_RP_DISCONNECT] = { 0, 0, 0, 0 },
  [GM_RP_FLUSH] = { 0, 0, GM_RP_TF_FLUSH, 0 },
  [GM_RP_TRIM] = { GM_RP_FLAG_FUA, NEEDS_LENGTH | WRITES, GM_RP_TF_TRIM, 0 },
  [GM_RP_CACHE] = { 0, NEEDS_LENGTH, GM_RP_TF_CACHE, 0 },
  [GM_RP_ZERO] = { GM_RP_FLAG_FUA | GM_RP_FLAG_NO_HOLE | GM_RP_FLAG_FAST_ZERO,
                   NEEDS_LENGTH | WRITES, GM_RP_TF_ZERO, 0 },
  [GM_RP_BLOCK_STATUS] = { GM_RP_FLAG_REQ_ONE, NEEDS_LENGTH | BUFFER,
                           GM_RP_TF_BLOCK_STATUS, 0 },
  [GM_RP_ABANDON] = { 0, CONN_ID, 0, 5 },
};

bool
gm_rp_op_writes (unsigned op)
{
  return op < GM_RP_OP_COUNT && (ops[op].needs & WRITES);
}

static bool
all_zero (const void *p, size_t n)
{
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i])
      return false;
  return true;
}

int
gm_rp_check_limits (const struct gm_rp_limits *l, char *why, size_t whylen)
{
  if (l->credits < 1 || l->credits > GM_RP_MAX_CREDITS)
    return say (-1, why, whylen, "credits %u not in 1-%u",
                l->credits, GM_RP_MAX_CREDITS);
  if (l->flags & ~TF_KNOWN)
    return say (-1, why, whylen, "unknown transmission flags 0x%x",
                l->flags & ~TF_KNOWN);
  if ((l->flags & GM_RP_TF_FAST_ZERO) && !(l->flags & GM_RP_TF_ZERO))
    return say (-1, why, whylen, "FAST_ZERO advertised without ZERO");
  if (l->size > INT64_MAX)
    return say (-1, why, whylen, "export size %llu above 2^63-1",
                (unsigned long long) l->size);
  /* nbdkit's rules for block sizes, so the bridge can pass them on. */
  if (!gm_is_power_of_2 (l->min_block) || l->min_block > 65536)
    return say (-1, why, whylen,
                "minimum block size %u is not a power of 2 up to 64K",
                l->min_block);
  if (!gm_is_power_of_2 (l->pref_block) || l->pref_block < 512 ||
      l->pref_block > 32 << 20 || l->pref_block < l->min_block)
    return say (-1, why, whylen, "preferred block size %u is not a power of 2"
                " from max(512, minimum %u) to 32M",
                l->pref_block, l->min_block);
  if (l->max_block < l->pref_block ||
      (l->max_block != UINT32_MAX && l->max_block % l->min_block))
    return say (-1, why, whylen, "maximum block size %u is below the preferred"
                " %u or not a multiple of the minimum %u",
                l->max_block, l->pref_block, l->min_block);
  if (l->max_request < l->min_block || l->max_request > l->max_block)
    return say (-1, why, whylen, "max request %u not between the minimum %u"
                " and maximum %u block sizes",
                l->max_request, l->min_block, l->max_block);
  return 0;
}

int
gm_rp_check_request (const struct gm_rp_request *r,
                     const struct gm_rp_limits *l, char *why, size_t whylen)
{
  const char *name = gm_rp_op_name (r->op);
  uint64_t end;

  /* Malformed: the peer is broken or hostile. */
  if (r->op >= GM_RP_OP_COUNT || l->version < ops[r->op].since)
    return say (-1, why, whylen, "unknown opcode %u in version %u", r->op,
                l->version);
  if (r->reserved)
    return say (-1, why, whylen, "%s: reserved field is not zero", name);
  if (r->flags & ~FLAGS_KNOWN)
    return say (-1, why, whylen, "%s: unknown flags 0x%x", name,
                r->flags & ~FLAGS_KNOWN);
  if (r->flags & ~ops[r->op].flags)
    return say (-1, why, whylen, "%s: flags 0x%x not valid on %s", name,
                r->flags & ~ops[r->op].flags, name);
  if (ops[r->op].needs & NEEDS_LENGTH) {
    if (r->length == 0)
      return say (-1, why, whylen, "%s: length is 0", name);
  }
  else if (ops[r->op].needs & CONN_ID) {
    if (r->length || r->offset == 0 || r->addr == 0 || r->rkey || r->buf_len)
      return say (-1, why, whylen, "%s: needs length 0, a conn_id (offset) "
                  "and an instance (addr), no rkey or buffer length", name);
  }
  else if (r->length || r->offset)
    return say (-1, why, whylen, "%s: offset and length must be 0", name);
  if ((ops[r->op].needs & DATA) && r->length > l->max_request)
    return say (-1, why, whylen, "%s: length %u above the max request %u",
                name, r->length, l->max_request);
  if (__builtin_add_overflow (r->offset, (uint64_t) r->length, &end))
    return say (-1, why, whylen, "%s: offset %llu + length %u overflows",
                name, (unsigned long long) r->offset, r->length);
  if (ops[r->op].needs & BUFFER) {
    uint32_t need = ops[r->op].needs & DATA ? r->length : GM_RP_EXTENT_SIZE;
    uint64_t buf_end;
    if (r->addr == 0)
      return say (-1, why, whylen, "%s: buffer address is 0", name);
    if (r->rkey == 0)
      return say (-1, why, whylen, "%s: rkey is 0", name);
    if (r->buf_len < need)
      return say (-1, why, whylen, "%s: buffer of %u bytes, needs %u",
                  name, r->buf_len, need);
    if (__builtin_add_overflow (r->addr, (uint64_t) r->buf_len, &buf_end))
      return say (-1, why, whylen, "%s: buffer wraps around the address space",
                  name);
  }
  else if ((r->addr && !(ops[r->op].needs & CONN_ID)) || r->rkey || r->buf_len)
    return say (-1, why, whylen, "%s: buffer given to an op without data",
                name);

  /* Well formed, but not allowed on this export: an error reply. */
  if (ops[r->op].tf && !(l->flags & ops[r->op].tf))
    return say (GM_RP_EINVAL, why, whylen, "%s: not supported by the export",
                name);
  if ((ops[r->op].needs & WRITES) && (l->flags & GM_RP_TF_READ_ONLY))
    return say (GM_RP_EPERM, why, whylen, "%s: the export is read-only", name);
  if ((r->flags & GM_RP_FLAG_FUA) && !(l->flags & GM_RP_TF_FUA))
    return say (GM_RP_EINVAL, why, whylen, "%s: FUA not supported by the export",
                name);
  if ((r->flags & GM_RP_FLAG_FAST_ZERO) && !(l->flags & GM_RP_TF_FAST_ZERO))
    return say (GM_RP_EINVAL, why, whylen,
                "%s: FAST_ZERO not supported by the export", name);
  if (end > l->size && !(ops[r->op].needs & CONN_ID))
    /* nbdkit's choice: ENOSPC for writes, EINVAL for the rest. */
    return say (r->op == GM_RP_WRITE || r->op == GM_RP_ZERO
                ? GM_RP_ENOSPC : GM_RP_EINVAL, why, whylen,
                "%s: offset %llu + length %u beyond the export size %llu",
                name, (unsigned long long) r->offset, r->length,
                (unsigned long long) l->size);
  return 0;
}

int
gm_rp_check_reply (const struct gm_rp_reply *rep,
                   const struct gm_rp_request *req, char *why, size_t whylen)
{
  if (rep->error && !gm_rp_error_known (rep->error))
    return say (-1, why, whylen, "reply: unknown error %u", rep->error);
  if (req->op != GM_RP_BLOCK_STATUS || rep->error) {
    if (rep->count)
      return say (-1, why, whylen, "reply to %s: count %u is not 0",
                  gm_rp_op_name (req->op), rep->count);
    return 0;
  }
  if (rep->count == 0 || rep->count > req->buf_len / GM_RP_EXTENT_SIZE)
    return say (-1, why, whylen,
                "reply to BLOCK_STATUS: %u extents, the buffer holds 1-%u",
                rep->count, req->buf_len / GM_RP_EXTENT_SIZE);
  if ((req->flags & GM_RP_FLAG_REQ_ONE) && rep->count != 1)
    return say (-1, why, whylen,
                "reply to BLOCK_STATUS: %u extents for REQ_ONE", rep->count);
  return 0;
}

int
gm_rp_check_extents (const void *buf, uint32_t count,
                     const struct gm_rp_request *req, char *why, size_t whylen)
{
  uint64_t sum = 0;

  for (uint32_t i = 0; i < count; i++) {
    struct gm_rp_extent e;
    gm_rp_decode_extent ((const uint8_t *) buf + (size_t) i * GM_RP_EXTENT_SIZE,
                         GM_RP_EXTENT_SIZE, &e, NULL, 0);
    if (e.length == 0)
      return say (-1, why, whylen, "extent %u: length 0", i);
    if (e.flags & ~(GM_RP_EXTENT_HOLE | GM_RP_EXTENT_ZERO))
      return say (-1, why, whylen, "extent %u: unknown flags 0x%x", i, e.flags);
    sum += e.length;
    if (sum > req->length)
      return say (-1, why, whylen, "extent %u ends past the %u bytes asked",
                  i, req->length);
  }
  return 0;
}

/* ---- connection state machine --------------------------------------- */

static const char *const state_names[] = {
  [GM_RP_HANDSHAKE] = "handshake", [GM_RP_WELCOME_WAIT] = "awaiting welcome",
  [GM_RP_READY] = "ready", [GM_RP_CLOSING] = "closing",
  [GM_RP_GONE] = "gone", [GM_RP_FAILED] = "failed",
};

int
gm_rp_random_id (uint64_t *id)
{
  *id = 0;
  while (*id == 0)
    if (getrandom (id, sizeof *id, 0) != sizeof *id)
      return -1;
  return 0;
}

void
gm_rp_conn_init (struct gm_rp_conn *c, enum gm_rp_role role)
{
  memset (c, 0, sizeof *c);
  c->role = role;
  c->state = GM_RP_HANDSHAKE;
}

/* A protocol error: the connection is finished.  Returns -1. */
static int __attribute__((format (printf, 4, 5)))
broken (struct gm_rp_conn *c, char *why, size_t whylen, const char *fmt, ...)
{
  va_list ap;

  c->state = GM_RP_FAILED;
  if (fmt && why && whylen) {
    va_start (ap, fmt);
    vsnprintf (why, whylen, fmt, ap);
    va_end (ap);
  }
  return -1;
}

/* The call fits the role and state?  Otherwise the conn is broken. */
static int
expect (struct gm_rp_conn *c, enum gm_rp_role role, enum gm_rp_state state,
        const char *what, char *why, size_t whylen)
{
  if (c->role != role)
    return broken (c, why, whylen, "%s on the %s side", what,
                   c->role == GM_RP_SERVER ? "server" : "client");
  if (c->state != state)
    return broken (c, why, whylen, "%s in state %s", what,
                   state_names[c->state]);
  return 0;
}

/* Judge a decoded hello: 0, or the error to refuse it with. */
static uint32_t
judge_hello (const struct gm_rp_hello *h, const struct gm_rp_limits *offer,
             char *why, size_t whylen)
{
  if (h->magic != GM_RP_HELLO_MAGIC)
    return say (GM_RP_EINVAL, why, whylen, "bad hello magic 0x%08x", h->magic);
  if (h->version < GM_RP_VERSION_MIN || h->version > GM_RP_VERSION)
    return say (GM_RP_ENOTSUP, why, whylen,
                "version %u not supported (server speaks %u to %u)",
                h->version, GM_RP_VERSION_MIN, GM_RP_VERSION);
  if (!all_zero (h->reserved, sizeof h->reserved) ||
      (h->version < 4 && h->conn_id != 0))
    return say (GM_RP_EINVAL, why, whylen, "hello: reserved field not zero");
  if (h->credits == 0)
    return say (GM_RP_EINVAL, why, whylen, "hello asks for 0 credits");
  if (gm_rp_check_limits (offer, why, whylen))
    return GM_RP_EIO;           /* the server's own offer is wrong */
  if (h->max_request < offer->min_block)
    return say (GM_RP_EINVAL, why, whylen,
                "client max request %u below the block size %u",
                h->max_request, offer->min_block);
  return 0;
}

void
gm_rp_welcome_refusal (struct gm_rp_welcome *w, uint32_t error,
                       const char *reason)
{
  memset (w, 0, sizeof *w);
  w->magic = GM_RP_WELCOME_MAGIC;
  w->version = GM_RP_VERSION;
  w->error = error;
  /* Printable only: it ends up in the client's log. */
  for (size_t i = 0; reason[i] && i < GM_RP_REASON_LEN - 1; i++)
    w->reason[i] = reason[i] >= 0x20 && reason[i] < 0x7f ? reason[i] : '?';
}

int
gm_rp_conn_accept_hello (struct gm_rp_conn *c, const void *buf, size_t len,
                         const struct gm_rp_limits *offer,
                         struct gm_rp_welcome *w, char *why, size_t whylen)
{
  struct gm_rp_hello h;
  char msg[128];
  uint32_t err = GM_RP_EINVAL;

  if (expect (c, GM_RP_SERVER, GM_RP_HANDSHAKE, "hello", msg, sizeof msg) == 0 &&
      gm_rp_decode_hello (buf, len, &h, msg, sizeof msg) == 0)
    err = judge_hello (&h, offer, msg, sizeof msg);
  gm_rp_welcome_refusal (w, err, err ? msg : "");
  if (err)
    return broken (c, why, whylen, "%s", msg);
  c->lim = *offer;
  c->lim.version = h.version;
  c->conn_id = h.conn_id;
  w->version = h.version;       /* an older client reads its own */
  if (h.credits < c->lim.credits)
    c->lim.credits = h.credits;
  if (h.max_request < c->lim.max_request)
    c->lim.max_request = h.max_request;
  c->state = GM_RP_READY;
  w->credits = c->lim.credits;
  w->flags = c->lim.flags;
  w->size = c->lim.size;
  w->min_block = c->lim.min_block;
  w->pref_block = c->lim.pref_block;
  w->max_block = c->lim.max_block;
  w->max_request = c->lim.max_request;
  w->instance = c->lim.instance;
  return 0;
}

int
gm_rp_conn_hello (struct gm_rp_conn *c, uint16_t credits, uint32_t max_request,
                  struct gm_rp_hello *h, char *why, size_t whylen)
{
  if (expect (c, GM_RP_CLIENT, GM_RP_HANDSHAKE, "hello", why, whylen))
    return -1;
  memset (h, 0, sizeof *h);
  h->magic = GM_RP_HELLO_MAGIC;
  h->version = GM_RP_VERSION;
  h->credits = credits;
  h->max_request = max_request;
  h->conn_id = c->conn_id;
  c->sent = *h;
  c->state = GM_RP_WELCOME_WAIT;
  return 0;
}

/* Printable characters, then NUL padding to the end. */
static bool
reason_ok (const char *r)
{
  size_t n = strnlen (r, GM_RP_REASON_LEN);

  if (n == GM_RP_REASON_LEN)
    return false;
  for (size_t i = 0; i < n; i++)
    if (r[i] < 0x20 || r[i] >= 0x7f)
      return false;
  return all_zero (r + n, GM_RP_REASON_LEN - n);
}

int
gm_rp_conn_take_welcome (struct gm_rp_conn *c, const void *buf, size_t len,
                         char *why, size_t whylen)
{
  struct gm_rp_welcome w;
  struct gm_rp_limits l;

  if (expect (c, GM_RP_CLIENT, GM_RP_WELCOME_WAIT, "welcome", why, whylen))
    return -1;
  if (gm_rp_decode_welcome (buf, len, &w, why, whylen))
    return broken (c, NULL, 0, NULL);
  if (w.magic != GM_RP_WELCOME_MAGIC)
    return broken (c, why, whylen, "bad welcome magic 0x%08x", w.magic);
  if (!reason_ok (w.reason))
    return broken (c, why, whylen,
                   "welcome: reason not printable and NUL-padded");
  if (w.error)
    return broken (c, why, whylen, "server refused with error %u: %s",
                   w.error, w.reason);
  if (w.version != c->sent.version)
    return broken (c, why, whylen, "server speaks version %u, not %u",
                   w.version, c->sent.version);
  if (w.instance == 0)
    return broken (c, why, whylen, "welcome: instance is 0");
  l = (struct gm_rp_limits) {
    .size = w.size, .flags = w.flags, .min_block = w.min_block,
    .pref_block = w.pref_block, .max_block = w.max_block,
    .max_request = w.max_request, .credits = w.credits,
    .instance = w.instance, .version = w.version,
  };
  if (gm_rp_check_limits (&l, why, whylen))
    return broken (c, NULL, 0, NULL);
  if (l.credits > c->sent.credits || l.max_request > c->sent.max_request)
    return broken (c, why, whylen, "welcome grants %u credits and max request"
                   " %u, more than the %u and %u asked", l.credits,
                   l.max_request, c->sent.credits, c->sent.max_request);
  c->lim = l;
  c->state = GM_RP_READY;
  return 0;
}

int
gm_rp_take_refusal (const void *buf, size_t len, struct gm_rp_welcome *w,
                    char *why, size_t whylen)
{
  if (gm_rp_decode_welcome (buf, len, w, why, whylen))
    return -1;
  if (w->magic != GM_RP_WELCOME_MAGIC)
    return say (-1, why, whylen, "bad welcome magic 0x%08x", w->magic);
  if (w->error == 0)
    return say (-1, why, whylen, "a rejection whose welcome has no error");
  if (!reason_ok (w->reason))
    return say (-1, why, whylen,
                "refusal: reason not printable and NUL-padded");
  return 0;
}

static struct gm_rp_request *
find (struct gm_rp_conn *c, uint64_t handle)
{
  for (unsigned i = 0; i < c->in_use; i++)
    if (c->inflight[i].handle == handle)
      return &c->inflight[i];
  return NULL;
}

int
gm_rp_conn_request_begin (struct gm_rp_conn *c, const struct gm_rp_request *r,
                          char *why, size_t whylen)
{
  int ret;

  if (expect (c, c->role, GM_RP_READY, "request", why, whylen))
    return -1;
  if (c->in_use >= c->lim.credits)
    return broken (c, why, whylen, "%s with all %u credits in use",
                   gm_rp_op_name (r->op), c->lim.credits);
  ret = gm_rp_check_request (r, &c->lim, why, whylen);
  if (ret < 0)
    return broken (c, NULL, 0, NULL);
  if (r->op == GM_RP_DISCONNECT) {
    c->state = GM_RP_CLOSING;
    return 0;
  }
  if (find (c, r->handle))
    return broken (c, why, whylen, "%s: handle 0x%llx already in flight",
                   gm_rp_op_name (r->op), (unsigned long long) r->handle);
  if (ret == 0 || c->role == GM_RP_SERVER)
    c->inflight[c->in_use++] = *r;
  return ret;
}

int
gm_rp_conn_take_request (struct gm_rp_conn *c, const void *buf, size_t len,
                         struct gm_rp_request *r, char *why, size_t whylen)
{
  if (expect (c, GM_RP_SERVER, GM_RP_READY, "request", why, whylen))
    return -1;
  if (gm_rp_decode_request (buf, len, r, why, whylen))
    return broken (c, NULL, 0, NULL);
  return gm_rp_conn_request_begin (c, r, why, whylen);
}

/* The request in flight with this handle, or NULL (and c is broken). */
static struct gm_rp_request *
answered (struct gm_rp_conn *c, uint64_t handle, char *why, size_t whylen)
{
  struct gm_rp_request *slot = NULL;

  if (c->state != GM_RP_READY && c->state != GM_RP_CLOSING)
    broken (c, why, whylen, "reply in state %s", state_names[c->state]);
  else if ((slot = find (c, handle)) == NULL)
    broken (c, why, whylen, "reply for handle 0x%llx, which is not in flight",
            (unsigned long long) handle);
  return slot;
}

/* Give back slot's credit; *r (if any) gets its request. */
static void
retire (struct gm_rp_conn *c, struct gm_rp_request *slot,
        struct gm_rp_request *r)
{
  if (r)
    *r = *slot;
  *slot = c->inflight[--c->in_use];
}

int
gm_rp_conn_request_end (struct gm_rp_conn *c, uint64_t handle,
                        struct gm_rp_request *r, char *why, size_t whylen)
{
  struct gm_rp_request *slot = answered (c, handle, why, whylen);

  if (slot == NULL)
    return -1;
  retire (c, slot, r);
  return 0;
}

int
gm_rp_conn_take_reply (struct gm_rp_conn *c, const void *buf, size_t len,
                       struct gm_rp_reply *rep, struct gm_rp_request *r,
                       char *why, size_t whylen)
{
  struct gm_rp_request *slot;

  if (c->role != GM_RP_CLIENT)
    return broken (c, why, whylen, "reply on the server side");
  if (gm_rp_decode_reply (buf, len, rep, why, whylen))
    return broken (c, NULL, 0, NULL);
  slot = answered (c, rep->handle, why, whylen);
  if (slot == NULL)
    return -1;
  if (gm_rp_check_reply (rep, slot, why, whylen))
    return broken (c, NULL, 0, NULL);
  retire (c, slot, r);
  return 0;
}

int
gm_rp_conn_goodbye (struct gm_rp_conn *c, bool flushed,
                    struct gm_rp_goodbye *g, char *why, size_t whylen)
{
  if (c->role != GM_RP_SERVER ||
      (c->state != GM_RP_READY && c->state != GM_RP_CLOSING) ||
      c->lim.version < 3 || c->in_use)
    return say (-1, why, whylen, "no goodbye: %s side, state %s, version %u, "
                "%u requests in flight",
                c->role == GM_RP_SERVER ? "server" : "client",
                state_names[c->state], c->lim.version, c->in_use);
  memset (g, 0, sizeof *g);
  g->magic = GM_RP_GOODBYE_MAGIC;
  g->flags = flushed ? GM_RP_BYE_FLUSHED : 0;
  g->instance = c->lim.instance;
  c->state = GM_RP_GONE;
  return 0;
}

int
gm_rp_conn_take_goodbye (struct gm_rp_conn *c, const void *buf, size_t len,
                         struct gm_rp_goodbye *g, char *why, size_t whylen)
{
  if (c->role != GM_RP_CLIENT)
    return broken (c, why, whylen, "goodbye on the server side");
  if (c->state != GM_RP_READY && c->state != GM_RP_CLOSING)
    return broken (c, why, whylen, "goodbye in state %s",
                   state_names[c->state]);
  if (c->lim.version < 3)
    return broken (c, why, whylen, "goodbye in protocol version %u",
                   c->lim.version);
  if (gm_rp_decode_goodbye (buf, len, g, why, whylen))
    return broken (c, NULL, 0, NULL);
  if (g->magic != GM_RP_GOODBYE_MAGIC)
    return broken (c, why, whylen, "bad goodbye magic 0x%08x", g->magic);
  if (g->flags & ~GM_RP_BYE_FLUSHED)
    return broken (c, why, whylen, "goodbye: unknown flags 0x%x", g->flags);
  if (!all_zero (g->reserved, sizeof g->reserved))
    return broken (c, why, whylen, "goodbye: reserved field not zero");
  if (g->instance != c->lim.instance)
    return broken (c, why, whylen, "goodbye from instance 0x%llx, the welcome "
                   "named 0x%llx", (unsigned long long) g->instance,
                   (unsigned long long) c->lim.instance);
  c->state = GM_RP_GONE;
  return 0;
}

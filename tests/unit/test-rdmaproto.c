/* Unit test: common/rdmaproto (RDMA wire protocol codec, checks, conn).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdmaproto.h"
#include "unit.h"

#define M (1024u * 1024)

static char why[256];

#define CHECK_WHY(s) do {                                               \
    unit_checks++;                                                      \
    if (strstr (why, (s)) == NULL) {                                    \
      fprintf (stderr, "%s:%d: why '%s' lacks '%s'\n",                  \
               __FILE__, __LINE__, why, (s));                           \
      exit (1);                                                         \
    }                                                                   \
  } while (0)

static const struct gm_rp_limits lim = {
  .size = 64 * M, .credits = 4,
  .flags = GM_RP_TF_FLUSH | GM_RP_TF_FUA | GM_RP_TF_TRIM | GM_RP_TF_ZERO |
           GM_RP_TF_FAST_ZERO | GM_RP_TF_CACHE | GM_RP_TF_BLOCK_STATUS |
           GM_RP_TF_MULTI_CONN,
  .min_block = 512, .pref_block = 4096, .max_block = 32 * M,
  .max_request = 1 * M, .instance = 0x1122334455667788ull,
  .version = GM_RP_VERSION,
};

static struct gm_rp_request
req (uint8_t op, uint64_t handle, uint64_t offset, uint32_t length)
{
  struct gm_rp_request r = {
    .op = op, .handle = handle, .offset = offset, .length = length,
  };
  if (op == GM_RP_READ || op == GM_RP_WRITE || op == GM_RP_BLOCK_STATUS) {
    r.addr = 0x7f0000001000;
    r.rkey = 0x1234;
    r.buf_len = op == GM_RP_BLOCK_STATUS ? 64 : length;
  }
  return r;
}

/* ---- codec ---------------------------------------------------------- */

static void
test_layout (void)
{
  /* Known bytes: magic "GMRH", the handle little-endian at 8. */
  struct gm_rp_hello h = { .magic = GM_RP_HELLO_MAGIC, .version = 3,
                           .credits = 0x0102, .max_request = 0x03040506 };
  struct gm_rp_request r = { .op = GM_RP_WRITE, .flags = GM_RP_FLAG_FUA,
                             .length = 0x11223344, .handle = 0x0807060504030201,
                             .rkey = 0xaabbccdd };
  uint8_t b[GM_RP_WELCOME_SIZE] = { 0 };
  static const uint8_t hello_bytes[12] = {
    'G', 'M', 'R', 'H', 3, 0, 0x02, 0x01, 0x06, 0x05, 0x04, 0x03,
  };
  /* The goodbye: magic "GMRB", flags at 4, the instance at 8. */
  struct gm_rp_goodbye g = { .magic = GM_RP_GOODBYE_MAGIC,
                             .flags = GM_RP_BYE_FLUSHED,
                             .instance = 0x0807060504030201ull };
  static const uint8_t goodbye_bytes[GM_RP_GOODBYE_SIZE] = {
    'G', 'M', 'R', 'B', 1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
    0, 0, 0, 0, 0, 0, 0, 0,
  };

  gm_rp_encode_hello (&h, b);
  CHECK (memcmp (b, hello_bytes, sizeof hello_bytes) == 0);
  gm_rp_encode_request (&r, b);
  CHECK (b[0] == GM_RP_WRITE && b[1] == 0 && b[2] == 1 && b[3] == 0);
  CHECK (b[4] == 0x44 && b[7] == 0x11);
  for (int i = 0; i < 8; i++)
    CHECK (b[8 + i] == i + 1);
  CHECK (b[32] == 0xdd && b[35] == 0xaa);
  {
    /* The welcome's instance, little-endian at 40. */
    struct gm_rp_welcome w = { .magic = GM_RP_WELCOME_MAGIC, .version = 3,
                               .instance = 0x0807060504030201ull };
    gm_rp_encode_welcome (&w, b);
    for (int i = 0; i < 8; i++)
      CHECK (b[40 + i] == i + 1);
    CHECK (b[4] == 3 && b[5] == 0);
  }
  memset (b, 0xee, sizeof b);
  gm_rp_encode_goodbye (&g, b);
  CHECK (memcmp (b, goodbye_bytes, sizeof goodbye_bytes) == 0);
  CHECK (b[GM_RP_GOODBYE_SIZE] == 0xee);      /* exactly its size */

  /* Every wire byte belongs to a field: a struct of 0xab bytes
   * encodes to 0xab bytes only.
   */
#define COVERS(type, size) do {                                         \
    struct gm_rp_##type m;                                              \
    memset (&m, 0xab, sizeof m);                                        \
    memset (b, 0, sizeof b);                                            \
    gm_rp_encode_##type (&m, b);                                        \
    for (size_t i = 0; i < (size); i++)                                 \
      CHECK (b[i] == 0xab);                                             \
  } while (0)
  COVERS (hello, GM_RP_HELLO_SIZE);
  COVERS (welcome, GM_RP_WELCOME_SIZE);
  COVERS (request, GM_RP_REQUEST_SIZE);
  COVERS (reply, GM_RP_REPLY_SIZE);
  COVERS (extent, GM_RP_EXTENT_SIZE);
  COVERS (goodbye, GM_RP_GOODBYE_SIZE);
  /* A goodbye and a reply differ in size: a client tells them apart. */
  CHECK (GM_RP_GOODBYE_SIZE != GM_RP_REPLY_SIZE);
}

static void
test_round_trip (void)
{
  struct gm_rp_welcome w = {
    .magic = GM_RP_WELCOME_MAGIC, .version = 3, .credits = 77, .error = 0,
    .flags = lim.flags, .size = 0x0123456789abcdefull, .min_block = 512,
    .pref_block = 4096, .max_block = 0xfedcba98, .max_request = 1 << 20,
    .instance = 0x8877665544332211ull, .reason = "printable",
  };
  struct gm_rp_request request = req (GM_RP_READ, UINT64_MAX,
                                      0x8000000000000001ull, 123456);
  struct gm_rp_reply reply = { .handle = 0x55aa55aa55aa55aaull, .error = 28,
                               .count = 0xffffffff };
  struct gm_rp_extent extent = { .length = 0xdeadbeef, .flags = 3 };
  struct gm_rp_hello hello = { .magic = 1, .version = 0xffff,
                               .credits = 0x8001, .max_request = 0x80000000 };
  /* Every field, the ones a take refuses included. */
  struct gm_rp_goodbye goodbye = { .magic = 0xfedcba98, .flags = 0x80000001,
                                   .instance = 0x0123456789abcdefull,
                                   .reserved = { 1, 2, 3, 4, 5, 6, 7, 0xff } };

  /* The structs have no padding, so memcmp compares every field. */
#define ROUND_TRIP(type, m, size) do {                                  \
    uint8_t b_[size];                                                   \
    struct gm_rp_##type back_;                                          \
    gm_rp_encode_##type (&m, b_);                                       \
    CHECK (gm_rp_decode_##type (b_, size, &back_, why, sizeof why) == 0); \
    CHECK (memcmp (&m, &back_, sizeof m) == 0);                         \
  } while (0)
  ROUND_TRIP (welcome, w, GM_RP_WELCOME_SIZE);
  ROUND_TRIP (request, request, GM_RP_REQUEST_SIZE);
  ROUND_TRIP (reply, reply, GM_RP_REPLY_SIZE);
  ROUND_TRIP (extent, extent, GM_RP_EXTENT_SIZE);
  ROUND_TRIP (hello, hello, GM_RP_HELLO_SIZE);
  ROUND_TRIP (goodbye, goodbye, GM_RP_GOODBYE_SIZE);
}

/* Decode never reads past len: the message ends right before a page
 * that may not be read, and every shorter length is refused.
 */
static void
test_short_buffers (void)
{
  long page = sysconf (_SC_PAGESIZE);
  uint8_t *map = mmap (NULL, 2 * page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint8_t *end = map + page;
  union {
    struct gm_rp_hello h; struct gm_rp_welcome w; struct gm_rp_request r;
    struct gm_rp_reply rep; struct gm_rp_extent e; struct gm_rp_goodbye g;
  } m;

  CHECK (map != MAP_FAILED);
  CHECK (mprotect (end, page, PROT_NONE) == 0);
  memset (map, 0, page);
#define SHORT(type, size) do {                                          \
    for (size_t len = 0; len < (size); len++) {                         \
      why[0] = '\0';                                                    \
      CHECK (gm_rp_decode_##type (end - len, len, (void *) &m,              \
                                  why, sizeof why) == -1);             \
      CHECK_WHY ("bytes, got");                                         \
    }                                                                   \
    CHECK (gm_rp_decode_##type (end - (size), (size), (void *) &m,      \
                                why, sizeof why) == 0);                 \
  } while (0)
  SHORT (hello, GM_RP_HELLO_SIZE);
  SHORT (welcome, GM_RP_WELCOME_SIZE);
  SHORT (request, GM_RP_REQUEST_SIZE);
  SHORT (reply, GM_RP_REPLY_SIZE);
  SHORT (extent, GM_RP_EXTENT_SIZE);
  SHORT (goodbye, GM_RP_GOODBYE_SIZE);
  munmap (map, 2 * page);

  /* SEND messages have one size; handshakes may carry zero padding
   * (CM private data is fixed-size), and nothing else.
   */
  uint8_t b[200] = { 0 };
  CHECK (gm_rp_decode_request (b, GM_RP_REQUEST_SIZE + 1, &m.r, why, sizeof why) == -1);
  CHECK_WHY ("a request is 40 bytes, got 41");
  CHECK (gm_rp_decode_reply (b, GM_RP_REPLY_SIZE + 8, &m.rep, why, sizeof why) == -1);
  CHECK_WHY ("a reply is 16 bytes, got 24");
  CHECK (gm_rp_decode_goodbye (b, GM_RP_GOODBYE_SIZE + 1, &m.g, why, sizeof why) == -1);
  CHECK_WHY ("a goodbye is 24 bytes, got 25");
  CHECK (gm_rp_decode_goodbye (b, GM_RP_REQUEST_SIZE, &m.g, why, sizeof why) == -1);
  CHECK_WHY ("a goodbye is 24 bytes, got 40");
  CHECK (gm_rp_decode_goodbye (b, GM_RP_REPLY_SIZE, &m.g, why, sizeof why) == -1);
  CHECK_WHY ("a goodbye is 24 bytes, got 16");
  CHECK (gm_rp_decode_hello (b, 56, &m.h, why, sizeof why) == 0);
  CHECK (gm_rp_decode_welcome (b, 148, &m.w, why, sizeof why) == 0);
  b[55] = 1;
  CHECK (gm_rp_decode_hello (b, 56, &m.h, why, sizeof why) == -1);
  CHECK_WHY ("padding after the hello is not zero");
}

/* ---- checks --------------------------------------------------------- */

/* Requests against the limits: the verdict and the reason given. */
#define BUF(n) .addr = 0x7f0000001000, .rkey = 0x1234, .buf_len = (n)
#define RD(off, len) .op = GM_RP_READ, .offset = (off), .length = (len), BUF (len)
#define WR(off, len) .op = GM_RP_WRITE, .offset = (off), .length = (len), BUF (len)
#define BS(len) .op = GM_RP_BLOCK_STATUS, .length = (len), BUF (64)
#define OP(o, off, len) .op = (o), .offset = (off), .length = (len)
/* ABANDON: a conn_id in the offset, the server instance in addr. */
#define AB(id, inst) .op = GM_RP_ABANDON, .offset = (id), .addr = (inst)
#define U64MAX UINT64_MAX
enum { ALL, RO, RO_TRIM, ZERO_ONLY, V4 };   /* which limits */
/* Each case overrides a field of a valid request: that is the point. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
static const struct {
  struct gm_rp_request r;
  int limits, want;
  const char *msg;
} request_cases[] = {
  /* Valid. */
  { { RD (0, 4096) }, ALL, 0, NULL },
  { { RD (63 * M, 1 * M) }, ALL, 0, NULL },
  { { WR (0, 1) }, ALL, 0, NULL },
  { { OP (GM_RP_FLUSH, 0, 0) }, ALL, 0, NULL },
  { { OP (GM_RP_DISCONNECT, 0, 0) }, ALL, 0, NULL },
  { { OP (GM_RP_TRIM, 0, 64 * M) }, ALL, 0, NULL },
  { { OP (GM_RP_CACHE, 0, 64 * M) }, ALL, 0, NULL },
  { { BS (64 * M) }, ALL, 0, NULL },
  { { OP (GM_RP_ZERO, 0, 8 * M), .flags = GM_RP_FLAG_FUA | GM_RP_FLAG_NO_HOLE |
      GM_RP_FLAG_FAST_ZERO }, ALL, 0, NULL },
  { { RD (0, 4096), .buf_len = 8192 }, ALL, 0, NULL },  /* larger buffer */
  { { RD (0, 4096) }, RO, 0, NULL },
  { { OP (GM_RP_FLUSH, 0, 0) }, RO, 0, NULL },
  /* Not an offset in the export, not a buffer; read-only exports too. */
  { { AB (U64MAX, U64MAX) }, ALL, 0, NULL },
  { { AB (1, 1) }, RO, 0, NULL },
  { { WR (0, 4096) }, V4, 0, NULL },

  /* Malformed: -1, the client is dropped. */
  { { RD (0, 4096), .op = 9 }, ALL, -1, "unknown opcode 9 in version 5" },
  { { RD (0, 4096), .op = 255 }, ALL, -1, "unknown opcode 255" },
  { { AB (1, 1) }, V4, -1, "unknown opcode 8 in version 4" },
  { { AB (0, 1) }, ALL, -1, "ABANDON: needs length 0, a conn_id (offset) "
    "and an instance (addr), no rkey or buffer length" },
  { { AB (1, 0) }, ALL, -1, "ABANDON: needs length 0, a conn_id" },
  { { AB (1, 1), .length = 1 }, ALL, -1, "ABANDON: needs length 0" },
  { { AB (1, 1), .rkey = 1 }, ALL, -1, "ABANDON: needs length 0" },
  { { AB (1, 1), .buf_len = 8 }, ALL, -1, "ABANDON: needs length 0" },
  { { AB (1, 1), .flags = GM_RP_FLAG_FUA }, ALL, -1,
    "ABANDON: flags 0x1 not valid on ABANDON" },
  { { AB (1, 1), .reserved = 1 }, ALL, -1,
    "ABANDON: reserved field is not zero" },
  { { RD (0, 4096), .reserved = 1 }, ALL, -1,
    "READ: reserved field is not zero" },
  { { WR (0, 4096), .flags = 1u << 2 }, ALL, -1, "WRITE: unknown flags 0x4" },
  { { WR (0, 4096), .flags = 0x8000 }, ALL, -1, "WRITE: unknown flags 0x8000" },
  { { RD (0, 4096), .flags = GM_RP_FLAG_FUA }, ALL, -1,
    "READ: flags 0x1 not valid on READ" },
  { { WR (0, 4096), .flags = GM_RP_FLAG_FAST_ZERO }, ALL, -1,
    "WRITE: flags 0x10 not valid on WRITE" },
  { { OP (GM_RP_TRIM, 0, 4096), .flags = GM_RP_FLAG_NO_HOLE }, ALL, -1,
    "TRIM: flags 0x2 not valid on TRIM" },
  { { RD (0, 4096), .flags = GM_RP_FLAG_REQ_ONE }, ALL, -1,
    "READ: flags 0x8 not valid on READ" },
  { { OP (GM_RP_FLUSH, 0, 0), .flags = GM_RP_FLAG_FUA }, ALL, -1,
    "FLUSH: flags 0x1 not valid on FLUSH" },
  { { OP (GM_RP_CACHE, 0, 0) }, ALL, -1, "CACHE: length is 0" },
  { { RD (0, 0) }, ALL, -1, "READ: length is 0" },
  { { OP (GM_RP_ZERO, 0, 0) }, ALL, -1, "ZERO: length is 0" },
  { { OP (GM_RP_FLUSH, 0, 1) }, ALL, -1, "FLUSH: offset and length must be 0" },
  { { OP (GM_RP_DISCONNECT, 4096, 0) }, ALL, -1,
    "DISCONNECT: offset and length must be 0" },
  { { RD (0, 1 * M + 1) }, ALL, -1,
    "READ: length 1048577 above the max request 1048576" },
  { { WR (0, 2 * M) }, ALL, -1, "WRITE: length 2097152 above the max request" },
  { { RD (U64MAX - 10, 4096) }, ALL, -1,
    "READ: offset 18446744073709551605 + length 4096 overflows" },
  { { OP (GM_RP_TRIM, U64MAX, 1) }, ALL, -1,
    "TRIM: offset 18446744073709551615 + length 1 overflows" },
  { { RD (0, 4096), .buf_len = 4095 }, ALL, -1,
    "READ: buffer of 4095 bytes, needs 4096" },
  { { BS (4096), .buf_len = 7 }, ALL, -1,
    "BLOCK_STATUS: buffer of 7 bytes, needs 8" },
  { { WR (0, 4096), .addr = 0 }, ALL, -1, "WRITE: buffer address is 0" },
  { { RD (0, 4096), .rkey = 0 }, ALL, -1, "READ: rkey is 0" },
  { { BS (4096), .rkey = 0 }, ALL, -1, "BLOCK_STATUS: rkey is 0" },
  { { RD (0, 4096), .addr = U64MAX - 100 }, ALL, -1,
    "READ: buffer wraps around the address space" },
  { { OP (GM_RP_TRIM, 0, 4096), .rkey = 5 }, ALL, -1,
    "TRIM: buffer given to an op without data" },
  { { OP (GM_RP_FLUSH, 0, 0), .buf_len = 5 }, ALL, -1,
    "FLUSH: buffer given to an op without data" },
  { { OP (GM_RP_CACHE, 0, 4096), .addr = 4096 }, ALL, -1,
    "CACHE: buffer given to an op without data" },

  /* Well formed but refused by this export: an error reply. */
  { { RD (64 * M - 4095, 4096) }, ALL, GM_RP_EINVAL,
    "READ: offset 67104769 + length 4096 beyond the export size 67108864" },
  { { WR (64 * M, 1) }, ALL, GM_RP_ENOSPC,
    "WRITE: offset 67108864 + length 1 beyond" },
  { { OP (GM_RP_ZERO, 0, 64 * M + 1) }, ALL, GM_RP_ENOSPC,
    "beyond the export size" },
  { { OP (GM_RP_TRIM, 1, 64 * M) }, ALL, GM_RP_EINVAL,
    "TRIM: offset 1 + length 67108864 beyond" },
  { { WR (0, 4096) }, RO, GM_RP_EPERM, "WRITE: the export is read-only" },
  { { OP (GM_RP_TRIM, 0, 4096) }, RO, GM_RP_EINVAL,
    "TRIM: not supported by the export" },
  { { OP (GM_RP_ZERO, 0, 4096) }, RO, GM_RP_EINVAL,
    "ZERO: not supported by the export" },
  { { OP (GM_RP_CACHE, 0, 4096) }, RO, GM_RP_EINVAL,
    "CACHE: not supported by the export" },
  { { BS (4096) }, RO, GM_RP_EINVAL, "BLOCK_STATUS: not supported by the export" },
  { { OP (GM_RP_TRIM, 0, 4096) }, RO_TRIM, GM_RP_EPERM,
    "TRIM: the export is read-only" },
  { { OP (GM_RP_FLUSH, 0, 0) }, ZERO_ONLY, GM_RP_EINVAL,
    "FLUSH: not supported by the export" },
  { { WR (0, 4096), .flags = GM_RP_FLAG_FUA }, ZERO_ONLY, GM_RP_EINVAL,
    "WRITE: FUA not supported" },
  { { OP (GM_RP_ZERO, 0, 4096), .flags = GM_RP_FLAG_FAST_ZERO }, ZERO_ONLY,
    GM_RP_EINVAL, "ZERO: FAST_ZERO not supported" },
};
#pragma GCC diagnostic pop

static void
test_check_request (void)
{
  struct gm_rp_limits l[5] = { lim, lim, lim, lim, lim };

  l[RO].flags = GM_RP_TF_READ_ONLY | GM_RP_TF_FLUSH;
  l[RO_TRIM].flags = GM_RP_TF_READ_ONLY | GM_RP_TF_TRIM;
  l[ZERO_ONLY].flags = GM_RP_TF_ZERO;
  l[V4].version = 4;
  for (size_t i = 0; i < sizeof request_cases / sizeof request_cases[0]; i++) {
    const struct gm_rp_request *r = &request_cases[i].r;
    int got;

    why[0] = '\0';
    got = gm_rp_check_request (r, &l[request_cases[i].limits], why, sizeof why);
    if (got != request_cases[i].want) {
      fprintf (stderr, "case %zu (op %u): got %d (%s), expected %d (%s)\n",
               i, r->op, got, why, request_cases[i].want,
               request_cases[i].msg);
      exit (1);
    }
    if (request_cases[i].msg)
      CHECK_WHY (request_cases[i].msg);
  }
}

static void
limits_bad (void (*mutate) (struct gm_rp_limits *), const char *msg)
{
  struct gm_rp_limits l = lim;
  mutate (&l);
  why[0] = '\0';
  CHECK (gm_rp_check_limits (&l, why, sizeof why) == -1);
  CHECK_WHY (msg);
}
static void no_credits (struct gm_rp_limits *l) { l->credits = 0; }
static void many_credits (struct gm_rp_limits *l) { l->credits = 129; }
static void odd_flag (struct gm_rp_limits *l) { l->flags |= 1; }
static void fast_no_zero (struct gm_rp_limits *l) { l->flags &= ~GM_RP_TF_ZERO; }
static void huge (struct gm_rp_limits *l) { l->size = 1ull << 63; }
static void min_odd (struct gm_rp_limits *l) { l->min_block = 768; }
static void min_big (struct gm_rp_limits *l) { l->min_block = 128 * 1024; }
static void pref_small (struct gm_rp_limits *l) { l->pref_block = 256; }
static void max_odd (struct gm_rp_limits *l) { l->max_block = 32 * M + 1; }
static void max_small (struct gm_rp_limits *l) { l->max_block = 2048; }
static void req_small (struct gm_rp_limits *l) { l->max_request = 100; }
static void req_big (struct gm_rp_limits *l) { l->max_request = 64 * M; }
/* A power of 2 from 512 up, but below the minimum. */
static void pref_below_min (struct gm_rp_limits *l)
{
  l->min_block = 64 * 1024;
  l->pref_block = 4096;
}

static void
test_check_limits (void)
{
  struct gm_rp_limits l = lim;

  CHECK (gm_rp_check_limits (&lim, why, sizeof why) == 0);
  l.max_block = UINT32_MAX;
  l.min_block = 1;
  l.size = INT64_MAX;
  CHECK (gm_rp_check_limits (&l, why, sizeof why) == 0);
  limits_bad (no_credits, "credits 0 not in 1-128");
  limits_bad (many_credits, "credits 129 not in 1-128");
  limits_bad (odd_flag, "unknown transmission flags 0x1");
  limits_bad (fast_no_zero, "FAST_ZERO advertised without ZERO");
  limits_bad (huge, "export size 9223372036854775808 above 2^63-1");
  limits_bad (min_odd, "minimum block size 768 is not a power of 2");
  limits_bad (min_big, "minimum block size 131072");
  limits_bad (pref_small, "preferred block size 256");
  limits_bad (pref_below_min, "preferred block size 4096 is not a power of 2"
              " from max(512, minimum 65536)");
  limits_bad (max_odd, "maximum block size 33554433");
  limits_bad (max_small, "maximum block size 2048 is below the preferred");
  limits_bad (req_small, "max request 100 not between");
  limits_bad (req_big, "max request 67108864 not between");
}

static void
test_check_reply (void)
{
  struct gm_rp_request bs = req (GM_RP_BLOCK_STATUS, 9, 0, 8192);
  struct gm_rp_request rd = req (GM_RP_READ, 9, 0, 8192);
  struct gm_rp_reply rep = { .handle = 9 };
  uint8_t ext[3 * GM_RP_EXTENT_SIZE];
  struct gm_rp_extent e[3] = { { 4096, 0 }, { 2048, 3 }, { 2048, 1 } };

  CHECK (gm_rp_check_reply (&rep, &rd, why, sizeof why) == 0);
  rep.error = GM_RP_EIO;
  CHECK (gm_rp_check_reply (&rep, &rd, why, sizeof why) == 0);
  rep.error = 4;                /* EINTR is not a wire error */
  CHECK (gm_rp_check_reply (&rep, &rd, why, sizeof why) == -1);
  CHECK_WHY ("reply: unknown error 4");
  rep.error = 0;
  rep.count = 1;
  CHECK (gm_rp_check_reply (&rep, &rd, why, sizeof why) == -1);
  CHECK_WHY ("reply to READ: count 1 is not 0");
  rep.count = 8;                /* buf_len 64: 8 extents */
  CHECK (gm_rp_check_reply (&rep, &bs, why, sizeof why) == 0);
  rep.count = 9;
  CHECK (gm_rp_check_reply (&rep, &bs, why, sizeof why) == -1);
  CHECK_WHY ("9 extents, the buffer holds 1-8");
  rep.count = 0;
  CHECK (gm_rp_check_reply (&rep, &bs, why, sizeof why) == -1);
  bs.flags = GM_RP_FLAG_REQ_ONE;
  rep.count = 2;
  CHECK (gm_rp_check_reply (&rep, &bs, why, sizeof why) == -1);
  CHECK_WHY ("2 extents for REQ_ONE");

  for (int i = 0; i < 3; i++)
    gm_rp_encode_extent (&e[i], ext + i * GM_RP_EXTENT_SIZE);
  CHECK (gm_rp_check_extents (ext, 3, &bs, why, sizeof why) == 0);
  e[2].length = 2049;
  gm_rp_encode_extent (&e[2], ext + 2 * GM_RP_EXTENT_SIZE);
  CHECK (gm_rp_check_extents (ext, 3, &bs, why, sizeof why) == -1);
  CHECK_WHY ("extent 2 ends past the 8192 bytes asked");
  e[1].length = 0;
  gm_rp_encode_extent (&e[1], ext + GM_RP_EXTENT_SIZE);
  CHECK (gm_rp_check_extents (ext, 3, &bs, why, sizeof why) == -1);
  CHECK_WHY ("extent 1: length 0");
  e[0].flags = 4;
  gm_rp_encode_extent (&e[0], ext);
  CHECK (gm_rp_check_extents (ext, 3, &bs, why, sizeof why) == -1);
  CHECK_WHY ("extent 0: unknown flags 0x4");
}

static void
test_errors (void)
{
  CHECK_EQ_U64 (gm_rp_error_to_wire (0), 0);
  CHECK_EQ_U64 (gm_rp_error_to_wire (EIO), GM_RP_EIO);
  CHECK_EQ_U64 (gm_rp_error_to_wire (EROFS), GM_RP_EPERM);
  CHECK_EQ_U64 (gm_rp_error_to_wire (EFBIG), GM_RP_ENOSPC);
  CHECK_EQ_U64 (gm_rp_error_to_wire (EDQUOT), GM_RP_ENOSPC);
  CHECK_EQ_U64 (gm_rp_error_to_wire (EOPNOTSUPP), GM_RP_ENOTSUP);
  CHECK_EQ_U64 (gm_rp_error_to_wire (EBADF), GM_RP_EINVAL);
  CHECK_EQ_U64 (gm_rp_error_from_wire (GM_RP_ENOSPC), ENOSPC);
  CHECK_EQ_U64 (gm_rp_error_from_wire (GM_RP_ESHUTDOWN), ESHUTDOWN);
  CHECK_EQ_U64 (gm_rp_error_from_wire (9999), EIO);
  CHECK (gm_rp_error_known (GM_RP_EOVERFLOW) && !gm_rp_error_known (0));
  CHECK (strcmp (gm_rp_op_name (GM_RP_ZERO), "ZERO") == 0);
  CHECK (strcmp (gm_rp_op_name (200), "unknown") == 0);
  /* The ops that change the export, from the table of ops. */
  for (unsigned op = 0; op < GM_RP_OP_COUNT; op++)
    CHECK (gm_rp_op_writes (op) ==
           (op == GM_RP_WRITE || op == GM_RP_TRIM || op == GM_RP_ZERO));
  CHECK (!gm_rp_op_writes (200));
}

/* ---- the connection state machine ------------------------------------ */

/* A client of this protocol version (an older one: its hello says 2)
 * and a server conn through a handshake, over encoded bytes.
 */
static void
connect_version (struct gm_rp_conn *cl, struct gm_rp_conn *sv,
                 uint16_t credits, uint16_t version)
{
  struct gm_rp_hello h;
  struct gm_rp_welcome w;
  uint8_t b[GM_RP_WELCOME_SIZE] = { 0 };

  gm_rp_conn_init (cl, GM_RP_CLIENT);
  gm_rp_conn_init (sv, GM_RP_SERVER);
  CHECK (gm_rp_conn_hello (cl, credits, 4 * M, &h, why, sizeof why) == 0);
  CHECK_EQ_U64 (h.version, GM_RP_VERSION);
  h.version = cl->sent.version = version;
  gm_rp_encode_hello (&h, b);
  CHECK (gm_rp_conn_accept_hello (sv, b, GM_RP_HELLO_SIZE, &lim, &w,
                                  why, sizeof why) == 0);
  CHECK_EQ_U64 (w.version, version);      /* the client's own */
  gm_rp_encode_welcome (&w, b);
  CHECK (gm_rp_conn_take_welcome (cl, b, GM_RP_WELCOME_SIZE, why, sizeof why) == 0);
  CHECK (cl->state == GM_RP_READY && sv->state == GM_RP_READY);
  CHECK_EQ_U64 (sv->lim.version, version);
  CHECK_EQ_U64 (cl->lim.version, version);
  CHECK_EQ_U64 (cl->lim.instance, lim.instance);
}

static void
connect_pair (struct gm_rp_conn *cl, struct gm_rp_conn *sv, uint16_t credits)
{
  connect_version (cl, sv, credits, GM_RP_VERSION);
}

static void
test_handshake (void)
{
  struct gm_rp_conn cl, sv;
  struct gm_rp_hello h;
  struct gm_rp_welcome w;
  uint8_t b[GM_RP_WELCOME_SIZE] = { 0 };

  /* Negotiation: the smaller credits and max request win. */
  connect_pair (&cl, &sv, 100);
  CHECK_EQ_U64 (sv.lim.credits, 4);
  CHECK_EQ_U64 (cl.lim.credits, 4);
  CHECK_EQ_U64 (cl.lim.max_request, 1 * M);
  CHECK_EQ_U64 (cl.lim.size, 64 * M);
  CHECK_EQ_U64 (cl.lim.flags, lim.flags);
  CHECK_EQ_U64 (gm_rp_conn_credits_free (&cl), 4);
  connect_pair (&cl, &sv, 2);
  CHECK_EQ_U64 (sv.lim.credits, 2);
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  gm_rp_conn_hello (&cl, 8, 8192, &h, why, sizeof why);
  gm_rp_encode_hello (&h, b);
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  CHECK (gm_rp_conn_accept_hello (&sv, b, 56, &lim, &w, why, sizeof why) == 0);
  CHECK_EQ_U64 (w.max_request, 8192);
  /* A second hello is out of order. */
  CHECK (gm_rp_conn_accept_hello (&sv, b, 56, &lim, &w, why, sizeof why) == -1);
  CHECK_WHY ("hello in state ready");
  CHECK (sv.state == GM_RP_FAILED && w.error == GM_RP_EINVAL);

  /* Refusals: the welcome carries the error and the reason. */
#define REFUSED(mutation, err, msg) do {                                \
    struct gm_rp_hello h_ = h;                                          \
    mutation;                                                           \
    gm_rp_encode_hello (&h_, b);                                        \
    gm_rp_conn_init (&sv, GM_RP_SERVER);                                \
    CHECK (gm_rp_conn_accept_hello (&sv, b, GM_RP_HELLO_SIZE, &lim, &w, \
                                    why, sizeof why) == -1);           \
    CHECK_WHY (msg);                                                    \
    CHECK (sv.state == GM_RP_FAILED);                                   \
    CHECK_EQ_U64 (w.error, err);                                        \
    CHECK (strncmp (w.reason, why, GM_RP_REASON_LEN - 1) == 0);         \
    CHECK (w.credits == 0 && w.size == 0);                              \
    CHECK_EQ_U64 (w.version, GM_RP_VERSION);                            \
  } while (0)
  REFUSED (h_.magic = 0x4e42444d, GM_RP_EINVAL, "bad hello magic 0x4e42444d");
  REFUSED (h_.version = 1, GM_RP_ENOTSUP,
           "version 1 not supported (server speaks 2 to 5)");
  REFUSED (h_.version = 6, GM_RP_ENOTSUP,
           "version 6 not supported (server speaks 2 to 5)");
  REFUSED (h_.version = 0, GM_RP_ENOTSUP, "version 0 not supported");
  REFUSED (h_.version = 0xffff, GM_RP_ENOTSUP, "version 65535 not supported");
  /* Version 2, the oldest served, is judged like 3 past the version. */
  REFUSED ((h_.version = 2, h_.credits = 0), GM_RP_EINVAL,
           "hello asks for 0 credits");
  REFUSED (h_.reserved[11] = 1, GM_RP_EINVAL, "hello: reserved field not zero");
  /* The connection identity is version 4's; before, reserved bytes. */
  REFUSED ((h_.version = 3, h_.conn_id = 1ull << 63), GM_RP_EINVAL,
           "hello: reserved field not zero");
  REFUSED ((h_.version = 2, h_.conn_id = 1), GM_RP_EINVAL,
           "hello: reserved field not zero");
  REFUSED (h_.credits = 0, GM_RP_EINVAL, "hello asks for 0 credits");
  REFUSED (h_.max_request = 511, GM_RP_EINVAL,
           "client max request 511 below the block size 512");
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  CHECK (gm_rp_conn_accept_hello (&sv, b, 31, &lim, &w, why, sizeof why) == -1);
  CHECK_WHY ("a hello is 32 bytes, got 31");
  CHECK (strcmp (w.reason, "a hello is 32 bytes, got 31") == 0);
  {
    struct gm_rp_limits bad = lim;
    bad.credits = 0;
    gm_rp_encode_hello (&h, b);
    gm_rp_conn_init (&sv, GM_RP_SERVER);
    CHECK (gm_rp_conn_accept_hello (&sv, b, 32, &bad, &w, why, sizeof why) == -1);
    CHECK_EQ_U64 (w.error, GM_RP_EIO);
    CHECK_WHY ("credits 0 not in 1-128");
  }

  /* The client reads a refusal, and checks an acceptance. */
#define WELCOME(mutation, msg) do {                                     \
    struct gm_rp_welcome w_;                                            \
    gm_rp_conn_init (&cl, GM_RP_CLIENT);                                \
    gm_rp_conn_hello (&cl, 4, 1 * M, &h, why, sizeof why);              \
    gm_rp_encode_hello (&h, b);                                         \
    gm_rp_conn_init (&sv, GM_RP_SERVER);                                \
    gm_rp_conn_accept_hello (&sv, b, 32, &lim, &w_, why, sizeof why);   \
    mutation;                                                           \
    gm_rp_encode_welcome (&w_, b);                                      \
    CHECK (gm_rp_conn_take_welcome (&cl, b, GM_RP_WELCOME_SIZE,         \
                                    why, sizeof why) == -1);            \
    CHECK_WHY (msg);                                                    \
    CHECK (cl.state == GM_RP_FAILED);                                   \
  } while (0)
  WELCOME ((w_.error = GM_RP_ENOTSUP, strcpy (w_.reason, "go away")),
           "server refused with error 95: go away");
  WELCOME (w_.magic = GM_RP_HELLO_MAGIC, "bad welcome magic 0x48524d47");
  WELCOME (w_.version = 2, "server speaks version 2, not 5");
  WELCOME (w_.version = 4, "server speaks version 4, not 5");
  WELCOME (w_.version = 6, "server speaks version 6, not 5");
  WELCOME (w_.instance = 0, "welcome: instance is 0");
  WELCOME (w_.reason[0] = '\n', "reason not printable and NUL-padded");
  WELCOME (w_.reason[47] = 'x', "reason not printable and NUL-padded");
  WELCOME (w_.reason[0] = 0x7f, "reason not printable and NUL-padded");
  WELCOME ((w_.reason[0] = 'a', w_.reason[2] = 'b'),
           "reason not printable and NUL-padded");
  WELCOME (w_.credits = 5, "welcome grants 5 credits");
  WELCOME (w_.max_request = 2 * M, "max request 2097152, more than");
  WELCOME (w_.credits = 0, "credits 0 not in 1-128");
  WELCOME (w_.flags = GM_RP_TF_FAST_ZERO, "FAST_ZERO advertised without ZERO");

  /* A refusal of the server's own (shutting down): printable, cut to
   * fit, and read back by the client.
   */
  gm_rp_welcome_refusal (&w, GM_RP_ESHUTDOWN, "stopping\tnow, and this reason"
                         " is longer than the 47 bytes a welcome holds");
  CHECK (strcmp (w.reason, "stopping?now, and this reason is longer than th") == 0);
  CHECK (w.credits == 0 && w.magic == GM_RP_WELCOME_MAGIC);
  {
    uint8_t reject[148] = { 0 };  /* a CM reject's private data */
    gm_rp_encode_welcome (&w, reject);
    gm_rp_conn_init (&cl, GM_RP_CLIENT);
    gm_rp_conn_hello (&cl, 4, 1 * M, &h, why, sizeof why);
    CHECK (gm_rp_conn_take_welcome (&cl, reject, sizeof reject,
                                    why, sizeof why) == -1);
  }
  CHECK_WHY ("server refused with error 108: stopping?now");

  /* Order and role errors. */
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  CHECK (gm_rp_conn_take_welcome (&cl, b, GM_RP_WELCOME_SIZE, why, sizeof why) == -1);
  CHECK_WHY ("welcome in state handshake");
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  CHECK (gm_rp_conn_hello (&sv, 4, 1 * M, &h, why, sizeof why) == -1);
  CHECK_WHY ("hello on the server side");
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  CHECK (gm_rp_conn_accept_hello (&cl, b, 32, &lim, &w, why, sizeof why) == -1);
  CHECK_WHY ("hello on the client side");
}

static int
take (struct gm_rp_conn *sv, struct gm_rp_request r)
{
  uint8_t b[GM_RP_REQUEST_SIZE];
  struct gm_rp_request got;
  int ret;

  gm_rp_encode_request (&r, b);
  why[0] = '\0';
  ret = gm_rp_conn_take_request (sv, b, sizeof b, &got, why, sizeof why);
  if (ret >= 0)
    CHECK (memcmp (&got, &r, sizeof r) == 0);
  return ret;
}

static int
reply (struct gm_rp_conn *cl, uint64_t handle, uint32_t error, uint32_t count)
{
  struct gm_rp_reply rep = { handle, error, count }, got;
  struct gm_rp_request r;
  uint8_t b[GM_RP_REPLY_SIZE];

  gm_rp_encode_reply (&rep, b);
  why[0] = '\0';
  return gm_rp_conn_take_reply (cl, b, sizeof b, &got, &r, why, sizeof why);
}

static void
test_requests (void)
{
  struct gm_rp_conn cl, sv;
  struct gm_rp_request r, back;

  /* Request before the handshake. */
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  CHECK (take (&sv, req (GM_RP_READ, 1, 0, 4096)) == -1);
  CHECK_WHY ("request in state handshake");
  CHECK (sv.state == GM_RP_FAILED);
  CHECK (take (&sv, req (GM_RP_READ, 1, 0, 4096)) == -1);
  CHECK_WHY ("request in state failed");
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  r = req (GM_RP_READ, 1, 0, 4096);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == -1);
  CHECK_WHY ("request in state handshake");

  /* Credits: four in flight, the fifth is a protocol error. */
  connect_pair (&cl, &sv, 4);
  for (uint64_t i = 0; i < 4; i++) {
    r = req (GM_RP_READ, 100 + i, i * 4096, 4096);
    CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
    CHECK (take (&sv, r) == 0);
    CHECK_EQ_U64 (sv.in_use, i + 1);
  }
  CHECK_EQ_U64 (gm_rp_conn_credits_free (&cl), 0);
  CHECK (take (&sv, req (GM_RP_READ, 200, 0, 4096)) == -1);
  CHECK_WHY ("READ with all 4 credits in use");
  CHECK (sv.state == GM_RP_FAILED);
  /* Replies give credits back, in any order. */
  CHECK (reply (&cl, 102, 0, 0) == 0);
  CHECK (reply (&cl, 100, GM_RP_EIO, 0) == 0);
  CHECK_EQ_U64 (gm_rp_conn_credits_free (&cl), 2);
  CHECK (reply (&cl, 100, 0, 0) == -1);
  CHECK_WHY ("reply for handle 0x64, which is not in flight");
  CHECK (cl.state == GM_RP_FAILED);

  /* A duplicate handle in flight. */
  connect_pair (&cl, &sv, 4);
  CHECK (take (&sv, req (GM_RP_WRITE, 7, 0, 512)) == 0);
  CHECK (take (&sv, req (GM_RP_READ, 7, 0, 512)) == -1);
  CHECK_WHY ("READ: handle 0x7 already in flight");
  connect_pair (&cl, &sv, 4);
  CHECK (take (&sv, req (GM_RP_WRITE, 7, 0, 512)) == 0);
  CHECK (gm_rp_conn_request_end (&sv, 7, &back, why, sizeof why) == 0);
  CHECK (back.op == GM_RP_WRITE && sv.in_use == 0);
  CHECK (take (&sv, req (GM_RP_READ, 7, 0, 512)) == 0);  /* reusable */
  CHECK (gm_rp_conn_request_end (&sv, 8, &back, why, sizeof why) == -1);
  CHECK_WHY ("reply for handle 0x8, which is not in flight");

  /* A malformed request breaks the conn; a refused one holds a credit
   * on the server until its error reply, and none on the client.
   */
  connect_pair (&cl, &sv, 4);
  CHECK (take (&sv, req (GM_RP_WRITE, 1, 64 * M, 512)) == GM_RP_ENOSPC);
  CHECK (sv.state == GM_RP_READY && sv.in_use == 1);
  CHECK (gm_rp_conn_request_end (&sv, 1, NULL, why, sizeof why) == 0);
  r = req (GM_RP_WRITE, 1, 64 * M, 512);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == GM_RP_ENOSPC);
  CHECK (cl.state == GM_RP_READY && cl.in_use == 0);
  CHECK (take (&sv, req (GM_RP_READ, 2, 0, 0)) == -1);
  CHECK (sv.state == GM_RP_FAILED);
  {
    uint8_t b[GM_RP_REQUEST_SIZE + 1] = { 0 };
    struct gm_rp_request got;
    connect_pair (&cl, &sv, 4);
    CHECK (gm_rp_conn_take_request (&sv, b, sizeof b, &got, why, sizeof why) == -1);
    CHECK_WHY ("a request is 40 bytes, got 41");
    CHECK (sv.state == GM_RP_FAILED);
  }

  /* Replies are checked against their request. */
  connect_pair (&cl, &sv, 4);
  r = req (GM_RP_BLOCK_STATUS, 3, 0, 4096);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
  CHECK (reply (&cl, 3, 0, 9) == -1);
  CHECK_WHY ("9 extents, the buffer holds 1-8");
  connect_pair (&cl, &sv, 4);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
  CHECK (reply (&cl, 3, 0, 8) == 0);
  CHECK (reply (&cl, 3, 0, 8) == -1);
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  CHECK (reply (&sv, 3, 0, 0) == -1);
  CHECK_WHY ("reply on the server side");

  /* DISCONNECT: outstanding replies still arrive, nothing else may. */
  connect_pair (&cl, &sv, 2);
  CHECK (take (&sv, req (GM_RP_READ, 1, 0, 512)) == 0);
  CHECK (take (&sv, req (GM_RP_DISCONNECT, 2, 0, 0)) == 0);
  CHECK (sv.state == GM_RP_CLOSING && sv.in_use == 1);
  CHECK (!gm_rp_conn_drained (&sv));
  CHECK (take (&sv, req (GM_RP_READ, 3, 0, 512)) == -1);
  CHECK_WHY ("request in state closing");
  connect_pair (&cl, &sv, 2);
  CHECK (take (&sv, req (GM_RP_READ, 1, 0, 512)) == 0);
  CHECK (take (&sv, req (GM_RP_DISCONNECT, 1, 0, 0)) == 0);  /* no handle */
  CHECK (gm_rp_conn_request_end (&sv, 1, NULL, why, sizeof why) == 0);
  CHECK (gm_rp_conn_drained (&sv));
  /* ... and it too needs a free credit (a posted receive). */
  connect_pair (&cl, &sv, 1);
  CHECK (take (&sv, req (GM_RP_READ, 1, 0, 512)) == 0);
  CHECK (take (&sv, req (GM_RP_DISCONNECT, 2, 0, 0)) == -1);
  CHECK_WHY ("DISCONNECT with all 1 credits in use");
  connect_pair (&cl, &sv, 2);
  r = req (GM_RP_DISCONNECT, 0, 0, 0);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
  CHECK (gm_rp_conn_credits_free (&cl) == 0 && gm_rp_conn_drained (&cl));
}

/* ---- versions and the goodbye --------------------------------------- */

static void
test_versions (void)
{
  struct gm_rp_conn cl, sv;
  struct gm_rp_hello h;
  struct gm_rp_welcome w;
  struct gm_rp_request r;
  uint8_t b[GM_RP_WELCOME_SIZE] = { 0 };

  /* Identifiers (instance, conn_id) are random and never 0. */
  {
    uint64_t a = 0, b = 0;
    CHECK (gm_rp_random_id (&a) == 0 && gm_rp_random_id (&b) == 0);
    CHECK (a != 0 && b != 0 && a != b);
  }

  /* A version 2 hello is served, as version 2: the welcome says 2. */
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  h = (struct gm_rp_hello) { .magic = GM_RP_HELLO_MAGIC, .version = 2,
                             .credits = 8, .max_request = 1 * M };
  gm_rp_encode_hello (&h, b);
  CHECK (gm_rp_conn_accept_hello (&sv, b, GM_RP_HELLO_SIZE, &lim, &w,
                                  why, sizeof why) == 0);
  CHECK (sv.state == GM_RP_READY && w.error == 0);
  CHECK_EQ_U64 (w.version, 2);
  CHECK_EQ_U64 (sv.lim.version, 2);
  CHECK_EQ_U64 (w.credits, 4);
  CHECK_EQ_U64 (w.instance, lim.instance);
  gm_rp_encode_welcome (&w, b);
  CHECK (b[4] == 2 && b[5] == 0);
  /* ... version 3 as 3, with no connection identity ... */
  connect_version (&cl, &sv, 4, 3);
  CHECK_EQ_U64 (sv.lim.version, 3);
  CHECK_EQ_U64 (sv.conn_id, 0);
  /* ... version 4 as 4, with no ABANDON (a server of version 4 would
   * drop the client for it) ... */
  connect_version (&cl, &sv, 4, 4);
  CHECK_EQ_U64 (sv.lim.version, 4);
  r = (struct gm_rp_request) { AB (7, lim.instance), .handle = 1 };
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == -1);
  CHECK_WHY ("unknown opcode 8 in version 4");
  CHECK (take (&sv, r) == -1);
  CHECK_WHY ("unknown opcode 8 in version 4");
  /* ... and version 5 as 5, where an ABANDON is a request like the
   * others: a credit, a reply with no count. */
  connect_pair (&cl, &sv, 4);
  CHECK_EQ_U64 (sv.lim.version, 5);
  r = (struct gm_rp_request) { AB (7, lim.instance), .handle = 9 };
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
  CHECK (take (&sv, r) == 0);
  CHECK_EQ_U64 (gm_rp_conn_credits_free (&sv), 3);
  CHECK (gm_rp_conn_request_end (&sv, 9, NULL, why, sizeof why) == 0);
  CHECK (reply (&cl, 9, 0, 0) == 0);
  CHECK_EQ_U64 (gm_rp_conn_credits_free (&cl), 4);
  /* The client's identity is read at offset 12 (little-endian), 0
   * (none) too. */
  connect_pair (&cl, &sv, 4);
  CHECK_EQ_U64 (sv.conn_id, 0);
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  cl.conn_id = 0x8877665544332211ull;
  CHECK (gm_rp_conn_hello (&cl, 4, 1 * M, &h, why, sizeof why) == 0);
  CHECK_EQ_U64 (h.conn_id, 0x8877665544332211ull);
  gm_rp_encode_hello (&h, b);
  CHECK (b[12] == 0x11 && b[19] == 0x88 && b[20] == 0);
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  CHECK (gm_rp_conn_accept_hello (&sv, b, GM_RP_HELLO_SIZE, &lim, &w,
                                  why, sizeof why) == 0);
  CHECK_EQ_U64 (sv.conn_id, 0x8877665544332211ull);
  /* A version 2 pair works as before. */
  connect_version (&cl, &sv, 4, 2);
  r = req (GM_RP_READ, 1, 0, 4096);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
  CHECK (take (&sv, r) == 0);
  CHECK (gm_rp_conn_request_end (&sv, 1, NULL, why, sizeof why) == 0);
  CHECK (reply (&cl, 1, 0, 0) == 0);
  CHECK (cl.state == GM_RP_READY && sv.state == GM_RP_READY);

  /* A client takes only the version its hello sent. */
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  gm_rp_conn_hello (&cl, 4, 1 * M, &h, why, sizeof why);
  h.version = cl.sent.version = 2;        /* an older client */
  gm_rp_encode_hello (&h, b);
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  CHECK (gm_rp_conn_accept_hello (&sv, b, 32, &lim, &w, why, sizeof why) == 0);
  w.version = 4;
  gm_rp_encode_welcome (&w, b);
  CHECK (gm_rp_conn_take_welcome (&cl, b, GM_RP_WELCOME_SIZE, why, sizeof why) == -1);
  CHECK_WHY ("server speaks version 4, not 2");
  CHECK (cl.state == GM_RP_FAILED);
  /* A refusal says the server's own version: an older client still
   * reads its error and reason.
   */
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  gm_rp_conn_hello (&cl, 4, 1 * M, &h, why, sizeof why);
  h.version = cl.sent.version = 2;
  gm_rp_welcome_refusal (&w, GM_RP_ESHUTDOWN, "stopping");
  CHECK_EQ_U64 (w.version, GM_RP_VERSION);
  gm_rp_encode_welcome (&w, b);
  CHECK (gm_rp_conn_take_welcome (&cl, b, GM_RP_WELCOME_SIZE, why, sizeof why) == -1);
  CHECK_WHY ("server refused with error 108: stopping");
}

/* The server's goodbye, encoded into b (GM_RP_GOODBYE_SIZE and more). */
static int
say_goodbye (struct gm_rp_conn *sv, bool flushed, uint8_t *b)
{
  struct gm_rp_goodbye g;
  int ret;

  why[0] = '\0';
  ret = gm_rp_conn_goodbye (sv, flushed, &g, why, sizeof why);
  if (ret == 0)
    gm_rp_encode_goodbye (&g, b);
  return ret;
}

static int
take_goodbye (struct gm_rp_conn *cl, const uint8_t *b, size_t len,
              struct gm_rp_goodbye *g)
{
  why[0] = '\0';
  return gm_rp_conn_take_goodbye (cl, b, len, g, why, sizeof why);
}

static void
test_goodbye (void)
{
  struct gm_rp_conn cl, sv;
  struct gm_rp_goodbye g;
  struct gm_rp_request r;
  struct gm_rp_hello h;
  uint8_t b[32] = { 0 };

  /* Made by the server, taken by the client: both are gone. */
  connect_pair (&cl, &sv, 4);
  CHECK (gm_rp_conn_goodbye (&sv, true, &g, why, sizeof why) == 0);
  CHECK (sv.state == GM_RP_GONE);
  CHECK_EQ_U64 (g.magic, GM_RP_GOODBYE_MAGIC);
  CHECK_EQ_U64 (g.flags, GM_RP_BYE_FLUSHED);
  CHECK_EQ_U64 (g.instance, lim.instance);
  CHECK (memcmp (g.reserved, (uint8_t[8]) { 0 }, sizeof g.reserved) == 0);
  gm_rp_encode_goodbye (&g, b);
  memset (&g, 0xab, sizeof g);
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == 0);
  CHECK (cl.state == GM_RP_GONE);
  CHECK_EQ_U64 (g.flags, GM_RP_BYE_FLUSHED);
  CHECK_EQ_U64 (g.instance, lim.instance);
  CHECK_EQ_U64 (gm_rp_conn_credits_free (&cl), 0);
  CHECK_EQ_U64 (gm_rp_conn_credits_free (&sv), 0);
  /* Nothing more on either side. */
  CHECK (gm_rp_conn_goodbye (&sv, true, &g, why, sizeof why) == -1);
  CHECK_WHY ("no goodbye: server side, state gone, version 5");
  CHECK (sv.state == GM_RP_GONE);
  CHECK (take (&sv, req (GM_RP_READ, 1, 0, 4096)) == -1);
  CHECK_WHY ("request in state gone");
  CHECK (sv.state == GM_RP_FAILED);
  r = req (GM_RP_READ, 1, 0, 4096);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == -1);
  CHECK_WHY ("request in state gone");
  CHECK (cl.state == GM_RP_FAILED);
  /* ... a reply neither, nor a second goodbye. */
  connect_pair (&cl, &sv, 4);
  CHECK (say_goodbye (&sv, false, b) == 0);
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == 0);
  CHECK_EQ_U64 (g.flags, 0);
  CHECK_EQ_U64 (g.instance, lim.instance);
  CHECK (reply (&cl, 1, 0, 0) == -1);
  CHECK_WHY ("reply in state gone");
  CHECK (cl.state == GM_RP_FAILED);
  connect_pair (&cl, &sv, 4);
  CHECK (say_goodbye (&sv, false, b) == 0);
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == 0);
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == -1);
  CHECK_WHY ("goodbye in state gone");
  CHECK (cl.state == GM_RP_FAILED);
  /* Not while the server has a request in flight: its reply would
   * come after the flush the goodbye speaks for. */
  connect_pair (&cl, &sv, 4);
  CHECK (take (&sv, req (GM_RP_READ, 1, 0, 4096)) == 0);
  CHECK (say_goodbye (&sv, true, b) == -1);
  CHECK_WHY ("no goodbye: server side, state ready, version 5, "
             "1 requests in flight");
  CHECK (sv.state == GM_RP_READY);
  CHECK (gm_rp_conn_request_end (&sv, 1, NULL, why, sizeof why) == 0);
  CHECK (say_goodbye (&sv, true, b) == 0);
  CHECK (gm_rp_conn_request_end (&sv, 1, NULL, why, sizeof why) == -1);
  CHECK_WHY ("reply in state gone");

  /* With the client's requests in flight (the server, shutting down,
   * took none of them): allowed, they were not served, and a reply for
   * one of them afterwards is a protocol error.
   */
  connect_pair (&cl, &sv, 4);
  r = req (GM_RP_READ, 1, 0, 4096);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
  r = req (GM_RP_WRITE, 2, 4096, 4096);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
  CHECK (say_goodbye (&sv, true, b) == 0);
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == 0);
  CHECK (cl.state == GM_RP_GONE);
  CHECK_EQ_U64 (cl.in_use, 2);
  CHECK (reply (&cl, 2, 0, 0) == -1);
  CHECK_WHY ("reply in state gone");
  CHECK (cl.state == GM_RP_FAILED);

  /* After a DISCONNECT (CLOSING) on both sides, too. */
  connect_pair (&cl, &sv, 4);
  r = req (GM_RP_DISCONNECT, 0, 0, 0);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
  CHECK (take (&sv, r) == 0);
  CHECK (cl.state == GM_RP_CLOSING && sv.state == GM_RP_CLOSING);
  CHECK (say_goodbye (&sv, false, b) == 0);
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == 0);
  CHECK (cl.state == GM_RP_GONE && sv.state == GM_RP_GONE);

  /* A version 2 conn has none: the server is refused one, and stays
   * READY; requests go on.
   */
  connect_version (&cl, &sv, 4, 2);
  CHECK (gm_rp_conn_goodbye (&sv, true, &g, why, sizeof why) == -1);
  CHECK_WHY ("no goodbye: server side, state ready, version 2");
  CHECK (sv.state == GM_RP_READY);
  CHECK (gm_rp_conn_goodbye (&sv, false, &g, NULL, 0) == -1);
  CHECK (sv.state == GM_RP_READY);
  r = req (GM_RP_READ, 1, 0, 4096);
  CHECK (gm_rp_conn_request_begin (&cl, &r, why, sizeof why) == 0);
  CHECK (take (&sv, r) == 0);
  CHECK (gm_rp_conn_request_end (&sv, 1, NULL, why, sizeof why) == 0);
  CHECK (reply (&cl, 1, 0, 0) == 0);
  CHECK (take (&sv, req (GM_RP_DISCONNECT, 0, 0, 0)) == 0);
  CHECK (gm_rp_conn_goodbye (&sv, true, &g, why, sizeof why) == -1);
  CHECK_WHY ("no goodbye: server side, state closing, version 2");
  CHECK (sv.state == GM_RP_CLOSING);

  /* Nor on a client, or before READY, or once FAILED: -1, the conn as
   * it was.
   */
  connect_pair (&cl, &sv, 4);
  CHECK (gm_rp_conn_goodbye (&cl, true, &g, why, sizeof why) == -1);
  CHECK_WHY ("no goodbye: client side, state ready, version 5");
  CHECK (cl.state == GM_RP_READY);
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  CHECK (gm_rp_conn_goodbye (&cl, true, &g, why, sizeof why) == -1);
  CHECK (cl.state == GM_RP_HANDSHAKE);
  gm_rp_conn_hello (&cl, 4, 1 * M, &h, why, sizeof why);
  CHECK (gm_rp_conn_goodbye (&cl, true, &g, why, sizeof why) == -1);
  CHECK_WHY ("no goodbye: client side, state awaiting welcome");
  CHECK (cl.state == GM_RP_WELCOME_WAIT);
  gm_rp_conn_init (&sv, GM_RP_SERVER);
  CHECK (gm_rp_conn_goodbye (&sv, true, &g, why, sizeof why) == -1);
  CHECK_WHY ("no goodbye: server side, state handshake");
  CHECK (sv.state == GM_RP_HANDSHAKE);
  connect_pair (&cl, &sv, 4);
  CHECK (take (&sv, req (GM_RP_READ, 1, 0, 0)) == -1);
  CHECK (sv.state == GM_RP_FAILED);
  CHECK (gm_rp_conn_goodbye (&sv, true, &g, why, sizeof why) == -1);
  CHECK_WHY ("no goodbye: server side, state failed");
  CHECK (sv.state == GM_RP_FAILED);

  /* Malformed goodbyes, or one out of place: the client is FAILED. */
#define BYE(mutation, len, msg) do {                                    \
    struct gm_rp_goodbye g_;                                            \
    connect_pair (&cl, &sv, 4);                                         \
    CHECK (gm_rp_conn_goodbye (&sv, true, &g_, why, sizeof why) == 0);  \
    mutation;                                                           \
    memset (b, 0, sizeof b);                                            \
    gm_rp_encode_goodbye (&g_, b);                                      \
    CHECK (take_goodbye (&cl, b, (len), &g) == -1);                     \
    CHECK_WHY (msg);                                                    \
    CHECK (cl.state == GM_RP_FAILED);                                   \
  } while (0)
  BYE (g_.magic = GM_RP_WELCOME_MAGIC, GM_RP_GOODBYE_SIZE,
       "bad goodbye magic 0x57524d47");
  BYE (g_.magic = 0, GM_RP_GOODBYE_SIZE, "bad goodbye magic 0x00000000");
  BYE (g_.flags = 1u << 1, GM_RP_GOODBYE_SIZE, "goodbye: unknown flags 0x2");
  BYE (g_.flags = GM_RP_BYE_FLUSHED | 1u << 31, GM_RP_GOODBYE_SIZE,
       "goodbye: unknown flags 0x80000001");
  BYE (g_.reserved[0] = 1, GM_RP_GOODBYE_SIZE,
       "goodbye: reserved field not zero");
  BYE (g_.reserved[7] = 0x80, GM_RP_GOODBYE_SIZE,
       "goodbye: reserved field not zero");
  BYE (g_.instance++, GM_RP_GOODBYE_SIZE, "goodbye from instance "
       "0x1122334455667789, the welcome named 0x1122334455667788");
  BYE (g_.instance = 0, GM_RP_GOODBYE_SIZE, "goodbye from instance 0x0,");
  BYE ((void) 0, GM_RP_REPLY_SIZE, "a goodbye is 24 bytes, got 16");
  BYE ((void) 0, GM_RP_GOODBYE_SIZE + 1, "a goodbye is 24 bytes, got 25");
  BYE ((void) 0, 0, "a goodbye is 24 bytes, got 0");
  /* On the server side. */
  connect_pair (&cl, &sv, 4);
  CHECK (say_goodbye (&sv, true, b) == 0);
  connect_pair (&cl, &sv, 4);
  CHECK (take_goodbye (&sv, b, GM_RP_GOODBYE_SIZE, &g) == -1);
  CHECK_WHY ("goodbye on the server side");
  CHECK (sv.state == GM_RP_FAILED);
  /* Before the welcome. */
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == -1);
  CHECK_WHY ("goodbye in state handshake");
  CHECK (cl.state == GM_RP_FAILED);
  gm_rp_conn_init (&cl, GM_RP_CLIENT);
  gm_rp_conn_hello (&cl, 4, 1 * M, &h, why, sizeof why);
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == -1);
  CHECK_WHY ("goodbye in state awaiting welcome");
  CHECK (cl.state == GM_RP_FAILED);
  /* On a version 2 conn (a goodbye a version 3 server would make). */
  connect_version (&cl, &sv, 4, 2);
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == -1);
  CHECK_WHY ("goodbye in protocol version 2");
  CHECK (cl.state == GM_RP_FAILED);
  /* Once FAILED. */
  CHECK (take_goodbye (&cl, b, GM_RP_GOODBYE_SIZE, &g) == -1);
  CHECK_WHY ("goodbye in state failed");
  CHECK (cl.state == GM_RP_FAILED);
}

/* A rejection's private data, as the bridge reads it before printing
 * the reason: only a well-formed refusal passes.  The reason is the
 * server's; it went to the log unchecked, read past its 48 bytes when
 * it had no NUL and could forge log lines.
 */
static void
test_refusal (void)
{
  uint8_t reject[148] = { 0 };  /* a CM reject's private data */
  struct gm_rp_welcome w, got;

  gm_rp_welcome_refusal (&w, GM_RP_ENOSPC, "too many clients");
  gm_rp_encode_welcome (&w, reject);
  CHECK (gm_rp_take_refusal (reject, sizeof reject, &got, why, sizeof why) == 0);
  CHECK (got.error == GM_RP_ENOSPC);
  CHECK (strcmp (got.reason, "too many clients") == 0);
  CHECK (gm_rp_take_refusal (reject, GM_RP_WELCOME_SIZE, &got,
                             why, sizeof why) == 0);
  /* DEL and bytes above ASCII become '?' too. */
  gm_rp_welcome_refusal (&w, GM_RP_EINVAL, "del\x7f" "hi\xc3\xa9");
  CHECK (strcmp (w.reason, "del?hi??") == 0);

  /* 48 bytes of reason and no NUL: printed with %s it runs on. */
  memset (w.reason, 'x', GM_RP_REASON_LEN);
  gm_rp_encode_welcome (&w, reject);
  CHECK (gm_rp_take_refusal (reject, sizeof reject, &got, why, sizeof why) == -1);
  CHECK_WHY ("refusal: reason not printable and NUL-padded");
  /* A line of its own in the bridge's log. */
  gm_rp_welcome_refusal (&w, GM_RP_EINVAL, "");
  strcpy (w.reason, "x\nnbdkit: error: forged");
  gm_rp_encode_welcome (&w, reject);
  CHECK (gm_rp_take_refusal (reject, sizeof reject, &got, why, sizeof why) == -1);
  CHECK_WHY ("refusal: reason not printable and NUL-padded");
  /* Bytes after the first NUL. */
  gm_rp_welcome_refusal (&w, GM_RP_EINVAL, "ok");
  w.reason[10] = 'y';
  gm_rp_encode_welcome (&w, reject);
  CHECK (gm_rp_take_refusal (reject, sizeof reject, &got, why, sizeof why) == -1);

  /* Not a refusal: no error, another magic, short, nonzero padding. */
  gm_rp_welcome_refusal (&w, 0, "fine");
  gm_rp_encode_welcome (&w, reject);
  CHECK (gm_rp_take_refusal (reject, sizeof reject, &got, why, sizeof why) == -1);
  CHECK_WHY ("a rejection whose welcome has no error");
  gm_rp_welcome_refusal (&w, GM_RP_EINVAL, "fine");
  w.magic = GM_RP_HELLO_MAGIC;
  gm_rp_encode_welcome (&w, reject);
  CHECK (gm_rp_take_refusal (reject, sizeof reject, &got, why, sizeof why) == -1);
  CHECK_WHY ("bad welcome magic 0x48524d47");
  w.magic = GM_RP_WELCOME_MAGIC;
  gm_rp_encode_welcome (&w, reject);
  CHECK (gm_rp_take_refusal (reject, GM_RP_WELCOME_SIZE - 1, &got,
                             why, sizeof why) == -1);
  CHECK_WHY ("a welcome is 96 bytes, got 95");
  reject[sizeof reject - 1] = 1;
  CHECK (gm_rp_take_refusal (reject, sizeof reject, &got, why, sizeof why) == -1);
  CHECK_WHY ("padding after the welcome is not zero");
}

int
main (void)
{
  test_layout ();
  test_round_trip ();
  test_short_buffers ();
  test_check_request ();
  test_check_limits ();
  test_check_reply ();
  test_errors ();
  test_handshake ();
  test_requests ();
  test_versions ();
  test_goodbye ();
  test_refusal ();
  UNIT_DONE ();
}

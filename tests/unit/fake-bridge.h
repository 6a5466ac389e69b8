/* Fakes of conn.c, mem.c and nbdkit that the bridge unit tests share:
 * bridge.c is compiled in over them (include it first).  Each test
 * defines struct conn (with its limits in 'lim') and the calls whose
 * behaviour it controls: conn_reserve, conn_unreserve, conn_post,
 * conn_collect, conn_collect_count, conn_credits, conn_ab,
 * mem_max_request and nbdkit_set_error.  mem_put and mem_put_exposed
 * count their calls.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_FAKE_BRIDGE_H
#define GMBLOCK_FAKE_BRIDGE_H

struct conn *conn_open (void) { return NULL; }
void conn_close (struct conn *c) { }
void conn_stop_all (void) { }
const struct gm_rp_limits *
conn_limits (const struct conn *c) { return &c->lim; }
void conn_acked (struct conn *c, const struct gm_uf_ack *ack) { }
void conn_flush_begin (struct conn *c, struct gm_uf_flush *f) { }
bool
conn_flush_lost (struct conn *c, const struct gm_uf_flush *f) { return false; }
int mem_check_odp (char *why, size_t whylen) { return 0; }

/* Zero copy into the caller's buffer; a bounce buffer only for what
 * the bridge reads itself (BLOCK_STATUS's extents). */
int
mem_get (void *user, uint32_t len, bool wait, struct buf_ref *b)
{
  *b = (struct buf_ref) { .addr = user, .len = len, .ent = -1 };
  return 0;
}

int
mem_get_bounce (uint32_t len, bool wait, struct buf_ref *b)
{
  static char extents[4096];

  *b = (struct buf_ref) { .addr = extents, .len = len, .ent = -1 };
  return 0;
}

/* Buffers given back, and of them those the server may still reach. */
static unsigned mem_puts, mem_exposed_puts;
void mem_put (struct buf_ref *b) { mem_puts++; }
void mem_put_exposed (struct buf_ref *b) { mem_exposed_puts++; }
void mem_unload (void) { }

/* What bridge.c and the common library call of nbdkit. */
void nbdkit_debug (const char *fs, ...) { }
void nbdkit_error (const char *fs, ...) { }
char *nbdkit_absolute_path (const char *path) { return strdup (path); }
int
nbdkit_add_extent (struct nbdkit_extents *ex, uint64_t offset,
                   uint64_t length, uint32_t type)
{
  return 0;
}

#endif /* GMBLOCK_FAKE_BRIDGE_H */

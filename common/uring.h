/* gmblock: io_uring helpers: ring set-up with graceful fallbacks and
 * synchronous submit-and-wait of one operation.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_URING_H
#define GMBLOCK_URING_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <liburing.h>

/* What the caller would like; the helper drops what the kernel refuses. */
#define GM_URING_SINGLE_ISSUER  1u  /* SINGLE_ISSUER + DEFER_TASKRUN */
#define GM_URING_COOP_TASKRUN   2u
#define GM_URING_REGISTER_FD    4u  /* register the ring fd (per thread:
                                       only for rings one thread uses) */

struct gm_uring {
  struct io_uring ring;
  unsigned features;            /* GM_URING_* actually in effect */
  char *fixed_base;             /* registered buffer 0, or NULL */
  size_t fixed_len;
  uint64_t seq;                 /* tags SQEs: a completion is known as ours */
  bool dead;                    /* waiting failed: never used again */
  bool lost;                    /* and a request was still in flight
                                   after gm_uring_reclaim_ms: it may
                                   still land in its buffer */
  bool refused;                 /* the last request failed unsubmitted:
                                   it never ran (a syscall may do it) */
};

/* Errors after which trying again is right: the kernel said "not now". */
static inline bool
gm_uring_transient (int r)
{
  return r == -EINTR || r == -EAGAIN || r == -EBUSY || r == -ETIME;
}

/* Returns 0 or -errno. */
int gm_uring_init (struct gm_uring *u, unsigned entries, unsigned want);
void gm_uring_exit (struct gm_uring *u);

/* Register [base, base+len) as fixed buffer 0.  Returns 0 or -errno
 * (typically -ENOMEM when RLIMIT_MEMLOCK is too small); the ring keeps
 * working with plain buffers after a failure.
 */
int gm_uring_register_buffer (struct gm_uring *u, void *base, size_t len);

/* Human-readable description of u->features, for logs. */
const char *gm_uring_describe (const struct gm_uring *u, char *buf, size_t len);

enum gm_rw { GM_READ, GM_WRITE };

/* Prepare one read or write in sqe, using the fixed buffer when buf
 * lies inside it.
 */
void gm_uring_prep_rw (struct gm_uring *u, struct io_uring_sqe *sqe,
                       enum gm_rw op, int fd, void *buf, size_t len,
                       uint64_t off, int rw_flags);

/* One transfer attempt: bytes transferred or -errno. */
typedef ssize_t (*gm_rw_once_fn) (void *ctx, enum gm_rw op, int fd, void *buf,
                                  size_t len, uint64_t off, int rw_flags);

/* Repeat 'once' until len bytes are done, continuing short transfers
 * and retrying EINTR/EAGAIN; a read stops early only at end of file.
 * Returns bytes transferred or -errno.
 */
ssize_t gm_rw_loop (gm_rw_once_fn once, void *ctx, enum gm_rw op, int fd,
                    void *buf, size_t len, uint64_t off, int rw_flags);

/* Transfer len bytes at off, waiting for completion.  Uses the fixed
 * buffer when buf lies inside it.  Short transfers are continued; a
 * read stops early only at end of file.  Returns bytes transferred or
 * -errno.  rw_flags are preadv2/pwritev2 flags (RWF_DSYNC for FUA).
 */
ssize_t gm_uring_rw (struct gm_uring *u, enum gm_rw op, int fd,
                     void *buf, size_t len, uint64_t off, int rw_flags);

/* fsync or fdatasync through the ring.  Returns 0 or -errno.  After
 * gm_uring_rw or gm_uring_fsync failed, u->refused says whether the
 * kernel never took the last request (so it never ran) rather than
 * ran it and failed.
 */
int gm_uring_fsync (struct gm_uring *u, int fd, bool datasync);

/* Hand every queued SQE to the kernel, retrying "not now" a bounded
 * number of times, and wait for wait_nr completions.  Returns 0 once
 * the kernel holds them all (even if waiting then failed), or the
 * error that left some queued: see gm_uring_unqueue.
 */
int gm_uring_submit_all (struct gm_uring *u, unsigned wait_nr);

/* Hand every completion in u's CQ to take (its user_data and result)
 * and mark them seen.  The CQ ring is mapped memory: reading it needs no
 * system call, so this works on a ring whose wait failed too.
 */
void gm_uring_take_cqes (struct gm_uring *u,
                         void (*take) (uint64_t tag, int res, void *arg),
                         void *arg);

/* After a wait on u failed for good, with requests in flight: cancel
 * them (io_uring_prep_cancel64 with cancel_tag and cancel_flags) and
 * hand each completion in the CQ to take (its user_data and result),
 * until done (arg) says all are back or gm_uring_reclaim_ms (10 s;
 * tests shorten it) have passed.  The CQ is read from mapped memory, so
 * this needs no working wait.
 */
extern unsigned gm_uring_reclaim_ms;
void gm_uring_reclaim (struct gm_uring *u, uint64_t cancel_tag,
                       unsigned cancel_flags,
                       void (*take) (uint64_t tag, int res, void *arg),
                       void *arg, bool (*done) (void *arg));

/* Take back the SQEs the kernel has not read, after gm_uring_submit_all
 * failed: each becomes a no-op with user_data 0, whose completion is
 * nobody's.  drop (if not NULL) gets the user_data of each request
 * taken back.  The caller must be the only one submitting.
 */
void gm_uring_unqueue (struct gm_uring *u,
                       void (*drop) (uint64_t data, void *arg), void *arg);

#endif /* GMBLOCK_URING_H */

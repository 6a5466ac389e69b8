/* gmblock: what the unit tests that interpose on liburing share (linked
 * with -Wl,--wrap=io_uring_submit_and_wait -Wl,--wrap=io_uring_submit
 * -Wl,--wrap=__io_uring_get_cqe): the real calls, and io_uring_submit
 * sent through the test's own __wrap_io_uring_submit_and_wait.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_URING_WRAP_H
#define GMBLOCK_URING_WRAP_H

#include <signal.h>
#include <liburing.h>

int __real_io_uring_submit_and_wait (struct io_uring *ring, unsigned wait_nr);
int __real___io_uring_get_cqe (struct io_uring *ring,
                               struct io_uring_cqe **cqe_ptr,
                               unsigned submit, unsigned wait_nr,
                               sigset_t *sigmask);
int __wrap_io_uring_submit_and_wait (struct io_uring *ring, unsigned wait_nr);

/* io_uring_submit (ring) is io_uring_submit_and_wait (ring, 0). */
int
__wrap_io_uring_submit (struct io_uring *ring)
{
  return __wrap_io_uring_submit_and_wait (ring, 0);
}

#endif /* GMBLOCK_URING_WRAP_H */

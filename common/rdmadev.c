/* gmblock: is there an RDMA device (see rdmaaddr.h)?  In its own file:
 * only the modules linked with libibverbs pull it from the archive.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdmaaddr.h"

int
gm_rdma_have_device (char *why, size_t whylen)
{
  struct ibv_device **list;
  int n = 0;

  errno = 0;
  list = ibv_get_device_list (&n);
  if (list)
    ibv_free_device_list (list);
  if (list && n > 0)
    return 0;
  snprintf (why, whylen, "no RDMA device on this host (ibv_get_device_list "
            "found none%s%s); on a host without an RDMA NIC, soft-RoCE gives "
            "one: modprobe rdma_rxe; rdma link add rxe0 type rxe netdev IFACE "
            "(see README)", list == NULL && errno ? ": " : "",
            list == NULL && errno ? strerror (errno) : "");
  return -1;
}

int
gm_rdma_cq_wait (struct ibv_cq *cq, struct ibv_comp_channel *cc,
                 struct ibv_wc *wc, int other_fd, int timeout_ms)
{
  for (;;) {
    struct pollfd p[2] = { { .fd = cc->fd, .events = POLLIN },
                           { .fd = other_fd, .events = POLLIN } };
    struct ibv_cq *ev_cq;
    void *ctx;
    int n = ibv_poll_cq (cq, 1, wc);

    if (n != 0)
      return n < 0 ? -1 : 1;
    if (ibv_req_notify_cq (cq, 0))
      return -1;
    /* A completion may have landed before the request for a notice. */
    n = ibv_poll_cq (cq, 1, wc);
    if (n != 0)
      return n < 0 ? -1 : 1;
    n = poll (p, other_fd >= 0 ? 2 : 1, timeout_ms);
    if (n == -1 && errno == EINTR)
      continue;
    if (n == 0)
      return -2;
    if (n < 0)
      return -1;
    if (other_fd >= 0 && p[1].revents)
      return 0;
    if (ibv_get_cq_event (cc, &ev_cq, &ctx) == 0)
      ibv_ack_cq_events (ev_cq, 1);
  }
}

void
gm_rdma_qp_destroy (struct rdma_cm_id *id, struct ibv_cq **cq,
                    struct ibv_comp_channel **cc, struct ibv_mr **mr)
{
  if (id && id->qp)
    rdma_destroy_qp (id);
  if (*cq)
    ibv_destroy_cq (*cq);
  if (*cc)
    ibv_destroy_comp_channel (*cc);
  if (mr && *mr)
    ibv_dereg_mr (*mr);
  *cq = NULL;
  *cc = NULL;
  if (mr)
    *mr = NULL;
}

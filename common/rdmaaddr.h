/* gmblock: RDMA endpoint addresses, "HOST[:PORT]" or "[IPV6]:PORT".
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Shared by the gmblock-rdma filter (rdma=) and the gmblock-rdma
 * bridge plugin (server=).  Plain libc: no verbs here.
 */
#ifndef GMBLOCK_RDMAADDR_H
#define GMBLOCK_RDMAADDR_H

#include <stddef.h>

#define GM_RDMA_DEFAULT_PORT 10810

struct gm_rdma_addr {
  char host[256];               /* without brackets */
  char port[8];                 /* decimal, 1 to 65535 */
};

/* Parse value into *a.  Returns 0, or -1 with why set to a sentence
 * saying what is wrong and what is expected.
 */
int gm_rdma_addr_parse (const char *value, struct gm_rdma_addr *a,
                        char *why, size_t whylen);


/* 0 if this host has at least one RDMA device; else -1 with why set to
 * a sentence naming that and how to get one (soft-RoCE).  Uses
 * libibverbs: only the RDMA modules, which link it, may call it.
 */
int gm_rdma_have_device (char *why, size_t whylen);

/* The next work completion of cq (whose completion channel is cc) into
 * *wc: 1.  0 when other_fd (if >= 0) became readable first; -2 after
 * timeout_ms (-1: no limit) without either; -1 on a verbs error.
 * Also verbs: RDMA modules only.
 */
struct ibv_cq;
struct ibv_comp_channel;
struct ibv_wc;
int gm_rdma_cq_wait (struct ibv_cq *cq, struct ibv_comp_channel *cc,
                     struct ibv_wc *wc, int other_fd, int timeout_ms);

/* Destroy what a connection's queue pair needs, in order: the QP of id
 * (if any), then *cq, *cc and *mr (each if not NULL, then set NULL).
 */
struct rdma_cm_id;
struct ibv_mr;
void gm_rdma_qp_destroy (struct rdma_cm_id *id, struct ibv_cq **cq,
                         struct ibv_comp_channel **cc, struct ibv_mr **mr);

#endif /* GMBLOCK_RDMAADDR_H */

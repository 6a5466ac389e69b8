/* gmblock-rdma filter: binding the listener's address, for real after
 * nbdkit's fork and as a trial before it.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The listener binds in .after_fork: device contexts librdmacm opens
 * belong to the process that opened them.  But an error there comes
 * after nbdkit has daemonised (only syslog sees it, and the daemon's
 * parent has exited 0) or while `--run` waits.  So .get_ready tries the
 * same bind in a short-lived child process, which reports what went
 * wrong through a pipe and exits; the serving process's librdmacm is
 * untouched.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdma.h"

int
gm_rdma_bind (const struct gm_rdma_addr *a, struct rdma_event_channel **ch,
              struct rdma_cm_id **id, char *why, size_t whylen)
{
  struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
                            .ai_flags = AI_PASSIVE }, *ai = NULL;
  int e, r = -1;

  e = getaddrinfo (a->host, a->port, &hints, &ai);
  if (e) {
    snprintf (why, whylen, "rdma=%s:%s: %s", a->host, a->port,
              gai_strerror (e));
    return -1;
  }
  *ch = rdma_create_event_channel ();
  if (*ch == NULL || rdma_create_id (*ch, id, NULL, RDMA_PS_TCP))
    snprintf (why, whylen, "cannot create an RDMA CM id: %s",
              strerror (errno));
  else if (rdma_bind_addr (*id, ai->ai_addr))
    snprintf (why, whylen, "rdma=%s:%s: cannot bind: %s (is the address one "
              "of an RDMA device's network interfaces, and the port free?)",
              a->host, a->port, strerror (errno));
  else if ((*id)->verbs == NULL)
    snprintf (why, whylen, "rdma=%s:%s: the address belongs to no RDMA "
              "device (give the address of an RDMA interface, not a "
              "wildcard)", a->host, a->port);
  else
    r = 0;
  freeaddrinfo (ai);
  return r;
}

int
gm_rdma_bind_trial (const struct gm_rdma_addr *a, char *why, size_t whylen)
{
  int p[2], st;
  ssize_t n;
  size_t got = 0;
  pid_t pid;

  /* Whatever keeps the trial from running, the real bind still tells. */
  if (pipe2 (p, O_CLOEXEC) == -1)
    return 0;
  pid = fork ();
  if (pid == -1) {
    close (p[0]);
    close (p[1]);
    return 0;
  }
  if (pid == 0) {
    struct rdma_event_channel *ch = NULL;
    struct rdma_cm_id *id = NULL;
    char msg[256];

    close (p[0]);
    if (gm_rdma_bind (a, &ch, &id, msg, sizeof msg) == -1 &&
        write (p[1], msg, strlen (msg)) == -1)
      _exit (1);
    _exit (0);                  /* the kernel releases the address */
  }
  close (p[1]);
  while (got < whylen - 1 &&
         ((n = read (p[0], why + got, whylen - 1 - got)) > 0 ||
          (n == -1 && errno == EINTR)))
    if (n > 0)
      got += n;
  close (p[0]);
  why[got] = '\0';
  while (waitpid (pid, &st, 0) == -1 && errno == EINTR)
    ;
  return got > 0 ? -1 : 0;
}

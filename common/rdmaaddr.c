/* gmblock: RDMA endpoint addresses (see rdmaaddr.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmaaddr.h"

#define EXPECTED "expected HOST[:PORT] or [IPV6]:PORT, port 1 to 65535"

int
gm_rdma_addr_parse (const char *value, struct gm_rdma_addr *a,
                    char *why, size_t whylen)
{
  const char *host = value, *port = NULL, *colon;
  size_t hlen;

  memset (a, 0, sizeof *a);
  if (value[0] == '[') {
    const char *close = strchr (value, ']');
    if (close == NULL || (close[1] != '\0' && close[1] != ':')) {
      snprintf (why, whylen, "unbalanced brackets (" EXPECTED ")");
      return -1;
    }
    host = value + 1;
    hlen = close - host;
    if (close[1] == ':')
      port = close + 2;
  }
  else {
    colon = strchr (value, ':');
    if (colon && strchr (colon + 1, ':')) {
      snprintf (why, whylen, "an IPv6 address needs brackets (" EXPECTED ")");
      return -1;
    }
    hlen = colon ? (size_t) (colon - value) : strlen (value);
    if (colon)
      port = colon + 1;
  }
  if (hlen == 0) {
    snprintf (why, whylen, "no host (" EXPECTED ")");
    return -1;
  }
  /* "a]:1", "[a[b]": a bracket is never part of a host name. */
  if (memchr (host, '[', hlen) || memchr (host, ']', hlen)) {
    snprintf (why, whylen, "unbalanced brackets (" EXPECTED ")");
    return -1;
  }
  if (hlen >= sizeof a->host) {
    snprintf (why, whylen, "host name too long (" EXPECTED ")");
    return -1;
  }
  memcpy (a->host, host, hlen);
  if (port == NULL) {
    snprintf (a->port, sizeof a->port, "%d", GM_RDMA_DEFAULT_PORT);
    return 0;
  }
  if (*port == '\0' || strspn (port, "0123456789") != strlen (port) ||
      strlen (port) > 5 || atoi (port) < 1 || atoi (port) > 65535) {
    snprintf (why, whylen, "port '%s' is not a number from 1 to 65535 ("
              EXPECTED ")", port);
    return -1;
  }
  snprintf (a->port, sizeof a->port, "%d", atoi (port));
  return 0;
}

/* gmblock: for unit tests linked with -Wl,--wrap=pthread_cond_wait
 * (Makefile): every condition wait in the process is counted in
 * cond_waits, so a test can tell how often waiters went back to sleep.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_COND_WAITS_H
#define GMBLOCK_COND_WAITS_H

#include <pthread.h>
#include <stdatomic.h>

int __real_pthread_cond_wait (pthread_cond_t *c, pthread_mutex_t *m);
int __wrap_pthread_cond_wait (pthread_cond_t *c, pthread_mutex_t *m);
static _Atomic unsigned long cond_waits;

int
__wrap_pthread_cond_wait (pthread_cond_t *c, pthread_mutex_t *m)
{
  atomic_fetch_add (&cond_waits, 1);
  return __real_pthread_cond_wait (c, m);
}

#endif /* GMBLOCK_COND_WAITS_H */

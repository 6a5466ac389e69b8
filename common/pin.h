/* gmblock: keep a module mapped until the process exits.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdkit dlclose()s plugins and filters after .unload, yet code of
 * ours can still run after that: an exit handler (gmblock-cache's
 * failing exit status), or the thread-specific data destructor of a
 * detached nbdkit connection thread that ends after nbdkit stopped
 * waiting for it (the gmblock plugin's per-thread rings with
 * --threads=1).  Pinning the module (RTLD_NODELETE) makes that
 * dlclose leave it, and the libraries it needs, mapped.
 */
#ifndef GMBLOCK_PIN_H
#define GMBLOCK_PIN_H

/* Pin the module holding addr: 0, or -1 with the reason in why. */
int gm_pin_module (const void *addr, char *why, size_t whylen);

#endif /* GMBLOCK_PIN_H */

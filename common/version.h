/* gmblock: the version every module and tool reports; debian/changelog
 * carries the same (tests/test-deb.sh checks it).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef GMBLOCK_VERSION_H
#define GMBLOCK_VERSION_H

#define GMBLOCK_VERSION "0.1.0"

#endif /* GMBLOCK_VERSION_H */

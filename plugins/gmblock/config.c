/* gmblock plugin: options.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gmblock.h"
#include "registry.h"
#include "sizes.h"

#define POOL_MIN (1024 * 1024)
#define POOL_MAX (1024 * 1024 * 1024)   /* io_uring's limit for one fixed buffer */

static bool pool_size_set, buffer_fallback_set;

int
gm_config (const char *key, const char *value)
{
  const char *why;
  int b;

  if ((b = gm_stats_config (&gm_stats_out, key, value)) != 0)
    return b == 1 ? 0 : -1;

  if (strcmp (key, "file") == 0) {
    free (gm.file);
    gm.file = NULL;
    if (*value == '\0') {
      nbdkit_error (GM_NAME ": file= is empty: expected the path of a file "
                    "or block device");
      return -1;
    }
    /* Absolute now: in daemon mode nbdkit changes to / later. */
    gm.file = realpath (value, NULL);
    if (gm.file == NULL) {
      nbdkit_error (GM_NAME ": file=%s: %m", value);
      return -1;
    }
  }
  else if (strcmp (key, "direct") == 0) {
    if ((b = nbdkit_parse_bool (value)) == -1) {
      nbdkit_error (GM_NAME ": direct=%s: expected true (O_DIRECT) or "
                    "false (page cache)", value);
      return -1;
    }
    gm.direct = b;
  }
  else if (strcmp (key, "pool-size") == 0) {
    if (gm_parse_size_range (value, POOL_MIN, POOL_MAX, &gm.pool_size,
                             &why) == -1) {
      nbdkit_error (GM_NAME ": pool-size=%s: %s (expected a size such as "
                    "64M, from 1M to 1G)", value, why);
      return -1;
    }
    pool_size_set = true;
  }
  else if (strcmp (key, "hugepages") == 0) {
    if (gm_huge_mode_parse (value, &gm.hugepages) == -1) {
      nbdkit_error (GM_NAME ": hugepages=%s: expected auto, on or off", value);
      return -1;
    }
  }
  else if (strcmp (key, "discard") == 0) {
    if (strcmp (value, "unmap") == 0)
      gm.discard = GM_DISCARD_UNMAP;
    else if (strcmp (value, "ignore") == 0)
      gm.discard = GM_DISCARD_IGNORE;
    else {
      nbdkit_error (GM_NAME ": discard=%s: expected unmap or ignore", value);
      return -1;
    }
  }
  else if (strcmp (key, "ring") == 0) {
    if (strcmp (value, "per-thread") == 0)
      gm.ring = GM_RING_PER_THREAD;
    else if (strcmp (value, "shared") == 0)
      gm.ring = GM_RING_SHARED;
    else if (strcmp (value, "none") == 0)
      gm.ring = GM_RING_NONE;
    else {
      nbdkit_error (GM_NAME ": ring=%s: expected per-thread, shared or none",
                    value);
      return -1;
    }
  }
  else if (strcmp (key, "buffer") == 0) {
    if (gm_buffer_parse (value) == -1)
      return -1;
  }
  else if (strcmp (key, "buffer-fallback") == 0) {
    if (strcmp (value, "refuse") == 0)
      gm.buffer.stage = false;
    else if (strcmp (value, "stage") == 0)
      gm.buffer.stage = true;
    else {
      nbdkit_error (GM_NAME ": buffer-fallback=%s: expected refuse or stage",
                    value);
      return -1;
    }
    buffer_fallback_set = true;
  }
  else if (strcmp (key, "sysfs.path") == 0) {
    free (gm.pci_path);
    gm.pci_path = NULL;
    if (*value == '\0') {
      nbdkit_error (GM_NAME ": sysfs.path= is empty: expected the bus/pci "
                    "folder of a sysfs tree, like /sys/bus/pci");
      return -1;
    }
    if ((gm.pci_path = nbdkit_absolute_path (value)) == NULL)
      return -1;
  }
  else {
    nbdkit_error (GM_NAME ": unknown parameter '%s' (accepted: file, direct, "
                  "pool-size, hugepages, discard, stats, stats-interval, ring, buffer, "
                  "buffer-fallback, sysfs.path)", key);
    return -1;
  }
  return 0;
}

int
gm_config_complete (void)
{
  if (gm.file == NULL) {
    nbdkit_error (GM_NAME ": file=PATH is required: the file or block "
                  "device to serve");
    return -1;
  }
  if (gm_stats_config_complete (&gm_stats_out) == -1)
    return -1;
  if (pool_size_set && !gm.direct)
    nbdkit_debug (GM_NAME ": pool-size is not used with direct=false");
  /* refuse, the default, is what every other buffer= does anyway. */
  if (buffer_fallback_set && gm.buffer.stage &&
      gm.buffer.kind != GM_BUFFER_BAR) {
    nbdkit_error (GM_NAME ": buffer-fallback=stage applies to "
                  "buffer=bar:BDF:N only (a p2pmem provider either takes DMA "
                  "or is refused)");
    return -1;
  }
  /* For the filters above (gmblock-stripe finds the RAID under it). */
  if (gm_registry_publish (GM_REG_SERVED_FILE, gm.file) == -1) {
    nbdkit_error (GM_NAME ": publishing file=%s: %m", gm.file);
    return -1;
  }
  /* For the RDMA filter's device-memory pool. */
  if (gm.pci_path &&
      gm_registry_publish (GM_REG_SYSFS_PATH, gm.pci_path) == -1) {
    nbdkit_error (GM_NAME ": publishing sysfs.path=%s: %m", gm.pci_path);
    return -1;
  }
  return gm_buffer_check ();
}

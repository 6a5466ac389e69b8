/* gmblock: PCI topology with libpci (see topology.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <pci/pci.h>

#include "devmem.h"
#include "sizes.h"
#include "topology.h"

#define MAX_DEPTH 8             /* nesting of md/dm/loop layers */
#define MAX_WALKS 4096          /* block directories visited per file */

/* libpci's error callback must not return (its default exits), so it
 * jumps back to the scan with the message; the scan runs once, single
 * threaded, before nbdkit serves anybody.
 */
static jmp_buf pci_escape;
static char pci_message[256];

static void __attribute__ ((noreturn))
pci_on_error (char *msg, ...)
{
  va_list ap;

  va_start (ap, msg);
  vsnprintf (pci_message, sizeof pci_message, msg, ap);
  va_end (ap);
  longjmp (pci_escape, 1);
}

static void
pci_on_warning (char *msg, ...)
{
}

/* ---- small sysfs helpers ---- */

static int
read_line (const char *path, char *buf, size_t len)
{
  FILE *f = fopen (path, "r");
  char *nl;

  if (f == NULL)
    return -1;
  if (fgets (buf, len, f) == NULL) {
    fclose (f);
    return -1;
  }
  fclose (f);
  if ((nl = strchr (buf, '\n')) != NULL)
    *nl = '\0';
  return 0;
}

static int
read_u64 (const char *path, uint64_t *v)
{
  char buf[64];

  if (read_line (path, buf, sizeof buf) == -1)
    return -1;
  return gm_parse_u64 (buf, 10, v);
}

static bool
exists (const char *path)
{
  return access (path, F_OK) == 0;
}

/* Is s a full PCI address "DDDD:BB:DD.F"? */
static bool
is_bdf (const char *s)
{
  unsigned d, b, dv, f;
  int n = 0;

  return sscanf (s, "%x:%x:%x.%x%n", &d, &b, &dv, &f, &n) == 4 &&
    s[n] == '\0' && strlen (s) >= 12;
}

/* The last path component of p that is a PCI address, or NULL. */
static const char *
last_bdf (const char *p, char *out, size_t len)
{
  const char *found = NULL;
  char comp[64];

  while (*p) {
    const char *s = p, *e;
    while (*s == '/')
      s++;
    e = strchrnul (s, '/');
    if ((size_t) (e - s) < sizeof comp) {
      memcpy (comp, s, e - s);
      comp[e - s] = '\0';
      if (is_bdf (comp) && strlen (comp) < len) {
        strcpy (out, comp);
        found = out;
      }
    }
    p = e;
  }
  return found;
}

static void
append (char *buf, size_t len, const char *fmt, ...)
{
  size_t used = strlen (buf);
  va_list ap;

  if (used + 1 >= len)
    return;
  va_start (ap, fmt);
  vsnprintf (buf + used, len - used, fmt, ap);
  va_end (ap);
}

/* ---- PCI functions, from libpci ---- */

static enum gm_port
express_port (struct pci_dev *d)
{
  struct pci_cap *cap = pci_find_cap (d, PCI_CAP_ID_EXP, PCI_CAP_NORMAL);
  unsigned type;

  if (cap == NULL)
    return GM_PORT_ENDPOINT;
  type = (pci_read_word (d, cap->addr + PCI_EXP_FLAGS) & PCI_EXP_FLAGS_TYPE) >> 4;
  switch (type) {
  case PCI_EXP_TYPE_ROOT_PORT: return GM_PORT_ROOT;
  case PCI_EXP_TYPE_UPSTREAM: return GM_PORT_SWITCH_UP;
  case PCI_EXP_TYPE_DOWNSTREAM: return GM_PORT_SWITCH_DOWN;
  case PCI_EXP_TYPE_PCI_BRIDGE: case PCI_EXP_TYPE_PCIE_BRIDGE:
    return GM_PORT_BRIDGE;
  default: return GM_PORT_ENDPOINT;
  }
}

static void
fill_fn (struct gm_topology *t, struct pci_access *pacc, struct pci_dev *d,
         struct gm_pci_fn *f)
{
  char path[PATH_MAX], *drv;

  pci_fill_info (d, PCI_FILL_IDENT | PCI_FILL_CLASS | PCI_FILL_BASES |
                 PCI_FILL_SIZES | PCI_FILL_IO_FLAGS | PCI_FILL_CAPS |
                 PCI_FILL_DRIVER);
  f->domain = d->domain;
  f->bus = d->bus;
  f->dev = d->dev;
  f->func = d->func;
  snprintf (f->bdf, sizeof f->bdf, "%04x:%02x:%02x.%d",
            d->domain, d->bus, d->dev, d->func);
  f->vendor = d->vendor_id;
  f->device = d->device_id;
  f->class = d->device_class;
  pci_lookup_name (pacc, f->name, sizeof f->name,
                   PCI_LOOKUP_VENDOR | PCI_LOOKUP_DEVICE,
                   d->vendor_id, d->device_id);
  if ((drv = pci_get_string_property (d, PCI_FILL_DRIVER)) != NULL) {
    const char *b = strrchr (drv, '/');
    snprintf (f->driver, sizeof f->driver, "%s", b ? b + 1 : drv);
  }
  f->parent = -1;
  f->port = express_port (d);
  /* Without the Express capability (config space past 64 bytes is
   * root's only), a bridge is told apart by its place in the tree
   * later (classify_bridges).
   */
  if (f->port == GM_PORT_ENDPOINT && f->class == PCI_CLASS_BRIDGE_PCI)
    f->port = GM_PORT_BRIDGE;
  for (int i = 0; i < 6; i++) {
    pciaddr_t fl = d->flags[i];
    f->bar[i].size = d->size[i];
    f->bar[i].io = fl & PCI_IORESOURCE_IO;
    f->bar[i].prefetch = fl & PCI_IORESOURCE_PREFETCH;
    f->bar[i].mem64 = fl & PCI_IORESOURCE_MEM_64;
  }
  snprintf (path, sizeof path, "%s/devices/%s/p2pmem", t->pci_path, f->bdf);
  if (exists (path)) {
    char p[PATH_MAX + 16];
    uint64_t pub = 0;
    f->p2pmem = true;
    snprintf (p, sizeof p, "%s/size", path);
    read_u64 (p, &f->p2p_size);
    snprintf (p, sizeof p, "%s/available", path);
    read_u64 (p, &f->p2p_available);
    snprintf (p, sizeof p, "%s/published", path);
    read_u64 (p, &pub);
    f->p2p_published = pub != 0;
  }
}

/* Bridges whose type the config space did not tell: a bridge on a root
 * bus is a root port, one below a root port with bridges below it is a
 * switch's upstream port, and bridges below that are its downstream
 * ports.
 */
static void
classify_bridges (struct gm_topology *t)
{
  for (size_t i = 0; i < t->nfn; i++) {
    struct gm_pci_fn *f = &t->fn[i];
    const struct gm_pci_fn *up = f->parent >= 0 ? &t->fn[f->parent] : NULL;
    bool has_bridge_child = false;

    if (f->port != GM_PORT_BRIDGE)
      continue;
    for (size_t j = 0; j < t->nfn; j++)
      if (t->fn[j].parent == (int) i && t->fn[j].class == PCI_CLASS_BRIDGE_PCI)
        has_bridge_child = true;
    if (up == NULL)
      f->port = GM_PORT_ROOT;
    else if (up->port == GM_PORT_ROOT && has_bridge_child)
      f->port = GM_PORT_SWITCH_UP;
    else if (up->port == GM_PORT_SWITCH_UP)
      f->port = GM_PORT_SWITCH_DOWN;
  }
}

static int
scan_pci (struct gm_topology *t, char *err, size_t errlen)
{
  struct pci_access *pacc = pci_alloc ();
  struct pci_dev *d;
  size_t n = 0;

  pacc->error = pci_on_error;
  pacc->warning = pci_on_warning;
  pacc->method = PCI_ACCESS_SYS_BUS_PCI;
  if (setjmp (pci_escape)) {
    snprintf (err, errlen, "libpci (sysfs.path=%s): %s", t->pci_path,
              pci_message);
    /* pacc is not modified after setjmp, so it is still valid here. */
    pci_cleanup (pacc);
    return -1;
  }
  pci_set_param (pacc, "sysfs.path", t->pci_path);
  pci_init (pacc);
  pci_scan_bus (pacc);
  for (d = pacc->devices; d; d = d->next)
    n++;
  t->fn = calloc (n ? n : 1, sizeof *t->fn);
  /* Every function could be under the file (24-drive arrays are common). */
  t->storage = calloc (n ? n : 1, sizeof *t->storage);
  if (t->fn == NULL || t->storage == NULL) {
    snprintf (err, errlen, "calloc: %s", strerror (errno));
    pci_cleanup (pacc);
    return -1;
  }
  for (d = pacc->devices; d; d = d->next)
    fill_fn (t, pacc, d, &t->fn[t->nfn++]);
  /* The upstream bridge is the directory above the function's own.
   * (libpci 3.9's PCI_FILL_PARENT does the same but leaks the path.)
   */
  for (size_t i = 0; i < t->nfn; i++) {
    char up[PATH_MAX + 32], real[PATH_MAX], bdf[32];
    const char *base;
    snprintf (up, sizeof up, "%s/devices/%s/..", t->pci_path, t->fn[i].bdf);
    if (realpath (up, real) == NULL || (base = strrchr (real, '/')) == NULL)
      continue;
    if (last_bdf (base, bdf, sizeof bdf))
      t->fn[i].parent = gm_topology_find (t, bdf);
  }
  pci_cleanup (pacc);
  /* A tree never loops, but a sysfs.path= of symlinks can: a function
   * whose directory sits inside its own, or two inside each other.
   * Every walk up the parents below must end, so cut any cycle.
   */
  for (size_t i = 0; i < t->nfn; i++) {
    size_t steps = 0;
    for (int x = t->fn[i].parent; x >= 0; x = t->fn[x].parent)
      if (++steps > t->nfn) {
        t->fn[i].parent = -1;
        break;
      }
  }
  classify_bridges (t);
  return 0;
}

/* ---- the block device chain behind the file ---- */

static void
add_storage (struct gm_topology *t, const char *bdf)
{
  int i = gm_topology_find (t, bdf);

  if (i < 0) {
    append (t->storage_note, sizeof t->storage_note,
            "%s%s is not in libpci's scan", *t->storage_note ? "; " : "",
            bdf);
    return;
  }
  if (t->fn[i].storage)
    return;
  t->fn[i].storage = true;
  t->storage[t->nstorage++] = i;  /* room for every function */
}

static void walk_block (struct gm_topology *t, const char *dir, int depth);

/* A device number's block directory, followed to its real place. */
static void
walk_devno (struct gm_topology *t, dev_t dev, const char *what, int depth)
{
  char link[PATH_MAX], real[PATH_MAX];

  snprintf (link, sizeof link, "%s/dev/block/%u:%u", t->sysfs_root,
            major (dev), minor (dev));
  if (realpath (link, real) == NULL) {
    append (t->storage_note, sizeof t->storage_note,
            "%s%s is on device %u:%u, which has no block device in sysfs "
            "(tmpfs, overlay, NFS or another virtual filesystem)",
            *t->storage_note ? "; " : "", what, major (dev), minor (dev));
    return;
  }
  walk_block (t, real, depth);
}

/* NVMe multipath: the namespace's node sits under the subsystem; its
 * controllers are the subsystem's nvmeN entries.
 */
static bool
walk_nvme_subsystem (struct gm_topology *t, const char *dir)
{
  char sub[PATH_MAX], p[PATH_MAX + 300], real[PATH_MAX], bdf[32];
  bool any = false;
  const char *s = strstr (dir, "/nvme-subsystem/");
  DIR *dh;
  struct dirent *e;

  if (s == NULL)
    return false;
  snprintf (sub, sizeof sub, "%s", dir);
  *strrchr (sub, '/') = '\0';
  if ((dh = opendir (sub)) == NULL)
    return false;
  while ((e = readdir (dh)) != NULL) {
    if (strncmp (e->d_name, "nvme", 4) != 0 || !isdigit (e->d_name[4]) ||
        strchr (e->d_name, 'n' ) != strrchr (e->d_name, 'n'))
      continue;
    snprintf (p, sizeof p, "%s/%s", sub, e->d_name);
    if (realpath (p, real) && last_bdf (real, bdf, sizeof bdf)) {
      add_storage (t, bdf);
      any = true;
    }
  }
  closedir (dh);
  return any;
}

static void
walk_block (struct gm_topology *t, const char *dir, int depth)
{
  const char *name = strrchr (dir, '/') + 1;
  char p[PATH_MAX + 64], real[PATH_MAX], bdf[32];
  DIR *dh;
  struct dirent *e;
  bool any = false;

  append (t->chain, sizeof t->chain, "%s%s", *t->chain ? " " : "", name);
  /* The depth bounds a chain, the budget a tree whose members lead
   * back to it (slaves/ links in a sysfs.path= of symlinks).
   */
  if (depth > MAX_DEPTH || ++t->walks > MAX_WALKS) {
    if (!t->walk_cut)
      append (t->storage_note, sizeof t->storage_note, "%sthe walk under "
              "the file stopped at %s (more than %d layers or %d block "
              "directories): the disks listed may not be all",
              *t->storage_note ? "; " : "", name, MAX_DEPTH, MAX_WALKS);
    t->walk_cut = true;
    return;
  }

  /* A partition: its disk is the directory above. */
  snprintf (p, sizeof p, "%s/partition", dir);
  if (exists (p)) {
    snprintf (p, sizeof p, "%s/..", dir);
    if (realpath (p, real))
      walk_block (t, real, depth + 1);
    return;
  }

  /* md, dm: their members. */
  snprintf (p, sizeof p, "%s/slaves", dir);
  if ((dh = opendir (p)) != NULL) {
    while ((e = readdir (dh)) != NULL) {
      char m[PATH_MAX + 300];
      if (e->d_name[0] == '.')
        continue;
      snprintf (m, sizeof m, "%s/slaves/%s", dir, e->d_name);
      if (realpath (m, real)) {
        if (!any)
          append (t->chain, sizeof t->chain, " <-");
        walk_block (t, real, depth + 1);
        any = true;
      }
    }
    closedir (dh);
    if (any)
      return;
  }

  /* loop: the device holding its backing file. */
  snprintf (p, sizeof p, "%s/loop/backing_file", dir);
  if (read_line (p, real, sizeof real) == 0) {
    struct stat st;
    append (t->chain, sizeof t->chain, " <- %s", real);
    if (stat (real, &st) == 0)
      walk_devno (t, S_ISBLK (st.st_mode) ? st.st_rdev : st.st_dev, real,
                  depth + 1);
    return;
  }

  if (last_bdf (dir, bdf, sizeof bdf))
    add_storage (t, bdf);
  else if (!walk_nvme_subsystem (t, dir))
    append (t->storage_note, sizeof t->storage_note,
            "%s%s has no PCI function (a virtual device)",
            *t->storage_note ? "; " : "", name);
}

static void
scan_file (struct gm_topology *t, const char *file)
{
  char p[PATH_MAX + 300], real[PATH_MAX];
  struct stat st;

  snprintf (t->file, sizeof t->file, "%s", file);
  if (stat (file, &st) == 0) {
    walk_devno (t, S_ISBLK (st.st_mode) ? st.st_rdev : st.st_dev, file, 0);
    return;
  }
  /* Not a path here: the name of a block device in the tree. */
  snprintf (p, sizeof p, "%s/class/block/%s", t->sysfs_root, file);
  if (realpath (p, real))
    walk_block (t, real, 0);
  else
    append (t->storage_note, sizeof t->storage_note,
            "%s: no such file, and no block device of that name in %s/class/block",
            file, t->sysfs_root);
}

/* ---- RDMA devices ---- */

static void
scan_rdma (struct gm_topology *t)
{
  char dir[PATH_MAX], p[PATH_MAX + 300], real[PATH_MAX], bdf[32];
  DIR *dh;
  struct dirent *e;

  snprintf (dir, sizeof dir, "%s/class/infiniband", t->sysfs_root);
  if ((dh = opendir (dir)) == NULL)
    return;
  while ((e = readdir (dh)) != NULL && t->nrdma < GM_TOPO_MAX_RDMA) {
    struct gm_rdma_dev *r = &t->rdma[t->nrdma];
    if (e->d_name[0] == '.')
      continue;
    memset (r, 0, sizeof *r);
    snprintf (r->name, sizeof r->name, "%.63s", e->d_name);
    r->fn = -1;
    snprintf (p, sizeof p, "%s/%s/device", dir, e->d_name);
    if (realpath (p, real) && last_bdf (real, bdf, sizeof bdf))
      r->fn = gm_topology_find (t, bdf);
    snprintf (p, sizeof p, "%s/%s/parent", dir, e->d_name);
    read_line (p, r->netdev, sizeof r->netdev);
    t->nrdma++;
  }
  closedir (dh);
}

/* Does the running kernel have CONFIG_PCI_P2PDMA?  A published p2pmem
 * proves it; otherwise the kernel's config file may say.
 */
static const char *
p2pdma_kernel (const struct gm_topology *t)
{
  struct utsname u;
  char path[400], line[256];
  FILE *f;
  const char *answer = "unknown";

  for (size_t i = 0; i < t->nfn; i++)
    if (t->fn[i].p2pmem)
      return "yes";
  if (strcmp (t->sysfs_root, "/sys") != 0 || uname (&u) == -1)
    return "unknown";
  snprintf (path, sizeof path, "/boot/config-%s", u.release);
  if ((f = fopen (path, "r")) == NULL)
    return "unknown";
  while (fgets (line, sizeof line, f)) {
    if (strncmp (line, "CONFIG_PCI_P2PDMA=y", 19) == 0)
      answer = "yes";
    else if (strncmp (line, "# CONFIG_PCI_P2PDMA is not set", 30) == 0)
      answer = "no";
  }
  fclose (f);
  return answer;
}

int
gm_topology_scan (struct gm_topology *t, const char *pci_path,
                  const char *file, char *err, size_t errlen)
{
  size_t len, tail = strlen ("/bus/pci");

  memset (t, 0, sizeof *t);
  if (pci_path == NULL)
    pci_path = GM_TOPO_DEFAULT_SYSFS;
  /* Every path below is built from these two: a cut one would read
   * another tree (or none) without saying so.
   */
  if (strlen (pci_path) >= sizeof t->sysfs_root + tail) {
    snprintf (err, errlen, "sysfs.path=%.200s...: too long (at most %zu "
              "characters)", pci_path, sizeof t->sysfs_root + tail - 1);
    return -1;
  }
  snprintf (t->pci_path, sizeof t->pci_path, "%s", pci_path);
  len = strlen (t->pci_path);
  while (len > 1 && t->pci_path[len - 1] == '/')
    t->pci_path[--len] = '\0';
  if (len < tail || strcmp (t->pci_path + len - tail, "/bus/pci") != 0) {
    snprintf (err, errlen, "sysfs.path=%s: expected the bus/pci folder of a "
              "sysfs tree, like libpci's default %s", t->pci_path,
              GM_TOPO_DEFAULT_SYSFS);
    return -1;
  }
  snprintf (t->sysfs_root, sizeof t->sysfs_root, "%.*s",
            (int) (len - tail), t->pci_path);
  if (*t->sysfs_root == '\0')
    strcpy (t->sysfs_root, "/");
  snprintf (err, errlen, "%s/devices", t->pci_path);
  if (!exists (err)) {
    snprintf (err, errlen, "sysfs.path=%s: there is no devices folder in it",
              t->pci_path);
    return -1;
  }
  if (scan_pci (t, err, errlen) == -1) {
    gm_topology_free (t);
    return -1;
  }
  scan_rdma (t);
  if (file)
    scan_file (t, file);
  t->p2pdma_kernel = p2pdma_kernel (t);
  return 0;
}

void
gm_topology_free (struct gm_topology *t)
{
  free (t->fn);
  free (t->storage);
  t->fn = NULL;
  t->storage = NULL;
  t->nfn = t->nstorage = 0;
}

/* ---- questions about the tree ---- */

int
gm_topology_find (const struct gm_topology *t, const char *bdf)
{
  char full[32];

  /* "BB:DD.F" means domain 0, as lspci prints it. */
  snprintf (full, sizeof full, "%s%s", is_bdf (bdf) ? "" : "0000:", bdf);
  for (size_t i = 0; i < t->nfn; i++)
    if (strcasecmp (t->fn[i].bdf, full) == 0)
      return i;
  return -1;
}

enum gm_path
gm_topology_path (const struct gm_topology *t, int a, int b, int *via)
{
  const struct gm_pci_fn *fa = &t->fn[a], *fb = &t->fn[b];

  *via = -1;
  if (fa->domain == fb->domain && fa->bus == fb->bus && fa->dev == fb->dev)
    return GM_PATH_SAME_DEVICE;
  for (int x = fa->parent; x >= 0; x = t->fn[x].parent)
    for (int y = fb->parent; y >= 0; y = t->fn[y].parent)
      if (x == y) {
        *via = x;
        return t->fn[x].port == GM_PORT_ROOT ? GM_PATH_ROOT_PORT
          : GM_PATH_SWITCH;
      }
  return GM_PATH_HOST_BRIDGE;
}

const char *
gm_path_name (enum gm_path p)
{
  switch (p) {
  case GM_PATH_SAME_DEVICE: return "same-device";
  case GM_PATH_SWITCH: return "switch";
  case GM_PATH_ROOT_PORT: return "root-port";
  case GM_PATH_HOST_BRIDGE: return "host-bridge";
  }
  return "?";
}

bool
gm_path_p2p_ok (enum gm_path p)
{
  return p != GM_PATH_HOST_BRIDGE;
}

int
gm_topology_auto_p2pmem (const struct gm_topology *t, char *why, size_t len)
{
  int best = -1, best_rank = 0;
  uint64_t best_avail = 0;

  *why = '\0';
  if (t->walk_cut) {
    snprintf (why, len, "%.400s", t->storage_note);
    return -1;
  }
  if (t->nstorage == 0) {
    snprintf (why, len, "no PCI storage device found behind the file%s%.400s",
              *t->storage_note ? ": " : "", t->storage_note);
    return -1;
  }
  for (size_t i = 0; i < t->nfn; i++) {
    const struct gm_pci_fn *f = &t->fn[i];
    int rank = 2;               /* 2: all under a switch, 1: same device */
    bool ok = f->p2pmem && f->p2p_available >= GM_DEVMEM_MIN;

    if (!f->p2pmem)
      continue;
    if (f->p2p_available == 0)
      append (why, len, "%s%s has no p2pmem available", *why ? "; " : "",
              f->bdf);
    else if (!ok)
      append (why, len, "%s%s has only %" PRIu64 " bytes of p2pmem "
              "available (a pool needs %d)", *why ? "; " : "", f->bdf,
              f->p2p_available, GM_DEVMEM_MIN);
    for (size_t s = 0; ok && s < t->nstorage; s++) {
      int via;
      enum gm_path p = gm_topology_path (t, t->storage[s], i, &via);
      if (!gm_path_p2p_ok (p)) {
        append (why, len, "%s%s -> %s crosses the %s", *why ? "; " : "",
                t->fn[t->storage[s]].bdf, f->bdf,
                p == GM_PATH_ROOT_PORT ? "root port (no switch in between)"
                : "host bridge");
        ok = false;
      }
      else if (p == GM_PATH_SAME_DEVICE)
        rank = 1;
    }
    if (ok && (best < 0 || rank < best_rank ||
               (rank == best_rank && f->p2p_available > best_avail))) {
      best = i;
      best_rank = rank;
      best_avail = f->p2p_available;
    }
  }
  if (best < 0 && *why == '\0')
    snprintf (why, len, "no PCI device publishes p2pmem (kernel "
              "CONFIG_PCI_P2PDMA: %s)", t->p2pdma_kernel);
  return best;
}

/* ---- reports ---- */

static const char *
port_name (enum gm_port p)
{
  switch (p) {
  case GM_PORT_ROOT: return "root port";
  case GM_PORT_SWITCH_UP: return "switch upstream port";
  case GM_PORT_SWITCH_DOWN: return "switch downstream port";
  case GM_PORT_BRIDGE: return "bridge";
  default: return "endpoint";
  }
}

static void
print_size (FILE *fp, uint64_t v)
{
  static const char unit[] = "KMGT";
  int u = -1;

  while (v >= 1024 && v % 1024 == 0 && u < 3) {
    v /= 1024;
    u++;
  }
  if (u < 0)
    fprintf (fp, "%" PRIu64, v);
  else
    fprintf (fp, "%" PRIu64 "%c", v, unit[u]);
}

static void
print_upstream (const struct gm_topology *t, FILE *fp, int i)
{
  fprintf (fp, "      upstream:");
  if (t->fn[i].parent < 0)
    fprintf (fp, " root bus");
  for (int x = t->fn[i].parent; x >= 0; x = t->fn[x].parent)
    fprintf (fp, " %s (%s)%s", t->fn[x].bdf, port_name (t->fn[x].port),
             t->fn[x].parent >= 0 ? " <" : " < root bus");
  fputc ('\n', fp);
}

static void
print_bars (const struct gm_pci_fn *f, FILE *fp)
{
  for (int b = 0; b < 6; b++) {
    if (f->bar[b].size == 0 || f->bar[b].io)
      continue;
    fprintf (fp, "      BAR%d: ", b);
    print_size (fp, f->bar[b].size);
    fprintf (fp, " %s%s\n", f->bar[b].mem64 ? "64-bit " : "",
             f->bar[b].prefetch ? "prefetchable" : "non-prefetchable");
  }
}

static void
print_fn (const struct gm_topology *t, FILE *fp, int i)
{
  const struct gm_pci_fn *f = &t->fn[i];

  fprintf (fp, "  %s %s [%04x:%04x]%s%s\n", f->bdf, f->name, f->vendor,
           f->device, *f->driver ? " driver " : "", f->driver);
  print_upstream (t, fp, i);
  print_bars (f, fp);
}

void
gm_topology_print (const struct gm_topology *t, FILE *fp)
{
  char why[512];
  int pick;
  bool any = false;

  fprintf (fp, "gmblock topology (sysfs %s, %zu PCI functions, kernel "
           "P2PDMA: %s)\n", t->sysfs_root, t->nfn, t->p2pdma_kernel);
  if (*t->file) {
    fprintf (fp, "storage behind %s: %s\n", t->file,
             *t->chain ? t->chain : "?");
    for (size_t s = 0; s < t->nstorage; s++)
      print_fn (t, fp, t->storage[s]);
    if (*t->storage_note)
      fprintf (fp, "  note: %s\n", t->storage_note);
  }

  fprintf (fp, "p2pmem providers (buffer=p2pmem:BDF):\n");
  for (size_t i = 0; i < t->nfn; i++) {
    const struct gm_pci_fn *f = &t->fn[i];
    if (!f->p2pmem)
      continue;
    any = true;
    print_fn (t, fp, i);
    fprintf (fp, "      p2pmem: ");
    print_size (fp, f->p2p_size);
    fprintf (fp, ", %" PRIu64 " bytes available, %s\n", f->p2p_available,
             f->p2p_published ? "published" : "not published");
  }
  if (!any)
    fprintf (fp, "  none%s\n", strcmp (t->p2pdma_kernel, "yes") == 0 ? "" :
             ": the kernel needs CONFIG_PCI_P2PDMA=y (Linux 6.2 or later; "
             "Debian 12's 6.1 and the 6.12 backport lack it) and a driver "
             "that publishes device memory (e.g. an NVMe CMB)");

  fprintf (fp, "other device memory (buffer=bar:BDF:N, prefetchable BARs "
           "of 1M or more that neither a driver nor p2pmem owns):\n");
  any = false;
  for (size_t i = 0; i < t->nfn; i++) {
    const struct gm_pci_fn *f = &t->fn[i];
    if (f->port != GM_PORT_ENDPOINT)
      continue;
    for (int b = 0; b < 6; b++)
      if (f->bar[b].prefetch && !f->bar[b].io &&
          f->bar[b].size >= 1024 * 1024 &&
          gm_devmem_bar_taken (f->driver, f->p2pmem, b) == NULL) {
        fprintf (fp, "  %s BAR%d ", f->bdf, b);
        print_size (fp, f->bar[b].size);
        fprintf (fp, " (%s)\n", f->name);
        any = true;
      }
  }
  if (!any)
    fprintf (fp, "  none\n");

  fprintf (fp, "RDMA devices:\n");
  for (size_t r = 0; r < t->nrdma; r++) {
    const struct gm_rdma_dev *d = &t->rdma[r];
    if (d->fn >= 0) {
      fprintf (fp, "  %s on ", d->name);
      print_fn (t, fp, d->fn);
    }
    else
      fprintf (fp, "  %s: software (no PCI function)%s%s\n", d->name,
               *d->netdev ? ", on netdev " : "", d->netdev);
  }
  if (t->nrdma == 0)
    fprintf (fp, "  none\n");

  if (t->nstorage > 0) {
    fprintf (fp, "paths from the storage (P2P DMA needs a common bridge "
             "below the host bridge, a switch or one root port; crossing "
             "the host bridge is refused by most kernels and slow where "
             "allowed):\n");
    for (size_t s = 0; s < t->nstorage; s++)
      for (size_t i = 0; i < t->nfn; i++) {
        int via;
        enum gm_path p;
        bool nic = false;
        for (size_t r = 0; r < t->nrdma; r++)
          nic |= t->rdma[r].fn == (int) i;
        if (!t->fn[i].p2pmem && !nic)
          continue;
        p = gm_topology_path (t, t->storage[s], i, &via);
        fprintf (fp, "  %s -> %s %s: %s%s%s: P2P %s\n",
                 t->fn[t->storage[s]].bdf, nic ? "RDMA NIC" : "p2pmem",
                 t->fn[i].bdf, gm_path_name (p), via >= 0 ? " at " : "",
                 via >= 0 ? t->fn[via].bdf : "",
                 gm_path_p2p_ok (p) ? "allowed" : "refused unless the host "
                 "bridge is whitelisted");
      }
    pick = gm_topology_auto_p2pmem (t, why, sizeof why);
    if (pick >= 0)
      fprintf (fp, "buffer=p2pmem:auto would use %s\n", t->fn[pick].bdf);
    else
      fprintf (fp, "buffer=p2pmem:auto would fail: %s\n", why);
  }
}

void
gm_topology_keys (const struct gm_topology *t, FILE *fp)
{
  char why[512];
  int pick;

  fprintf (fp, "gmblock_topology_sysfs=%s\n", t->sysfs_root);
  fprintf (fp, "gmblock_p2pdma_kernel=%s\n", t->p2pdma_kernel);
  if (*t->file) {
    fprintf (fp, "gmblock_storage_chain=%s\n", t->chain);
    fprintf (fp, "gmblock_storage=");
    for (size_t s = 0; s < t->nstorage; s++)
      fprintf (fp, "%s%s", s ? " " : "", t->fn[t->storage[s]].bdf);
    fputc ('\n', fp);
    if (*t->storage_note)
      fprintf (fp, "gmblock_storage_note=%s\n", t->storage_note);
  }
  fprintf (fp, "gmblock_p2pmem=");
  for (size_t i = 0, n = 0; i < t->nfn; i++)
    if (t->fn[i].p2pmem)
      fprintf (fp, "%s%s:%" PRIu64 ":%" PRIu64, n++ ? " " : "", t->fn[i].bdf,
               t->fn[i].p2p_size, t->fn[i].p2p_available);
  fputc ('\n', fp);
  fprintf (fp, "gmblock_rdma=");
  for (size_t r = 0; r < t->nrdma; r++)
    fprintf (fp, "%s%s@%s", r ? " " : "", t->rdma[r].name,
             t->rdma[r].fn >= 0 ? t->fn[t->rdma[r].fn].bdf :
             *t->rdma[r].netdev ? t->rdma[r].netdev : "software");
  fputc ('\n', fp);
  for (size_t s = 0; s < t->nstorage; s++)
    for (size_t i = 0; i < t->nfn; i++) {
      bool nic = false;
      int via;
      enum gm_path p;
      for (size_t r = 0; r < t->nrdma; r++)
        nic |= t->rdma[r].fn == (int) i;
      if (!t->fn[i].p2pmem && !nic)
        continue;
      p = gm_topology_path (t, t->storage[s], i, &via);
      fprintf (fp, "gmblock_path_%s_%s=%s%s%s\n", t->fn[t->storage[s]].bdf,
               t->fn[i].bdf, gm_path_name (p), via >= 0 ? "@" : "",
               via >= 0 ? t->fn[via].bdf : "");
    }
  if (*t->file) {
    pick = gm_topology_auto_p2pmem (t, why, sizeof why);
    fprintf (fp, "gmblock_buffer_auto=%s\n",
             pick >= 0 ? t->fn[pick].bdf : "none");
  }
}

/* "0000:03:00.0 -> 0000:04:00.0: host-bridge" for each storage
 * function, to say why the kernel refused.
 */
static void
describe_paths (const struct gm_topology *t, const char *bdf, char *buf,
                size_t len)
{
  int p = gm_topology_find (t, bdf);
  size_t used = 0;

  *buf = '\0';
  if (p < 0)
    return;
  for (size_t s = 0; s < t->nstorage && used + 1 < len; s++) {
    int via, n;
    enum gm_path path = gm_topology_path (t, t->storage[s], p, &via);
    n = snprintf (buf + used, len - used, "%s%s -> %s: %s%s%s",
                  used ? "; " : " (path ", t->fn[t->storage[s]].bdf, bdf,
                  gm_path_name (path), via >= 0 ? " at " : "",
                  via >= 0 ? t->fn[via].bdf : "");
    if (n < 0)
      break;
    used += n;
  }
  if (used && used + 2 < len)
    strcat (buf, ")");
}

int
gm_topology_p2pmem_for (const char *pci_path, const char *file,
                        const char *bdf, const char *opt,
                        char *bdf_out, size_t bdflen,
                        char *paths, size_t pathslen,
                        char *err, size_t errlen)
{
  struct gm_topology t;
  char why[512];

  if (gm_topology_scan (&t, pci_path, file, why, sizeof why) == -1) {
    snprintf (err, errlen, "%s=p2pmem:%s: cannot read the PCI topology: %s",
              opt, *bdf ? bdf : "auto", why);
    return -1;
  }
  snprintf (bdf_out, bdflen, "%s", bdf);
  if (*bdf == '\0') {
    int pick = gm_topology_auto_p2pmem (&t, why, sizeof why);
    if (pick < 0) {
      snprintf (err, errlen, "%s=p2pmem:auto: no p2pmem provider can take "
                "DMA from %s: %s%s", opt, file, why,
                strcmp (t.p2pdma_kernel, "yes") == 0 ? "" :
                ". The kernel must be built with CONFIG_PCI_P2PDMA=y "
                "(Linux 6.2 or later; Debian 12's 6.1 and its 6.12 "
                "backport are not) and a driver must publish device "
                "memory (e.g. an NVMe controller memory buffer)");
      gm_topology_free (&t);
      return -1;
    }
    snprintf (bdf_out, bdflen, "%s", t.fn[pick].bdf);
  }
  describe_paths (&t, bdf_out, paths, pathslen);
  gm_topology_free (&t);
  return 0;
}

/* "DDDD:BB:DD.F" or "BB:DD.F" into lower-case "DDDD:BB:DD.F". */
int
gm_parse_bdf (const char *s, size_t len, char *out, size_t outlen)
{
  unsigned d = 0, b, dv, f;
  char tmp[32];
  int n = 0;

  if (len == 0 || len >= sizeof tmp)
    return -1;
  memcpy (tmp, s, len);
  tmp[len] = '\0';
  /* Field widths: no digits beyond what a field holds (an unbounded %x
   * would read "100000000" into an unsigned and wrap it to 0).
   */
  /* Domains past ffff exist (Intel VMD puts its disks in 10000 and up). */
  if (sscanf (tmp, "%5x:%2x:%2x.%1x%n", &d, &b, &dv, &f, &n) == 4 &&
      tmp[n] == '\0')
    ;
  else if (d = 0, n = 0,
           sscanf (tmp, "%2x:%2x.%1x%n", &b, &dv, &f, &n) == 3 &&
           tmp[n] == '\0')
    ;
  else
    return -1;
  if (d > 0xfffff || b > 0xff || dv > 0x1f || f > 7)
    return -1;
  for (char *c = tmp; *c; c++)
    if (!isxdigit (*c) && *c != ':' && *c != '.')
      return -1;
  snprintf (out, outlen, "%04x:%02x:%02x.%x", d, b, dv, f);
  return 0;
}


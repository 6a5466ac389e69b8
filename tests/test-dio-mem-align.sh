#!/bin/bash
# A disk whose DMA alignment is larger than its offset alignment
# (statx: dio_offset_align 512, dio_mem_align 4096; a ublk device can
# say so, as can any driver whose queue dma_alignment exceeds its
# logical block).  gmblock accepted such a file and used 512-byte
# blocks; the read-modify-write of an unaligned write read the partial
# last block into the pool buffer at a 512-byte multiple, an address
# such a disk refuses (EINVAL): a 2-byte write across a 512-byte
# boundary failed.  A preloaded shim makes the test file look so:
# statx reports dio_mem_align 4096, and preadv2/pwritev2 (ring=none:
# the plugin calls them itself) fail with EINVAL on an O_DIRECT
# descriptor whose buffer does not start on 4096.
. "$(dirname "$0")/functions.sh"
require gcc cmp
cd "$T"

cat >memalign.c <<'SHIM'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/stat.h>

#define MEM_ALIGN 4096

long
syscall (long n, ...)
{
  static long (*real) (long, ...);
  long a[5], r;
  va_list ap;

  va_start (ap, n);
  for (int i = 0; i < 5; i++)
    a[i] = va_arg (ap, long);
  va_end (ap);
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "syscall");
  r = real (n, a[0], a[1], a[2], a[3], a[4]);
  if (n == SYS_statx && r == 0) {
    struct statx *stx = (struct statx *) a[4];
    if ((stx->stx_mask & STATX_DIOALIGN) && stx->stx_dio_mem_align < MEM_ALIGN) {
      FILE *fp = fopen (getenv ("STATX_LOG"), "a");
      if (fp) {
        fprintf (fp, "dio_mem_align %u -> %d\n", stx->stx_dio_mem_align,
                 MEM_ALIGN);
        fclose (fp);
      }
      stx->stx_dio_mem_align = MEM_ALIGN;
    }
  }
  return r;
}

static int
refuse (int fd, const struct iovec *iov, int n)
{
  int fl = fcntl (fd, F_GETFL);
  for (int i = 0; i < n; i++)
    if (fl != -1 && (fl & O_DIRECT) &&
        (uintptr_t) iov[i].iov_base % MEM_ALIGN != 0) {
      FILE *fp = fopen (getenv ("MEMALIGN_LOG"), "a");
      if (fp) {
        fprintf (fp, "misaligned buffer %p\n", iov[i].iov_base);
        fclose (fp);
      }
      errno = EINVAL;
      return -1;
    }
  return 0;
}

ssize_t
preadv2 (int fd, const struct iovec *iov, int n, off_t off, int flags)
{
  static ssize_t (*real) (int, const struct iovec *, int, off_t, int);
  if (refuse (fd, iov, n))
    return -1;
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "preadv2");
  return real (fd, iov, n, off, flags);
}

ssize_t
pwritev2 (int fd, const struct iovec *iov, int n, off_t off, int flags)
{
  static ssize_t (*real) (int, const struct iovec *, int, off_t, int);
  if (refuse (fd, iov, n))
    return -1;
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "pwritev2");
  return real (fd, iov, n, off, flags);
}
SHIM
gcc -shared -fPIC -O2 -o memalign.so memalign.c -ldl

randfile "$T/disk.img" 1M
cp disk.img expect.img
STATX_LOG=$T/statx.log MEMALIGN_LOG=$T/memalign.log LD_PRELOAD=$T/memalign.so \
    start_server m gmblock file="$T/disk.img" ring=none stats="$T/m.stats"
timeout 60 /usr/bin/python3 - "$(uri m)" "$T/expect.img" <<'PY' || fail "unaligned writes failed or read back wrong"
import nbd, os, sys
h = nbd.NBD()
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
h.connect_uri(sys.argv[1])
exp = bytearray(open(sys.argv[2], "rb").read())
# Across 512-byte boundaries inside and across 4K pages, and a long
# one whose last partial block is not at a 4K multiple of its start.
for off, n in [(1023, 2), (511, 1), (4095, 2), (700, 5000), (8192 + 3, 70000),
               (65536 - 1, 513), (123457, 1)]:
    d = os.urandom(n)
    try:
        h.pwrite(d, off)
    except nbd.Error as e:
        sys.exit(f"write of {n} bytes at {off} failed: {e}")
    exp[off:off + n] = d
    if h.pread(n, off) != d:
        sys.exit(f"write of {n} bytes at {off} reads back wrong")
h.flush()
if h.pread(len(exp), 0) != bytes(exp):
    sys.exit("the export differs from what was written")
open(sys.argv[2], "wb").write(exp)
PY
stop_server m
[[ -s $T/memalign.log ]] && { cat "$T/memalign.log" >&2; fail "O_DIRECT with a misaligned buffer"; }
cmp disk.img expect.img || fail "the file differs from what was written"
# The shim must have been in effect, or nothing was tested.
[[ -s $T/statx.log ]] || fail "statx was not rewritten (shim not preloaded?): no test"
[[ $(counter "$T/m.stats" rmw_bytes) -gt 0 ]] || fail "no read-modify-write: no test"
info "ok: unaligned writes on a disk with 4096-byte DMA alignment and 512-byte blocks"

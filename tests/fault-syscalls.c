/* gmblock tests: a preloaded shim that makes the plugin's system calls
 * fail or wait, for tests that need a disk to misbehave on cue without
 * root (ring=none: the plugin makes these calls itself).  A test builds
 * it with
 *     gcc -shared -fPIC -O2 -o fault-syscalls.so tests/fault-syscalls.c -ldl
 * and serves with LD_PRELOAD=.../fault-syscalls.so FAULT_DIR=DIR.  Each
 * fault is on while its file exists in DIR (create and remove it as the
 * test goes):
 *   fdatasync-eio   fdatasync fails with EIO
 *   fdatasync-slow  fdatasync returns 1 s after it is done
 *   fdatasync-lost  the next fdatasync takes the file away and fails
 *                   with EIO 1 s later; the ones after it succeed, as
 *                   Linux reports a lost write-back once per open file
 *   dsync-eio       a pwritev2 with RWF_DSYNC waits 1 s (or as many
 *                   seconds as the file holds), then fails with EIO
 *                   without writing; "write OFF LEN dsync waiting" is
 *                   logged as the wait begins
 *   dsync-enospc    a pwritev2 with RWF_DSYNC fails with ENOSPC without
 *                   writing (its own failure, or a lost write-back that
 *                   was not EIO: the plugin must ask its second
 *                   descriptor)
 *   pwrite-eio      holds "LO HI": a pwritev2 touching [LO, HI) fails
 *                   with EIO without writing
 *   pread-slow      holds "LO HI": a preadv2 touching [LO, HI) returns
 *                   1 s after it is done
 *   pread-eio       holds "LO HI": a preadv2 touching [LO, HI) fails
 *                   with EIO
 *   fallocate-eio   fallocate fails with EIO
 *   seek-data-eio   lseek with SEEK_DATA fails with EIO
 *   seek-hole-eio   lseek with SEEK_HOLE fails with EIO
 *   blkdiscard-eio  ioctl BLKDISCARD fails with EIO
 *   blkdiscard-eopnotsupp  ioctl BLKDISCARD fails with EOPNOTSUPP
 *   pread-efault    pread (not preadv2) on an O_DIRECT descriptor fails
 *                   with EFAULT, as a DMA into memory the disk cannot
 *                   reach does (the plugin's probe of buffer=bar)
 *   mem-align-4096  the disk needs 4096-byte aligned memory for O_DIRECT
 *                   (a ublk device, or any whose queue dma_alignment
 *                   exceeds its logical block): statx reports
 *                   dio_mem_align 4096, and preadv2/pwritev2 on an
 *                   O_DIRECT descriptor fail with EINVAL when a buffer
 *                   does not start on 4096
 *   rw-short        a preadv2/pwritev2 of 8K or more (one iovec) moves
 *                   only its first half, rounded down to 4K, and
 *                   returns that count, as the kernel may
 *   rw-eintr        every other preadv2/pwritev2 fails with EINTR
 *                   before doing anything
 *   write-zero      a pwritev2 writes nothing and returns 0
 *   dio-none        statx reports dio_offset_align 0: the filesystem
 *                   does not do O_DIRECT (though the open succeeded)
 *   dio-offset-128k statx reports dio_offset_align 131072, more than
 *                   the plugin takes
 * Every call of these (on a descriptor of the served file or not) is
 * logged to DIR/log as it returns: "fdatasync", "write OFF LEN" with
 * " dsync" for RWF_DSYNC, "read OFF LEN", "fallocate MODE OFF LEN",
 * "pread OFF LEN", "seek data|hole OFF" (lseek's SEEK_DATA and
 * SEEK_HOLE only), "blkdiscard OFF LEN", and
 * "EIO"/"ENOSPC"/"EOPNOTSUPP"/"EFAULT"/"slow"/"EINTR"/"zero"/"short N"
 * after what was injected;
 * "statx dio_mem_align N -> 4096" and "misaligned read|write OFF LEN
 * EINVAL" for mem-align-4096, "statx dio_offset_align N -> M" for
 * dio-none and dio-offset-128k.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/fs.h>
#include <linux/stat.h>

#define MEM_ALIGN 4096

static const char *
path (const char *name, char *buf, size_t len)
{
  const char *dir = getenv ("FAULT_DIR");

  if (dir == NULL)
    return NULL;
  snprintf (buf, len, "%s/%s", dir, name);
  return buf;
}

static int
on (const char *name)
{
  char p[4096];

  return path (name, p, sizeof p) && access (p, F_OK) == 0;
}

/* Whether file NAME existed, removing it: one caller wins. */
static int
take (const char *name)
{
  char p[4096];

  return path (name, p, sizeof p) && unlink (p) == 0;
}

/* The number file NAME holds, or dflt. */
static long
number_in (const char *name, long dflt)
{
  char p[4096];
  long n;
  FILE *fp;

  if (path (name, p, sizeof p) == NULL || (fp = fopen (p, "r")) == NULL)
    return dflt;
  if (fscanf (fp, "%ld", &n) != 1)
    n = dflt;
  fclose (fp);
  return n;
}

/* Whether [off, off+len) touches the range in file NAME. */
static int
touches (const char *name, off_t off, size_t len)
{
  char p[4096];
  long long lo, hi;
  FILE *fp;
  int n;

  if (path (name, p, sizeof p) == NULL || (fp = fopen (p, "r")) == NULL)
    return 0;
  n = fscanf (fp, "%lld %lld", &lo, &hi);
  fclose (fp);
  return n == 2 && off < hi && off + (long long) len > lo;
}

static void
say (const char *fmt, ...)
{
  char p[4096];
  va_list ap;
  FILE *fp;
  int saved = errno;

  if (path ("log", p, sizeof p) && (fp = fopen (p, "a")) != NULL) {
    va_start (ap, fmt);
    vfprintf (fp, fmt, ap);
    va_end (ap);
    fputc ('\n', fp);
    fclose (fp);
  }
  errno = saved;
}

static size_t
total (const struct iovec *iov, int n)
{
  size_t t = 0;

  for (int i = 0; i < n; i++)
    t += iov[i].iov_len;
  return t;
}

/* mem-align-4096: whether the disk refuses this O_DIRECT transfer. */
static int
misaligned (int fd, const struct iovec *iov, int n)
{
  int fl;

  if (!on ("mem-align-4096") || (fl = fcntl (fd, F_GETFL)) == -1 ||
      !(fl & O_DIRECT))
    return 0;
  for (int i = 0; i < n; i++)
    if ((uintptr_t) iov[i].iov_base % MEM_ALIGN != 0)
      return 1;
  return 0;
}

/* The plugin asks statx through syscall(2) (glibc's statx may lack the
 * DIOALIGN fields); six arguments forwarded, the most any call takes. */
long
syscall (long nr, ...)
{
  static long (*real) (long, ...);
  long a[6], r;
  va_list ap;

  va_start (ap, nr);
  for (int i = 0; i < 6; i++)
    a[i] = va_arg (ap, long);
  va_end (ap);
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "syscall");
  r = real (nr, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (nr == SYS_statx && r == 0) {
    struct statx *stx = (struct statx *) a[4];
    bool dio = stx->stx_mask & STATX_DIOALIGN;

    if (dio && on ("mem-align-4096") && stx->stx_dio_mem_align < MEM_ALIGN) {
      say ("statx dio_mem_align %u -> %d", stx->stx_dio_mem_align, MEM_ALIGN);
      stx->stx_dio_mem_align = MEM_ALIGN;
    }
    if (dio && (on ("dio-none") || on ("dio-offset-128k"))) {
      unsigned to = on ("dio-none") ? 0 : 131072;
      say ("statx dio_offset_align %u -> %u", stx->stx_dio_offset_align, to);
      stx->stx_dio_offset_align = to;
    }
  }
  return r;
}

int
fdatasync (int fd)
{
  static int (*real) (int);
  int r;

  if (on ("fdatasync-eio")) {
    say ("fdatasync EIO");
    errno = EIO;
    return -1;
  }
  if (take ("fdatasync-lost")) {
    sleep (1);
    say ("fdatasync EIO lost");
    errno = EIO;
    return -1;
  }
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "fdatasync");
  r = real (fd);
  if (on ("fdatasync-slow")) {
    sleep (1);
    say ("fdatasync slow");
  }
  else
    say ("fdatasync");
  return r;
}

/* rw-eintr: whether this call is one of every other one to fail. */
static int
eintr_now (void)
{
  static _Atomic unsigned calls;

  return on ("rw-eintr") && calls++ % 2 == 0;
}

/* rw-short: the length to move of a one-iovec transfer of len bytes,
 * or len. */
static size_t
short_len (int n, size_t len)
{
  size_t half = len / 2 / 4096 * 4096;   /* O_DIRECT: whole 4K */

  if (n != 1 || half == 0 || !on ("rw-short"))
    return len;
  return half;
}

ssize_t
pwritev2 (int fd, const struct iovec *iov, int n, off_t off, int flags)
{
  static ssize_t (*real) (int, const struct iovec *, int, off_t, int);
  size_t len = total (iov, n);
  const char *dsync = flags & RWF_DSYNC ? " dsync" : "";
  ssize_t r;

  if ((flags & RWF_DSYNC) && on ("dsync-eio")) {
    unsigned wait = number_in ("dsync-eio", 1);
    say ("write %jd %zu%s waiting", (intmax_t) off, len, dsync);
    sleep (wait);
    say ("write %jd %zu%s EIO", (intmax_t) off, len, dsync);
    errno = EIO;
    return -1;
  }
  if ((flags & RWF_DSYNC) && on ("dsync-enospc")) {
    say ("write %jd %zu%s ENOSPC", (intmax_t) off, len, dsync);
    errno = ENOSPC;
    return -1;
  }
  if (misaligned (fd, iov, n)) {
    say ("misaligned write %jd %zu EINVAL", (intmax_t) off, len);
    errno = EINVAL;
    return -1;
  }
  if (touches ("pwrite-eio", off, len)) {
    say ("write %jd %zu%s EIO", (intmax_t) off, len, dsync);
    errno = EIO;
    return -1;
  }
  if (eintr_now ()) {
    say ("write %jd %zu%s EINTR", (intmax_t) off, len, dsync);
    errno = EINTR;
    return -1;
  }
  if (on ("write-zero")) {
    say ("write %jd %zu%s zero", (intmax_t) off, len, dsync);
    return 0;
  }
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "pwritev2");
  if (short_len (n, len) < len) {
    struct iovec half = { iov[0].iov_base, short_len (n, len) };
    r = real (fd, &half, 1, off, flags);
    say ("write %jd %zu%s short %zd", (intmax_t) off, len, dsync, r);
    return r;
  }
  r = real (fd, iov, n, off, flags);
  say ("write %jd %zu%s", (intmax_t) off, len, dsync);
  return r;
}

ssize_t
preadv2 (int fd, const struct iovec *iov, int n, off_t off, int flags)
{
  static ssize_t (*real) (int, const struct iovec *, int, off_t, int);
  size_t len = total (iov, n);
  ssize_t r;

  if (misaligned (fd, iov, n)) {
    say ("misaligned read %jd %zu EINVAL", (intmax_t) off, len);
    errno = EINVAL;
    return -1;
  }
  if (touches ("pread-eio", off, len)) {
    say ("read %jd %zu EIO", (intmax_t) off, len);
    errno = EIO;
    return -1;
  }
  if (eintr_now ()) {
    say ("read %jd %zu EINTR", (intmax_t) off, len);
    errno = EINTR;
    return -1;
  }
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "preadv2");
  if (short_len (n, len) < len) {
    struct iovec half = { iov[0].iov_base, short_len (n, len) };
    r = real (fd, &half, 1, off, flags);
    say ("read %jd %zu short %zd", (intmax_t) off, len, r);
    return r;
  }
  r = real (fd, iov, n, off, flags);
  if (touches ("pread-slow", off, len)) {
    sleep (1);
    say ("read %jd %zu slow", (intmax_t) off, len);
  }
  else
    say ("read %jd %zu", (intmax_t) off, len);
  return r;
}

int
fallocate (int fd, int mode, off_t off, off_t len)
{
  static int (*real) (int, int, off_t, off_t);

  if (on ("fallocate-eio")) {
    say ("fallocate %d %jd %jd EIO", mode, (intmax_t) off, (intmax_t) len);
    errno = EIO;
    return -1;
  }
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "fallocate");
  say ("fallocate %d %jd %jd", mode, (intmax_t) off, (intmax_t) len);
  return real (fd, mode, off, len);
}

ssize_t
pread (int fd, void *buf, size_t len, off_t off)
{
  static ssize_t (*real) (int, void *, size_t, off_t);
  int fl = fcntl (fd, F_GETFL);

  if (fl != -1 && (fl & O_DIRECT) && on ("pread-efault")) {
    say ("pread %jd %zu EFAULT", (intmax_t) off, len);
    errno = EFAULT;
    return -1;
  }
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "pread");
  say ("pread %jd %zu", (intmax_t) off, len);
  return real (fd, buf, len, off);
}

off_t
lseek (int fd, off_t off, int whence)
{
  static off_t (*real) (int, off_t, int);
  const char *w = whence == SEEK_DATA ? "data" : "hole";

  if (real == NULL)
    real = dlsym (RTLD_NEXT, "lseek");
  if (whence != SEEK_DATA && whence != SEEK_HOLE)
    return real (fd, off, whence);
  if (on (whence == SEEK_DATA ? "seek-data-eio" : "seek-hole-eio")) {
    say ("seek %s %jd EIO", w, (intmax_t) off);
    errno = EIO;
    return -1;
  }
  say ("seek %s %jd", w, (intmax_t) off);
  return real (fd, off, whence);
}

/* ioctl's third argument, if any, is one pointer or integer: forwarded
 * as a pointer. */
int
ioctl (int fd, unsigned long req, ...)
{
  static int (*real) (int, unsigned long, ...);
  va_list ap;
  void *arg;

  va_start (ap, req);
  arg = va_arg (ap, void *);
  va_end (ap);
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "ioctl");
  if (req == BLKDISCARD) {
    const uint64_t *range = arg;
    int err = on ("blkdiscard-eio") ? EIO
      : on ("blkdiscard-eopnotsupp") ? EOPNOTSUPP : 0;

    if (err) {
      say ("blkdiscard %" PRIu64 " %" PRIu64 " %s", range[0], range[1],
           err == EIO ? "EIO" : "EOPNOTSUPP");
      errno = err;
      return -1;
    }
    say ("blkdiscard %" PRIu64 " %" PRIu64, range[0], range[1]);
  }
  return real (fd, req, arg);
}

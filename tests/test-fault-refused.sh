#!/bin/bash
# The kernel refuses io_uring submissions (ENOMEM, or "not now" a
# thousand times in a row: memory pressure): the requests never ran, so
# gmblock does them with plain preadv2/pwritev2/fdatasync.  A refused
# fsync used to reach gm_datasync as a failed one, which takes it for a
# lost write-back and refuses every write and flush for good
# (fail-stop); ring=shared used to fail a refused read or write with
# ENOMEM (its flushes go through the thread's own ring).  Both engines
# must serve every request and not stop.  A preloaded shim makes
# io_uring_submit_and_wait fail with ENOMEM while a flag file exists
# (and logs each refusal).
. "$(dirname "$0")/functions.sh"
require gcc nbdinfo
cd "$T"

cat >refuse.c <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <liburing.h>

int
io_uring_submit_and_wait (struct io_uring *ring, unsigned wait_nr)
{
  static int (*real) (struct io_uring *, unsigned);
  const char *flag = getenv ("REFUSE_FLAG"), *log = getenv ("REFUSE_LOG");
  FILE *fp;

  if (flag && access (flag, F_OK) == 0) {
    if (log && (fp = fopen (log, "a")) != NULL) {
      fputs ("refused\n", fp);
      fclose (fp);
    }
    return -ENOMEM;
  }
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "io_uring_submit_and_wait");
  return real (ring, wait_nr);
}
EOF
gcc -shared -fPIC -O2 -o refuse.so refuse.c -ldl

truncate -s 4M disk.img
for ring in per_thread shared; do
    rm -f flag refused.log
    REFUSE_FLAG=$T/flag REFUSE_LOG=$T/refused.log LD_PRELOAD=$T/refuse.so \
        start_server "$ring" gmblock file="$T/disk.img" ring=${ring/_/-} stats="$T/$ring.stats"
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$ring")" "$T/flag" "$ring" <<'PY'
import nbd, os, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
a, b, c = os.urandom(65536), os.urandom(65536), os.urandom(65536)
h.pwrite(a, 0)
h.flush()
h.pwrite(b, 65536)                      # acknowledged, not yet synced
open(sys.argv[2], "w").close()          # from now on the kernel refuses
try:
    h.flush()                           # must sync b
except nbd.Error as e:
    print(f"a flush failed while submissions were refused: {e}"); sys.exit(1)
try:
    h.pwrite(c, 131072, nbd.CMD_FLAG_FUA)
    got = h.pread(3 * 65536, 0)
except nbd.Error as e:
    print(f"a request failed while submissions were refused: {e}"); sys.exit(1)
os.unlink(sys.argv[2])
try:
    h.pwrite(c, 131072, nbd.CMD_FLAG_FUA)
    h.flush()
    if h.pread(3 * 65536, 0) != got:
        print("reads differ after the refusals"); sys.exit(1)
except nbd.Error as e:
    print(f"after the refusals the server refuses requests: {e}"); sys.exit(1)
if got != a + b + c:
    print("read back wrong data"); sys.exit(1)
PY
) || fail "ring=$ring: $out"
    stop_server "$ring"
    n=$(wc -l <refused.log 2>/dev/null || echo 0)
    [[ $n -gt 0 ]] || fail "ring=$ring: the shim refused nothing (not preloaded?): no test"
    grep -q "acknowledged data may be lost" "$T/$ring.log" &&
        { cat "$T/$ring.log" >&2; fail "ring=$ring: fail-stop after refused submissions"; }
    info "ring=$ring: $n submissions refused, flushes served, no fail-stop"
done

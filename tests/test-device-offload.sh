#!/bin/bash
# A block device whose queue limits do not fit 32 bits (zram and many
# NVMe drives say discard_max_bytes = write_zeroes_max_bytes = 2 TiB):
# with discard=unmap a trim must reach the device as BLKDISCARD (zram
# frees the pages: its stored size drops), and a fast zero that may not
# punch holes must use the write-zeroes offload, not be refused.  They
# were read as 32-bit values, and 2 TiB became 0, "no offload".
# Reads of several sizes come back right.  zram on Linux 6.18 writes
# whole pages on an O_DIRECT read into a buffer that starts inside a
# page, over the memory beside it: gmblock must never let it read
# straight into nbdkit's buffer then.  Only the sanitizer run can see
# that: glibc never gives nbdkit a 512-aligned 1 MiB buffer, ASan does
# (2K into a page), and the bytes changed are beside the buffer, where
# ASan then finds its heap corrupted (a bad free).
. "$(dirname "$0")/functions.sh"
require strace
[[ -w /sys/class/zram-control/hot_add ]] ||
    skip "no /sys/class/zram-control (zram module not loaded, or not root)"
id=$(cat /sys/class/zram-control/hot_add)
zram=/sys/block/zram$id dev=/dev/zram$id
# The server goes first: a device still open cannot be removed.
trap 'rc=$?; [[ -s $T/s.pid ]] && kill -9 "$(cat "$T/s.pid")" 2>/dev/null && sleep 0.2
      echo 1 >"$zram/reset" 2>/dev/null; echo "$id" >/sys/class/zram-control/hot_remove
      (exit $rc); cleanup' EXIT
echo 16M >"$zram/disksize"
dmax=$(cat "$zram/queue/discard_max_bytes") zmax=$(cat "$zram/queue/write_zeroes_max_bytes")
info "$dev: discard_max_bytes=$dmax write_zeroes_max_bytes=$zmax"
[[ $dmax -gt 4294967295 ]] || info "(this kernel's zram limits fit 32 bits: the check still runs)"
dd if=/dev/urandom of="$dev" bs=1M count=12 oflag=direct status=none
stored () { awk '{ print $1 }' "$zram/mm_stat"; }      # orig_data_size
before=$(stored)

start_traced s ioctl gmblock file="$dev" discard=unmap ring=none
out=$(timeout 60 /usr/bin/python3 - "$(uri s)" "$dev" <<'PY'
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
want = open(sys.argv[2], "rb").read(16 << 20)    # buffered: page-aligned
for size in (4096, 65536, 1 << 20, 4 << 20):
    for off in (8 << 20, (12 << 20) - size):
        if h.pread(size, off) != want[off:off + size]:
            print(f"a read of {size} bytes at {off} differs from the device"); sys.exit(1)
h.trim(8 << 20, 0)
h.flush()
try:
    h.zero(1 << 20, 8 << 20, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE)
    if h.pread(1 << 20, 8 << 20) != bytes(1 << 20):
        print("the fast zero left data"); sys.exit(1)
except nbd.Error as e:
    print(f"fast zero refused: {e}"); sys.exit(1)
PY
) || fail "$out"
after=$(stored)
stop_traced s
grep -q BLKDISCARD "$T/s.strace" || fail "a trim with discard=unmap sent no BLKDISCARD"
[[ $after -lt $before ]] ||
    fail "zram holds as much after the trim as before ($before -> $after bytes)"
info "reads right, trim discarded ($before -> $after bytes stored), fast zero offloaded"

#!/bin/bash
# gmblock-cache: a write that fails below may still have put part of its
# data on the disk (a large write split into pieces, the disk full
# after the first ones).  The cache must then not keep serving its older
# copy of those blocks: reads would change once it is evicted.  The file
# sits on a tmpfs with 384K free; a 1 MiB write over cached blocks fails
# with ENOSPC after writing about 384K, and the next read through the
# cache must equal the file.  In every mode that writes below at once.
. "$(dirname "$0")/functions.sh"
[[ $(id -u) == 0 ]] || skip "needs root (a full tmpfs)"
cd "$T"

for mode in read writethrough adaptive; do
    mkdir "$T/$mode"
    mount -t tmpfs -o size=4M none "$T/$mode" || skip "cannot mount a tmpfs"
    track_mount "$T/$mode"
    truncate -s 2M "$T/$mode/disk.img"
    dd if=/dev/zero of="$T/$mode/fill" bs=4K count=$(((4096 - 384) / 4)) status=none 2>/dev/null || true
    start_server "$mode" --filter=gmblock-cache gmblock file="$T/$mode/disk.img" \
        direct=false cache-mode=$mode cache-block-size=64K cache-stats="$T/$mode.stats"
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$mode")" "$T/$mode/disk.img" <<'PY'
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
M = 1 << 20
for i in range(4):              # cached now (admission may want a second look)
    for off in range(0, M, 65536):
        h.pread(65536, off)
try:
    h.pwrite(b"A" * M, 0)
    print("the write did not fail: the tmpfs was not full"); sys.exit(1)
except nbd.Error as e:
    if e.errnum != 28:
        print(f"the write failed with {e}, not ENOSPC"); sys.exit(1)
disk = open(sys.argv[2], "rb").read(M)
if disk.count(b"A") == 0:
    print("nothing of the failed write reached the disk: no test"); sys.exit(1)
got = h.pread(M, 0)
if got != disk:
    print(f"reads after the failed write differ from the disk: "
          f"{got.count(b'A')} of its bytes read, {disk.count(b'A')} on the disk"); sys.exit(1)
print(f"{disk.count(b'A')} bytes of the failed write on the disk, read back the same")
PY
) || fail "cache-mode=$mode: $out"
    stop_server "$mode"
    hits=$(ccounter "$T/$mode.stats" hits)
    [[ ${hits:-0} -gt 0 ]] || fail "cache-mode=$mode: no cache hits (the blocks were never cached: no test)"
    info "cache-mode=$mode: $out"
done

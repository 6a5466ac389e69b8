#!/bin/bash
# qemu-io writes and pattern reads at unaligned offsets and lengths
# (crossing 512 and 4096 boundaries, the last bytes of an odd-sized
# file), then the whole export and its backing store compared with a
# reference file modified the same way.  On a file, an odd-sized file
# (minimum block 1, so QEMU sends the unaligned requests as they are
# and the plugin does read-modify-write), page-cache mode and loop
# devices with 512- and 4096-byte sectors (where QEMU aligns requests
# to the advertised minimum itself).
. "$(dirname "$0")/functions.sh"
require qemu-io nbdcopy losetup cmp
pattern=$top/tests/data-qemu-io.py

# run NAME BACKING SIZE [plugin options...]
run () {
    local name=$1 backing=$2 size=$3; shift 3
    randfile "$T/ref.img" "$size"
    if [[ -b $backing ]]; then
        dd if="$T/ref.img" of="$backing" bs=1M oflag=direct status=none
    else
        cp "$T/ref.img" "$backing"
    fi
    start_server "$name" gmblock file="$backing" stats="$T/$name.stats" "$@"
    /usr/bin/python3 "$pattern" "$(uri "$name")" "$T/ref.img" 1 ||
        fail "$name: qemu-io patterns failed"
    /usr/bin/python3 "$pattern" "$(uri "$name")" "$T/ref.img" 2 ||
        fail "$name: qemu-io patterns failed (second round)"
    nbdcopy "$(uri "$name")" "$T/out.img"
    cmp "$T/out.img" "$T/ref.img" || fail "$name: export differs from the reference"
    stop_server "$name"
    cmp "$backing" "$T/ref.img" || fail "$name: backing store differs from the reference"
    [[ $(counter "$T/$name.stats" errors) == 0 ]] || fail "$name: errors counted"
    [[ $(counter "$T/$name.stats" pool_in_use) == 0 ]] || fail "$name: pool buffers leaked"
    info "$name: ok (rmw_bytes $(counter "$T/$name.stats" rmw_bytes))"
}

run file "$T/file.img" 16M
run odd "$T/odd.img" 10000001
# The odd-sized file must really have gone through read-modify-write.
[[ $(counter "$T/odd.stats" rmw_bytes) -gt 0 ]] ||
    fail "odd: no read-modify-write counted for unaligned writes"
run pc "$T/pc.img" 10000001 direct=false

truncate -s 16M "$T/l512.img"
loopdev "$T/l512.img" --direct-io=on
run l512 "$LOOP" 16M

truncate -s 16M "$T/l4k.img"
loopdev "$T/l4k.img" --direct-io=on --sector-size 4096
[[ $(blockdev --getss "$LOOP") == 4096 ]] || skip "loop device refused --sector-size 4096"
run l4k "$LOOP" 16M

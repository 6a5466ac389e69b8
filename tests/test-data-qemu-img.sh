#!/bin/bash
# qemu-img compare of the export against its source (and against a
# copy with one byte changed, which must differ), qemu-img convert out
# of and into the export; on a file, an odd-sized file and loop devices
# with 512- and 4096-byte sectors.
. "$(dirname "$0")/functions.sh"
require qemu-img losetup cmp

# flipbyte FILE OFFSET: invert one byte in place.
flipbyte () {
    /usr/bin/python3 -c '
import sys
with open(sys.argv[1], "r+b") as f:
    off = int(sys.argv[2]); f.seek(off); b = f.read(1)
    f.seek(off); f.write(bytes([b[0] ^ 0xff]))' "$1" "$2"
}

# check NAME BACKING SIZE [plugin options...]
check () {
    local name=$1 backing=$2 size=$(($3)); shift 3
    local u rc
    randfile "$T/orig.img" "$size"
    randfile "$T/new.img" "$size"
    if [[ -b $backing ]]; then
        dd if="$T/orig.img" of="$backing" bs=1M oflag=direct status=none
    else
        cp "$T/orig.img" "$backing"
    fi
    start_server "$name" gmblock file="$backing" "$@"
    u=$(uri "$name")

    qemu-img compare -q -f raw -F raw "$T/orig.img" "$u" ||
        fail "$name: qemu-img compare: the export differs from its source"
    # The comparison must be able to fail: change one byte near the end.
    cp "$T/orig.img" "$T/bad.img"
    flipbyte "$T/bad.img" $(($(stat -c %s "$T/orig.img") - 2))
    set +e
    qemu-img compare -q -f raw -F raw "$T/bad.img" "$u"
    rc=$?
    set -e
    [[ $rc == 1 ]] || fail "$name: qemu-img compare did not see a changed byte (exit $rc)"

    # QEMU rounds an export's size up to 512 bytes and reads the tail
    # past the end as zeros: compare the real size, then the padding.
    qemu-img convert -f raw -O raw "$u" "$T/out.img"
    cmp -n "$size" "$T/out.img" "$T/orig.img" ||
        fail "$name: qemu-img convert from the export differs"
    [[ $(stat -c %s "$T/out.img") == $(( (size + 511) / 512 * 512 )) ]] ||
        fail "$name: qemu-img convert wrote $(stat -c %s "$T/out.img") bytes"
    tail -c +$((size + 1)) "$T/out.img" | cmp -s - <(head -c $(( (size + 511) / 512 * 512 - size )) /dev/zero) ||
        fail "$name: qemu-img convert: the padding past the end is not zeros"

    # QEMU writes whole 512-byte sectors, so it can only convert into
    # an export of such a size (nbdkit file fails the same way).
    if (( size % 512 == 0 )); then
        qemu-img convert -n -f raw -O raw "$T/new.img" "$u"
        qemu-img compare -q -f raw -F raw "$T/new.img" "$u" ||
            fail "$name: qemu-img convert into the export: compare differs"
    else
        cp "$T/orig.img" "$T/new.img"
    fi
    stop_server "$name"
    cmp "$backing" "$T/new.img" || fail "$name: backing store differs"
    info "$name: ok"
}

check file "$T/file.img" 32*1048576
check odd "$T/odd.img" 10000001
check pc "$T/pc.img" 10000001 direct=false

truncate -s 32M "$T/l512.img"
loopdev "$T/l512.img" --direct-io=on
check l512 "$LOOP" 32*1048576

truncate -s 32M "$T/l4k.img"
loopdev "$T/l4k.img" --direct-io=on --sector-size 4096
[[ $(blockdev --getss "$LOOP") == 4096 ]] || skip "loop device refused --sector-size 4096"
check l4k "$LOOP" 32*1048576

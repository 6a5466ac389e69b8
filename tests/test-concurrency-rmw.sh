#!/bin/bash
# Concurrency torture: 4 (or 8) connections write interleaved unaligned
# chunks of 1-300 bytes, each writer owning distinct bytes inside shared
# 512- and 4096-byte blocks, 16 requests in flight each, and read their
# chunks back after every pass: a lost read-modify-write update shows as
# a mismatch (see tests/data-torture.py).  On a file, the partial last
# block of an odd-sized file, page-cache mode, a 1 MiB pool, and loop
# devices with 512- and 4096-byte sectors.  Afterwards the backing
# store must equal what the server served.
. "$(dirname "$0")/functions.sh"
require nbdcopy losetup cmp
torture=$top/tests/data-torture.py

# run NAME BACKING SIZE "OFFSET LENGTH [WRITERS [PASSES]]"... -- [plugin options...]
run () {
    local name=$1 backing=$2 size=$3; shift 3
    local ranges=()
    while [[ $1 != -- ]]; do ranges+=("$1"); shift; done
    shift
    randfile "$T/init.img" "$size"
    if [[ -b $backing ]]; then
        dd if="$T/init.img" of="$backing" bs=1M oflag=direct status=none
    else
        cp "$T/init.img" "$backing"
    fi
    start_server "$name" gmblock file="$backing" stats="$T/$name.stats" "$@"
    local r seed=1
    for r in "${ranges[@]}"; do
        # shellcheck disable=SC2086
        set -- $r
        /usr/bin/python3 "$torture" "$(uri "$name")" "$1" "$2" "${3:-4}" "${4:-30}" $seed ||
            fail "$name: concurrent writers lost data ($r)"
        seed=$((seed + 1))
    done
    nbdcopy "$(uri "$name")" "$T/out.img"
    stop_server "$name"
    cmp "$backing" "$T/out.img" || fail "$name: backing store differs from what was served"
    [[ $(counter "$T/$name.stats" errors) == 0 ]] || fail "$name: errors counted"
    [[ $(counter "$T/$name.stats" pool_in_use) == 0 ]] || fail "$name: pool buffers leaked"
    info "$name: ok (rmw_bytes $(counter "$T/$name.stats" rmw_bytes), pool_waits $(counter "$T/$name.stats" pool_waits))"
}

run file "$T/file.img" 8M "$((1048576 - 99)) 65536 4 15" "5000 32768 8 15" --
run odd "$T/odd.img" 10000001 "-20000 20000" "-3000 3000 8 20" --
run pc "$T/pc.img" 8M "$((1048576 - 99)) 65536 4 15" -- direct=false
run smallpool "$T/sp.img" 8M "$((1048576 - 99)) 65536 4 15" -- pool-size=1M

truncate -s 8M "$T/l512.img"
loopdev "$T/l512.img" --direct-io=on
run l512 "$LOOP" 8M "$((1048576 - 99)) 65536 4 15" "-10000 10000 8 15" --

truncate -s 8M "$T/l4k.img"
loopdev "$T/l4k.img" --direct-io=on --sector-size 4096
[[ $(blockdev --getss "$LOOP") == 4096 ]] || skip "loop device refused --sector-size 4096"
run l4k "$LOOP" 8M "$((1048576 - 99)) 65536 4 15" "77 16384 8 20" "-12288 12288" --

#!/bin/bash
# Every ring design (ring=per-thread|shared|none) serves the same data
# correctly under concurrent load: nbdcopy round trips over 4
# connections, then fio with 4 jobs writing and verifying crc32c.
. "$(dirname "$0")/functions.sh"
require nbdcopy fio
cd "$T"                         # fio writes state files into the cwd

randfile "$T/orig.img" 32M
randfile "$T/new.img" 32M
for ring in per-thread shared none; do
    info "ring=$ring"
    cp "$T/orig.img" "$T/disk.img"
    s=r_${ring//-/_}            # server names must be shell identifiers
    start_server "$s" gmblock file="$T/disk.img" ring="$ring" stats="$T/$ring.stats"
    nbdcopy --connections=4 "$(uri "$s")" "$T/out.img"
    cmp "$T/out.img" "$T/orig.img" || fail "ring=$ring: read back differs"
    nbdcopy --connections=4 "$T/new.img" "$(uri "$s")"
    fio --name=v --ioengine=nbd --uri="$(uri "$s")" --rw=randwrite \
        --bs=4k --size=4M --offset=16M --numjobs=4 --offset_increment=4M \
        --iodepth=8 --verify=crc32c --do_verify=1 --group_reporting --verify_state_save=0 \
        >"$T/fio-$ring.log" 2>&1 || { cat "$T/fio-$ring.log"; fail "ring=$ring: fio verify failed"; }
    stop_server "$s"
    cmp -n 16M "$T/disk.img" "$T/new.img" || fail "ring=$ring: written data differs"
    [[ $(counter "$T/$ring.stats" pool_in_use) == 0 ]] || fail "ring=$ring: pool buffers leaked"
    [[ $(counter "$T/$ring.stats" errors) == 0 ]] || fail "ring=$ring: errors counted"
done

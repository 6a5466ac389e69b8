#!/bin/bash
# Counters after a read-only workload (nbdcopy, then unaligned and
# aligned reads through libnbd, every byte compared with the source):
# direct mode copies each served byte exactly once (pool -> nbdkit's
# buffer: read_copies_per_byte 1.000), returns every pool buffer
# (pool_in_use 0) and counts exactly the bytes served; page-cache mode
# copies nothing itself (memcpy_read_bytes 0).  On a file and on a loop
# device with 4096-byte sectors.
. "$(dirname "$0")/functions.sh"
require nbdcopy losetup cmp

randfile "$T/orig.img" 32M

# workload NAME: reads the whole export twice plus some odd pieces;
# prints the number of bytes the client asked for.
workload () {
    local u total
    u=$(uri "$1")
    nbdcopy "$u" "$T/out.img"
    cmp "$T/out.img" "$T/orig.img" || fail "$1: nbdcopy read differs"
    nbdcopy --connections=4 --request-size=1048576 "$u" - | cmp - "$T/orig.img" ||
        fail "$1: nbdcopy read (4 connections) differs"
    total=$(REF=$T/orig.img nbdsh -u "$u" -c '
import os, random, sys
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
ref = open(os.environ["REF"], "rb").read()
r = random.Random(3)
total = 0
pieces = [(1, 1), (511, 2), (4095, 4098), (100000, 1000000), (len(ref) - 1, 1),
          (0, 4096), (8192, 65536)]
pieces += [(r.randrange(0, len(ref) - 70000), r.randrange(1, 70000)) for _ in range(200)]
for off, n in pieces:
    if h.pread(n, off) != ref[off:off + n]:
        sys.exit(f"read at {off}+{n} differs")
    total += n
print(total)
') || fail "$1: libnbd reads differ"
    echo $(( 2 * $(stat -c %s "$T/orig.img") + total ))
}

# check NAME COUNTER=VALUE...
check () {
    local name=$1 kv k v got; shift
    for kv in "$@"; do
        k=${kv%%=*} v=${kv#*=}
        got=$(counter "$T/$name.stats" "$k")
        [[ $got == "$v" ]] || { cat "$T/$name.stats" >&2; fail "$name: $k is '$got', expected $v"; }
    done
}

direct () {
    local name=$1 backing=$2 want
    start_server "$name" gmblock file="$backing" stats="$T/$name.stats"
    want=$(workload "$name")
    stop_server "$name"
    check "$name" pool_in_use=0 served_bytes="$want" read_bytes="$want" \
        buffered_bytes=0 writes=0 write_bytes=0 memcpy_write_bytes=0 errors=0
    # Every served byte was either copied once from the pool or (when
    # nbdkit's buffer happened to be aligned: rare, allowed) read by
    # DMA straight into it; so copies per byte is 1.000 unless some
    # went straight in, and never more.
    local memcpy client cpb
    memcpy=$(counter "$T/$name.stats" memcpy_read_bytes)
    client=$(counter "$T/$name.stats" dma_client_bytes)
    cpb=$(counter "$T/$name.stats" read_copies_per_byte)
    [[ $((memcpy + client)) == "$want" ]] ||
        fail "$name: memcpy_read_bytes $memcpy + dma_client_bytes $client != served $want"
    if [[ $client == 0 ]]; then
        [[ $cpb == 1.000 ]] || fail "$name: read_copies_per_byte $cpb, expected 1.000"
    else
        info "$name: $client bytes went straight into nbdkit's buffer"
        [[ $cpb == $(awk -v m="$memcpy" -v s="$want" 'BEGIN { printf "%.3f", m / s }') ]] ||
            fail "$name: read_copies_per_byte $cpb does not match the counters"
    fi
    # Pool DMA covers what was served plus what widening added.
    local dma widen
    dma=$(counter "$T/$name.stats" dma_pool_bytes)
    widen=$(counter "$T/$name.stats" widen_bytes)
    [[ $widen -gt 0 ]] || fail "$name: unaligned reads were not widened"
    [[ $dma == $((memcpy + widen)) ]] ||
        fail "$name: dma_pool_bytes $dma != copied $memcpy + widened $widen"
    [[ $(counter "$T/$name.stats" pool_peak) -gt 0 ]] || fail "$name: the pool was never used"
    info "$name: ok ($want bytes served, $widen widened)"
}

pagecache () {
    local name=$1 backing=$2 want
    start_server "$name" gmblock file="$backing" direct=false stats="$T/$name.stats"
    want=$(workload "$name")
    stop_server "$name"
    check "$name" memcpy_read_bytes=0 read_copies_per_byte=0.000 pool_in_use=0 \
        dma_pool_bytes=0 dma_client_bytes=0 served_bytes="$want" \
        buffered_bytes="$want" errors=0
    info "$name: ok ($want bytes served)"
}

cp "$T/orig.img" "$T/file.img"
direct file "$T/file.img"
pagecache pc "$T/file.img"

cp "$T/orig.img" "$T/l4k.img"
loopdev "$T/l4k.img" --direct-io=on --sector-size 4096
[[ $(blockdev --getss "$LOOP") == 4096 ]] || skip "loop device refused --sector-size 4096"
direct l4k "$LOOP"
pagecache l4kpc "$LOOP"

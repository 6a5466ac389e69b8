#!/bin/bash
# nbdcopy round trips, compared byte for byte: read the export out and
# write new data (random, with a hole that nbdcopy sends as zero
# requests) into it, with one and four connections and several request
# sizes; on a file, an odd-sized file, page-cache mode, and loop block
# devices with 512- and 4096-byte sectors.  The written data is checked
# both through the server and in the backing store after it stopped.
. "$(dirname "$0")/functions.sh"
require nbdcopy losetup cmp

size=16M
randfile "$T/orig.img" "$size"
randfile "$T/odd-orig.img" 10000001

# New data to write: random, with a hole (4M+1000 .. 8M+1000 rounded by
# the filesystem to whole blocks; whatever it is, the file reads back
# as the reference).
mknew () {
    randfile "$1" "$2"
    fallocate -p -o $((4 * 1048576 + 1000)) -l $((4 * 1048576)) "$1"
}
mknew "$T/new.img" "$size"
mknew "$T/odd-new.img" 10000001

# roundtrip NAME BACKING ORIG NEW [plugin options...]
# BACKING (a file or device) already holds ORIG.
roundtrip () {
    local name=$1 backing=$2 orig=$3 new=$4; shift 4
    local u
    start_server "$name" gmblock file="$backing" stats="$T/$name.stats" "$@"
    u=$(uri "$name")

    nbdcopy "$u" "$T/out.img"
    cmp "$T/out.img" "$orig" || fail "$name: read (1 connection) differs"
    nbdcopy --connections=4 --request-size=65536 "$u" "$T/out.img"
    cmp "$T/out.img" "$orig" || fail "$name: read (4 connections, 64K) differs"
    nbdcopy --connections=4 --requests=8 --request-size=4194304 "$u" - | cmp - "$orig" ||
        fail "$name: read (4 connections, 4M, to a pipe) differs"

    nbdcopy --connections=4 --request-size=1048576 --flush "$new" "$u"
    nbdcopy --request-size=131072 "$u" "$T/out.img"
    cmp "$T/out.img" "$new" || fail "$name: written data reads back wrong"
    # And once more the other way round, 1 connection, small requests.
    nbdcopy --connections=1 --request-size=16384 "$orig" "$u"
    nbdcopy --connections=4 "$u" "$T/out.img"
    cmp "$T/out.img" "$orig" || fail "$name: rewritten data reads back wrong"
    nbdcopy --connections=2 "$new" "$u"
    stop_server "$name"
    [[ $(counter "$T/$name.stats" zeros) -gt 0 ]] ||
        fail "$name: nbdcopy sent no zero requests for the hole"
    [[ $(counter "$T/$name.stats" errors) == 0 ]] || fail "$name: errors counted"
    [[ $(counter "$T/$name.stats" pool_in_use) == 0 ]] || fail "$name: pool buffers leaked"

    cmp "$backing" "$new" || fail "$name: backing store differs from what was written"
    info "$name: ok"
}

cp "$T/orig.img" "$T/file.img"
roundtrip file "$T/file.img" "$T/orig.img" "$T/new.img"
cp "$T/odd-orig.img" "$T/odd.img"
roundtrip odd "$T/odd.img" "$T/odd-orig.img" "$T/odd-new.img"
cp "$T/orig.img" "$T/pc.img"
roundtrip pc "$T/pc.img" "$T/orig.img" "$T/new.img" direct=false
cp "$T/odd-orig.img" "$T/pcodd.img"
roundtrip pcodd "$T/pcodd.img" "$T/odd-orig.img" "$T/odd-new.img" direct=false
cp "$T/orig.img" "$T/small-pool.img"
roundtrip smallpool "$T/small-pool.img" "$T/orig.img" "$T/new.img" pool-size=1M

cp "$T/orig.img" "$T/l512.img"
loopdev "$T/l512.img" --direct-io=on
roundtrip l512 "$LOOP" "$T/orig.img" "$T/new.img"
cmp "$T/l512.img" "$T/new.img" || fail "l512: the loop device's backing file differs"

cp "$T/orig.img" "$T/l4k.img"
loopdev "$T/l4k.img" --direct-io=on --sector-size 4096
[[ $(blockdev --getss "$LOOP") == 4096 ]] || skip "loop device refused --sector-size 4096"
roundtrip l4k "$LOOP" "$T/orig.img" "$T/new.img"
cmp "$T/l4k.img" "$T/new.img" || fail "l4k: the loop device's backing file differs"
dd if="$T/orig.img" of="$LOOP" bs=1M oflag=direct status=none
roundtrip l4kpc "$LOOP" "$T/orig.img" "$T/new.img" direct=false

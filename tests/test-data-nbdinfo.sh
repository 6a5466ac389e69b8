#!/bin/bash
# nbdinfo sees the right size, block sizes and flags for a file, an
# odd-sized file, page-cache mode, a read-only export and loop block
# devices with 512- and 4096-byte sectors.
. "$(dirname "$0")/functions.sh"
require nbdinfo losetup
check=$top/tests/data-info-check.py

# expect NAME KEY=VALUE...: the export of server NAME matches.
expect () {
    local name=$1; shift
    nbdinfo --json "$(uri "$name")" >"$T/$name.json" ||
        fail "nbdinfo on $name failed"
    /usr/bin/python3 "$check" "$@" <"$T/$name.json" ||
        fail "server $name: nbdinfo shows unexpected values"
    info "$name: ok"
}

rw="is_read_only=false can_fua=true can_multi_conn=true can_trim=true
    can_zero=true can_fast_zero=true can_flush=true"

# The logical block size of the device under $T: what O_DIRECT on a
# file there needs (ext4 reports it through statx STATX_DIOALIGN).
dev=$(stat -c '%Hd:%Ld' "$T")
lbs=$(cat "/sys/dev/block/$dev/queue/logical_block_size" 2>/dev/null ||
      cat "/sys/dev/block/$dev/../queue/logical_block_size" 2>/dev/null ||
      echo 512)

# A file.
truncate -s 16M "$T/file.img"
start_server file gmblock file="$T/file.img"
expect file export-size=16777216 block_size_minimum="$lbs" \
    block_size_maximum=33554432 $rw can_cache=false

# A file whose size is not a multiple of any block: minimum 1.
truncate -s 10000001 "$T/odd.img"
start_server odd gmblock file="$T/odd.img"
expect odd export-size=10000001 block_size_minimum=1 $rw can_cache=false

# Page-cache mode: no alignment, and cache is native.
start_server pc gmblock file="$T/file.img" direct=false
expect pc export-size=16777216 block_size_minimum=1 $rw can_cache=true
start_server pcodd gmblock file="$T/odd.img" direct=false
expect pcodd export-size=10000001 block_size_minimum=1 $rw can_cache=true

# Read-only export (-r): no writes, trims or zeros offered.
start_server ro -r gmblock file="$T/file.img"
expect ro export-size=16777216 is_read_only=true can_trim=false \
    can_zero=false can_cache=false

# Loop block devices (O_DIRECT loop over a file), 512 and 4096 sectors.
truncate -s 32M "$T/l512.img" "$T/l4k.img"
loopdev "$T/l512.img" --direct-io=on
l512=$LOOP
loopdev "$T/l4k.img" --direct-io=on --sector-size 4096
l4k=$LOOP
[[ $(blockdev --getss "$l4k") == 4096 ]] || skip "loop device refused --sector-size 4096"

start_server l512 gmblock file="$l512"
expect l512 export-size=33554432 block_size_minimum=512 $rw can_cache=false
start_server l4k gmblock file="$l4k"
expect l4k export-size=33554432 block_size_minimum=4096 \
    block_size_preferred=4096 $rw can_cache=false
start_server l4kpc gmblock file="$l4k" direct=false
expect l4kpc export-size=33554432 $rw can_cache=true

#!/bin/bash
# nbdsh (libnbd's python) scripts for flush, FUA writes, trim, zero
# (may-trim, NO_HOLE, FUA, unaligned edges), fast zero and extents,
# every result compared byte for byte with a model of the export, on a
# file, an odd-sized file, page-cache mode, a file on tmpfs (no
# ZERO_RANGE: FAST_ZERO|NO_HOLE must fail with ENOTSUP), discard=ignore,
# and loop devices with 512- and 4096-byte sectors (trim advisory; one
# 512 bytes past its last whole 4K block serves the whole blocks).
# Then base:allocation on a sparse file shows its holes exactly.
. "$(dirname "$0")/functions.sh"
require losetup cmp
ops=$top/tests/data-ops.py

# run NAME BACKING SIZE EXPECTATIONS -- [plugin options...]
run () {
    local name=$1 backing=$2 size=$3 expect=$4; shift 4
    randfile "$T/init.img" "$size"
    if [[ -b $backing ]]; then
        dd if="$T/init.img" of="$backing" bs=1M oflag=direct status=none
    else
        cp "$T/init.img" "$backing"
    fi
    start_server "$name" gmblock file="$backing" stats="$T/$name.stats" "$@"
    # shellcheck disable=SC2086
    /usr/bin/python3 "$ops" "$(uri "$name")" "$T/model.img" $expect ||
        fail "$name: operations gave wrong results"
    stop_server "$name"
    # (-n: a device may end inside a block it cannot read.)
    cmp -n "$(stat -c %s "$T/model.img")" "$backing" "$T/model.img" ||
        fail "$name: backing store differs from the model"
    [[ $(counter "$T/$name.stats" pool_in_use) == 0 ]] || fail "$name: pool buffers leaked"
    [[ $(counter "$T/$name.stats" fua_writes) -gt 0 ]] || fail "$name: no FUA writes counted"
    [[ $(counter "$T/$name.stats" flushes) -gt 0 ]] || fail "$name: no flushes counted"
    info "$name: ok"
}

file="trim=zero fast_no_hole=ok fast_trim=ok holes=yes"
run file "$T/file.img" 16M "$file"
run odd "$T/odd.img" 17000001 "$file"
run pc "$T/pc.img" 16M "$file" direct=false
# discard=ignore: trim keeps the data, zero still zeroes.
run ignore "$T/ignore.img" 16M "trim=keep fast_no_hole=ok fast_trim=ok holes=any" discard=ignore
[[ $(counter "$T/ignore.stats" trims) -gt 0 ]] || fail "ignore: no trims counted"

# tmpfs has PUNCH_HOLE but no ZERO_RANGE: zeroing without a hole is
# slow there (written), so FAST_ZERO|NO_HOLE must be refused; with
# MAY_TRIM a punched hole is fast.
mkdir "$T/tmpfs"
if mount -t tmpfs -o size=64M gmblock-test "$T/tmpfs"; then
    track_mount "$T/tmpfs"
    truncate -s 1M "$T/tmpfs/probe"
    if dd if=/dev/zero of="$T/tmpfs/probe" bs=4096 count=1 oflag=direct conv=notrunc status=none 2>/dev/null; then
        direct=true
    else
        direct=false                    # kernel before 6.6: no O_DIRECT on tmpfs
    fi
    run tmpfs "$T/tmpfs/disk.img" 16M "trim=zero fast_no_hole=enotsup fast_trim=ok holes=yes" \
        direct=$direct
    [[ $(counter "$T/tmpfs.stats" fast_zero_refused) -gt 0 ]] ||
        fail "tmpfs: fast_zero_refused not counted"
    rm -f "$T/tmpfs/disk.img"
else
    info "cannot mount tmpfs: the fast-zero refusal case is not run"
fi

# Loop devices: trim is advisory, fast zero works where the device
# has a write-zeroes offload (a loop device over ext4 has).
fast () {
    local wz
    wz=$(cat "/sys/block/${1#/dev/}/queue/write_zeroes_max_bytes")
    [[ $wz -gt 0 ]] && echo ok || echo enotsup
}
truncate -s 16M "$T/l512.img"
loopdev "$T/l512.img" --direct-io=on
f=$(fast "$LOOP")
run l512 "$LOOP" 16M "trim=advisory fast_no_hole=$f fast_trim=$f holes=no"
run l512ignore "$LOOP" 16M "trim=keep fast_no_hole=$f fast_trim=$f holes=no" discard=ignore

truncate -s 16M "$T/l4k.img"
loopdev "$T/l4k.img" --direct-io=on --sector-size 4096
[[ $(blockdev --getss "$LOOP") == 4096 ]] || skip "loop device refused --sector-size 4096"
f=$(fast "$LOOP")
run l4k "$LOOP" 16M "trim=advisory fast_no_hole=$f fast_trim=$f holes=no"

# A loop device with 4K sectors over a file 512 bytes longer than 16M:
# the device says 16M + 512, but no I/O reaches past 16M (the tail used
# to be advertised, and reading the whole export failed there with EIO).
head -c $((16 * 1048576 + 512)) /dev/zero >"$T/l4kodd.img"
loopdev "$T/l4kodd.img" --direct-io=on --sector-size 4096
run l4kodd "$LOOP" 16M "trim=advisory fast_no_hole=$f fast_trim=$f holes=no"
grep -q "ends inside a 4096-byte logical block, whose last 512 bytes the kernel cannot read or write: serving 16777216 bytes" "$T/l4kodd.log" ||
    { cat "$T/l4kodd.log" >&2; fail "l4kodd: no warning about the partial last block"; }
[[ $(counter "$T/l4k.stats" rmw_bytes) -gt 0 ]] ||
    fail "l4k: unaligned writes did not go through read-modify-write"

# Extents of a sparse file: holes and data exactly where they are.
truncate -s 16M "$T/sparse.img"
dd if=/dev/urandom of="$T/sparse.img" bs=1M seek=1 count=1 conv=notrunc status=none
dd if=/dev/urandom of="$T/sparse.img" bs=4096 seek=$((2048 + 1)) count=1 conv=notrunc status=none
dd if=/dev/urandom of="$T/sparse.img" bs=4096 seek=$((4096 - 1)) count=1 conv=notrunc status=none
for mode in true false; do
    start_server sparse$mode gmblock file="$T/sparse.img" direct=$mode
    nbdsh --base-allocation -u "$(uri sparse$mode)" -c '
M = 1024 * 1024
size = h.get_size()
ext = []
pos = 0
while pos < size:
    got = []
    h.block_status(size - pos, pos, lambda m, s, e, err: got.extend(e))
    for i in range(0, len(got), 2):
        if ext and ext[-1][2] == got[i + 1]:
            ext[-1][1] += got[i]
        else:
            ext.append([pos, got[i], got[i + 1]])
        pos += got[i]
H = nbd.STATE_HOLE | nbd.STATE_ZERO
want = [[0, M, H], [M, M, 0], [2 * M, 6 * M + 4096, H], [8 * M + 4096, 4096, 0],
        [8 * M + 8192, 8 * M - 12288, H], [16 * M - 4096, 4096, 0]]
assert ext == want, f"extents {ext}, expected {want}"
# REQ_ONE: one extent only, starting where asked.
one = []
h.block_status(size - 512, 512, lambda m, s, e, err: one.extend(e), nbd.CMD_FLAG_REQ_ONE)
assert one == [M - 512, H], one
# The holes read as zeros, the data does not.
assert h.pread(M, 0) == bytes(M)
assert h.pread(4096, 8 * M + 4096) != bytes(4096)
' || fail "sparse (direct=$mode): extents wrong"
    stop_server sparse$mode
done
info "sparse: ok"

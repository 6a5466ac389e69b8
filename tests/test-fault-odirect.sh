#!/bin/bash
# O_DIRECT refused by the filesystem (ramfs): direct=true must fail at
# start-up with a message naming direct=false; direct=false must serve
# the file correctly (nbdcopy round trip both ways).
. "$(dirname "$0")/functions.sh"
require nbdcopy nbdinfo

mkdir "$T/ramfs"
mount -t ramfs none "$T/ramfs" 2>"$T/mount.err" ||
    skip "cannot mount a ramfs: $(cat "$T/mount.err")"
track_mount "$T/ramfs"
img=$T/ramfs/disk.img
randfile "$img" 3M
head -c 1000 /dev/urandom >>"$img"      # and a size no block divides
cp "$img" "$T/orig.img"
# Prove the premise: this filesystem really refuses O_DIRECT.
if dd if="$img" of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null; then
    skip "ramfs accepts O_DIRECT on this kernel"
fi

start_fails refused 'gmblock:' "$img" 'O_DIRECT' 'direct=false' -- gmblock file="$img"
start_fails refused_ro 'gmblock:' 'direct=false' -- -r gmblock file="$img" direct=true

start_server s gmblock file="$img" direct=false stats="$T/stats"
[[ $(nbdinfo --size "$(uri s)") == $(stat -c %s "$T/orig.img") ]] || fail "wrong size"
nbdcopy "$(uri s)" "$T/out.img"
cmp "$T/out.img" "$T/orig.img" || fail "read back through direct=false differs"
randfile "$T/new.img" "$(stat -c %s "$T/orig.img")"
nbdcopy "$T/new.img" "$(uri s)"
stop_server s
cmp "$T/new.img" "$img" || fail "written through direct=false differs"
[[ $(counter "$T/stats" errors) == 0 ]] || fail "errors counted"
[[ $(counter "$T/stats" buffered_bytes) -gt 0 ]] || fail "no buffered I/O counted"

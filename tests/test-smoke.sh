#!/bin/bash
# Smoke: serve a file, read it back with nbdcopy, write it with nbdcopy.
. "$(dirname "$0")/functions.sh"
require nbdcopy nbdinfo

randfile "$T/disk.img" 8M
cp "$T/disk.img" "$T/orig.img"
start_server s gmblock file="$T/disk.img" stats="$T/stats"
nbdcopy "$(uri s)" "$T/out.img"
cmp "$T/out.img" "$T/orig.img" || fail "read back differs"
randfile "$T/new.img" 8M
nbdcopy "$T/new.img" "$(uri s)"
stop_server s
cmp "$T/new.img" "$T/disk.img" || fail "written data differs"
[[ $(counter "$T/stats" pool_in_use) == 0 ]] || fail "pool buffers leaked"

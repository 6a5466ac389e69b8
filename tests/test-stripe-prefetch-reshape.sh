#!/bin/bash
# gmblock-readahead's prefetches through gmblock-stripe are rounded to
# the stripe for new connections, whenever the workers' contexts were
# opened: the workers open theirs once, at start-up, so a server started
# during an md reshape (pass-through) kept prefetching unrounded for its
# whole life, though the clients that connected after the reshape were
# shaped (a review finding).  A fake sysfs (tests/fake-sysfs.py) shows
# md RAID5 over the served file: 4 disks, 64K chunks.  A sequential 4K
# read of 8 MiB, with the server started before the reshape ends and
# after: the prefetches are rounded in both.
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"
scounter () { awk -v k="gmblock-stripe.$2" '$1 == k { print $2 }' "$1"; }
randfile disk.img $((16 << 20))
dev=$(stat -c %Hd:%Ld disk.img)
/usr/bin/python3 "$top/tests/fake-sysfs.py" sys switch --storage-dev "$dev" ||
    fail "fake-sysfs.py failed"
link=sys/dev/block/$dev
md0=$T/sys/devices/virtual/block/md0
ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$md0")" "$link"
md=$md0/md
echo raid5 >"$md/level"; echo 4 >"$md/raid_disks"; echo 2 >"$md/layout"
echo 65536 >"$md/chunk_size"; echo none >"$md/reshape_position"; echo idle >"$md/sync_action"

serve () {
    start_server "$1" --filter=gmblock-readahead --filter=gmblock-stripe \
        --filter=gmblock-cache gmblock file="$T/disk.img" \
        stripe-sysfs="$T/sys" stripe-stats="$T/$1.stats"
}
read_seq () {
    URI=$(uri "$1") /usr/bin/python3 - <<'PY' || fail "$1: the sequential read failed"
import os, nbd
h = nbd.NBD()
h.connect_uri(os.environ["URI"])
for off in range(0, 8 << 20, 4096):
    h.pread(4096, off)
h.shutdown()
PY
}
check () {
    local n r
    n=$(scounter "$T/$1.stats" cache_requests)
    r=$(scounter "$T/$1.stats" cache_rounded)
    [[ ${n:-0} -gt 10 ]] || fail "$1: only '${n}' prefetches came through the stripe filter: no test"
    [[ ${r:-0} -gt $((n / 2)) ]] || fail "$1: $r of $n prefetches rounded to the stripe"
    info "$1: $r of $n prefetches rounded to the stripe"
}

serve steady
read_seq steady
stop_server steady
check steady

echo 2048 >"$md/reshape_position"       # started during a reshape...
serve late
echo none >"$md/reshape_position"       # ...that ends before the client
read_seq late
stop_server late
[[ $(scounter "$T/late.stats" geometry_changes) == 1 ]] ||
    fail "late: geometry_changes is '$(scounter "$T/late.stats" geometry_changes)', not 1: the reshape's end was not seen"
check late

#!/bin/bash
# A stats file that cannot be written at exit (its filesystem is full):
# every module says so, naming its option and the file, nbdkit still
# exits cleanly, and the file written before (at start-up, all zeros)
# is left whole: each write goes to a temporary file that replaces the
# old one only once it is complete and synced.
. "$(dirname "$0")/functions.sh"
require nbdcopy
[[ $(id -u) == 0 ]] || skip "needs root (a full tmpfs)"

randfile "$T/disk.img" 4M
mkdir "$T/s"
mount -t tmpfs -o size=64K none "$T/s" || skip "cannot mount a tmpfs"
track_mount "$T/s"
start_server full --filter=gmblock-readahead --filter=gmblock-cache \
    gmblock file="$T/disk.img" stats="$T/s/p.txt" cache-stats="$T/s/c.txt" \
    ra-stats="$T/s/r.txt"
for f in p c r; do cp "$T/s/$f.txt" "$T/$f.before"; done
nbdcopy "$(uri full)" "$T/copy.img" || fail "the copy failed"
cmp "$T/disk.img" "$T/copy.img" || fail "the copy differs"
# Fill the filesystem: the counters at exit find no room.
dd if=/dev/zero of="$T/s/fill" bs=4K status=none 2>/dev/null || true
stop_server full
for pair in 'gmblock: stats=' 'gmblock-cache: cache-stats=' 'gmblock-readahead: ra-stats='; do
    grep -q "$pair$T/s/.*No space left on device" "$T/full.log" || {
        cat "$T/full.log" >&2; fail "no error for ${pair%% *} ${pair#* }"; }
done
for f in p c r; do
    cmp "$T/$f.before" "$T/s/$f.txt" || fail "$f.txt was not left as it was"
done
# No temporary file left behind.
n=$(find "$T/s" -name '*.txt.*' | wc -l)
[[ $n == 0 ]] || fail "$n temporary files left in the stats folder"
# And with room again the counters are written at exit.
rm -f "$T/s/fill"
start_server room gmblock file="$T/disk.img" stats="$T/s/p.txt"
nbdcopy "$(uri room)" "$T/copy2.img" || fail "the second copy failed"
stop_server room
[[ $(counter "$T/s/p.txt" read_bytes) == $((4 << 20)) ]] ||
    fail "with room again, the counters were not written: $(cat "$T/s/p.txt")"
echo PASS

#!/bin/bash
# gmblock-cache: shutting down while write-backs keep failing.  Every
# write below fails (error filter); the background flusher retries
# every 10 ms over 32 dirty blocks.  SIGTERM must end nbdkit promptly
# (the flusher's helper threads used to leave in the middle of a pass
# and the flusher waited for them forever), and because the final
# write-back failed, nbdkit must say which data is lost and exit with
# status 1 (documented in filters/cache/README.md).  Control: the same
# with healthy writes exits 0 with the data on disk.
. "$(dirname "$0")/functions.sh"
cd "$T"

M=1048576
randfile "$T/data" $((2 * M))

# write32 NAME: 32 whole 64K blocks, acknowledged into the cache.
write32 () {
    nbdsh -u "$(uri "$1")" -c "
data = open('$T/data', 'rb').read()
for i in range(32):
    h.pwrite(data[i * 65536:(i + 1) * 65536], i * 65536)
"
}

for try in 1 2 3 4 5; do
    head -c $((2 * M)) /dev/zero >"$T/disk.img"
    start_server bad --filter=gmblock-cache --filter=error gmblock \
        file="$T/disk.img" cache-mode=writeback writeback-interval=0.01 \
        cache-block-size=64K error-pwrite-rate=100%
    write32 bad
    sleep 0.$((RANDOM % 3))
    stop_server bad             # fails if it hangs or crashes
    [[ $server_rc == 1 ]] || { cat "$T/bad.log" >&2; fail "try $try: exit status $server_rc after lost write-backs, expected 1"; }
    grep -q "gmblock-cache: write-back at shutdown failed.*32 dirty blocks .* lost" "$T/bad.log" ||
        { cat "$T/bad.log" >&2; fail "try $try: no message naming the lost blocks"; }
done
info "5 tries: SIGTERM ended nbdkit with status 1 and a message naming the lost blocks"
grep -m1 "lost" "$T/bad.log"

# With gmblock-readahead stacked above: every module still unloads (its
# exit-time counters are written) and the status is still 1.
head -c $((2 * M)) /dev/zero >"$T/disk.img"
start_server top --filter=gmblock-readahead --filter=gmblock-cache \
    --filter=error gmblock file="$T/disk.img" cache-mode=writeback \
    writeback-interval=0.01 cache-block-size=64K error-pwrite-rate=100% \
    ra-stats="$T/ra.stats" cache-stats="$T/cache.stats"
write32 top
stop_server top
[[ $server_rc == 1 ]] || { cat "$T/top.log" >&2; fail "stacked: exit status $server_rc, expected 1"; }
[[ -s $T/ra.stats && -s $T/cache.stats ]] || fail "stacked: a module above or the cache did not write its counters at exit"
info "stacked under gmblock-readahead: status 1, both stats files written"

# Control: healthy writes, same settings: exit 0, data on disk.
head -c $((2 * M)) /dev/zero >"$T/disk.img"
start_server good --filter=gmblock-cache --filter=error gmblock \
    file="$T/disk.img" cache-mode=writeback writeback-interval=3600 \
    cache-block-size=64K error-pwrite-rate=0%
write32 good
stop_server good
[[ $server_rc == 0 ]] || { cat "$T/good.log" >&2; fail "control: exit status $server_rc"; }
cmp "$T/disk.img" "$T/data" || fail "control: the shutdown write-back did not write the data"
info "control: healthy shutdown exits 0 with every block written back"

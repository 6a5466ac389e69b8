#!/bin/bash
# The statistics threads start last in .after_fork.  A module's stats
# thread prints values it reads without a lock (the readahead filter's
# active, the cache filter's block size, slots and shards, the RDMA
# pools), so they must be set before the thread's creation publishes
# them.  They were set after it: a data race, and a first interval file
# or SIGUSR1 summary could show the filter inactive or a cache of 0
# blocks.  Here the first interval write comes before any client (so
# nothing else orders the two threads): make check-tsan reported both
# races (ra_active; tbl, swb), and in any run that file must show the
# values the module serves with.
. "$(dirname "$0")/functions.sh"
require nbdinfo

randfile "$T/disk.img" 8M

# value FILE NAME MODULE: NAME's value for MODULE in a Prometheus file.
value () {
    awk -v k="gmblock_$2{module=\"$3\"}" '$1 == k { print $2 }' "$1"
}

# first_write NAME FILE... -- nbdkit args: start nbdkit with no client,
# wait until every FILE was rewritten by its interval thread, stop it.
first_write () {
    local name=$1 f i; shift
    local files=()
    while [[ $1 != -- ]]; do files+=("$1"); shift; done
    shift
    "$NBDKIT" -f -U "$T/$name.sock" "$@" >"$T/$name.log" 2>&1 &
    local pid=$!
    track_pid "$pid"
    # The first file is written at start (inode A); the interval thread
    # renames a new one over it a second later.
    for f in "${files[@]}"; do
        for i in $(seq 100); do [[ -s $f ]] && break; sleep 0.05; done
        [[ -s $f ]] || { cat "$T/$name.log" >&2; fail "$name: no first file $f"; }
        local ino=$(stat -c %i "$f")
        for i in $(seq 100); do
            [[ $(stat -c %i "$f") != "$ino" ]] && break
            sleep 0.05
        done
        [[ $(stat -c %i "$f") != "$ino" ]] || fail "$name: $f not rewritten within 5 s"
        cp "$f" "$f.first"
    done
    kill -TERM "$pid"
    wait "$pid" || fail "$name: nbdkit exited $?"
}

info "readahead over the cache, no client: the first interval files"
first_write rc "$T/ra.prom" "$T/cache.prom" -- \
    --filter=gmblock-readahead --filter=gmblock-cache gmblock file="$T/disk.img" \
    ra-stats="$T/ra.prom" ra-stats-interval=1 \
    cache-stats="$T/cache.prom" cache-stats-interval=1 cache-block-size=64K
[[ $(value "$T/ra.prom.first" active readahead) == 1 ]] ||
    { cat "$T/ra.prom.first" >&2; fail "the first readahead file says not active"; }
[[ $(value "$T/cache.prom.first" block_size cache) == 65536 ]] ||
    { cat "$T/cache.prom.first" >&2; fail "the first cache file has no block size"; }
[[ $(value "$T/cache.prom.first" slots cache) -gt 0 ]] ||
    { cat "$T/cache.prom.first" >&2; fail "the first cache file has no slots"; }

info "the cache alone and readahead alone (nothing else runs there)"
first_write c "$T/c.prom" -- --filter=gmblock-cache gmblock file="$T/disk.img" \
    cache-stats="$T/c.prom" cache-stats-interval=1
[[ $(value "$T/c.prom.first" slots cache) -gt 0 ]] ||
    { cat "$T/c.prom.first" >&2; fail "the first cache file has no slots"; }
first_write r "$T/r.prom" -- --filter=gmblock-readahead gmblock file="$T/disk.img" \
    ra-stats="$T/r.prom" ra-stats-interval=1
[[ -n $(value "$T/r.prom.first" active readahead) ]] ||
    { cat "$T/r.prom.first" >&2; fail "the first readahead file has no active line"; }
info "ok"

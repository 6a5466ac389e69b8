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
        # What the module wrote at start-up, before its thread ran (a
        # test audit finding: only the thread's file was checked, a
        # second later, when any late value had long landed).
        cp "$f" "$f.start"
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

# expect FILE NAME MODULE TEST WANT: NAME's value in FILE.start (written
# at start-up) and FILE.first (by the interval thread) passes
# [[ VALUE TEST WANT ]].
expect () {
    local f v
    for f in "$1.start" "$1.first"; do
        v=$(value "$f" "$2" "$3")
        [[ -n $v ]] && eval "[[ \$v $4 \$5 ]]" ||
            { cat "$f" >&2; fail "${f##*/}: $3's $2 is '$v', expected $4 $5"; }
    done
}

info "readahead over the cache, no client: the first files"
first_write rc "$T/ra.prom" "$T/cache.prom" -- \
    --filter=gmblock-readahead --filter=gmblock-cache gmblock file="$T/disk.img" \
    ra-stats="$T/ra.prom" ra-stats-interval=1 \
    cache-stats="$T/cache.prom" cache-stats-interval=1 cache-block-size=64K
expect "$T/ra.prom" active readahead == 1
expect "$T/cache.prom" block_size cache == 65536
expect "$T/cache.prom" slots cache -gt 0

info "the cache alone and readahead alone (nothing else runs there)"
first_write c "$T/c.prom" -- --filter=gmblock-cache gmblock file="$T/disk.img" \
    cache-stats="$T/c.prom" cache-stats-interval=1
expect "$T/c.prom" slots cache -gt 0
first_write r "$T/r.prom" -- --filter=gmblock-readahead gmblock file="$T/disk.img" \
    ra-stats="$T/r.prom" ra-stats-interval=1
expect "$T/r.prom" active readahead -ge 0
info "ok"

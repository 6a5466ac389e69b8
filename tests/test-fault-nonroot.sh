#!/bin/bash
# Served as nobody (RLIMIT_MEMLOCK 8 MiB): the default pool cannot be
# registered with io_uring; the server must say so (naming the memlock
# limit) and still serve correctly.  pool-size=4M registers fine, so no
# warning then.
. "$(dirname "$0")/functions.sh"
require nbdcopy setpriv

lim=$("${AS_NOBODY[@]}" bash -c 'ulimit -l')
[[ $lim != unlimited && $lim -lt 32768 ]] ||
    skip "nobody's memlock limit is $lim KiB: the default pool would register"

use_nobody

randfile "$T/disk.img" 16M
cp "$T/disk.img" "$T/orig.img"
chown nobody "$T/disk.img"
: >"$T/stats"; chown nobody "$T/stats"

roundtrip () {
    local s=$1
    nbdcopy "$(uri "$s")" "$T/out.img"
    cmp "$T/out.img" "$T/orig.img" || fail "$s: read back differs"
    randfile "$T/new.img" 16M
    nbdcopy --requests=8 "$T/new.img" "$(uri "$s")"
    nbdcopy "$(uri "$s")" "$T/out.img"
    cmp "$T/out.img" "$T/new.img" || fail "$s: written data reads back differently"
    cp "$T/new.img" "$T/orig.img"
}

# Default pool (32M) as nobody: a warning naming the memlock limit.
start_server big -v gmblock file="$T/disk.img" stats="$T/stats"
grep -q "gmblock: warning: cannot register" "$T/big.log" ||
    { cat "$T/big.log"; fail "no warning about the unregistered pool"; }
grep -qE "RLIMIT_MEMLOCK is (${lim}K|$((lim / 1024))M)\b" "$T/big.log" ||
    { cat "$T/big.log"; fail "the warning does not name the memlock limit (${lim}K)"; }
grep -q "debug: gmblock: pool 32M.*plain buffers" "$T/big.log" ||
    fail "debug output does not say the pool is plain buffers"
grep -q "pool-size" "$T/big.log" || fail "the warning does not say what to change"
info "$(grep warning "$T/big.log")"
roundtrip big
stop_server big
cmp "$T/disk.img" "$T/orig.img" || fail "file differs after the server stopped"
[[ $(counter "$T/stats" pool_in_use) == 0 ]] || fail "pool buffers leaked"
[[ $(counter "$T/stats" errors) == 0 ]] || fail "errors counted"
# O_DIRECT really happened (into the pool, or straight into nbdkit's
# buffer when that is aligned, as it is under ASan's allocator).
[[ $(( $(counter "$T/stats" dma_pool_bytes) + $(counter "$T/stats" dma_client_bytes) )) -gt 0 ]] ||
    fail "no O_DIRECT transfers counted"

# A pool under the limit registers at start-up: no warning then...
start_server small -v gmblock file="$T/disk.img" pool-size=4M
grep -qi "warning" "$T/small.log" && { cat "$T/small.log"; fail "pool-size=4M warned"; }
grep -q "debug: gmblock: pool 4M.*registered as fixed buffers" "$T/small.log" ||
    { cat "$T/small.log"; fail "pool-size=4M was not registered"; }
roundtrip small
# ... by start-up's probe ring: each worker thread's ring registers it
# again, and each registration counts against the limit on its own, so
# two rings got it and the others (nbdcopy's 4 connections use many
# threads) silently used plain buffers (a review finding): said once.
grep -qE "gmblock: warning: a worker thread's io_uring cannot register the 4M buffer pool.*RLIMIT_MEMLOCK is (${lim}K|$((lim / 1024))M)" "$T/small.log" ||
    { cat "$T/small.log"; fail "pool-size=4M: rings past the memlock limit went unregistered without a word"; }
[[ $(grep -c "worker thread's io_uring cannot register" "$T/small.log") == 1 ]] ||
    fail "pool-size=4M: the unregistered rings were reported more than once"
stop_server small
cmp "$T/disk.img" "$T/orig.img" || fail "file differs after the server stopped"

#!/bin/bash
# Every stack against a demanding, careless client (tests/probe-random.py):
# random concurrent reads, writes, trims, zeros (FUA, FAST_ZERO, NO_HOLE),
# flushes, prefetches and block status over 3 connections, unaligned and
# beyond the advertised maximum (non-strict libnbd), requests at and past
# the end; every read and extent against a shadow model, every error's
# errno checked, the connection alive afterwards; then flush + kill -9
# (the file must hold everything acknowledged) or SIGTERM (the file must
# equal the model), and no sanitizer report, assertion or crash in the
# log. Fixed seeds: a failure reproduces with the command it prints.
. "$(dirname "$0")/functions.sh"
require nbdkit
export TMPDIR=$T
odd=$T/odd.img aligned=$T/aligned.img
truncate -s $((64 * 1048576 + 3)) "$odd"
truncate -s $((64 * 1048576)) "$aligned"

n=0
probe () {      # probe STACK FILE SEED [probe options]
    local stack=$1 file=$2 seed=$3; shift 3
    n=$((n + 1))
    /usr/bin/python3 "$top/tests/probe-random.py" --stack "$stack" --file "$file" \
        --seed "$seed" --batches 40 --log "$T/$stack.$seed.log" "$@" >"$T/out" 2>&1 ||
        { cat "$T/out" >&2; tail -n 20 "$T/$stack.$seed.log" >&2
          fail "$stack (seed $seed): see above; rerun: tests/probe-random.py --stack $stack --file F --seed $seed $*"; }
    info "$(tail -n 1 "$T/out" | sed 's/ops=.*\(PASS\)$/\1/') $*"
}

probe plain "$odd" 1
probe plain-buffered "$odd" 2 --kill
probe plain-ring-shared "$aligned" 3 --strict
probe plain-smallpool "$odd" 4 --kill
probe cache-read "$odd" 5
probe cache-writethrough-small "$aligned" 6 --kill
probe cache-writeback-small "$odd" 7 --kill
probe cache-writeback-discard-ignore "$odd" 8
probe cache-adaptive-back-small "$odd" 9 --kill
probe cache-unsafe "$aligned" 10
probe ra-cache-small "$odd" 11 --kill
probe ra-buffered "$odd" 12
probe stripe-plain "$aligned" 13 --strict
probe ra-stripe-cache-wb-small "$odd" 14 --kill
probe cache-stripe-wb-small "$aligned" 15
info "$n stacks probed"

# Negative control: a byte changed behind the server's back is caught.
if /usr/bin/python3 "$top/tests/probe-random.py" --stack plain --file "$aligned" \
    --seed 16 --batches 5 --control --log "$T/control.log" >"$T/out" 2>&1; then
    fail "negative control: a changed byte was not noticed"
fi
grep -q "WRONG DATA final: byte 4097" "$T/out" || { cat "$T/out" >&2; fail "negative control: not the expected failure"; }
info "negative control: a changed byte is noticed"

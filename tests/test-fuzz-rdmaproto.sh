#!/bin/bash
# The RDMA protocol's parser, checks and state machine under libFuzzer
# (tests/fuzz/fuzz-rdmaproto.c, built with clang, ASan and UBSan by
# make fuzz into the build directory) for a bounded time, starting from
# a copy of the committed seed corpus: the run never adds to it.  Any
# crash, sanitizer report, leak, timeout or broken invariant fails, and
# the failing input is printed in hex.  FUZZ_SECONDS and FUZZ_RUNS
# change the bounds (30 s, 3M runs).
. "$(dirname "$0")/functions.sh"
require clang /usr/bin/python3
plain_run_only "the fuzz target is always built with ASan and UBSan: the plain run runs it"
bld=${GMBLOCK_BUILDDIR:-$top}
fuzz=$bld/tests/fuzz/fuzz-rdmaproto
corpus=$top/tests/fuzz/corpus/rdmaproto

# A clang build of its own: no make flags or sanitizer settings of the
# caller's (the sanitizer run's ASAN_OPTIONS send reports to files).
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$top" B="$bld" fuzz ||
    fail "make fuzz failed (is libclang-rt-14-dev installed?)"
unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS

# The committed seeds are what the generator writes (it packs them from
# docs/rdma-protocol.md): a layout change must regenerate them.
/usr/bin/python3 "$top/tests/fuzz/gen-rdmaproto-corpus.py" "$T/seeds" >/dev/null
diff -r "$T/seeds" "$corpus" >/dev/null ||
    fail "$corpus differs from what tests/fuzz/gen-rdmaproto-corpus.py writes"

cp -r "$corpus" "$T/corpus"
rc=0
"$fuzz" -max_total_time="${FUZZ_SECONDS:-30}" -runs="${FUZZ_RUNS:-3000000}" \
        -use_value_profile=1 -max_len=2048 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$T/" "$T/corpus" >"$T/fuzz.log" 2>&1 || rc=$?

execs=$(awk '/number_of_executed_units/ { print $2 }' "$T/fuzz.log")
last=$(grep -E "^#[0-9]+" "$T/fuzz.log" | tail -n 1 || true)   # none when it failed at once
info "fuzz-rdmaproto: exit $rc, ${execs:-?} inputs run; last status: $last"
if [[ $rc -ne 0 ]]; then
    tail -n 60 "$T/fuzz.log"
    for a in "$T"/crash-* "$T"/leak-* "$T"/timeout-* "$T"/oom-*; do
        [[ -e $a ]] || continue
        echo "--- failing input $(basename "$a") (FUZZ_TRACE=1 $fuzz FILE replays it):"
        od -An -tx1 -v "$a"
    done
    fail "fuzz-rdmaproto failed"
fi
[[ ${execs:-0} -gt 0 ]] || fail "the fuzzer ran no inputs"

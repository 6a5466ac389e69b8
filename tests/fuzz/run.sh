# Sourced by tests/test-fuzz-*.sh (after functions.sh): build the
# libFuzzer targets and run one for a bounded time.
# SPDX-License-Identifier: BSD-3-Clause

# fuzz_build: the targets, by clang with ASan and UBSan (make fuzz), into
# the build directory; none of the caller's make flags or sanitizer
# settings (the sanitizer run's ASAN_OPTIONS send reports to files).
fuzz_build () {
    fuzz_bld=${GMBLOCK_BUILDDIR:-$top}
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$top" B="$fuzz_bld" fuzz ||
        fail "make fuzz failed (is libclang-rt-14-dev installed?)"
    unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
}

# fuzz_run NAME SECONDS RUNS MAX_LEN: fuzz-NAME from a copy of
# tests/fuzz/corpus/NAME (never added to), its regress-* seeds alone
# first (a failure names the seed).  Any crash, sanitizer report, leak,
# timeout or broken invariant fails, printing the failing input in hex.
fuzz_run () {
    local t=$1 secs=$2 runs=$3 maxlen=$4 fuzz rc=0 r a execs last
    fuzz=$fuzz_bld/tests/fuzz/fuzz-$t
    mkdir -p "$T/$t" "$T/art-$t"
    cp "$top/tests/fuzz/corpus/$t"/* "$T/$t/"
    for r in "$top/tests/fuzz/corpus/$t"/regress-*; do
        [[ -e $r ]] || continue
        "$fuzz" "$r" >"$T/regress-$t.log" 2>&1 || {
            tail -n 30 "$T/regress-$t.log"
            fail "fuzz-$t: the regression $(basename "$r") fails again"
        }
    done
    "$fuzz" -max_total_time="$secs" -runs="$runs" \
            -use_value_profile=1 -max_len="$maxlen" -timeout=10 -rss_limit_mb=2048 \
            -print_final_stats=1 -artifact_prefix="$T/art-$t/" "$T/$t" \
            >"$T/fuzz-$t.log" 2>&1 || rc=$?
    execs=$(awk '/number_of_executed_units/ { print $2 }' "$T/fuzz-$t.log")
    last=$(grep -E '^#[0-9]+' "$T/fuzz-$t.log" | tail -n 1 || true)   # none when it failed at once
    info "fuzz-$t: exit $rc, ${execs:-?} inputs run; last status: $last"
    if [[ $rc -ne 0 ]]; then
        tail -n 60 "$T/fuzz-$t.log"
        for a in "$T/art-$t"/*; do
            [[ -e $a ]] || continue
            echo "--- failing input $(basename "$a") ($fuzz FILE replays it; fuzz-rdmaproto traces with FUZZ_TRACE=1):"
            od -An -tx1 -v "$a"
        done
        fail "fuzz-$t failed"
    fi
    [[ ${execs:-0} -gt 0 ]] || fail "fuzz-$t ran no inputs"
}

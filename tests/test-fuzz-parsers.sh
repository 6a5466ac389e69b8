#!/bin/bash
# The parser fuzz targets under libFuzzer (ASan and UBSan), a few
# seconds each, as test-fuzz-rdmaproto.sh runs its target:
#   fuzz-options    option values (sizes, percentages, seconds, rdma=
#                   and server= addresses, PCI addresses)
#   fuzz-stripegeo  stripe geometry: sysfs text, device-mapper tables,
#                   the registry, stream layouts, fake sysfs trees
#   fuzz-abstate    the RDMA bridge's state= file
# Each starts from a copy of its committed seeds (which hold the inputs
# of the bugs the fuzzers found, regress-*: each is run first), never
# adds to them, and fails on any crash, sanitizer report, leak, timeout
# or broken invariant, printing the failing input in hex.
# FUZZ_SECONDS (6 each: the test stays under 30 s) and FUZZ_RUNS (1M
# each) change the bounds; FUZZ_TARGETS picks targets.
. "$(dirname "$0")/functions.sh"
require clang /usr/bin/python3
plain_run_only "the fuzz targets are always built with ASan and UBSan: the plain run runs them"
bld=${GMBLOCK_BUILDDIR:-$top}

env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$top" B="$bld" fuzz ||
    fail "make fuzz failed (is libclang-rt-14-dev installed?)"
unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS

# The committed seeds are what the generator writes.
/usr/bin/python3 "$top/tests/fuzz/gen-parsers-corpus.py" "$T/seeds" >/dev/null
for t in ${FUZZ_TARGETS:-options stripegeo abstate}; do
    diff -r "$T/seeds/$t" "$top/tests/fuzz/corpus/$t" >/dev/null ||
        fail "tests/fuzz/corpus/$t differs from what tests/fuzz/gen-parsers-corpus.py writes"
done

# fuzz-stripegeo's fake sysfs tree goes here, and goes with $T.
export FUZZ_TMPDIR=$T
for t in ${FUZZ_TARGETS:-options stripegeo abstate}; do
    fuzz=$bld/tests/fuzz/fuzz-$t
    mkdir -p "$T/$t" "$T/art-$t"
    cp "$top/tests/fuzz/corpus/$t"/* "$T/$t/"
    rc=0
    # The regressions alone first: a failure names its seed.
    for r in "$top/tests/fuzz/corpus/$t"/regress-*; do
        [[ -e $r ]] || continue
        "$fuzz" "$r" >"$T/regress-$t.log" 2>&1 || {
            tail -n 30 "$T/regress-$t.log"
            fail "fuzz-$t: the regression $(basename "$r") fails again"
        }
    done
    "$fuzz" -max_total_time="${FUZZ_SECONDS:-6}" -runs="${FUZZ_RUNS:-1000000}" \
            -use_value_profile=1 -max_len=512 -timeout=10 -rss_limit_mb=2048 \
            -print_final_stats=1 -artifact_prefix="$T/art-$t/" "$T/$t" \
            >"$T/fuzz-$t.log" 2>&1 || rc=$?
    execs=$(awk '/number_of_executed_units/ { print $2 }' "$T/fuzz-$t.log")
    last=$(grep -E "^#[0-9]+" "$T/fuzz-$t.log" | tail -n 1 || true)   # none when it failed at once
    info "fuzz-$t: exit $rc, ${execs:-?} inputs run; last status: $last"
    if [[ $rc -ne 0 ]]; then
        tail -n 60 "$T/fuzz-$t.log"
        for a in "$T/art-$t"/*; do
            [[ -e $a ]] || continue
            echo "--- failing input $(basename "$a") ($fuzz FILE replays it):"
            od -An -tx1 -v "$a"
        done
        fail "fuzz-$t failed"
    fi
    [[ ${execs:-0} -gt 0 ]] || fail "fuzz-$t ran no inputs"
done

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
. "$top/tests/fuzz/run.sh"
fuzz_build

# The committed seeds are what the generator writes.
/usr/bin/python3 "$top/tests/fuzz/gen-parsers-corpus.py" "$T/seeds" >/dev/null
for t in ${FUZZ_TARGETS:-options stripegeo abstate}; do
    diff -r "$T/seeds/$t" "$top/tests/fuzz/corpus/$t" >/dev/null ||
        fail "tests/fuzz/corpus/$t differs from what tests/fuzz/gen-parsers-corpus.py writes"
done

# fuzz-stripegeo's fake sysfs tree goes here, and goes with $T.
export FUZZ_TMPDIR=$T
for t in ${FUZZ_TARGETS:-options stripegeo abstate}; do
    fuzz_run "$t" "${FUZZ_SECONDS:-6}" "${FUZZ_RUNS:-1000000}" 512
done

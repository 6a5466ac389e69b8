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
corpus=$top/tests/fuzz/corpus/rdmaproto
. "$top/tests/fuzz/run.sh"
fuzz_build

# The committed seeds are what the generator writes (it packs them from
# docs/rdma-protocol.md): a layout change must regenerate them.
/usr/bin/python3 "$top/tests/fuzz/gen-rdmaproto-corpus.py" "$T/seeds" >/dev/null
diff -r "$T/seeds" "$corpus" >/dev/null ||
    fail "$corpus differs from what tests/fuzz/gen-rdmaproto-corpus.py writes"

fuzz_run rdmaproto "${FUZZ_SECONDS:-30}" "${FUZZ_RUNS:-3000000}" 2048

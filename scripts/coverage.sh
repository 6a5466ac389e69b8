#!/bin/bash
# Line and branch coverage of the host test suite (make coverage).
#   scripts/coverage.sh             every host test
#   scripts/coverage.sh PATTERN...  only tests whose name has a PATTERN
# Builds the modules and unit tests with gcov counters into .build-cov
# (-O0, so lines map exactly; atomic counters, the modules being
# threaded), runs the tests on that build, and writes gcovr's summary
# to .build-cov/coverage.txt (lines) and coverage-branches.txt, and an
# annotated copy of the sources to .build-cov/html/index.html.  The
# guest lab is not run: the RDMA and md code it covers reads low here.
# Servers killed with SIGKILL record nothing; unit tests that compile a
# module's source in count for it.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
B=.build-cov
rm -rf "$B"
make -j"$(nproc)" B="$B" COVERAGE=1 CFLAGS='-O0 -g' all > "$B.log" 2>&1 || {
    tail -20 "$B.log"; echo "coverage: the build failed (log: $B.log)" >&2; exit 1; }
mv "$B.log" "$B/build.log"
# Servers that run as nobody (nbdkit -u) update the counter files too.
chmod -R a+rwX "$B"
GMBLOCK_BUILDDIR=$top/$B tests/run "$@"
rc=$?
# A counter file first made by such a server's root parent is 0644:
# open them all up and run again the tests whose log says one could
# not be written (libgcov's "profiling: ... Cannot open").
chmod -R a+rwX "$B"
mapfile -t again < <(grep -l "^profiling:.*Cannot open" tests/logs/*.log 2>/dev/null |
                     xargs -r -n1 basename | sed 's/\.log$//')
if ((${#again[@]})); then
    echo "coverage: again, with every counter file writable: ${again[*]}"
    GMBLOCK_BUILDDIR=$top/$B tests/run "${again[@]}"
fi
gcovr -r . "$B" -e tests/ --txt "$B/coverage.txt" -s
gcovr -r . "$B" -e tests/ -b --txt "$B/coverage-branches.txt" > /dev/null
mkdir -p "$B/html"
gcovr -r . "$B" -e tests/ --html-details "$B/html/index.html" > /dev/null
echo "coverage: $B/coverage.txt, $B/coverage-branches.txt, $B/html/index.html"
exit $rc

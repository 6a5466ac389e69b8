#!/bin/bash
# Line and branch coverage of the test suites (make coverage).
#   scripts/coverage.sh                   every host test
#   scripts/coverage.sh PATTERN...        only tests whose name has a PATTERN
#   scripts/coverage.sh --lab SCENARIO... guest lab scenarios instead
# Builds the modules and unit tests with gcov counters (-O0, so lines
# map exactly; atomic counters, the modules being threaded), runs the
# tests on that build, and writes gcovr's summary of lines to
# coverage.txt and of branches to coverage-branches.txt, and an
# annotated copy of the sources to html/index.html: host into
# .build-cov, lab into tests/vm/.cache/coverage.  The guest runs the
# modules of the tree itself, so --lab builds the tree with counters
# and plainly again afterwards; each guest writes its counters into its
# run's out/gcov/ (LAB_COVERAGE=1), merged with gcov-tool.  The host suite leaves the
# RDMA and md code low, the lab the rest.  Servers killed with SIGKILL
# record nothing; unit tests that compile a module's source in count
# for it.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1

build() {
    make -j"$(nproc)" B="$1" COVERAGE=1 CFLAGS='-O0 -g' all > "$top/coverage-build.log" 2>&1 || {
        tail -20 "$top/coverage-build.log"
        echo "coverage: the build failed (log: coverage-build.log)" >&2; exit 1; }
    rm -f "$top/coverage-build.log"
}

# The tree's own build outputs (make clean would also drop the lab's
# cache: its kernels and packages).
unbuild() {
    find common plugins filters tests -path tests/vm -prune -o \
        \( -name '*.o' -o -name '*.a' -o -name '*.so' -o -name '*.gcno' \
           -o -name '*.gcda' \) -print0 | xargs -0 rm -f
    find tests/unit tests/fuzz -maxdepth 1 -type f -executable ! -name '*.*' -delete
    rm -f gmblock-topology tests/rdma-badclient tests/rdma-badserver
}

# report OBJDIR OUTDIR
report() {
    mkdir -p "$2/html"
    gcovr -r . "$1" -e tests/ --txt "$2/coverage.txt" -s
    gcovr -r . "$1" -e tests/ -b --txt "$2/coverage-branches.txt" > /dev/null
    gcovr -r . "$1" -e tests/ --html-details "$2/html/index.html" > /dev/null
    echo "coverage: $2/coverage.txt, $2/coverage-branches.txt, $2/html/index.html"
}

if [[ ${1:-} == --lab ]]; then
    shift
    unbuild
    build .
    LAB_COVERAGE=1 LAB_SANITIZE=0 tests/vm/run.sh "$@"
    rc=$?
    runs=()
    for s in "${@:-$(cd tests/vm/scenarios && ls *.sh | sed 's/\.sh$//')}"; do
        d=tests/vm/.cache/runs/$s/out/gcov$top
        [[ -d $d ]] && runs+=("$d")
    done
    if ((${#runs[@]})); then
        merged=$(mktemp -d)
        cp -a "${runs[0]}/." "$merged"
        for d in "${runs[@]:1}"; do
            gcov-tool merge -o "$merged.new" "$merged" "$d" &&
                rm -rf "$merged" && mv "$merged.new" "$merged"
        done
        (cd "$merged" && find . -name '*.gcda') | while read -r f; do
            cp "$merged/$f" "$f"
        done
        rm -rf "$merged"
        rm -rf tests/vm/.cache/coverage
        report . tests/vm/.cache/coverage
    else
        echo "coverage: no guest wrote counters" >&2
    fi
    unbuild
    make -j"$(nproc)" all > /dev/null
    exit $rc
fi

B=.build-cov
rm -rf "$B"
build "$B"
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
report "$B" "$B"
exit $rc

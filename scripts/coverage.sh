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
    for c in tests/unit/test-*.c tests/fuzz/fuzz-*.c; do rm -f "${c%.c}"; done
    rm -f gmblock-topology tests/rdma-badclient tests/rdma-badserver
}

# report OUTDIR SEARCHDIR...: the counters found under the SEARCHDIRs
# only (the tree's own build must not count .build-cov's).
report() {
    local out=$1; shift
    mkdir -p "$out/html"
    gcovr -r . -e tests/ --txt "$out/coverage.txt" -s "$@"
    gcovr -r . -e tests/ -b --txt "$out/coverage-branches.txt" "$@" > /dev/null
    gcovr -r . -e tests/ --html-details "$out/html/index.html" "$@" > /dev/null
    echo "coverage: $out/coverage.txt, $out/coverage-branches.txt, $out/html/index.html"
}

# Servers that run as nobody (nbdkit -u) write counters too: they may
# make files in the build's folders (sticky: not replace others') and
# update the counter files, nothing else (root loads its modules).
open_counters() {
    find "$1" -type d -exec chmod a+rwx,+t {} +
    find "$1" -name '*.gcda' -exec chmod a+rw {} +
}

if [[ ${1:-} == --lab ]]; then
    shift
    if (($#)); then
        names=("$@")
    else
        mapfile -t names < <(cd tests/vm/scenarios && ls -- *.sh | sed 's/\.sh$//')
    fi
    # Whatever happens from here (a failed build, Ctrl-C in the lab),
    # the tree ends built plainly: make tracks no flags, so objects
    # with counters would stay, and modules linked without --coverage
    # from them do not load.
    restore() {
        unbuild
        make -j"$(nproc)" all > /dev/null ||
            echo "coverage: the plain rebuild failed: run make" >&2
    }
    trap restore EXIT
    unbuild
    build .
    LAB_COVERAGE=1 LAB_SANITIZE=0 tests/vm/run.sh "$@"
    rc=$?
    runs=()
    for s in "${names[@]}"; do
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
        report tests/vm/.cache/coverage common plugins filters
    else
        echo "coverage: no guest wrote counters" >&2
    fi
    exit $rc
fi

B=.build-cov
rm -rf "$B"
build "$B"
open_counters "$B"
GMBLOCK_BUILDDIR=$top/$B tests/run "$@" | tee "$B/run.log"
rc=${PIPESTATUS[0]}
# A counter file first made by such a server's root parent is 0644:
# open them all up and run again the tests whose log says one could
# not be written (libgcov's "profiling: ... Cannot open").  When those
# were the only failures and now pass, the run passes.
open_counters "$B"
mapfile -t again < <(grep -l "^profiling:.*Cannot open" tests/logs/*.log 2>/dev/null |
                     xargs -r -n1 basename | sed 's/\.log$//')
if ((${#again[@]})); then
    echo "coverage: again, with every counter file writable: ${again[*]}"
    if GMBLOCK_BUILDDIR=$top/$B tests/run "${again[@]}" &&
       ! grep -oP '^FAIL \K[^:]+' "$B/run.log" | grep -qvxF -f <(printf '%s\n' "${again[@]}"); then
        rc=0
    fi
fi
report "$B" "$B"
exit $rc

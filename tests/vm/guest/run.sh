#!/bin/sh
# Runs inside the guest, chrooted into the host's tree: execute the
# scenario named in the job file and leave its log and exit status in the
# results share, where the host harness picks them up.
OUT=/run/lab/out
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/run/lab TMPDIR=/tmp LC_ALL=C
# shellcheck source=/dev/null
. "$OUT/job" || { echo 99 >"$OUT/status"; exit 1; }
# /var/lock points into /run, a fresh tmpfs here (qemu-nbd needs it).
mkdir -p /run/lock
cd /run/lab || exit 1
if [ -n "${LAB_SANITIZE:-}" ]; then
    # The modules built with ASan+UBSan, preloaded into nbdkit only, as
    # the host's sanitizer run does (tests/run); a report fails the
    # scenario.  The root is read-only: reports go to the results share.
    export GMBLOCK_BUILDDIR=$LAB_REPO/.build-sanitize
    export GMBLOCK_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so):$GMBLOCK_BUILDDIR/tests/sanitizer-shim.so"
    # intercept_tls_get_addr=0: see tests/run (LeakSanitizer's tracer).
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0:intercept_tls_get_addr=0:log_path=$OUT/asan
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$OUT/ubsan
    export LSAN_OPTIONS=suppressions=$LAB_REPO/tests/lsan.supp:print_suppressions=0
elif [ -n "${LAB_TSAN:-}" ]; then
    # The same with ThreadSanitizer (tests/run's GMBLOCK_TSAN).
    export GMBLOCK_BUILDDIR=$LAB_REPO/.build-tsan
    export GMBLOCK_PRELOAD="$(gcc -print-file-name=libtsan.so):$GMBLOCK_BUILDDIR/tests/sanitizer-shim.so"
    export TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1:report_signal_unsafe=0:suppressions=$LAB_REPO/tests/tsan.supp:log_path=$OUT/tsan
fi
echo "lab: scenario $LAB_NAME starting" >/dev/console
bash "$LAB_SCENARIO" >"$OUT/scenario.log" 2>&1 </dev/null
rc=$?
# With ASan present UBSan writes to stderr: the modules' logs.
reports=$(ls "$OUT"/asan.* "$OUT"/ubsan.* "$OUT"/tsan.* 2>/dev/null; [ -z "${LAB_SANITIZE:-}" ] ||
    grep -l "runtime error:" "$OUT"/*.log 2>/dev/null | grep -v scenario.log)
# LeakSanitizer's own crash (tests/lsan-tool-crash) is no finding, only
# a leak check that did not happen: said in the log, not a failure.
# Any other report in the same file still fails.
for r in $reports; do
    case $r in "$OUT"/asan.*) ;; *) continue ;; esac
    if "$LAB_REPO/tests/lsan-tool-crash" "$r"; then
        { echo "LeakSanitizer crashed in its tracer ($(basename "$r")): that nbdkit's leaks were not checked"
          cat "$r"; } >>"$OUT/scenario.log"
        mv "$r" "$OUT/lsan-tool-crash.$(basename "$r")"
    fi
done
reports=$(for r in $reports; do [ -e "$r" ] && echo "$r"; done)
if [ -n "$reports" ]; then
    { echo "sanitizer report:"; cat $reports; } >>"$OUT/scenario.log"
    echo "sanitizer report in $(echo $reports | sed "s|$OUT/||g")" >"$OUT/reason"
    [ "$rc" != 0 ] || rc=1
fi
# Soft-RoCE's own counters (retransmissions, RNR, duplicate requests),
# to explain an RDMA scenario's stall after the fact.
for d in /sys/class/infiniband/*/ports/*/hw_counters; do
    [ -d "$d" ] || continue
    echo "== $d"
    grep -H . "$d"/* 2>/dev/null | sed 's|.*/||'
done >"$OUT/rdma-counters" 2>&1
[ -s "$OUT/rdma-counters" ] || rm -f "$OUT/rdma-counters"
echo "$rc" >"$OUT/status"
echo "lab: scenario $LAB_NAME exited $rc" >/dev/console
exit "$rc"

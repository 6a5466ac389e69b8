#!/bin/bash
# The guest lab's sanitizer choice (tests/vm/lib/scenario.sh): a
# scenario's lab-sanitizer header, LAB_SANITIZE and LAB_TSAN overriding
# it, a bad value refused with the scenario named, and the job file the
# guest reads carrying the choice; and the guest's check (guest/lib.sh's
# sanitized) that a server said to run under a sanitizer really has its
# runtime loaded; and tests/lsan-tool-crash, which the lab and
# tests/run share.
. "$(dirname "$0")/functions.sh"
VM_DIR=$top/tests/vm REPO=$top
. "$top/tests/vm/lib/scenario.sh"
unset LAB_SANITIZE LAB_TSAN

# expect NAME WANT [VAR=VALUE...]: scenario_sanitizer NAME says WANT
# with those variables set.
expect() {
    local name=$1 want=$2 got
    shift 2
    got=$(env -u LAB_SANITIZE -u LAB_TSAN "$@" bash -c \
        'VM_DIR=$1; . "$2"; scenario_sanitizer "$3"' _ "$VM_DIR" \
        "$top/tests/vm/lib/scenario.sh" "$name") ||
        fail "$name ($*): scenario_sanitizer failed"
    [[ $got == "$want" ]] || fail "$name ($*): '$got', expected '$want'"
}

info "headers, and the variables over them"
expect rdma-restart asan
expect rdma-netloss tsan
expect rdma-basic none
expect rdma-basic asan LAB_SANITIZE=1
expect rdma-netloss asan LAB_SANITIZE=1
expect rdma-restart tsan LAB_TSAN=1
expect rdma-restart none LAB_SANITIZE=0
expect rdma-netloss none LAB_SANITIZE=0
expect rdma-basic none LAB_TSAN=0

info "a bad header is refused, naming the scenario and the value"
mkdir -p "$T/vm/scenarios"
printf '# lab-timeout: 60\n# lab-sanitizer: valgrind\ntrue\n' >"$T/vm/scenarios/bad.sh"
if msg=$(VM_DIR=$T/vm scenario_sanitizer bad 2>&1); then fail "accepted: $msg"; fi
[[ $msg == "scenario bad: lab-sanitizer 'valgrind' is none of asan, tsan, none" ]] ||
    fail "bad header: '$msg'"

info "the job file carries the choice, whatever the host's variables"
KDIR=/k DATASET=/d MANIFEST=/m
job=$(LAB_SANITIZE=1 LAB_FILES=3 scenario_job rdma-basic none)
[[ $job != *LAB_SANITIZE* && $job != *LAB_TSAN* ]] || fail "plain job: $job"
[[ $job == *"export LAB_FILES='3'"* ]] || fail "other knobs lost: $job"
job=$(scenario_job rdma-restart asan)
[[ $job == *"export LAB_SANITIZE=1"* && $job != *LAB_TSAN* ]] || fail "asan job: $job"
job=$(LAB_SANITIZE=1 scenario_job rdma-netloss tsan)
[[ $job == *"export LAB_TSAN=1"* && $job != *LAB_SANITIZE* ]] || fail "tsan job: $job"

info "LeakSanitizer's own crash, told from a finding (tests/lsan-tool-crash)"
crash="==1==LeakSanitizer has encountered a fatal error."
printf 'Tracer caught signal 11: addr=0xb0 pc=0x1 sp=0x2\n%s\n' "$crash" >"$T/crash"
printf '%s\n==1==ERROR: LeakSanitizer: detected memory leaks\n' "$crash" >"$T/leak"
printf '%s\nbad.c:3:5: runtime error: signed integer overflow\n' "$crash" >"$T/ub"
printf '==1==ERROR: AddressSanitizer: heap-use-after-free\n' >"$T/uaf"
"$top/tests/lsan-tool-crash" "$T/crash" || fail "the tracer's crash alone is not recognised"
for f in leak ub uaf; do
    "$top/tests/lsan-tool-crash" "$T/$f" && fail "a finding ($f) taken for the tracer's crash"
    "$top/tests/lsan-tool-crash" "$T/crash" "$T/$f" && fail "a finding ($f) beside the crash ignored"
done
"$top/tests/lsan-tool-crash" && fail "no report at all taken for the tracer's crash"

info "the guest's check: the runtime must be loaded in the server"
require gcc
asan=$(gcc -print-file-name=libasan.so)
[[ -e $asan ]] || skip "no libasan ($asan)"
sed -n '/^sanitized() {/,/^}/p' "$top/tests/vm/guest/lib.sh" >"$T/sanitized.sh"
[[ -s $T/sanitized.sh ]] || fail "no sanitized() in tests/vm/guest/lib.sh"
sleep 60 &
plain=$!
LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0 sleep 60 &
sanitized_pid=$!
echo "$plain" >"$T/plain.pid"
echo "$sanitized_pid" >"$T/san.pid"
# check NAME [VAR=VALUE...]: sanitized NAME in a fresh shell with
# those variables set.
check() {
    local name=$1
    shift
    env -u LAB_SANITIZE -u LAB_TSAN LAB_RUN="$T" "$@" bash -c \
        'fail() { echo "$*"; exit 1; }; . "$1"; sanitized "$2"' _ "$T/sanitized.sh" "$name"
}
for _ in $(seq 50); do
    grep -q libasan "/proc/$sanitized_pid/maps" 2>/dev/null && break
    sleep 0.1
done
out=$(check san LAB_SANITIZE=1) || fail "ASan server refused: $out"
out=$(check plain) || fail "no sanitizer, plain server refused: $out"
if out=$(check plain LAB_SANITIZE=1); then fail "plain server taken for ASan"; fi
[[ $out == *"plain: nbdkit (pid $plain) runs without libasan"* ]] || fail "message: '$out'"
if out=$(check san LAB_TSAN=1); then fail "ASan server taken for TSan"; fi
[[ $out == *"runs without libtsan"* ]] || fail "message: '$out'"
kill "$plain" "$sanitized_pid"
wait 2>/dev/null
echo PASS

# gmblock: helpers for the shell integration tests.  Source it first:
#     . "$(dirname "$0")/functions.sh"
# It gives each test a private temporary directory ($T), servers on
# private Unix sockets, and a cleanup that always runs: servers are
# stopped, mounts undone and loop devices detached, even on failure.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH   # Debian's python for nbdsh
NBDKIT=$top/nbdkit
T=$(mktemp -d /var/tmp/gmblock-test.XXXXXX)

_servers=() _mounts=() _loops=() _pids=()

cleanup () {
    local rc=$? stop_failed=
    set +e
    # A server that fails its stop here (a crash, a sanitizer report)
    # fails the test, but must not end this trap: the servers after it
    # would keep running and $T would stay.
    fail () { echo "FAIL: $*" >&2; stop_failed=1; return 1; }
    for m in "${_mounts[@]}"; do umount -l "$m" 2>/dev/null; done
    for l in "${_loops[@]}"; do losetup -d "$l" 2>/dev/null; done
    for p in "${_pids[@]}"; do kill "$p" 2>/dev/null; done
    for s in "${_servers[@]}"; do stop_server "$s"; done
    [[ -z $stop_failed || ( $rc != 0 && $rc != 77 ) ]] || rc=1
    [[ -n ${KEEP_TMP:-} ]] || rm -rf "$T"
    exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail () { echo "FAIL: $*" >&2; exit 1; }
skip () { echo "SKIP: $*"; exit 77; }
# plain_run_only REASON: skip in the sanitizer and TSan runs, for a test
# that runs no module code of their builds (REASON says why).
plain_run_only () {
    [[ -z ${GMBLOCK_SANITIZE:-}${GMBLOCK_TSAN:-} ]] || skip "$*"
}
info () { echo "--- $*"; }

# require CMD...: every command must exist (make check installs them).
require () {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null || fail "$c is not installed (run scripts/install-deps.sh)"
    done
}

# start_server NAME [nbdkit options and plugin args...]
# Runs ./nbdkit in the foreground in the background on $T/NAME.sock,
# logging to $T/NAME.log; returns once the socket accepts connections.
start_server () {
    local name=$1; shift
    local sock=$T/$name.sock
    rm -f "$sock"
    "$NBDKIT" -f -U "$sock" -P "$T/$name.pid" "$@" >"$T/$name.log" 2>&1 &
    eval "_pid_$name=$!"
    _servers+=("$name")
    local i
    for i in $(seq 1 200); do
        if [[ -S $sock ]] && nbdinfo --size "$(uri "$name")" >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$(server_pid "$name")" 2>/dev/null; then
            cat "$T/$name.log" >&2
            fail "server $name exited during start-up"
        fi
        sleep 0.05
    done
    cat "$T/$name.log" >&2
    fail "server $name did not start"
}

server_pid () { eval "echo \${_pid_$1:-}"; }

# wait_idle NAME|ADDR: tests/wait-idle for server NAME's socket, or for
# ADDR (see there why).
wait_idle () {
    local a=$1
    [[ $a == */* || $a == *:* ]] || a=$T/$1.sock
    "$top/tests/wait-idle" "$a"
}

# RUN_SIZE: a --run command for a server on -U: nbdinfo --size, then
# wait-idle, so that nbdkit's quit at the command's exit does not come
# before the modules' .close for nbdinfo's connection.  (Under ASan its
# children used to carry the runtime, whose leak check at their exit
# hid that race.)
RUN_SIZE="nbdinfo --size \"\$uri\"; r=\$?; '$top/tests/wait-idle' \"\$unixsocket\"; exit \$r"

# await_exit NAME PID NBDKIT-PID: wait (10 s at most) for PID to end
# after a SIGTERM; a hang kills nbdkit and fails.
await_exit () {
    local i
    for i in $(seq 1 200); do
        kill -0 "$2" 2>/dev/null || return 0
        sleep 0.05
    done
    kill -KILL "$3" 2>/dev/null
    fail "server $1 did not exit on SIGTERM"
}

# Stop a server (SIGTERM: nbdkit unloads, which writes stats files),
# wait for it (10 s at most: a hang fails), and fail if it crashed (died
# of a signal) or a sanitizer or nbdkit reported one.  Sets server_rc
# to its exit status.
stop_server () {
    local name=$1 pid
    pid=$(server_pid "$name")
    [[ -n $pid ]] || return 0
    wait_idle "$name"
    kill -TERM "$pid" 2>/dev/null || true
    await_exit "$name" "$pid" "$pid"
    server_rc=0
    wait "$pid" 2>/dev/null || server_rc=$?
    eval "_pid_$name="
    if grep -qE 'AddressSanitizer|runtime error:|LeakSanitizer|Segmentation fault|assertion' "$T/$name.log"; then
        cat "$T/$name.log" >&2
        fail "server $name crashed or a sanitizer reported an error"
    fi
    # nbdkit exits on SIGTERM: ended by a signal, it crashed (a module's
    # .close or .unload), which its own log never says.  A test that
    # kills a server itself reaps it and clears _pid_NAME.
    if [[ $server_rc -gt 128 ]]; then
        cat "$T/$name.log" >&2
        fail "server $name died of signal $((server_rc - 128)) (exit $server_rc)"
    fi
}

# start_traced NAME SYSCALLS [nbdkit args...]: like start_server, with
# nbdkit under strace -f -e trace=SYSCALLS, which writes $T/NAME.strace
# as it goes.  Stop it with stop_traced NAME (strace itself would only
# detach on SIGTERM).  LeakSanitizer cannot run under ptrace: the
# sanitizer run keeps ASan and UBSan there and drops leak checking.
start_traced () {
    local name=$1 calls=$2 i; shift 2
    rm -f "$T/$name.sock" "$T/$name.pid" "$T/$name.strace"
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:detect_leaks=0} \
        strace -f -qq -e trace="$calls" -o "$T/$name.strace" \
        "$NBDKIT" -f -U "$T/$name.sock" -P "$T/$name.pid" "$@" >"$T/$name.log" 2>&1 &
    eval "_traced_$name=$!"
    _pids+=($!)
    for i in $(seq 1 200); do
        if [[ -S $T/$name.sock ]] && nbdinfo --size "$(uri "$name")" >/dev/null 2>&1; then
            _pids+=("$(cat "$T/$name.pid")")    # strace only detaches on SIGTERM
            return 0
        fi
        kill -0 $! 2>/dev/null || break
        sleep 0.05
    done
    cat "$T/$name.log" >&2
    fail "traced server $name did not start"
}

stop_traced () {
    local name=$1 pid nbd
    wait_idle "$name"
    nbd=$(cat "$T/$name.pid")
    kill -TERM "$nbd" 2>/dev/null || true
    pid=$(eval "echo \$_traced_$name")
    await_exit "$name" "$pid" "$nbd"
    local keep=() p                     # gone: not to be signalled again
    for p in "${_pids[@]}"; do [[ $p == "$nbd" || $p == "$pid" ]] || keep+=("$p"); done
    _pids=("${keep[@]}")
    wait "$pid" || fail "traced server $name exited $? on SIGTERM"
    if grep -qE 'AddressSanitizer|runtime error:|Segmentation fault|assertion' "$T/$name.log"; then
        cat "$T/$name.log" >&2
        fail "traced server $name crashed or a sanitizer reported an error"
    fi
}

# NBD URI of a server started with start_server.
uri () { echo "nbd+unix:///?socket=$T/$1.sock"; }

# Value of one counter in a stats file: counter FILE NAME; ccounter for
# gmblock-cache's.
counter () { awk -v k="gmblock.$2" '$1 == k { print $2 }' "$1"; }
ccounter () { awk -v k="gmblock-cache.$2" '$1 == k { print $2 }' "$1"; }

# nbdsh with Debian's python (the libnbd module lives there).
nbdsh () { /usr/bin/python3 -m nbd "$@"; }

# A random file of the given size: randfile PATH SIZE
randfile () { head -c "$2" /dev/urandom >"$1"; }

# Attach a loop device and remember to detach it; sets LOOP.
# (Not usable as $(loopdev ...): the subshell would forget it.)
#     loopdev FILE [losetup options]
loopdev () {
    local f=$1; shift
    LOOP=$(losetup -f --show "$@" "$f") || fail "losetup $* $f failed"
    _loops+=("$LOOP")
}

track_mount () { _mounts+=("$1"); }
track_pid () { _pids+=("$1"); }

# start_fails NAME PATTERN... -- [nbdkit options and plugin args...]
# nbdkit must refuse to start: exit non-zero (not by a signal, not
# hanging: 20 s at most), with stderr (kept in $T/NAME.err) matching
# every PATTERN (extended regex, case-insensitive).
start_fails () {
    local name=$1; shift
    local pats=() rc=0 p
    while [[ $# -gt 0 && $1 != -- ]]; do pats+=("$1"); shift; done
    [[ ${1:-} == -- ]] && shift
    timeout -k 5 20 "$NBDKIT" -f -U "$T/$name.sock" "$@" \
        >"$T/$name.err" 2>&1 </dev/null || rc=$?
    case $rc in
        0)   fail "$name: nbdkit exited 0 instead of refusing: $*" ;;
        124|137) fail "$name: nbdkit did not refuse within 20 s (hung or started): $*" ;;
    esac
    if [[ $rc -gt 128 ]]; then
        cat "$T/$name.err" >&2; fail "$name: nbdkit died of signal $((rc - 128))"
    fi
    if grep -qE 'AddressSanitizer|runtime error:|LeakSanitizer' "$T/$name.err"; then
        cat "$T/$name.err" >&2; fail "$name: a sanitizer reported an error"
    fi
    for p in "${pats[@]}"; do
        grep -qiE -- "$p" "$T/$name.err" ||
            { cat "$T/$name.err" >&2; fail "$name: message does not match /$p/"; }
    done
    info "$name refused (exit $rc): $(grep -m1 -i error "$T/$name.err" || head -n1 "$T/$name.err")"
}

# refused_early NAME PATTERN... -- NBDKIT-ARGS...
# Like start_fails, for nbdkit's two ways of starting that fork first:
# with --run, and as a daemon (no -f).  A module that refuses only
# after the fork (.after_fork) makes nbdkit 1.32 wait for ever on the
# --run command, and exit 0 as a daemon with the error in syslog.
refused_early () {
    local name=$1; shift
    local pats=() rc p mode i
    while [[ $# -gt 0 && $1 != -- ]]; do pats+=("$1"); shift; done
    [[ ${1:-} == -- ]] && shift
    for mode in run daemon; do
        rc=0
        if [[ $mode == run ]]; then
            timeout -k 5 20 "$NBDKIT" -U - --run true "$@" \
                >"$T/$name.$mode.err" 2>&1 </dev/null || rc=$?
        else
            timeout -k 5 20 "$NBDKIT" -U "$T/$name.sock" -P "$T/$name.pid" "$@" \
                >"$T/$name.$mode.err" 2>&1 </dev/null || rc=$?
            # Had it started after all, stop it (nbdkit 1.32's daemon
            # writes its pidfile after the parent has exited).
            if [[ $rc == 0 ]]; then
                for i in $(seq 50); do [[ -s $T/$name.pid ]] && break; sleep 0.1; done
            fi
            [[ -s $T/$name.pid ]] && kill "$(cat "$T/$name.pid")" 2>/dev/null
        fi
        case $rc in
            0)   fail "$name ($mode): nbdkit exited 0 instead of refusing: $*" ;;
            124|137) fail "$name ($mode): nbdkit did not refuse within 20 s (hung): $*" ;;
        esac
        [[ $rc -gt 128 ]] && { cat "$T/$name.$mode.err" >&2; fail "$name ($mode): nbdkit died of signal $((rc - 128))"; }
        for p in "${pats[@]}"; do
            grep -qiE -- "$p" "$T/$name.$mode.err" ||
                { cat "$T/$name.$mode.err" >&2; fail "$name ($mode): message does not match /$p/"; }
        done
    done
    info "$name refused with --run and as a daemon: $(grep -m1 -i error "$T/$name.run.err")"
}

# Undo one loop device, mount or background process now (instead of at
# exit) and forget it, so the exit cleanup cannot hit a loop device or
# pid that someone else got meanwhile.
#     loopdev_detach DEV     umount_now DIR     kill_now PID
loopdev_detach () {
    local l keep=()
    losetup -d "$1" || fail "losetup -d $1 failed"
    for l in "${_loops[@]}"; do [[ $l == "$1" ]] || keep+=("$l"); done
    _loops=("${keep[@]}")
}
umount_now () {
    local m keep=()
    umount "$1" || fail "umount $1 failed"
    for m in "${_mounts[@]}"; do [[ $m == "$1" ]] || keep+=("$m"); done
    _mounts=("${keep[@]}")
}
kill_now () {
    local p keep=()
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    for p in "${_pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    _pids=("${keep[@]}")
}

# fault_shim: build tests/fault-syscalls.c (makes the plugin's system
# calls fail or wait on cue) into $T/fault.so, with $T/faults for its
# flag files; serve under it with
#     FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so start_server ...
fault_shim () {
    require gcc
    gcc -shared -fPIC -O2 -o "$T/fault.so" "$top/tests/fault-syscalls.c" -ldl ||
        fail "cannot build tests/fault-syscalls.c"
    mkdir -p "$T/faults"
}

# serve_faults NAME FILE [plugin args...]: gmblock on FILE as server NAME
# under the fault shim (fault_shim first), every fault off and its log
# empty, ring=none (the plugin's own system calls), counters in
# $T/NAME.stats.
serve_faults () {
    local name=$1 file=$2; shift 2
    rm -f "$T"/faults/*
    FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so start_server "$name" \
        gmblock file="$file" ring=none stats="$T/$name.stats" "$@"
}

# cache_over_faults MODE: serve a 4M file through gmblock-cache in MODE
# on server MODE, nbdkit's file plugin below with the fault shim
# (fault_shim first; faults in $T/faults, counters in $T/MODE.stats).
cache_over_faults () {
    truncate -s 4M "$T/$1.img"
    FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so \
        start_server "$1" --filter=gmblock-cache file "$T/$1.img" \
        cache-mode="$1" cache-stats="$T/$1.stats"
}

# Run the servers of this test as user nobody: the build's modules (and
# the sanitizer shim) are copied where nobody can read them, wherever the
# checkout lives (a CI checkout may sit in a directory only root can
# enter), and NBDKIT becomes a wrapper that drops privileges.
# Sets AS_NOBODY (the setpriv command) for other uses.
AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
use_nobody () {
    local bld=${GMBLOCK_BUILDDIR:-$top} tree=$T/nobody-tree f
    chmod 1777 "$T"             # nobody creates its sockets here
    mkdir -p "$tree"
    cp "$top/nbdkit" "$tree/nbdkit"
    (cd "$bld" && for f in plugins/*/*.so filters/*/*.so tests/*.so; do
        if [[ -f $f ]]; then cp --parents "$f" "$tree/"; fi; done)
    chmod -R a+rX "$tree"
    cat >"$T/nbdkit-nobody" <<EOS
#!/bin/bash
export GMBLOCK_BUILDDIR=$tree GMBLOCK_PRELOAD="${GMBLOCK_PRELOAD:+${GMBLOCK_PRELOAD//$bld/$tree}}"
exec ${AS_NOBODY[*]} $tree/nbdkit "\$@"
EOS
    chmod 0755 "$T/nbdkit-nobody"
    NBDKIT=$T/nbdkit-nobody
}

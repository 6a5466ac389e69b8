#!/bin/bash
# The systemd units of contrib/systemd.  systemd-analyze verify accepts
# them.  The service's ExecStartPre= and ExecStart=, taken from the unit
# file with an /etc/gmblock/NAME.conf made from example.conf, run as
# systemd would run them, with the socket passed by
# systemd-socket-activate (LISTEN_FDS): nbdinfo sees the export, nbdcopy
# writes and reads back the same bytes, later clients are served by the
# same nbdkit, the data survives a crash and a re-activation on TCP, and
# SIGTERM (systemctl stop) ends it cleanly.  A conf without DEVICE=
# fails with a message that names it.  (No systemd runs here as PID 1.)
. "$(dirname "$0")/functions.sh"
require systemd-socket-activate systemd-analyze man nbdinfo nbdcopy python3 cmp
bld=${GMBLOCK_BUILDDIR:-$top}
units=$top/contrib/systemd
exec_of=$top/tests/systemd-exec.py

# make install puts the units where systemd looks; systemd-analyze
# verify accepts the installed ones (any warning fails), and the man
# pages of their Documentation= exist, in the build's man/ or the
# system's (man -w: verify's own check renders each, which is slow).
make -s -C "$top" B="$bld" ${GMBLOCK_SANITIZE:+SANITIZE=1} ${GMBLOCK_TSAN:+TSAN=1} install DESTDIR="$T/root" >"$T/install.log" 2>&1 ||
    fail "make install: $(cat "$T/install.log")"
udir=$T/root/usr/local/lib/systemd/system
for f in gmblock@.service gmblock@.socket; do
    cmp "$units/$f" "$udir/$f" || fail "make install did not install $f into $udir"
done
for f in README.md example.conf; do
    cmp "$units/$f" "$T/root/usr/local/share/doc/gmblock/systemd/$f" ||
        fail "make install did not install the units' $f into DOCDIR"
done
# PREFIX= moves what is not nbdkit's; uninstall takes back all it put.
make -s -C "$top" B="$bld" ${GMBLOCK_SANITIZE:+SANITIZE=1} ${GMBLOCK_TSAN:+TSAN=1} install \
    DESTDIR="$T/opt" PREFIX=/opt/gm >"$T/install2.log" 2>&1 || fail "make install PREFIX=: $(cat "$T/install2.log")"
[[ -f $T/opt/opt/gm/lib/systemd/system/gmblock@.service && -x $T/opt/opt/gm/bin/gmblock-topology ]] ||
    fail "PREFIX=/opt/gm: $(cd "$T/opt" && find . -type f | head -5)"
make -s -C "$top" B="$bld" uninstall DESTDIR="$T/opt" PREFIX=/opt/gm >"$T/uninstall.log" 2>&1 ||
    fail "make uninstall: $(cat "$T/uninstall.log")"
left=$(cd "$T/opt" && find . -type f)
[[ -z $left ]] || fail "make uninstall left: $left"
out=$(systemd-analyze verify --man=no "$udir/gmblock@disk.service" \
      "$udir/gmblock@disk.socket" 2>&1) || fail "systemd-analyze verify: $out"
[[ -z $out ]] || fail "systemd-analyze verify warns: $out"
for d in $(sed -n 's/^Documentation=//p' "$units"/gmblock@.service "$units"/gmblock@.socket); do
    [[ $d =~ ^man:([a-z0-9.-]+)\(([0-9])\)$ ]] || fail "Documentation=$d: not man:PAGE(N)"
    MANPATH=$bld/man: man -w "${BASH_REMATCH[2]}" "${BASH_REMATCH[1]}" >/dev/null 2>&1 ||
        fail "Documentation=$d: no such man page"
done
info "make install: units in $udir; systemd-analyze verify: no warnings"

# conf NAME SED-SCRIPT: $T/etc/gmblock/NAME.conf, example.conf edited.
mkdir -p "$T/etc/gmblock"
conf () { sed "$2" "$units/example.conf" >"$T/etc/gmblock/$1.conf"; }

# unit NAME KEY: ExecStartPre, ExecStart or env of gmblock@NAME.service
# into the array $cmd.
unit () {
    "$exec_of" "$units/gmblock@.service" "$1" "$T" "$2" >"$T/cmd" ||
        fail "systemd-exec.py $1 $2 failed"
    mapfile -d '' cmd <"$T/cmd"
}

size=$((16 << 20))
randfile "$T/data" "$size"
truncate -s "$size" "$T/disk.img"
# A small cache and pool start fast (and show both lists split into words).
conf disk "s|^DEVICE=.*|DEVICE=$T/disk.img|
\$a NBDKIT_ARGS=\"-t 4\"\\
GMBLOCK_ARGS=\"cache-size=8M pool-size=4M\""

unit disk env; envs=("${cmd[@]}")
unit disk ExecStartPre; pre=("${cmd[@]}")
unit disk ExecStart; argv=("${cmd[@]}")
info "ExecStart: ${argv[*]}"
[[ ${argv[0]} == /usr/bin/nbdkit ]] || fail "ExecStart runs ${argv[0]}, not /usr/bin/nbdkit"
want=(-f -t 4 --filter=gmblock-readahead --filter=gmblock-cache gmblock "file=$T/disk.img" cache-size=8M pool-size=4M)
[[ ${#argv[@]} == $((${#want[@]} + 1)) && "${argv[*]:1}" == "${want[*]}" ]] ||
    fail "ExecStart does not serve DEVICE with the recommended stack and the conf's arguments: ${argv[*]}"
argv[0]=$NBDKIT                 # this tree's modules, by their short names

env -i "${envs[@]}" "${pre[@]}" >"$T/pre.log" 2>&1 ||
    fail "ExecStartPre failed with DEVICE set: $(cat "$T/pre.log")"

# pass_env: the -E options that give ExecStart the service's
# environment ($envs) and what runs this tree's build.
pass_env () {
    local e v
    pass=(-E PATH)
    for e in "${envs[@]}"; do pass+=(-E "$e"); done
    for v in GMBLOCK_BUILDDIR GMBLOCK_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
        if [[ -n ${!v:-} ]]; then pass+=(-E "$v"); fi
    done
}
pass_env

# activate NAME ADDR [PREFIX...]: systemd-socket-activate listens on
# ADDR and execs ExecStart at the first connection, in the same process
# ($act, or its child when PREFIX runs it).
activate () {
    local name=$1 addr=$2 i; shift 2
    "$@" systemd-socket-activate -l "$addr" "${pass[@]}" "${argv[@]}" >"$T/$name.log" 2>&1 &
    act=$!
    track_pid "$act"
    for i in $(seq 1 100); do
        grep -q '^Listening on' "$T/$name.log" && return 0
        kill -0 "$act" 2>/dev/null || break
        sleep 0.05
    done
    cat "$T/$name.log" >&2
    fail "$name: systemd-socket-activate did not listen on $addr"
}

# is_nbdkit PID: the activated process is nbdkit itself, still running.
is_nbdkit () { [[ $(ps -o comm= -p "$1") == nbdkit ]]; }

sock=$T/gmblock.sock
u="nbd+unix:///?socket=$sock"
activate unix "$sock"
got=$(nbdinfo --size "$u") || fail "nbdinfo on the activated socket: $(cat "$T/unix.log")"
[[ $got == "$size" ]] || fail "nbdinfo: size $got, expected $size"
is_nbdkit "$act" || fail "the activated process is not nbdkit: $(cat "$T/unix.log")"
pid=$act
info "nbdinfo: $got bytes from nbdkit $pid, activated on $sock"

nbdcopy "$T/data" "$u" || fail "nbdcopy write"
nbdcopy "$u" "$T/back" || fail "nbdcopy read back"
cmp "$T/data" "$T/back" || fail "read back differs from what was written"
cmp "$T/data" "$T/disk.img" || fail "DEVICE differs from what was written"
info "nbdcopy: $size bytes written and read back identical, on DEVICE too"
[[ $(nbdinfo --size "$u") == "$size" ]] || fail "a client after the others failed"
kill -0 "$pid" 2>/dev/null && is_nbdkit "$pid" || fail "nbdkit $pid is gone"
info "four clients in turn, all served by nbdkit $pid"

# A crash (Restart=on-failure), then activation again, on TCP.
kill -KILL "$pid"; kill_now "$pid"    # reaped and forgotten
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
activate tcp "127.0.0.1:$port"
rm -f "$T/back"
nbdcopy "nbd://127.0.0.1:$port" "$T/back" || fail "nbdcopy over TCP: $(cat "$T/tcp.log")"
cmp "$T/data" "$T/back" || fail "data differs after the restart"
info "after SIGKILL and re-activation on 127.0.0.1:$port: data read back identical"

# systemctl stop: SIGTERM, exit 0.
wait_idle "127.0.0.1:$port"
kill -TERM "$act"
rc=0; timeout 10 tail --pid="$act" -f /dev/null || fail "nbdkit did not exit on SIGTERM"
wait "$act" || rc=$?
[[ $rc == 0 ]] || fail "nbdkit exited $rc on SIGTERM: $(cat "$T/tcp.log")"
kill_now "$act"
info "SIGTERM: nbdkit exited 0"

# SystemCallFilter= and RestrictAddressFamilies= (systemd kills a
# service at a system call outside its filter): nbdkit, traced from its
# exec while it serves a write and a read, makes only the calls that the
# unit's filter allows (its groups expanded by systemd-analyze) and
# opens sockets only of the families the unit allows.  Not in the
# sanitizer or TSan runs, whose runtimes make calls of their own.
# filter_calls WORD...: the system calls a SystemCallFilter= list allows.
filter_calls () {
    local w
    for w in "$@"; do
        if [[ $w == @* ]]; then
            # shellcheck disable=SC2046
            filter_calls $(systemd-analyze syscall-filter "$w" |
                           awk 'NR > 1 && $1 !~ /^#/ { print $1 }')
        else
            echo "$w"
        fi
    done
}
# unit_value KEY: the value of KEY= in the service unit.
unit_value () { sed -n "s/^$1=//p" "$units/gmblock@.service"; }

if [[ -z ${GMBLOCK_SANITIZE:-}${GMBLOCK_TSAN:-} ]]; then
    require strace
    words=$(unit_value SystemCallFilter)
    [[ -n $words && $words != "~"* ]] || fail "no allow-list SystemCallFilter= in the unit"
    # shellcheck disable=SC2086
    filter_calls $words | sort -u >"$T/allowed"
    [[ $(wc -l <"$T/allowed") -gt 100 ]] || fail "SystemCallFilter=$words: too few calls: $(cat "$T/allowed")"
    activate traced "$T/traced.sock" strace -f -qq -o "$T/strace.log"
    u="nbd+unix:///?socket=$T/traced.sock"
    randfile "$T/data4" 4M
    nbdcopy "$T/data4" "$u" && nbdcopy "$u" "$T/back4" || fail "nbdcopy under strace: $(cat "$T/traced.log")"
    cmp -n 4M "$T/data4" "$T/back4" || fail "read back differs under strace"
    pid=$(pgrep -P "$act") && is_nbdkit "$pid" || fail "no nbdkit under strace"
    wait_idle "$T/traced.sock"
    kill -TERM "$pid"
    rc=0; wait "$act" || rc=$?
    [[ $rc == 0 ]] || fail "nbdkit under strace exited $rc: $(cat "$T/traced.log")"
    kill_now "$act"
    awk '/^[0-9]+ +execve\("\/usr\/bin\/nbdkit"/ { on = 1 } on' "$T/strace.log" >"$T/nbdkit.strace"
    [[ -s $T/nbdkit.strace ]] || fail "strace saw no exec of /usr/bin/nbdkit"
    grep -oE '^[0-9]+ +[a-z0-9_]+\(' "$T/nbdkit.strace" | sed 's/.* //; s/($//' | sort -u >"$T/made"
    grep -qx io_uring_enter "$T/made" || fail "strace saw no io_uring_enter: nothing was checked"
    bad=$(comm -23 "$T/made" "$T/allowed")
    [[ -z $bad ]] || fail "nbdkit made system calls SystemCallFilter= does not allow:" $bad
    fams=$(grep -oE '^[0-9]+ +socket\(AF_[A-Z0-9]+' "$T/nbdkit.strace" | sed 's/.*(//' | sort -u || true)
    for f in $fams; do
        [[ " $(unit_value RestrictAddressFamilies) " == *" $f "* ]] ||
            fail "nbdkit opened an $f socket, not in RestrictAddressFamilies="
    done
    info "strace: nbdkit made $(wc -l <"$T/made") distinct system calls, all in SystemCallFilter=; sockets opened:" ${fams:-none}
fi

# A conf without DEVICE=: ExecStartPre refuses and says why; nbdkit
# alone (were ExecStartPre dropped) refuses too.
conf nodev '/^DEVICE=/d'
unit nodev env; envs=("${cmd[@]}")
unit nodev ExecStartPre
rc=0; env -i "${envs[@]}" "${cmd[@]}" >"$T/nodev.err" 2>&1 || rc=$?
[[ $rc != 0 ]] || fail "ExecStartPre accepted a conf without DEVICE="
grep -q "gmblock@nodev: DEVICE= is not set in /etc/gmblock/nodev.conf" "$T/nodev.err" ||
    fail "ExecStartPre's message: $(cat "$T/nodev.err")"
info "no DEVICE=, ExecStartPre exit $rc: $(cat "$T/nodev.err")"
unit nodev ExecStart; argv=("${cmd[@]}"); argv[0]=$NBDKIT
pass_env
activate nodev "$T/nodev.sock"
nbdinfo --size "nbd+unix:///?socket=$T/nodev.sock" >/dev/null 2>&1 &&
    fail "nbdkit served without DEVICE="
rc=0; timeout 10 tail --pid="$act" -f /dev/null || fail "nbdkit without DEVICE= did not exit"
wait "$act" || rc=$?
[[ $rc != 0 && $rc -lt 128 ]] || fail "nbdkit without DEVICE= exited $rc"
kill_now "$act"
grep -q "file= is empty" "$T/nodev.log" || fail "nbdkit's message: $(cat "$T/nodev.log")"
info "no DEVICE=, nbdkit exit $rc: $(grep -m1 error "$T/nodev.log")"
echo PASS

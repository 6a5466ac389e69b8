#!/bin/bash
# The README's first command: `make serve` builds, makes the demo disk
# (256M, ext4, a README inside) unless FILE= is given, serves it on
# localhost with the recommended stack and prints how to connect; the
# printed commands work; Ctrl-C (SIGINT) stops it. FILE= and
# STACK=plain serve a given file (written through it, byte for byte;
# its name may have spaces);
# a bad STACK= and a port already in use fail with a message.
. "$(dirname "$0")/functions.sh"
require make nbdinfo nbdcopy qemu-img e2fsck debugfs ss
plain_run_only "make serve builds and serves the plain build: the plain run tests it"
cd "$T"

free_port () { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# serve NAME PORT [make variables...]: make serve in its own session in
# the background; returns once the port answers.
serve () {
    local name=$1 port=$2 i; shift 2
    setsid make -C "$top" --no-print-directory serve PORT="$port" "$@" \
        >"$T/$name.out" 2>&1 </dev/null &
    eval "sid_$name=$!"
    for i in $(seq 1 600); do
        if nbdinfo --size "nbd://127.0.0.1:$port" >/dev/null 2>&1; then
            # make and nbdkit: the cleanup stops them whatever happens.
            _pids+=($(pgrep -s "$(eval "echo \$sid_$name")"))
            return 0
        fi
        kill -0 "$(eval "echo \$sid_$name")" 2>/dev/null ||
            { cat "$T/$name.out" >&2; fail "$name: make serve exited before serving"; }
        sleep 0.1
    done
    cat "$T/$name.out" >&2
    fail "$name: nothing served on port $port after 60 s"
}

# stop NAME PORT: Ctrl-C, as a user would; make serve must end soon.
stop () {
    local name=$1 port=$2 sid i
    sid=$(eval "echo \$sid_$name")
    # No client may be left connected (nbdkit waits for them).
    for i in $(seq 1 50); do
        ss -tanH "( sport = :$port )" | grep -q ESTAB || break
        sleep 0.1
    done
    kill -INT -- "-$sid"
    for i in $(seq 1 100); do
        kill -0 "$sid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$sid" 2>/dev/null && fail "$name: make serve still runs 10 s after Ctrl-C"
    wait "$sid" 2>/dev/null || true
}

# 1. The demo disk, the recommended stack, the printed commands.
port=$(free_port)
serve demo "$port"
grep -q "nbdkit --filter=gmblock-readahead --filter=gmblock-cache gmblock file=$top/demo/disk.img" demo.out ||
    { cat demo.out >&2; fail "demo: the banner does not show the recommended stack"; }
uri=nbd://127.0.0.1:$port
for cmd in "nbdinfo $uri" "qemu-img info $uri" "nbdcopy $uri copy.img"; do
    grep -qF "    $cmd" demo.out || fail "demo: the banner does not print '$cmd'"
    $cmd >/dev/null || fail "demo: the printed command failed: $cmd"
done
[[ $(stat -c %s copy.img) == $((256 << 20)) ]] || fail "demo: the disk is not 256M"
e2fsck -fn copy.img >/dev/null 2>&1 || fail "demo: the demo disk's ext4 is not clean"
debugfs -R "cat /README.txt" copy.img 2>/dev/null | grep -q "Hello from gmblock" ||
    fail "demo: README.txt is not on the demo disk"
# 2. A port already in use: a message and a non-zero exit.
if make -C "$top" --no-print-directory serve PORT="$port" >busy.out 2>&1 </dev/null; then
    fail "busy port: a second make serve on port $port succeeded"
fi
grep -qi "address already in use" busy.out || { cat busy.out >&2; fail "busy port: no clear message"; }
stop demo "$port"
info "demo: served $top/demo/disk.img, the printed commands work, Ctrl-C stops it"

# 3. FILE= and STACK=plain: written through, byte for byte.
randfile new.img $((8 << 20))
truncate -s $((8 << 20)) given.img
port=$(free_port)
serve given "$port" FILE="$T/given.img" STACK=plain
grep -q "nbdkit  gmblock file=$T/given.img" given.out || { cat given.out >&2; fail "given: the banner does not show the plain stack"; }
nbdcopy new.img "nbd://127.0.0.1:$port"
stop given "$port"
cmp new.img given.img || fail "given: the file differs from what was written through make serve"
info "FILE= STACK=plain: 8M written through, byte for byte"

# 3b. A FILE= whose name has a space is one file, not two arguments.
truncate -s $((8 << 20)) "my disk.img"
port=$(free_port)
serve spaced "$port" FILE="$T/my disk.img" STACK=plain
[[ $(nbdinfo --size "nbd://127.0.0.1:$port") == $((8 << 20)) ]] || fail "spaced: wrong size served"
stop spaced "$port"
info "FILE= with a space in the name: served"

# 4. A bad STACK=.
if make -C "$top" --no-print-directory serve STACK=fast FILE="$T/given.img" >bad.out 2>&1 </dev/null; then
    fail "STACK=fast was accepted"
fi
grep -q "STACK=fast: expected full or plain" bad.out || { cat bad.out >&2; fail "STACK=fast: no clear message"; }
info "STACK=fast refused: $(grep STACK= bad.out)"

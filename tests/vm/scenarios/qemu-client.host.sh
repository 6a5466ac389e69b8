# Host side of qemu-client: serve an image with gmblock for QEMU to boot
# with, then verify what the guest left in it: fsck, and every file of
# the dataset read back through gmblock (nbdcopy) and compared with the
# manifest. Sourced by lib/scenario.sh.

host_serve() {
    rm -f "$1/gm.pid" "$1/gm.sock"
    "$REPO/nbdkit" -f -P "$1/gm.pid" -U "$1/gm.sock" gmblock file="$1/served.img" \
        stats="$1/$2.stats" >>"$1/$2.nbdkit.log" 2>&1 &
    for i in $(seq 100); do
        [ -s "$1/gm.pid" ] && return 0
        kill -0 $! 2>/dev/null || break
        sleep 0.1
    done
    echo "gmblock did not start on the host (see $1/$2.nbdkit.log)"
    return 1
}

# host_stop DIR: stop the server; on failure return 1 with the reason in
# host_stop_err. Bounded: a server that hangs at exit must fail the
# scenario, not hang the lab (LAB_BUDGET bounds only the guests); and one
# that died of a signal crashed.
host_stop() {
    [ -s "$1/gm.pid" ] || return 0
    pid=$(cat "$1/gm.pid") rc=0 host_stop_err=
    kill "$pid" 2>/dev/null
    for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        host_stop_err="gmblock on the host did not exit within 30 s of SIGTERM"
    fi
    wait "$pid" 2>/dev/null || rc=$?
    rm -f "$1/gm.pid"
    [ -n "$host_stop_err" ] || [ "$rc" -le 128 ] ||
        host_stop_err="gmblock on the host died of signal $((rc - 128))"
    [ -z "$host_stop_err" ]
}

host_fail() { echo "$2" >"$1/host.reason"; echo "FAIL: $2"; return 1; }

host_before() {
    truncate -s 256M "$1/served.img" || return 1
    host_serve "$1" host-write || return 1
    HOST_DISKS="nbd:nbd+unix:///?socket=$1/gm.sock"
}

host_after() {
    d=$1
    host_stop "$d" || host_fail "$d" "$host_stop_err" || return 1
    w=$(sed -n 's/^gmblock\.write_bytes //p' "$d/host-write.stats")
    echo "the guest wrote ${w:-?} bytes through gmblock"
    [ "${w:-0}" -gt 0 ] || host_fail "$d" "no writes reached gmblock" || return 1
    e2fsck -fn "$d/served.img" || host_fail "$d" "e2fsck -fn of the image found problems" || return 1
    if [ "${LAB_CORRUPT:-0}" = 1 ]; then
        blk=$(debugfs -R "bmap /big.bin 3" "$d/served.img" 2>/dev/null)
        bs=$(dumpe2fs -h "$d/served.img" 2>/dev/null | sed -n 's/^Block size: *//p')
        echo "LAB_CORRUPT=1: flipping a byte of big.bin (block $blk) in the image"
        /usr/bin/python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
off = int(sys.argv[2])
os.pwrite(fd, bytes([os.pread(fd, 1, off)[0] ^ 0xff]), off)' "$d/served.img" $((blk * bs + 123))
    fi
    # Read the whole image back through gmblock, read-only this time.
    host_serve "$d" host-read || return 1
    timeout 120 nbdcopy "nbd+unix:///?socket=$d/gm.sock" "$d/readback.img" ||
        host_fail "$d" "nbdcopy from gmblock failed" || return 1
    host_stop "$d" || host_fail "$d" "$host_stop_err" || return 1
    qemu-img compare -q -f raw -F raw "$d/served.img" "$d/readback.img" ||
        host_fail "$d" "what gmblock reads back differs from the image" || return 1
    rm -rf "$d/extract"
    mkdir "$d/extract"
    debugfs -R "rdump / $d/extract" "$d/readback.img" >/dev/null 2>&1
    bad=$(cd "$d/extract" 2>&1 && md5sum -c --quiet "$MANIFEST" 2>&1 | grep -v WARNING | head -n 3)
    bad=$(echo $bad)
    [ -z "$bad" ] || host_fail "$d" "checksum mismatch in the image: $bad" || return 1
    echo "all $(wc -l <"$MANIFEST") files match in the image"
}

host_cleanup() {
    host_stop "$1"
    rm -rf "$1/extract" "$1/readback.img"
}

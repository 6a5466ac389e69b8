#!/bin/bash
# A file the server cannot open for writing, served without -r: a
# read-only loop device (losetup -r) and a file on a read-only bind
# mount.  The server must warn that it serves read-only, advertise
# read-only, refuse writes/trim/zero (EPERM or EROFS) and serve reads.
# Also -r on a writable file: writes refused, the file unchanged.
. "$(dirname "$0")/functions.sh"
require nbdinfo

randfile "$T/disk.img" 4M
sum=$(md5sum <"$T/disk.img")

check_ro () {
    local s=$1 warn=$2
    local ro
    ro=$(nbdinfo --json "$(uri "$s")" |
         /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["exports"][0]["is_read_only"])')
    [[ $ro == True ]] || fail "$s: is_read_only is $ro"
    if [[ -n $warn ]]; then
        grep -q "gmblock: warning: .* is not writable .*: serving it read-only" "$T/$s.log" ||
            { cat "$T/$s.log"; fail "$s: no warning that it serves read-only"; }
        info "$s: $(grep warning "$T/$s.log")"
    fi
    /usr/bin/python3 "$top/tests/fault-nbd.py" - "$(uri "$s")" "$T/disk.img" <<'PY'
uri, orig = sys.argv[1], open(sys.argv[2], "rb").read()
for strict in (None, 0):          # libnbd's own check, then the server's
    E = (errno.EPERM, errno.EROFS)
    # libnbd itself refuses commands that are not advertised (EINVAL);
    # with strict mode off they reach the server, which must say EPERM
    # or EROFS.
    EZ = E + ((errno.EINVAL,) if strict is None else ())
    h = connect(uri, strict=strict)
    if h.is_read_only() != 1:
        die("not read-only")
    for off, n in [(0, 4096), (1000, 100), (len(orig) - 4096, 4096)]:
        expect_err(h, "pwrite", b"\x5a" * n, off, errnos=E)
        expect_err(h, "pwrite", b"\x5a" * n, off, errnos=E, flags=nbd.CMD_FLAG_FUA)
        expect_err(h, "zero", n, off, errnos=EZ)
        expect_err(h, "trim", n, off, errnos=EZ)
    expect_ok(h, "flush")
    data = b"".join(expect_ok(h, "pread", 1 << 20, o) for o in range(0, len(orig), 1 << 20))
    if data != orig:
        die("read back differs")
    h.shutdown()
PY
}

# 1. A read-only loop device.
loopdev "$T/disk.img" -r
start_server loop gmblock file="$LOOP" stats="$T/stats.loop"
check_ro loop warn
stop_server loop
[[ $(counter "$T/stats.loop" writes) == 0 ]] || fail "loop: a write reached the plugin"

# 2. A file on a read-only bind mount.
mkdir "$T/src" "$T/ro"
cp "$T/disk.img" "$T/src/disk.img"
mount --bind "$T/src" "$T/ro" || skip "cannot bind-mount"
track_mount "$T/ro"
mount -o remount,bind,ro "$T/ro" || fail "cannot remount the bind read-only"
touch "$T/ro/x" 2>/dev/null && fail "the bind mount is writable"
for d in true false; do
    start_server bind_$d gmblock file="$T/ro/disk.img" direct=$d
    check_ro bind_$d warn
    stop_server bind_$d
done
[[ $(md5sum <"$T/src/disk.img") == "$sum" ]] || fail "bind: the file changed"

# 3. -r on a writable file: no warning needed, writes refused.
start_server dash_r -r gmblock file="$T/disk.img" stats="$T/stats.r"
check_ro dash_r ""
stop_server dash_r
[[ $(md5sum <"$T/disk.img") == "$sum" ]] || fail "-r: the file changed"
[[ $(counter "$T/stats.r" writes) == 0 ]] || fail "-r: a write reached the plugin"

#!/bin/bash
# fio's nbd engine: 4 jobs (4 connections), iodepth 16, random writes
# over 64 MiB with verify=crc32c, then a verify-only pass against a
# restarted server, and a negative control: one byte changed in the
# backing store must make verification fail.  On a file (4k and mixed
# block sizes), page-cache mode and a 4096-byte-sector loop device.
. "$(dirname "$0")/functions.sh"
require fio losetup
cd "$T"

# fio_run NAME LOG [extra fio options...]: run the job against server
# NAME; the job's JSON report goes to $T/LOG.json, its exit status is
# returned.
fio_run () {
    local name=$1 log=$2; shift 2
    local rc=0
    fio --name=w --ioengine=nbd --uri="$(uri "$name")" --rw=randwrite \
        --iodepth=16 --numjobs=4 --size=16M --offset_increment=16M \
        --verify=crc32c --verify_fatal=1 --do_verify=1 --group_reporting=1 \
        --randseed=1234 --verify_state_save=0 --output-format=json --output="$T/$log.json" \
        "$@" >"$T/$log.out" 2>&1 || rc=$?
    return $rc
}

# fio_ok LOG READ_BYTES WRITE_BYTES: no errors, the expected volume.
fio_ok () {
    /usr/bin/python3 - "$T/$1.json" "$2" "$3" <<'EOF' || { cat "$T/$1.out" >&2; fail "fio $1: bad report"; }
import json, sys
r = json.load(open(sys.argv[1]))
want_r, want_w = int(sys.argv[2]), int(sys.argv[3])
for j in r["jobs"]:
    got_r, got_w = j["read"]["io_bytes"], j["write"]["io_bytes"]
    assert j["error"] == 0, f"job error {j['error']}"
    # (verify_only reports the writes it skipped as done)
    assert got_r == want_r and (want_w == 0 or got_w == want_w), \
        f"read {got_r} write {got_w}, expected {want_r} {want_w}"
EOF
    ! grep -qi 'verify' "$T/$1.out" || { cat "$T/$1.out" >&2; fail "fio $1: verify messages"; }
}

M=1048576
# run NAME BACKING [fio options...] -- [plugin options...]
run () {
    local name=$1 backing=$2; shift 2
    local fioopts=() rc
    while [[ $1 != -- ]]; do fioopts+=("$1"); shift; done
    shift
    start_server "$name" gmblock file="$backing" stats="$T/$name.stats" "$@"
    fio_run "$name" "$name-write" "${fioopts[@]}" || { cat "$T/$name-write.out" >&2; fail "$name: fio write+verify failed"; }
    fio_ok "$name-write" $((64 * M)) $((64 * M))
    stop_server "$name"
    [[ $(counter "$T/$name.stats" pool_in_use) == 0 ]] || fail "$name: pool buffers leaked"
    [[ $(counter "$T/$name.stats" errors) == 0 ]] || fail "$name: errors counted"

    # The data is still there after a server restart.
    start_server "$name" gmblock file="$backing" "$@"
    fio_run "$name" "$name-verify" --verify_only=1 "${fioopts[@]}" ||
        { cat "$T/$name-verify.out" >&2; fail "$name: fio verify-only failed"; }
    fio_ok "$name-verify" $((64 * M)) 0
    stop_server "$name"

    [[ $name == file ]] || { info "$name: ok"; return; }
    # Negative control (once): one changed byte must be caught.
    printf '\xff\x00\xff' | dd of="$backing" bs=1 seek=$((37 * M + 1000)) conv=notrunc,fsync status=none
    start_server "$name" gmblock file="$backing" "$@"
    if fio_run "$name" "$name-bad" --verify_only=1 "${fioopts[@]}"; then
        cat "$T/$name-bad.out" >&2
        fail "$name: fio did not notice a corrupted byte"
    fi
    grep -qi 'verify' "$T/$name-bad.out" || { cat "$T/$name-bad.out" >&2; fail "$name: fio failed, but not on verify"; }
    stop_server "$name"
    info "$name: ok"
}

truncate -s 64M "$T/file.img"
run file "$T/file.img" --bs=4k --
truncate -s 64M "$T/mixed.img"
run mixed "$T/mixed.img" --bssplit=512/20:4k/40:64k/30:1m/10 --
truncate -s 64M "$T/pc.img"
run pc "$T/pc.img" --bssplit=1k/50:12k/50 -- direct=false

truncate -s 64M "$T/l4k.img"
loopdev "$T/l4k.img" --direct-io=on --sector-size 4096
[[ $(blockdev --getss "$LOOP") == 4096 ]] || skip "loop device refused --sector-size 4096"
run l4k "$LOOP" --bssplit=4k/50:16k/30:128k/20 --

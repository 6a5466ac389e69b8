#!/bin/bash
# A real filesystem over gmblock: nbdfuse exposes the export as a file,
# a loop device turns that into a kernel block device, and ext4 goes on
# top.  Thousands of small files and a few large ones are written, the
# filesystem is unmounted and fsck.ext4 -fn must find it clean (through
# the server, and again on the backing store with the server stopped);
# after a fresh server and remount every checksum must match; the files
# are then changed, and the backing store mounted directly must hold
# exactly the new contents.  On a file export and on an export of a
# loop device with 4096-byte sectors.
. "$(dirname "$0")/functions.sh"
require nbdfuse losetup mkfs.ext4 fsck.ext4 sha256sum mount
[[ -c /dev/fuse ]] || skip "no /dev/fuse"

# client_up NAME BACKING [losetup options]: serve BACKING, mount it
# with nbdfuse, put a loop device on it; sets CLOOP.
client_up () {
    local name=$1 backing=$2; shift 2
    local i
    start_server "$name" gmblock file="$backing"
    mkdir -p "$T/fuse"
    nbdfuse "$T/fuse/disk" "$(uri "$name")" &
    FUSEPID=$!
    track_pid "$FUSEPID"
    track_mount "$T/fuse"
    for i in $(seq 1 100); do
        [[ -e $T/fuse/disk ]] && break
        kill -0 "$FUSEPID" 2>/dev/null || fail "nbdfuse exited"
        sleep 0.1
    done
    [[ -e $T/fuse/disk ]] || fail "nbdfuse did not show the disk"
    loopdev "$T/fuse/disk" "$@"
    CLOOP=$LOOP
}

client_down () {
    local name=$1 i
    loopdev_detach "$CLOOP"
    umount_now "$T/fuse"
    for i in $(seq 1 100); do
        kill -0 "$FUSEPID" 2>/dev/null || break
        sleep 0.1
    done
    kill_now "$FUSEPID"
    stop_server "$name"
}

# populate DIR: 3000 small files in 30 directories, empty ones, a few
# large ones, some with odd sizes.
populate () {
    /usr/bin/python3 - "$1" <<'EOF'
import os, random, sys
root = sys.argv[1]
rng = random.Random(42)
for d in range(30):
    os.mkdir(f"{root}/d{d}")
    for i in range(100):
        n = rng.choice([0, 1, 511, 4096, 4097, rng.randrange(1, 20000)])
        with open(f"{root}/d{d}/f{i}", "wb") as f:
            f.write(rng.randbytes(n))
EOF
    head -c 20000001 /dev/urandom >"$1/large1"
    head -c $((8 * 1048576)) /dev/urandom >"$1/large2"
    dd if=/dev/urandom of="$1/sparse" bs=4096 seek=1000 count=3 status=none
}

# sums DIR OUT: checksums of every file (relative names).
sums () { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$2"; }

# verify DIR SUMS: every checksum matches, and no file more or less.
verify () {
    (cd "$1" && sha256sum -c --quiet "$2") || fail "checksums differ in $1"
    [[ $(cd "$1" && find . -type f | wc -l) == $(wc -l <"$2") ]] ||
        fail "number of files in $1 differs"
}

fsck_clean () {
    fsck.ext4 -fn "$1" >"$T/fsck.out" 2>&1 || { cat "$T/fsck.out" >&2; fail "fsck.ext4 -fn $1 (${2}): not clean"; }
}

# fs NAME BACKING MKFS_OPTS LOOP_OPTS
fs () {
    local name=$1 backing=$2 mkfsopts=$3 loopopts=$4
    mkdir -p "$T/mnt"

    # shellcheck disable=SC2086
    client_up "$name" "$backing" $loopopts
    # shellcheck disable=SC2086
    mkfs.ext4 -q -F $mkfsopts "$CLOOP"
    mount "$CLOOP" "$T/mnt"
    track_mount "$T/mnt"
    populate "$T/mnt"
    sums "$T/mnt" "$T/sums1"
    umount_now "$T/mnt"
    fsck_clean "$CLOOP" "through the server"
    client_down "$name"
    fsck_clean "$backing" "backing store"
    info "$name: written, clean"

    # shellcheck disable=SC2086
    client_up "$name" "$backing" $loopopts
    mount "$CLOOP" "$T/mnt"
    track_mount "$T/mnt"
    verify "$T/mnt" "$T/sums1"
    # Change things: delete, rewrite, append, create.
    rm -r "$T/mnt/d3" "$T/mnt/d17" "$T/mnt/large2"
    for i in $(seq 0 3 99); do head -c $((i * 37 + 1)) /dev/urandom >"$T/mnt/d5/f$i"; done
    head -c 123457 /dev/urandom >>"$T/mnt/large1"
    mkdir "$T/mnt/new"
    for i in $(seq 1 300); do head -c $((i * 13)) /dev/urandom >"$T/mnt/new/n$i"; done
    sums "$T/mnt" "$T/sums2"
    umount_now "$T/mnt"
    fsck_clean "$CLOOP" "through the server, after changes"
    client_down "$name"
    info "$name: re-read, changed, clean"

    # The backing store itself holds exactly the new state.
    fsck_clean "$backing" "backing store, after changes"
    if [[ -b $backing ]]; then
        mount -o ro "$backing" "$T/mnt"
    else
        mount -o ro,loop "$backing" "$T/mnt"
    fi
    track_mount "$T/mnt"
    verify "$T/mnt" "$T/sums2"
    umount_now "$T/mnt"
    info "$name: backing store verified"
}

truncate -s 128M "$T/file.img"
fs file "$T/file.img" "" ""

truncate -s 128M "$T/l4k.img"
loopdev "$T/l4k.img" --direct-io=on --sector-size 4096
[[ $(blockdev --getss "$LOOP") == 4096 ]] || skip "loop device refused --sector-size 4096"
fs l4k "$LOOP" "-b 4096" "--sector-size 4096"

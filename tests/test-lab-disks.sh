#!/bin/bash
# The guest lab's disk specs (tests/vm/lib/boot.sh): iops= and bps=
# become QEMU drive throttling that this host's QEMU accepts and applies;
# bad values are refused with the option named.
. "$(dirname "$0")/functions.sh"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
say() { echo "$*"; }
PCI_TOPOLOGY=    # boot.sh: the default machine
. "$top/tests/vm/lib/boot.sh"

info "iops and bps become throttling options, on virtio and nvme"
disk_args "$T" virtio:1M:iops=150 virtio:1M nvme:1M:lbs=4096:iops=100:bps=1000000
[[ $QEMU_DISK_ARGS == *"disk0.img,format=raw,if=virtio,cache=unsafe,throttling.iops-total=150 "* ]] ||
    fail "virtio iops: $QEMU_DISK_ARGS"
[[ $QEMU_DISK_ARGS == *"disk1.img,format=raw,if=virtio,cache=unsafe "* ]] ||
    fail "unthrottled virtio: $QEMU_DISK_ARGS"
[[ $QEMU_DISK_ARGS == *"id=nv2,cache=unsafe,throttling.iops-total=100,throttling.bps-total=1000000 "* ]] ||
    fail "nvme iops and bps: $QEMU_DISK_ARGS"
[[ $(stat -c %s "$T/disk0.img") = 1048576 ]] || fail "disk0.img is not 1M"

info "QEMU accepts them and throttles the drive"
disk_args "$T" virtio:1M:iops=150:bps=2000000
# shellcheck disable=SC2086
got=$(printf 'info block\nquit\n' | timeout 60 qemu-system-x86_64 -M pc -accel tcg \
    -display none -S -nodefaults -monitor stdio $QEMU_DISK_ARGS 2>&1) ||
    fail "qemu refused $QEMU_DISK_ARGS: $got"
[[ $got == *"bps=2000000 "*"iops=150 "* ]] || fail "qemu did not throttle: $got"

info "bad values are refused, naming the option"
for spec in virtio:1M:iops=0 virtio:1M:iops=1x virtio:1M:iops= virtio:1M:bps=-5 \
            virtio:1M:speed=3 nvme:1M:iops=fast; do
    if msg=$(disk_args "$T" "$spec"); then fail "$spec accepted"; fi
    opt=${spec##*:}
    [[ $msg == "unknown ${spec%%:*} option $opt" ]] || fail "$spec: '$msg'"
done
echo PASS

# A disk with 4096-byte logical blocks (an NVMe namespace formatted so)
# served by gmblock: it must advertise 4096 as its minimum block size,
# a kernel client using 4096-byte blocks must round-trip a filesystem,
# and so must one using 512-byte blocks with a 1 KiB-block filesystem
# (every write then smaller than a device block: read-modify-write).
# lab-disks: nvme:256M:lbs=4096
# lab-timeout: 400
. "$LAB_REPO/tests/vm/guest/lib.sh"
load nvme nbd ext4
for i in $(seq 50); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
[ "$(blockdev --getss /dev/nvme0n1)" = 4096 ] || fail "/dev/nvme0n1 does not have 4096-byte logical blocks"
serve nvme 10809 /dev/nvme0n1

step "nbdinfo: advertised block sizes"
info=$(nbdinfo --json nbd://127.0.0.1:10809) || fail "nbdinfo failed"
echo "$info" | grep block_size
min=$(echo "$info" | sed -n 's/.*"block_size_minimum": *\([0-9]*\).*/\1/p')
[ "$min" = 4096 ] || fail "gmblock advertises minimum block size '$min', not 4096"

attach /dev/nbd0 10809 -b 4096
[ "$(blockdev --getss /dev/nbd0)" = 4096 ] || fail "/dev/nbd0 is not using 4096-byte blocks"
fs_roundtrip /dev/nbd0 /dev/nvme0n1 -b 4096
detach /dev/nbd0

stop nvme

serve nvme512 10809 /dev/nvme0n1
attach /dev/nbd0 10809 -b 512
[ "$(blockdev --getss /dev/nbd0)" = 512 ] || fail "/dev/nbd0 is not using 512-byte blocks"
fs_roundtrip /dev/nbd0 /dev/nvme0n1 -b 1024
detach /dev/nbd0
stop nvme512
rmw=$(counter nvme512 rmw_bytes)
echo "read-modify-write: ${rmw:-?} bytes"
[ "${rmw:-0}" -gt 0 ] || fail "the 512-byte client caused no read-modify-write: the unaligned path went untested"

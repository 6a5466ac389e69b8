# The cheapest check that the lab works at all: the guest boots, loads
# modules, runs the host's programs, and gmblock (io_uring on the guest's
# 6.1 kernel) serves a disk whose bytes read back exactly. Also that the
# NVMe disk with a controller memory buffer (for the direct path) shows
# its 16 MiB BAR.
# lab-disks: virtio:64M nvme:64M:cmb=16
# lab-timeout: 120
. "$LAB_REPO/tests/vm/guest/lib.sh"
step "kernel $(uname -r)"
load virtio_blk
[ -b /dev/vda ] || fail "no /dev/vda"
step "8 MiB of the dataset onto /dev/vda, read back through gmblock"
must dd if="$LAB_DATASET" of=/dev/vda bs=1M count=8 oflag=direct status=none
serve vda 10809 /dev/vda -r
must nbdcopy nbd://127.0.0.1:10809 "$LAB_RUN/vda.copy"
stop vda
cmp -n $((8 << 20)) "$LAB_DATASET" "$LAB_RUN/vda.copy" || fail "what gmblock served differs from the disk"
[ "$(counter vda served_bytes)" = $((64 << 20)) ] || fail "gmblock's counters do not show the 64 MiB served"

load nvme
for i in $(seq 50); do [ -e /sys/class/nvme/nvme0/device/resource2 ] && break; sleep 0.2; done
bar=$(stat -c %s /sys/class/nvme/nvme0/device/resource2 2>/dev/null)
[ "$bar" = $((16 << 20)) ] || fail "no 16 MiB CMB BAR on the NVMe controller (resource2: '$bar')"

# The cheapest check that the lab works at all: the guest boots, loads
# modules, runs the host's programs, and gmblock (io_uring on the guest's
# 6.1 kernel) serves a disk whose bytes read back exactly.
# lab-disks: virtio:64M
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

# The guest boots, sees the host's tree and the results share, loads
# modules and runs the host's programs.
# lab-disks: virtio:64M
# lab-timeout: 120
. "$LAB_REPO/tests/vm/guest/lib.sh"
step "kernel $(uname -r)"
load virtio_blk
[ -b /dev/vda ] || fail "no /dev/vda"
mdadm --version
nbd-client -V 2>&1 | head -n 1
t=$(cut -d' ' -f1 /proc/uptime)
md5sum "$LAB_DATASET"
step "md5 of the dataset took from $t"

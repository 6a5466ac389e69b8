# RAID0 as in raid0, with the kernel client opening 4 connections
# (multi-conn): writes and flushes spread over all of them.
# lab-disks: virtio:96M virtio:96M virtio:96M virtio:96M
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd ext4
make_raid 0 /dev/vda /dev/vdb /dev/vdc /dev/vdd
serve md0 10809 /dev/md0
attach /dev/nbd0 10809 -C 4
n=$(connections 10809)
[ "$n" = 4 ] || fail "expected 4 connections to the server, found $n"
fs_roundtrip /dev/nbd0 /dev/md0
detach /dev/nbd0
stop md0

# md RAID5 over 4 disks (64 KiB chunks) served by gmblock, attached with
# the kernel NBD client, ext4 round trip.
# lab-disks: virtio:96M virtio:96M virtio:96M virtio:96M
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd ext4
make_raid 5 /dev/vda /dev/vdb /dev/vdc /dev/vdd
serve md0 10809 /dev/md0
attach /dev/nbd0 10809
fs_roundtrip /dev/nbd0 /dev/md0
detach /dev/nbd0
stop md0

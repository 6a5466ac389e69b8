# QEMU as the client: the host serves a disk image with gmblock on a Unix
# socket and QEMU boots the guest with it as a virtio disk
# (-drive file=nbd+unix:...). The guest makes a filesystem there and
# round-trips the dataset; the host then checks the image itself (see
# qemu-client.host.sh).
# lab-disks:
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk ext4
[ "$(blockdev --getsize64 /dev/vda)" = $((256 << 20)) ] || fail "/dev/vda is not the 256 MiB NBD disk"
fs_roundtrip /dev/vda ""
must sync

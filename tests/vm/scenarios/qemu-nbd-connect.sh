# qemu-nbd as the client: qemu-nbd --connect=/dev/nbd1 opens the nbd://
# URI of a gmblock export and hands it to the kernel as /dev/nbd1.
# lab-disks: virtio:256M
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd ext4
serve vda 10809 /dev/vda
step "qemu-nbd --connect=/dev/nbd1 nbd://127.0.0.1:10809"
must qemu-nbd --connect=/dev/nbd1 --format=raw nbd://127.0.0.1:10809
for i in $(seq 50); do
    [ "$(blockdev --getsize64 /dev/nbd1 2>/dev/null)" = $((256 << 20)) ] && break
    sleep 0.2
done
[ "$(blockdev --getsize64 /dev/nbd1)" = $((256 << 20)) ] || fail "/dev/nbd1 does not have the export's size"
fs_roundtrip /dev/nbd1 /dev/vda
step "qemu-nbd --disconnect /dev/nbd1"
must qemu-nbd --disconnect /dev/nbd1
stop vda

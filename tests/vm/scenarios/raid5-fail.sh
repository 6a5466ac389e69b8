# A RAID5 member fails (mdadm --fail) while gmblock serves the array and
# the client is reading: every byte read, during and after the failure,
# must still be right (md rebuilds it from parity).
# lab-disks: virtio:96M virtio:96M virtio:96M virtio:96M
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd ext4
make_raid 5 /dev/vda /dev/vdb /dev/vdc /dev/vdd
serve md0 10809 /dev/md0
attach /dev/nbd0 10809
make_fs /dev/nbd0
must mount /dev/nbd0 "$MNT"
put_data "$MNT"
must umount "$MNT"
fsck_clean /dev/nbd0
drop_caches /dev/nbd0
drop_caches /dev/md0

must mount -o ro /dev/nbd0 "$MNT"
( check_data "$MNT" ) &
reader=$!
sleep 1
kill -0 "$reader" 2>/dev/null || fail "the reader finished before the member failed"
step "mdadm --fail /dev/vdc while the client reads"
must mdadm /dev/md0 --fail /dev/vdc
wait "$reader" || fail "reads during the member failure: $(cat "$LAB_OUT/reason")"
[ "$(cat /sys/block/md0/md/degraded)" = 1 ] || fail "md0 is not degraded after --fail"
must umount "$MNT"

# Everything again from the degraded array, nothing cached anywhere.
drop_caches /dev/nbd0
drop_caches /dev/md0
must mount -o ro /dev/nbd0 "$MNT"
check_data "$MNT"
must umount "$MNT"
fsck_clean /dev/nbd0
detach /dev/nbd0
stop md0

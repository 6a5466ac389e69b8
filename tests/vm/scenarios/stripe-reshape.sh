# gmblock-stripe across a real md reshape: RAID5 on 4 members (192K
# stripe, 128K preferred) grows to 5 (mdadm --grow --raid-devices=5 with
# a spare) while gmblock serves it under nbd-client. A connection opened
# during the reshape gets no stripe (pass-through, said once); one opened
# after it gets the new one (4 data disks: 256K), said once and counted,
# equal to mdadm's. The ext4 written before and during the reshape, over
# the connection opened before it, reads back byte for byte through a
# new connection, and e2fsck -f finds it clean; 1 MiB QEMU wrote beside
# it over a connection opened during the reshape reads back (qemu-io's
# pattern check) over one opened after it, and on md0.
# lab-disks: virtio:16M virtio:16M virtio:16M virtio:16M virtio:16M
# lab-timeout: 240
. "$LAB_REPO/tests/vm/guest/lib.sh"
. "$LAB_REPO/tests/vm/guest/stripe.sh"
load virtio_blk nbd ext4 md-mod raid456

array raid5-4 5 "" vda vdb vdc vdd
must mdadm --add --quiet /dev/md0 /dev/vde
stripe_serve grow /dev/md0
probe
before_pref=$PREF
check_block_sizes before
attach /dev/nbd0 10809
# ext4 on the first 32 MiB; [40M, 41M) is for raw writes by QEMU.
step "mkfs.ext4 /dev/nbd0 32M"
must mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 /dev/nbd0 32M
must mount /dev/nbd0 "$MNT"
small_put "$MNT"

# Slow enough to look at it while it runs, then let it finish.
echo 200 >/sys/block/md0/md/sync_speed_min
echo 400 >/sys/block/md0/md/sync_speed_max
step "mdadm --grow /dev/md0 --raid-devices=5"
must mdadm --grow /dev/md0 --raid-devices=5
for i in $(seq 50); do
    [ "$(cat /sys/block/md0/md/sync_action)" = reshape ] && break
    sleep 0.1
done
echo "md0 during: sync_action $(cat /sys/block/md0/md/sync_action), raid_disks $(cat /sys/block/md0/md/raid_disks), reshape_position $(cat /sys/block/md0/md/reshape_position)"
[ "$(cat /sys/block/md0/md/sync_action)" = reshape ] || fail "no reshape running after mdadm --grow"
probe
[ "$PREF" = 65536 ] || fail "during the reshape a new connection got preferred block $PREF, expected gmblock's own 65536 (pass-through)"
step "qemu-io: write 1 MiB (pattern 0xa5) at 40M over a connection opened during the reshape"
must qemu-io -f raw -c "write -P 0xa5 40M 1M" nbd://127.0.0.1:10809
step "write 4 MiB more over the connection opened before the reshape"
must head -c 4M /dev/urandom >"$MNT/during.bin"
must sync -f "$MNT"
[ "$(cat /sys/block/md0/md/sync_action)" = reshape ] || fail "the reshape ended before the writes during it were done: slow it down"
(cd "$MNT" && md5sum ./during.bin) >>"$LAB_RUN/small.md5"
must umount "$MNT"

echo 200000 >/sys/block/md0/md/sync_speed_max
step "mdadm --wait /dev/md0"
mdadm --wait /dev/md0
echo "md0 after: sync_action $(cat /sys/block/md0/md/sync_action), raid_disks $(cat /sys/block/md0/md/raid_disks), reshape_position $(cat /sys/block/md0/md/reshape_position)"
md_expect /dev/md0
[ "$DATA" = 4 ] || fail "md0 has $DATA data disks after the reshape, expected 4"
probe
check_block_sizes after
[ "$PREF" != "$before_pref" ] || fail "the preferred block did not change with the reshape ($PREF)"
step "qemu-io: read it back over a connection opened after the reshape, and on md0"
must qemu-io -f raw -c "read -P 0xa5 40M 1M" nbd://127.0.0.1:10809
must qemu-io -f raw -c "read -P 0xa5 40M 1M" /dev/md0

detach /dev/nbd0
fsck_clean /dev/md0
corrupt_if_asked /dev/md0 /dev/md0
attach /dev/nbd0 10809
drop_caches /dev/nbd0
must mount -o ro /dev/nbd0 "$MNT"
small_check "$MNT"
must umount "$MNT"
detach /dev/nbd0
stop grow

check_geometry grow "md0 raid5"
n=$(grep -c 'a reshape is in progress.*new connections pass through until it ends' "$LAB_OUT/grow.nbdkit.log")
[ "$n" = 1 ] || fail "the reshape note appeared $n times, expected once"
grep 'geometry for new connections: md0 raid5: chunk 64K, 4 data disks' "$LAB_OUT/grow.nbdkit.log" ||
    fail "no note of the new geometry"
for c in connections reshape_connections geometry_changes active; do echo "gmblock-stripe.$c $(stripe_counter grow $c)"; done
[ "$(stripe_counter grow geometry_changes)" = 1 ] || fail "geometry_changes $(stripe_counter grow geometry_changes), expected 1"
counter_above reshape_connections "$(stripe_counter grow reshape_connections)" 0 "the connection during the reshape was not counted"
must mdadm --stop /dev/md0

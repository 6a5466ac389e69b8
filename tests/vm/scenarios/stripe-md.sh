# gmblock-stripe on real md: RAID0 (4 x 64K), RAID5 on 4 (a 192K stripe,
# not a power of two) and on 5 members, RAID10 near=2 and far=2, each
# served by --filter=gmblock-stripe --filter=gmblock-cache gmblock. For
# each: the geometry the filter detects equals mdadm --detail's (and the
# kernel's io_opt), nbdinfo's preferred block is the stripe (or the
# largest power of two in it) and the maximum at least one stripe; one
# NBD_CMD_CACHE of 4K inside the first stripe makes every data member
# read (without the filter, on RAID5: one member). Data round trips:
# ext4 through nbd-client on RAID0 and RAID5-4, then through QEMU's NBD
# client (qemu-nbd --connect) on RAID0, checked on md0 itself. A
# partition of the RAID5, a loop device over it and a device-mapper
# linear volume 1 MiB + 64K into it (LVM's kind) are followed. RAID6
# on 5, RAID4 on 4, RAID10 offset=2 and near=2 on 3 members: geometry
# and block sizes as mdadm and md's io_opt say. RAID0 over members of
# different sizes (vdf is 16M: md stripes in zones): the stripe of all
# members, as md's io_opt, with a note of where it stops holding; none
# when the options give the stripe.
# lab-disks: virtio:32M virtio:32M virtio:32M virtio:32M virtio:32M virtio:16M
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
. "$LAB_REPO/tests/vm/guest/stripe.sh"
load virtio_blk nbd ext4 md-mod raid0 raid456 raid10 loop dm_mod
M4=(vda vdb vdc vdd) M5=(vda vdb vdc vdd vde)
stack=(--filter=gmblock-cache -- cache-size=4M)   # a small cache starts fast

# shaped NAME MEMBERS...: block sizes, then one 4K CACHE at 68K (inside
# the first stripe): as many members must read as the stripe has data
# chunks, a whole stripe in all.
shaped() {
    local name=$1
    shift
    probe 69632 4096 "$@"
    check_block_sizes "$name"
    [ "$READERS" = "$DATA" ] && [ "$SECTORS" -ge $((CHUNK * DATA / 512)) ] ||
        fail "$name: a 4K CACHE read $SECTORS sectors on $READERS members, expected a stripe on $DATA"
}

array raid0 0 "" "${M4[@]}"
stripe_serve raid0 /dev/md0 "${stack[@]}"
shaped raid0 "${M4[@]}"
attach /dev/nbd0 10809
small_roundtrip /dev/nbd0 /dev/md0
detach /dev/nbd0
step "qemu-nbd --connect=/dev/nbd1 nbd://127.0.0.1:10809 (QEMU's NBD client)"
must qemu-nbd --connect=/dev/nbd1 --format=raw --cache=none nbd://127.0.0.1:10809
for i in $(seq 50); do [ "$(blockdev --getsize64 /dev/nbd1 2>/dev/null)" -gt 0 ] && break; sleep 0.2; done
must mount /dev/nbd1 "$MNT"
small_check "$MNT"
must head -c 4M /dev/urandom >"$MNT/qemu.bin"
(cd "$MNT" && md5sum ./qemu.bin) >>"$LAB_RUN/small.md5"
must umount "$MNT"
must qemu-nbd --disconnect /dev/nbd1
stop raid0
check_geometry raid0 "md0 raid0"
fsck_clean /dev/md0
drop_caches /dev/md0
must mount -o ro /dev/md0 "$MNT"
small_check "$MNT"
must umount "$MNT"

array raid5-4 5 "" "${M4[@]}"
serve plain5 10809 /dev/md0 "${stack[@]}"
probe 69632 4096 "${M4[@]}"
[ "$READERS" = 1 ] || fail "raid5-4 without the filter: a 4K CACHE read on $READERS members, expected 1"
stop plain5
stripe_serve raid5-4 /dev/md0 "${stack[@]}"
shaped raid5-4 "${M4[@]}"
attach /dev/nbd0 10809
small_roundtrip /dev/nbd0 /dev/md0
detach /dev/nbd0
stop raid5-4
check_geometry raid5-4 "md0 raid5"

# A partition 1 MiB into the array (an MBR written by hand: no sfdisk
# here): its offset moves the stripes. A loop device over md0.
step "partition md0p1 at 1 MiB, loop device over md0"
printf '\x00\x00\x02\x00\x83\xfe\xff\xff\x00\x08\x00\x00\x00\x00\x01\x00' |
    dd of=/dev/md0 bs=1 seek=446 conv=notrunc status=none
printf '\x55\xaa' | dd of=/dev/md0 bs=1 seek=510 conv=notrunc status=none
must blockdev --rereadpt /dev/md0
for i in $(seq 25); do [ -b /dev/md0p1 ] && break; sleep 0.2; done
stripe_serve part /dev/md0p1
probe
check_block_sizes part
stop part
check_geometry part "md0p1 raid5"
[ "$(stripe_counter part offset)" = 1048576 ] || fail "part: offset $(stripe_counter part offset), expected 1048576"
loop=$(losetup -f --show /dev/md0) || fail "losetup over md0"
stripe_serve loop "$loop"
probe
check_block_sizes loop
stop loop
check_geometry loop "${loop#/dev/} over md0 raid5"
must losetup -d "$loop"
# A device-mapper linear volume over md0 (what LVM makes), 1 MiB + 64K
# in: not on a stripe boundary, and the kernel's io hints do not say
# where it starts; the filter reads the device-mapper table.
step "dm-linear over md0, 1 MiB + 64K in"
must dmsetup create --noudevsync gmlv --table "0 16384 linear /dev/md0 2176"
must dmsetup mknodes gmlv
dm=dm-$(dmsetup info -c --noheadings -o minor gmlv | tr -d " ")
stripe_serve dmlv /dev/mapper/gmlv
probe
check_block_sizes dmlv
stop dmlv
check_geometry dmlv "$dm over md0 raid5"
[ "$(stripe_counter dmlv offset)" = 1114112 ] || fail "dmlv: offset $(stripe_counter dmlv offset), expected 1114112"
grep -F "offset in the array 1114112" "$LAB_OUT/dmlv.nbdkit.log" || fail "dmlv: the geometry line does not give the offset 1114112"
must dmsetup remove --noudevsync gmlv

array raid5-5 5 "" "${M5[@]}"
stripe_serve raid5-5 /dev/md0 "${stack[@]}"
shaped raid5-5 "${M5[@]}"
stop raid5-5
check_geometry raid5-5 "md0 raid5"

for lay in n2 f2; do
    array raid10-$lay 10 $lay "${M4[@]}"
    stripe_serve raid10-$lay /dev/md0 "${stack[@]}"
    shaped raid10-$lay "${M4[@]}"
    stop raid10-$lay
    check_geometry raid10-$lay "md0 raid10"
done

# levels NAME LEVEL LAYOUT MEMBER...: the geometry and block sizes only.
levels() {
    array "$@"
    stripe_serve "$1" /dev/md0
    probe
    check_block_sizes "$1"
    stop "$1"
    check_geometry "$1" "md0 $LEVEL"
}
levels raid6-5 6 "" "${M5[@]}"
levels raid4-4 4 "" "${M4[@]}"
levels raid10-o2 10 o2 "${M4[@]}"
levels raid10-n2-3 10 n2 vda vdb vdc

array raid0-zones 0 "" vda vdb vdf
echo "md0 members (KiB): $(cat /sys/block/md0/md/rd*/size | tr '\n' ' ')"
stripe_serve zones /dev/md0
probe
check_block_sizes zones
stop zones
check_geometry zones "md0 raid0"
grep -F "note: md0: raid0 over members of different sizes: md stripes the first" "$LAB_OUT/zones.nbdkit.log" ||
    fail "zones: no note that md0 stripes in zones"
stripe_serve zones-opt /dev/md0 -- stripe-chunk=64K stripe-data-disks=3
probe
stop zones-opt
[ "$PREF" = 131072 ] || fail "zones with options: preferred block $PREF, expected 128K (3 x 64K)"
! grep -q "different sizes" "$LAB_OUT/zones-opt.nbdkit.log" || fail "zones with options: a note although the options give the stripe"
must mdadm --stop /dev/md0

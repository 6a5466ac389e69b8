# The server dies (kill -9) while the kernel client is writing; it is
# restarted and the client reconnects. After journal replay the
# filesystem must be clean and everything synced before the kill intact:
# only what the client had not yet flushed may be lost. A kill -9 of the
# process cannot lose what the kernel already took, so this shows that
# acknowledged writes had reached the disk's page of the kernel, not that
# a flush made them durable (a flush that skips its fdatasync passes
# here): powerfail (the guest itself cut off) checks that.
# lab-disks: virtio:512M
# lab-timeout: 400
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd ext4
serve vda 10809 /dev/vda
attach /dev/nbd0 10809
make_fs /dev/nbd0
must mount /dev/nbd0 "$MNT"
put_data "$MNT"               # synced: must survive

step "more copies of the dataset in the background"
( for i in 1 2 3; do
    mkdir -p "$MNT/late$i" && tar -xf "$LAB_DATASET" -C "$MNT/late$i" || exit
done ) &
writer=$!
# dirty_kb: sets dirty to /proc/meminfo's Dirty: (kB), without a fork
# (each costs the TCG guest about 80 ms of CPU, taken from the writer).
dirty_kb() {
    local k v
    while read -r k v _; do
        [ "$k" = Dirty: ] && { dirty=$v; return; }
    done </proc/meminfo
}
# Let writeback to the server get going, then pull the plug.
for i in $(seq 100); do
    dirty_kb
    [ "$dirty" -gt 8192 ] && break
    sleep 0.1
done
sleep 1
kill -0 "$writer" 2>/dev/null || fail "the writer finished before the kill: nothing was in flight"
dirty_kb
step "kill -9 the server while writing (dirty: $dirty kB)"
stop vda KILL
# Disconnect at once: that fails the requests in flight when the server
# died, which otherwise stay queued for good (no nbd timeout) and can
# block a journal commit, the writer and the unmount with it.
detach /dev/nbd0
wait "$writer"
echo "writer exited $? (it may fail or not: its data was never synced)"
# The kernel's word that writes were under way when the server died.
# grep -c reads all of dmesg: with grep -q, dmesg could die of SIGPIPE
# after the match and pipefail would call the pipeline failed.
dmesg | grep -c 'I/O error, dev nbd0, .*WRITE' >/dev/null ||
    fail "no write to /dev/nbd0 failed: the kill did not hit writes in flight"
umount_orphan "$MNT"

serve vda 10809 /dev/vda
attach /dev/nbd0 10809
step "replay the journal"
must mount /dev/nbd0 "$MNT"
must umount "$MNT"
fsck_clean /dev/nbd0
drop_caches /dev/nbd0
must mount -o ro /dev/nbd0 "$MNT"
check_data "$MNT"
must umount "$MNT"
detach /dev/nbd0
stop vda

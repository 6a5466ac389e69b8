# ext4 over RDMA through the whole stack (issue 10): md RAID0 served by
# --filter=gmblock-rdma --filter=gmblock-readahead --filter=gmblock-cache
# gmblock, the gmblock-rdma bridge on a Unix socket under nbd-client:
# mkfs, the dataset, fsck, remount, every checksum; the same filesystem
# read over NBD/TCP from the same server while the bridge is attached
# (one cache for both transports); then read cold from a fresh server.
# lab-disks: virtio:96M virtio:96M
# lab-timeout: 400
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd ext4
rxe_pair
make_raid 0 /dev/vda /dev/vdb
serve srv 10809 /dev/md0 -D gmblock-cache.stats=1 -D gmblock-rdma.stats=1 \
    --filter=gmblock-rdma --filter=gmblock-readahead --filter=gmblock-cache -- \
    rdma=10.77.0.1 rdma-stats="$LAB_OUT/srv.rdma-stats" \
    cache-stats="$LAB_OUT/srv.cache-stats" ra-stats="$LAB_OUT/srv.ra-stats"
bridge br 10.77.0.1
attach /dev/nbd0 "$LAB_RUN/br.sock"
fs_roundtrip /dev/nbd0 /dev/md0
# So far only RDMA clients have read: the cache must have served every
# byte they got (the TCP phase below hits the cache too, so a check at
# the end passed with RDMA reads sent around the cache).
step "the RDMA clients' reads went through the cache (counters by SIGUSR1)"
kill -USR1 "$(server_pid srv)"
log=$LAB_OUT/srv.nbdkit.log
logged "$log" "^gmblock-cache\.hits " 1 30 && logged "$log" "^gmblock-rdma\.read_bytes " 1 30 ||
    fail "SIGUSR1 printed no counters"
rb=$(sed -n 's/^gmblock-rdma\.read_bytes //p' "$log" | head -1)
cb=$(sed -n 's/^gmblock-cache\.read_bytes //p' "$log" | head -1)
counter_above rdma_read_bytes "$rb" $((16 << 20)) "the dataset came back over RDMA"
counter_above cache_read_bytes "$cb" $((rb - 1)) "every byte read over RDMA went through the cache"
counter_above cache_hits "$(sed -n 's/^gmblock-cache\.hits //p' "$log" | head -1)" 0 "RDMA clients hit the cache"
step "the same filesystem over TCP from the same server, bridge still attached"
attach /dev/nbd1 10809 -readonly
must mount -o ro,noload /dev/nbd1 "$MNT"
check_data "$MNT"
must umount "$MNT"
detach /dev/nbd1
detach /dev/nbd0
stop br
stop srv
echo "server filter: $(tr '\n' ' ' <"$LAB_OUT/srv.rdma-stats")"
echo "bridge: $(tr '\n' ' ' <"$LAB_OUT/br.stats")"
counter_above rdma_write_bytes "$(rdma_counter srv.rdma-stats write_bytes)" $((16 << 20)) "the dataset went over RDMA"
counter_above rdma_read_bytes "$(rdma_counter srv.rdma-stats read_bytes)" $((16 << 20)) "the dataset came back over RDMA"
[ "$(rdma_counter srv.rdma-stats protocol_errors)" = 0 ] || fail "protocol errors"
reread_cold srv2 /dev/md0
echo "rdma-ext4: all checks passed"

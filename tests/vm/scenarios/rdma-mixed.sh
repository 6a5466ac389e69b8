# The pipelined, zero-copy bridge under mixed load (issue 10), in one
# boot of 7.3.4 (soft-RoCE pages on demand there): the server on md
# RAID0 (4 members) behind gmblock-rdma + gmblock-cache in write-back.
# (a) fio randwrite 4k-1m at iodepth 16 through nbd-client on the
# bridge, then verify (crc32c); (b) a TCP client (libnbd) and an RDMA
# client (nbd-client on the bridge) write disjoint ranges at once, each
# reads the other's back; a TCP flush, kill -9, restart: both ranges are
# on disk and read back over both transports (the bridge reconnects);
# (c) scale-out: md RAID0 on the client over two bridges to two
# servers (one bridge with 4 credits and a 1M pool: pool waits), ext4,
# fsck, checksums.  Zero copy: rxe0 pages on demand on 7.3.4 but its
# ODP is not used (see below): zero-copy=on is refused with the reason.
# lab-disks: virtio:64M virtio:64M virtio:64M virtio:64M virtio:48M virtio:48M
# lab-kernel: trixie-backports
# lab-timeout: 600
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd ext4
rxe_pair netns
make_raid 0 /dev/vda /dev/vdb /dev/vdc /dev/vdd

# Zero copy needs on-demand paging (ODP). rxe0 advertises it on 7.3.4,
# but the bridge does not use soft-RoCE's (its copy loop garbles packets
# that cross a page: plugins/gmblock-rdma/README.md), so zero-copy=on is
# refused at start here, with the reason, and auto uses the bounce pool.
rc_odp=$(ibv_devinfo -v -d rxe0 | awk '/rc_odp_caps:/ {on = 1; next}
    on && /:/ {on = 0} on {print $1}' | tr '\n' ' ')
echo "rxe0 RC ODP caps: ${rc_odp:-none}"
case $rc_odp in
*SUPPORT_WRITE*SUPPORT_READ*|*SUPPORT_READ*SUPPORT_WRITE*) why='is soft-RoCE' ;;
*) why='no on-demand paging' ;;
esac
step "zero-copy=on must be refused at start: $why"
if "$LAB_REPO/nbdkit" -U "$LAB_RUN/x.sock" gmblock-rdma server=10.77.0.1 \
    zero-copy=on --run true >"$LAB_OUT/zc-on.log" 2>&1; then
    fail "zero-copy=on started on soft-RoCE"
fi
cat "$LAB_OUT/zc-on.log"
grep -q "zero-copy=on: rxe[0-9] .*$why" "$LAB_OUT/zc-on.log" ||
    fail "zero-copy=on refused without the reason ($why)"

# 160M: (b)'s 32M stay dirty below a quarter of the cache (the writers'
# early wake of the flusher), so its flush is what writes them back.
srv_args=(--filter=gmblock-rdma --filter=gmblock-cache -- rdma=10.77.0.1
    cache-mode=writeback cache-size=160M writeback-interval=3600
    rdma-stats="$LAB_OUT/srv.rdma-stats")
serve srv 10809 /dev/md0 "${srv_args[@]}"
bridge br 10.77.0.1 credits=32
attach /dev/nbd0 "$LAB_RUN/br.sock"

step "(a) fio randwrite 4k-1m iodepth 16 through the bridge, then verify"
must fio --name=mixed --filename=/dev/nbd0 --direct=1 --ioengine=libaio \
    --iodepth=16 --rw=randwrite --bsrange=4k-1m --size=32M \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 \
    --output="$LAB_OUT/fio.txt"
grep -E 'WRITE:|READ:|verify' "$LAB_OUT/fio.txt"
grep -q 'err= 0' "$LAB_OUT/fio.txt" || fail "fio reported errors: see fio.txt"

# nbd_py put|get|flush FILE OFFSET [LENGTH]: libnbd over TCP: write
# FILE at OFFSET, read LENGTH bytes at OFFSET into FILE, or flush.
nbd_py() {
    python3 - "$@" <<'PY'
import sys, nbd
op, path, off = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = nbd.NBD()
h.connect_uri("nbd://127.0.0.1:10809")
if op == "put":
    data = open(path, "rb").read()
    for i in range(0, len(data), 1 << 20):
        h.pwrite(data[i:i + (1 << 20)], off + i)
elif op == "get":
    n = int(sys.argv[4])
    with open(path, "wb") as f:
        for i in range(0, n, 1 << 20):
            f.write(h.pread(min(1 << 20, n - i), off + i))
else:
    h.flush()
h.shutdown()
PY
}
must nbd_py flush - 0           # (a)'s writes written back: (b)'s alone are dirty

step "(b) TCP writes [64M,80M) while RDMA writes [80M,96M)"
must head -c 16M /dev/urandom >"$LAB_RUN/t.img"
must head -c 16M /dev/urandom >"$LAB_RUN/r.img"
nbd_py put "$LAB_RUN/t.img" $((64 << 20)) &
tcp=$!
must dd if="$LAB_RUN/r.img" of=/dev/nbd0 bs=1M seek=80 oflag=direct status=none
wait "$tcp" || fail "the TCP writer failed"
step "each transport reads the other's range"
# Only those ranges: a read of the whole export evicted dirty blocks,
# which wrote them back before the flush below was asked to.
must nbd_py get "$LAB_RUN/rt.img" $((80 << 20)) $((16 << 20))
cmp "$LAB_RUN/r.img" "$LAB_RUN/rt.img" || fail "RDMA's writes read over TCP differ"
must dd if=/dev/nbd0 of="$LAB_RUN/back.img" bs=1M skip=64 count=16 iflag=direct status=none
cmp "$LAB_RUN/t.img" "$LAB_RUN/back.img" || fail "TCP's writes read over RDMA differ"
step "flush over TCP, kill -9 the server, restart"
# The writes must still be in the cache only, or the flush has nothing
# to prove (a flush that wrote nothing back passed).
must dd if=/dev/md0 of="$LAB_RUN/pre.img" bs=1M skip=64 count=32 iflag=direct status=none
cmp -s -n $((16 << 20)) "$LAB_RUN/t.img" "$LAB_RUN/pre.img" &&
    fail "TCP's writes were on md0 before the flush: no test"
cmp -s -i 0:$((16 << 20)) -n $((16 << 20)) "$LAB_RUN/r.img" "$LAB_RUN/pre.img" &&
    fail "RDMA's writes were on md0 before the flush: no test"
must nbd_py flush - 0
stop srv KILL
must dd if=/dev/md0 of="$LAB_RUN/disk.img" bs=1M skip=64 count=32 iflag=direct status=none
cmp -n $((16 << 20)) "$LAB_RUN/t.img" "$LAB_RUN/disk.img" || fail "TCP's flushed writes are not on disk"
cmp -i 0:$((16 << 20)) -n $((16 << 20)) "$LAB_RUN/r.img" "$LAB_RUN/disk.img" || fail "RDMA's acknowledged writes are not on disk after a flush"
echo "both transports' writes are on md0 after the flush and kill -9"
serve srv 10809 /dev/md0 "${srv_args[@]}"
must nbd_py get "$LAB_RUN/tcp.img" $((64 << 20)) $((32 << 20))
cmp "$LAB_RUN/disk.img" "$LAB_RUN/tcp.img" || fail "after the restart, TCP reads other data"
drop_caches /dev/nbd0
must dd if=/dev/nbd0 of="$LAB_RUN/rdma.img" bs=1M skip=64 count=32 iflag=direct status=none
cmp "$LAB_RUN/disk.img" "$LAB_RUN/rdma.img" || fail "after the restart, RDMA reads other data"
detach /dev/nbd0
stop br
stop srv

step "(c) scale-out: md RAID0 over two bridges to two servers"
serve s1 10811 /dev/vde --filter=gmblock-rdma -- rdma=10.77.0.1:10821
serve s2 10812 /dev/vdf --filter=gmblock-rdma -- rdma=10.77.0.1:10822
bridge b1 10.77.0.1:10821
bridge b2 10.77.0.1:10822 credits=4 pool=1M
attach /dev/nbd1 "$LAB_RUN/b1.sock"
attach /dev/nbd2 "$LAB_RUN/b2.sock"
step "mdadm --create /dev/md1 level 0 on /dev/nbd1 /dev/nbd2"
must mdadm --create /dev/md1 --run --quiet --level=0 --raid-devices=2 \
    --chunk=64 --assume-clean /dev/nbd1 /dev/nbd2
fs_roundtrip /dev/md1 ""
must mdadm --stop /dev/md1
detach /dev/nbd1
detach /dev/nbd2
stop b1
stop b2
stop s1
stop s2

for b in br b1 b2; do
    echo "bridge $b: $(tr '\n' ' ' <"$LAB_OUT/$b.stats")"
done
counter_above b1_read_bytes "$(rdma_counter b1.stats read_bytes)" $((4 << 20)) "half the filesystem came back through b1"
counter_above b2_read_bytes "$(rdma_counter b2.stats read_bytes)" $((4 << 20)) "half the filesystem came back through b2"
[ "$(rdma_counter br.stats error_replies)" = 0 ] || fail "the server answered errors"
counter_above br_reconnects "$(rdma_counter br.stats reconnects)" 0 "the bridge reconnected after the kill -9"
counter_above b2_credit_waits "$(rdma_counter b2.stats credit_waits)" 0 "4 credits bound what b2 has in flight"
for b in br b1 b2; do
    [ "$(rdma_counter $b.stats bytes_zero_copy)" = 0 ] || fail "bridge $b went zero copy on soft-RoCE"
    counter_above ${b}_bytes_copied "$(rdma_counter $b.stats bytes_copied)" $((8 << 20)) "the bounce pool carries soft-RoCE's data"
done
echo "rdma-mixed: all checks passed"

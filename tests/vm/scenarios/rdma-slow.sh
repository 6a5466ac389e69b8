# A slow server is not a dead one (issue 10): below gmblock-rdma every
# read takes 70 s (nbdkit's delay filter).  A READ through the bridge
# must wait for it: after 10 s of silence the bridge sends liveness
# probes (zero-length RDMA WRITEs), the server's NIC answers them, so
# the connection is kept: no reconnect, no EIO, and the data is right.
# (Before the probes, 60 s without a completion broke the connection,
# and a slow FLUSH then even reported acknowledged writes as lost.)
# lab-disks: virtio:16M
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk
rxe_pair
must head -c 16M /dev/urandom >"$LAB_RUN/a.img"
must dd if="$LAB_RUN/a.img" of=/dev/vda bs=1M oflag=direct status=none
serve srv 10809 /dev/vda --filter=gmblock-rdma --filter=delay -- \
    rdma=10.77.0.1 delay-read=70 rdma-stats="$LAB_OUT/srv.rdma-stats"
bridge br 10.77.0.1
step "one 4K READ that the server takes 70 s to answer"
t0=$(date +%s)
timeout 200 python3 -m nbd -u "nbd+unix:///?socket=$LAB_RUN/br.sock" \
    -c "import sys; sys.stdout.buffer.write(h.pread(4096, 1 << 20))" \
    >"$LAB_RUN/slow.bin" || fail "the slow READ failed"
t1=$(date +%s)
echo "answered after $((t1 - t0)) s"
[ $((t1 - t0)) -ge 65 ] || fail "answered after $((t1 - t0)) s: the delay was not in effect"
must dd if="$LAB_RUN/a.img" of="$LAB_RUN/want.bin" bs=4096 skip=256 count=1 status=none
cmp "$LAB_RUN/slow.bin" "$LAB_RUN/want.bin" || {
    ls -l "$LAB_RUN/slow.bin" "$LAB_RUN/want.bin"; od -A d -t x1 "$LAB_RUN/slow.bin" | head -4
    od -A d -t x1 "$LAB_RUN/want.bin" | head -4
    fail "the slow READ returned wrong data"; }
grep -q "connection broken" "$LAB_OUT/br.nbdkit.log" &&
    fail "the bridge broke the connection to a slow server"
stop br
stop srv
counter_above probes "$(rdma_counter br.stats probes)" 2 "liveness probes during a 70 s READ"
[ "$(rdma_counter br.stats reconnects)" = 0 ] || fail "the bridge reconnected"
echo "rdma-slow: all checks passed"

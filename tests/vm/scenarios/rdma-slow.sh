# A slow server is not a dead one (issue 10): below gmblock-rdma every
# read takes 70 s (nbdkit's delay filter).  A READ through the bridge
# must wait for it: after 10 s of silence the bridge sends liveness
# probes (zero-length RDMA WRITEs), the server's NIC answers them, so
# the connection is kept: no reconnect, no EIO, and the data is right.
# (Before the probes, 60 s without a completion broke the connection,
# and a slow FLUSH then even reported acknowledged writes as lost.)
# Then a bridge with timeout=20 (a user who prefers an error to such a
# wait): the same READ fails with EIO after about 20 s, the probes
# answered or not, and the bridge serves on: a write after it, over a
# new connection to the same server, lands.  Last, a bridge stopped
# (SIGTERM) with that READ in flight exits within seconds: the READ
# fails 2 s after nbdkit quits.
# lab-disks: virtio:16M
# lab-timeout: 420
# lab-sanitizer: tsan
# lab-mem: 2048
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
counter_above probes "$(rdma_counter br.stats probes)" 2 "liveness probes during a 70 s READ"
[ "$(rdma_counter br.stats reconnects)" = 0 ] || fail "the bridge reconnected"

step "timeout=20: the same READ fails after about 20 s, and a write after it lands"
bridge br2 10.77.0.1 timeout=20
must head -c 4096 /dev/urandom >"$LAB_RUN/new.bin"
timeout 200 python3 - "nbd+unix:///?socket=$LAB_RUN/br2.sock" "$LAB_RUN/new.bin" <<'PY' ||
import sys, time, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
t = time.monotonic()
try:
    h.pread(4096, 1 << 20)
    sys.exit("the READ succeeded: it was not delayed, nothing was tested")
except nbd.Error as e:
    waited = time.monotonic() - t
    print("the READ failed after %.0f s: %s" % (waited, e.string))
    if e.errno != "EIO":
        sys.exit("expected EIO, got %s" % e.errno)
    if not 18 <= waited <= 30:
        sys.exit("timeout=20, yet it failed after %.0f s" % waited)
h.pwrite(open(sys.argv[2], "rb").read(), 0)
h.flush()
h.shutdown()
PY
    fail "timeout=20 did not end the slow READ as it should"
stop br2

step "the bridge stopped (SIGTERM) with the slow READ in flight: it exits within seconds"
# nbdkit waits for the requests in progress before it exits, and the
# server's NIC answers the probes: the bridge used to wait the READ's
# full 70 s (the lab's stop gives up after 30). Requests still in
# flight 2 s after nbdkit quits now fail.
bridge br3 10.77.0.1
rm -f "$LAB_RUN/held3"
python3 - "nbd+unix:///?socket=$LAB_RUN/br3.sock" "$LAB_RUN/held3" >"$LAB_OUT/br3.client" 2>&1 <<'PY' &
import sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
open(sys.argv[2], "w").close()
try:
    h.pread(4096, 1 << 20)
    print("the READ succeeded")
except nbd.Error as e:
    print("the READ failed: %s" % e.string)
PY
client=$!
for i in $(seq 100); do [ -e "$LAB_RUN/held3" ] && break; sleep 0.1; done
sleep 3                         # the READ is at the server, in the delay
t0=$(date +%s)
stop br3
echo "the bridge exited $(( $(date +%s) - t0 )) s after SIGTERM"
wait $client
cat "$LAB_OUT/br3.client"
grep -q "the READ failed" "$LAB_OUT/br3.client" || fail "the READ in flight did not fail at the bridge's shutdown"
grep -q "nbdkit is shutting down" "$LAB_OUT/br3.nbdkit.log" ||
    fail "the bridge's log does not say why the READ failed"
stop srv
must dd if=/dev/vda of="$LAB_RUN/got.bin" bs=4096 count=1 iflag=direct status=none
cmp "$LAB_RUN/got.bin" "$LAB_RUN/new.bin" || fail "the write after the timeout did not land"
[ "$(rdma_counter br2.stats timeouts)" = 1 ] ||
    fail "timeouts $(rdma_counter br2.stats timeouts), expected 1"
counter_above reconnects "$(rdma_counter br2.stats reconnects)" 0 "the write went over a new connection"
echo "rdma-slow: all checks passed"

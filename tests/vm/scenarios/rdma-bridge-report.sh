# What the gmblock-rdma bridge counts and says. Its wait counters count
# each piece that waited once: a bridge with one credit under nbdcopy's
# 16 requests in flight has at most as many credit_waits as pieces sent
# (every slot given back wakes every waiter, and each one that found
# none free again counted once more: thousands), and one with a pool of
# one piece under 16 credits at most as many pool_waits. A bridge whose
# pool (100000 bytes) makes an odd max request cuts requests on the
# server's 4096-byte block grid all the same: the server (an NVMe
# namespace of 4096-byte blocks) does no read-modify-write. A request
# that fails says which one and why: a READ the server answers EIO (nbdkit's
# error filter below gmblock-rdma), one whose server is gone, and one
# whose reconnect finds an export of another size (which one) or of
# another minimum block size.
# lab-disks: virtio:64M nvme:64M:lbs=4096
# lab-timeout: 400
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nvme
rxe_pair
for i in $(seq 50); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
[ "$(blockdev --getss /dev/nvme0n1)" = 4096 ] || fail "/dev/nvme0n1 does not have 4096-byte logical blocks"
must head -c 16M /dev/urandom >"$LAB_RUN/a.img"
trig=$LAB_RUN/fail-reads
serve srv 10809 /dev/vda --filter=gmblock-rdma --filter=error -- \
    rdma=10.77.0.1 error-pread=EIO error-pread-rate=100% error-pread-file="$trig"

# waits_at_most BRIDGE COUNTER: COUNTER of BRIDGE's stats is at most
# its requests (pieces sent).
waits_at_most() {
    local w r
    w=$(rdma_counter "$1.stats" "$2") r=$(rdma_counter "$1.stats" requests)
    echo "$1: $2 = $w, requests = $r"
    case $w$r in ''|*[!0-9]*) fail "$1: $2 or requests missing" ;; esac
    [ "$r" -gt 0 ] || fail "$1: no requests counted"
    [ "$w" -le "$r" ] || fail "$1: $2 = $w for $r pieces sent: a piece counted more than once"
}

step "one credit, 16 NBD requests in flight: credit_waits"
bridge one 10.77.0.1 credits=1
must nbdcopy --requests=16 "$LAB_RUN/a.img" "nbd+unix:///?socket=$LAB_RUN/one.sock"
must nbdcopy --requests=16 "nbd+unix:///?socket=$LAB_RUN/one.sock" "$LAB_RUN/out.img"
cmp -n $((16 << 20)) "$LAB_RUN/a.img" "$LAB_RUN/out.img" || fail "credits=1: data differs"
stop one
waits_at_most one credit_waits
counter_above credit_waits "$(rdma_counter one.stats credit_waits)" 0 "16 requests on one credit wait"

step "a 64K pool (one piece at a time), 16 credits: pool_waits"
bridge tiny 10.77.0.1 pool=64K
must nbdcopy --requests=16 "$LAB_RUN/a.img" "nbd+unix:///?socket=$LAB_RUN/tiny.sock"
must nbdcopy --requests=16 "nbd+unix:///?socket=$LAB_RUN/tiny.sock" "$LAB_RUN/out.img"
cmp -n $((16 << 20)) "$LAB_RUN/a.img" "$LAB_RUN/out.img" || fail "pool=64K: data differs"
stop tiny
waits_at_most tiny pool_waits
counter_above pool_waits "$(rdma_counter tiny.stats pool_waits)" 0 "a one-piece pool makes pieces wait"

step "pool=100000: pieces on the server's 4096-byte grid"
serve srv4k 10811 /dev/nvme0n1 --filter=gmblock-rdma -- rdma=10.77.0.1:10820
bridge odd 10.77.0.1:10820 pool=100000
min=$(nbdinfo --json "nbd+unix:///?socket=$LAB_RUN/odd.sock" |
      sed -n 's/.*"block_size_minimum": *\([0-9]*\).*/\1/p')
[ "$min" = 4096 ] || fail "the bridge advertises minimum block size '$min', not the server's 4096"
must nbdcopy --requests=16 "$LAB_RUN/a.img" "nbd+unix:///?socket=$LAB_RUN/odd.sock"
must nbdcopy --requests=16 "nbd+unix:///?socket=$LAB_RUN/odd.sock" "$LAB_RUN/out.img"
cmp -n $((16 << 20)) "$LAB_RUN/a.img" "$LAB_RUN/out.img" || fail "pool=100000: data differs"
stop odd
stop srv4k
rmw=$(counter srv4k rmw_bytes)
echo "server: rmw_bytes = ${rmw:-?}, bridge requests = $(rdma_counter odd.stats requests)"
[ "${rmw:-x}" = 0 ] || fail "4096-aligned NBD requests cost the server ${rmw:-?} bytes of read-modify-write: the bridge cut them off its block grid"

step "a READ the server fails says which"
bridge br 10.77.0.1
must touch "$trig"
python3 -m nbd -u "nbd+unix:///?socket=$LAB_RUN/br.sock" -c "h.pread(4096, 8192)" \
    >"$LAB_OUT/eio.out" 2>&1 && fail "the READ succeeded with the server's reads failing"
rm -f "$trig"
grep "READ at 8192 length 4096" "$LAB_OUT/br.nbdkit.log" ||
    fail "the bridge did not say which READ failed: $(tail -3 "$LAB_OUT/br.nbdkit.log")"
grep -q "READ at 8192 length 4096: Input/output error" "$LAB_OUT/br.nbdkit.log" ||
    fail "the bridge did not say why the READ failed"
step "a READ whose server is gone says which"
python3 -m nbd -u "nbd+unix:///?socket=$LAB_RUN/br.sock" -c "
import os, time, nbd
def wait(f):
    while not os.path.exists('$LAB_RUN/' + f):
        time.sleep(0.1)
h.pread(4096, 0)
open('$LAB_RUN/held', 'w').close()
wait('go')
try:
    h.pread(4096, 12288)
    print('read 1 ok', flush=True)
except nbd.Error as e:
    print('read 1 failed:', e, flush=True)
open('$LAB_RUN/failed1', 'w').close()
wait('go2')
try:
    h.pread(4096, 0)
    print('read 2 ok', flush=True)
except nbd.Error as e:
    print('read 2 failed:', e, flush=True)" >"$LAB_OUT/gone.out" 2>&1 &
holder=$!
await_file "$LAB_RUN/held" $holder 60 "the holder did not read before the kill: $(cat "$LAB_OUT/gone.out")"
stop srv KILL
touch "$LAB_RUN/go"
await_file "$LAB_RUN/failed1" $holder 120 "the holder's READ did not end: $(cat "$LAB_OUT/gone.out")"
grep -q "read 1 failed" "$LAB_OUT/gone.out" && ! grep -q "read 1 ok" "$LAB_OUT/gone.out" ||
    fail "the READ did not fail with the server gone: $(cat "$LAB_OUT/gone.out")"
grep "READ at 12288 length 4096: the connection to the server failed" "$LAB_OUT/br.nbdkit.log" ||
    fail "the bridge did not say which READ failed with the server gone: $(tail -3 "$LAB_OUT/br.nbdkit.log")"
step "a server of another size: the reconnect says what changed"
serve other 10809 "$LAB_RUN/a.img" --filter=gmblock-rdma -- rdma=10.77.0.1 direct=false
touch "$LAB_RUN/go2"
wait $holder
cat "$LAB_OUT/gone.out"
grep -q "read 2 failed" "$LAB_OUT/gone.out" || fail "a READ succeeded from an export of another size"
grep "the export changed across a reconnect: size $((64 << 20)) -> $((16 << 20))" "$LAB_OUT/br.nbdkit.log" ||
    fail "the bridge did not say what changed: $(grep -i changed "$LAB_OUT/br.nbdkit.log")"
# Once for the READ, once for its retry: connecting again finds the
# same export (it tried 6 times each).
[ "$(grep -c "the export changed" "$LAB_OUT/br.nbdkit.log")" = 2 ] ||
    fail "the changed export was connected to $(grep -c "the export changed" "$LAB_OUT/br.nbdkit.log") times for one READ and its retry"
stop other
stop br

step "a server of another minimum block size: the reconnect refuses it"
# Same size, flags and max request; only the minimum block grows (512 ->
# 4096). The NBD client negotiated 512, and pieces are cut on it.
serve mb1 10812 /dev/vda --filter=gmblock-rdma -- rdma=10.77.0.1:10822
bridge mbb 10.77.0.1:10822
python3 -m nbd -u "nbd+unix:///?socket=$LAB_RUN/mbb.sock" -c "
import os, time, nbd
h.pread(4096, 0)
open('$LAB_RUN/mb-held', 'w').close()
while not os.path.exists('$LAB_RUN/mb-go'):
    time.sleep(0.1)
try:
    h.pread(4096, 0)
    print('read ok', flush=True)
except nbd.Error as e:
    print('read failed:', e, flush=True)" >"$LAB_OUT/mb.out" 2>&1 &
holder=$!
await_file "$LAB_RUN/mb-held" $holder 60 "the holder did not read: $(cat "$LAB_OUT/mb.out")"
stop mb1 KILL
serve mb2 10812 /dev/vda --filter=gmblock-rdma --filter=blocksize-policy -- \
    rdma=10.77.0.1:10822 blocksize-minimum=4096
touch "$LAB_RUN/mb-go"
wait $holder
cat "$LAB_OUT/mb.out"
grep -q "read failed" "$LAB_OUT/mb.out" ||
    fail "a READ succeeded from an export whose minimum block grew"
grep "the export changed across a reconnect: .*minimum block 512 -> 4096" "$LAB_OUT/mbb.nbdkit.log" ||
    fail "the bridge did not say the minimum block changed: $(grep -i changed "$LAB_OUT/mbb.nbdkit.log")"
stop mb2
stop mbb
echo "rdma-bridge-report: all checks passed"

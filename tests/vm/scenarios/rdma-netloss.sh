# A network failure is not a server failure (issue 10, the bridge's
# durability rule, common/unflushed.h).  The server (gmblock-cache in
# write-back behind gmblock-rdma) holds 32 acknowledged writes in its
# cache (checked: not on the disk) when the network between the
# namespaces drops every packet both ways (netem), with 16 more writes
# in flight: each of those must fail with an error, none hang.  The
# network heals: a FLUSH on another, idle connection (multi-conn) and
# one on the broken connection (which reconnects to the same server
# instance) must both succeed, and all 32 writes must then be on the
# disk (O_DIRECT) and read back.  The old rule (a broken connection
# counts its unflushed writes lost) failed those FLUSHes with EIO, and
# an ext4 journal on nbd-client would have aborted.  rdma-durability
# checks the other side: a restarted server makes the next FLUSH fail.
# Then a write held in the server's storage while the network fails: it
# lands before the ZERO the bridge sends over it after reconnecting.
# Then an idle client cut off for good: the server's keepalive probe
# (rdma-keepalive=) drops it, and its place is free for another.  Last,
# a client whose RTU is lost and whose first request is malformed: it is
# told it was dropped, and the server's REP is not retried (the server
# exits at once).
# Why netem and not 'ip link set down': on 7.3.4 a soft-RoCE port that
# goes down leaves its QP1 (the CM's queue pair) in the error state for
# good once a CM message fails to go out, and that device never makes
# another connection ('rdma res show qp': rxe1 lqpn 1 type GSI state
# ERR); real NICs do not do that.
# lab-disks: virtio:32M
# lab-kernel: trixie-backports
# lab-timeout: 900
# lab-sanitizer: tsan
# lab-mem: 2048
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk sch_netem
rxe_pair netns
br_uri="nbd+unix:///?socket=$LAB_RUN/br.sock"

serve srv 10809 /dev/vda --filter=gmblock-rdma --filter=gmblock-cache -- \
    rdma=10.77.0.1 cache-mode=writeback writeback-interval=3600 \
    cache-size=16M rdma-stats="$LAB_OUT/srv.rdma-stats"
bridge br 10.77.0.1

# loss on|off: every packet dropped both ways, or none.
loss() {
    if [ "$1" = on ]; then
        must tc qdisc add dev gmr0 root netem loss 100%
        must ip netns exec gmcl tc qdisc add dev gmr1 root netem loss 100%
    else
        must tc qdisc del dev gmr0 root
        must ip netns exec gmcl tc qdisc del dev gmr1 root
    fi
}

step "32 writes acknowledged into the server's cache, an idle second connection"
rm -f "$LAB_RUN/written" "$LAB_RUN/lossy" "$LAB_RUN/failed" "$LAB_RUN/healed"
python3 - /dev/vda "$br_uri" "$LAB_RUN" <<'PY' &
import os, random, sys, time, nbd
sys.path.insert(0, os.environ["LAB_REPO"] + "/tests/vm/guest")
import nbdaio, ondisk
disk, uri, run = sys.argv[1:]
SZ = 64 << 10

def wait_file(name, what, secs):
    for _ in range(secs * 10):
        if os.path.exists(run + "/" + name):
            return
        time.sleep(0.1)
    sys.exit("timed out waiting for " + what)

h = nbd.NBD(); h.connect_uri(uri)
b = nbd.NBD(); b.connect_uri(uri)
if not b.can_multi_conn():
    sys.exit("the bridge does not advertise multi-conn")
data = [random.randbytes(SZ) for _ in range(48)]
for i in range(32):
    h.pwrite(data[i], i * SZ)
if ondisk.on_disk(disk, range(32), data, SZ):
    sys.exit("control: acknowledged writes reached the disk unflushed "
             "(write-back not in effect)")
open(run + "/written", "w").close()
wait_file("lossy", "the network to fail", 60)

# 16 writes into the dead network: each must end with an error.
t0 = time.monotonic()
cookies = [h.aio_pwrite(data[32 + i], (32 + i) * SZ) for i in range(16)]
ok, failed, left = nbdaio.settle(h, cookies, 300)
if left:
    sys.exit("%d writes into the dead network still unanswered after 300 s"
             % left)
print("writes into the dead network: %d failed, %d succeeded, the last "
      "after %.0f s" % (failed, ok, time.monotonic() - t0))
if failed == 0:
    sys.exit("control: no write failed: the network did not fail")
open(run + "/failed", "w").close()
wait_file("healed", "the network to heal", 60)

def must_flush(conn, what):
    try:
        conn.flush()
    except nbd.Error as e:
        sys.exit("FLUSH on %s failed: %s" % (what, e))
    print("FLUSH on %s succeeded" % what)

# The server still holds the 32 writes: a FLUSH must cover them.
must_flush(b, "the other (idle) connection after the network came back")
n = len(ondisk.on_disk(disk, range(32), data, SZ))
if n != 32:
    sys.exit("after that FLUSH only %d of 32 acknowledged writes are on the "
             "disk" % n)
must_flush(h, "the broken connection (reconnecting to the same server)")
for i in range(32):
    if h.pread(SZ, i * SZ) != data[i]:
        sys.exit("write %d reads back other data" % i)
print("all 32 writes are on the disk and read back")
PY
py=$!
await_file "$LAB_RUN/written" $py 60 "the writes were not acknowledged"
step "the network drops every packet both ways (netem loss 100%)"
loss on
touch "$LAB_RUN/lossy"
for i in $(seq 3500); do [ -e "$LAB_RUN/failed" ] && break; kill -0 $py 2>/dev/null || break; sleep 0.1; done
[ -e "$LAB_RUN/failed" ] || { loss off; kill $py 2>/dev/null; wait $py; fail "the writes into the dead network did not all end"; }
step "the network heals"
loss off
touch "$LAB_RUN/healed"
wait $py || fail "see above"
stop br
stop srv
echo "bridge: $(tr '\n' ' ' <"$LAB_OUT/br.stats")"
[ "$(rdma_counter br.stats lost_write_flushes)" = 0 ] ||
    fail "the bridge failed a FLUSH for writes the server still held"
counter_above br_reconnects "$(rdma_counter br.stats reconnects)" 0 "the broken connection reconnected"

step "a write held in the server's storage when the network fails lands before a later write over it"
# The server sends nothing while the write sleeps in nbdkit's delay
# filter, so it learns of the failure only from the bridge's disconnect
# request (a CM DREQ), which the bridge sends when it reconnects; here
# that one is lost (dropped on the way: `cm_drop on`), so the server still
# holds the old connection when the new one comes.  The bridge fails
# the write (its probe unanswered for 5 s: -D gmblock-rdma.silence_s=5)
# and, once the network is back, reconnects naming the connection again
# (protocol version 4): the server drops the old one and holds the ZERO
# over the old write until it has landed.  A second old write,
# overlapped by nothing, proves they land.  Then the same with the ZERO
# sent over another NBD connection of the bridge, which the broken one
# never reconnects before: the bridge must name it first (ABANDON,
# protocol version 5); and with the bridge killed while its disconnect
# requests are lost, the ZERO sent by its successor on the same state
# file (state=), which names the killed one's connections.
load sch_prio cls_u32 act_gact
# cm_drop on|off [ATTR]: the client's CM messages of attribute ATTR
# (DREQ 0x0015, the default; RTU 0x0014) dropped on their way to the
# server, nothing else: RoCEv2 (UDP 4791), the MAD's attribute (offset
# 64 in the IP packet: IP 20, UDP 8, BTH 12, DETH 8, then the MAD
# header's attribute ID at 16).
cm_drop() {
    if [ "$1" = on ]; then
        must ip netns exec gmcl tc qdisc add dev gmr1 root handle 1: prio
        must ip netns exec gmcl tc filter add dev gmr1 parent 1: protocol ip \
            prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff \
            match u16 "${2:-0x0015}" 0xffff at 64 action drop
    else
        must ip netns exec gmcl tc qdisc del dev gmr1 root
    fi
}
# held_write NAME same|other|killed MAX_CLIENTS: two writes held 40 s
# in the server's storage (nbdkit's delay filter) fail; then a ZERO over
# the first must not be overwritten when the old write lands, and the
# second old write must land.  same, other: the writes fail in the dead
# network; once it is back, the ZERO goes over the same NBD connection
# (it reconnects naming itself: version 4, clients_replaced) or over
# another one of the same bridge, opened before the failure and idle
# since (the bridge names the broken one in an ABANDON first: version
# 5, clients_abandoned).  killed: the bridge (state=FILE) is killed -9
# while the kernel's disconnect requests for its connections are lost
# (`cm_drop on`, as in a network cut), and a new bridge on the same state
# file sends the ZERO: its connection takes the killed one's name, so
# its hello replaces it (clients_replaced), even with rdma-max-clients
# full of the killed one's connections.
held_write() {
    local name=$1 over=$2 maxc=$3 counter py state=()
    # nbdkit's log filter above the delay: a write is logged once the
    # server has its data and it sleeps in the storage.
    serve $name 10809 /dev/vda --filter=gmblock-rdma --filter=log \
        --filter=delay -- rdma=10.77.0.1 delay-write=40 \
        rdma-max-clients=$maxc rdma-stats="$LAB_OUT/$name.rdma-stats" \
        logfile="$LAB_OUT/$name.reqlog"
    [ $over = killed ] && state=(state="$LAB_RUN/br$name.state")
    bridge br$name 10.77.0.1 -D gmblock-rdma.silence_s=5 "${state[@]}"
    rm -f "$LAB_RUN/zsent" "$LAB_RUN/zfailed" "$LAB_RUN/zhealed"
    python3 - "nbd+unix:///?socket=$LAB_RUN/br$name.sock" "$LAB_RUN" $over \
        "nbd+unix:///?socket=$LAB_RUN/br${name}b.sock" <<'PY' &
import os, sys, time, nbd
sys.path.insert(0, os.environ["LAB_REPO"] + "/tests/vm/guest")
import nbdaio
uri, run, over, uri2 = sys.argv[1:]
h = nbd.NBD(); h.connect_uri(uri)
g = h
if over == "other":
    g = nbd.NBD(); g.connect_uri(uri)
cookies = [h.aio_pwrite(b"\xaa" * 65536, off) for off in (0, 1 << 20)]
open(run + "/zsent", "w").close()
t0 = time.monotonic()
ok, failed, left = nbdaio.settle(h, cookies, 60)
if ok:
    sys.exit("a write that could not be answered succeeded")
if left:
    sys.exit("writes still unanswered after 60 s")
print("both writes failed after %.0f s" % (time.monotonic() - t0))
open(run + "/zfailed", "w").close()
for _ in range(1500):
    if os.path.exists(run + "/zhealed"):
        break
    time.sleep(0.1)
if over == "killed":
    g = nbd.NBD(); g.connect_uri(uri2)
t = time.monotonic()
try:
    g.zero(65536, 0)
except nbd.Error as e:
    sys.exit("the ZERO (over the %s connection) failed: %s" % (over, e))
print("the ZERO over the failed write, on the %s connection, took %.0f s"
      % (over, time.monotonic() - t))
PY
    py=$!
    await_file "$LAB_RUN/zsent" $py 60 "the writes were not sent"
    logged "$LAB_OUT/$name.reqlog" 'Write id=.*offset=' 2 30 ||
        { kill $py; fail "the two writes did not reach the server's storage in 30 s"; }
    if [ $over = killed ]; then
        cm_drop on
        stop br$name KILL
        await_file "$LAB_RUN/zfailed" $py 60 "the writes did not fail with their bridge"
        bridge br${name}b 10.77.0.1 "${state[@]}"
    else
        loss on
        for i in $(seq 700); do [ -e "$LAB_RUN/zfailed" ] && break; kill -0 $py 2>/dev/null || break; sleep 0.1; done
        loss off
        cm_drop on
    fi
    touch "$LAB_RUN/zhealed"
    wait $py || { cm_drop off; fail "see above"; }
    cm_drop off
    # Both old writes land 40 s after the server took them.
    logged "$LAB_OUT/$name.reqlog" 'Write id=.*return=' 2 90 || true
    [ $over = killed ] && stop br${name}b || stop br$name
    stop $name
    [ "$(dd if=/dev/vda bs=64K count=1 iflag=direct status=none | tr -d '\0' | wc -c)" = 0 ] ||
        fail "the write that failed landed over the later ZERO (sent over the $over connection)"
    [ "$(dd if=/dev/vda bs=64K skip=16 count=1 iflag=direct status=none | tr -d '\252' | wc -c)" = 0 ] ||
        fail "the old write at 1M never landed: nothing was tested"
    echo "server: $(grep -E 'clients_replaced|clients_abandoned|fence_waits' "$LAB_OUT/$name.rdma-stats" | tr '\n' ' ')"
    if [ $over = other ]; then counter=clients_abandoned; else counter=clients_replaced; fi
    counter_above $counter "$(rdma_counter $name.rdma-stats $counter)" 0 "the server dropped the connection it still held"
    counter_above fence_waits "$(rdma_counter $name.rdma-stats fence_waits)" 0 "the ZERO waited for the old write"
    case $over in
    other) counter_above abandons "$(rdma_counter br$name.stats abandons)" 0 "the bridge named the broken connection" ;;
    killed) counter_above names_taken "$(rdma_counter br${name}b.stats names_taken)" 0 "the new bridge's connection took the killed one's name"
            [ "$(cat "$LAB_RUN/br$name.state")" = "gmblock-rdma connections 1" ] ||
                fail "the state file still names connections after a clean exit: $(cat "$LAB_RUN/br$name.state")" ;;
    esac
    dd if=/dev/zero of=/dev/vda bs=1M count=2 oflag=direct status=none
}
# rdma-max-clients=1: the bridge's one connection; its reconnect must
# replace the old one, not be refused as one client too many.
held_write srv2 same 1
step "the same, with the ZERO sent over another NBD connection of the bridge (multi-conn)"
held_write srv3 other 2
step "the same, with the bridge killed (its disconnect requests lost) and the ZERO sent by a new bridge on its state file"
# rdma-max-clients=1, full with the killed bridge's connection.
held_write srv4 killed 1

step "an idle client whose network is cut for good: the server's keepalive probe drops it, freeing its place"
# rdma-max-clients=1: while the server holds the dead client, nobody
# else gets in.  Nothing is ever sent to an idle client but the probe.
serve srv5 10809 /dev/vda --filter=gmblock-rdma -- rdma=10.77.0.1 \
    rdma-keepalive=3 rdma-max-clients=1 rdma-stats="$LAB_OUT/srv5.rdma-stats"
bridge br5 10.77.0.1
rm -f "$LAB_RUN/kconn" "$LAB_RUN/kdone"
python3 - "nbd+unix:///?socket=$LAB_RUN/br5.sock" "$LAB_RUN" <<'PY' &
import os, sys, time, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pread(4096, 0)
open(sys.argv[2] + "/kconn", "w").close()
while not os.path.exists(sys.argv[2] + "/kdone"):
    time.sleep(0.1)
PY
py=$!
await_file "$LAB_RUN/kconn" $py 30 "the idle client did not connect"
loss on
logged "$LAB_OUT/srv5.nbdkit.log" "keepalive probe .*dropping it" 1 60 || true
loss off
touch "$LAB_RUN/kdone"; wait $py 2>/dev/null || true
grep "keepalive probe" "$LAB_OUT/srv5.nbdkit.log" ||
    fail "the server did not drop the idle client within 60 s of the cut"
bridge br5b 10.77.0.1
nbdinfo --size "nbd+unix:///?socket=$LAB_RUN/br5b.sock" >/dev/null ||
    fail "a new client was refused: the dead one still holds its place"
stop br5b
stop br5
stop srv5
counter_above keepalive_probes "$(rdma_counter srv5.rdma-stats keepalive_probes)" 0 "probes sent"
counter_above keepalive_drops "$(rdma_counter srv5.rdma-stats keepalive_drops)" 0 "the silent client was dropped"

# A client dropped before its RTU reached the server (the RTU lost, its
# first request malformed): the server tells the CM the connection is
# established and holds its DREQ until the CM's ESTABLISHED event
# (disconnect.c): sent at once, the DREQ would leave the REP retried for
# about a minute, and the REP holds the connection id (rdma_destroy_id,
# so the server's exit, waits for it).  The client must be told, no REP
# retried, and the server exit at once.
step "a client dropped before the server saw its RTU"
serve srv6 10809 /dev/vda -v --filter=gmblock-rdma -- rdma=10.77.0.1
reps=/sys/class/infiniband/rxe0/ports/1/cm_tx_retries/rep
[ -r "$reps" ] || fail "no CM counter $reps: the REP retries cannot be checked"
reps0=$(cat $reps)
cm_drop on 0x0014
ip netns exec gmcl timeout 60 "$LAB_REPO/tests/rdma-badclient" 10.77.0.1 10810 bad-op ||
    { cm_drop off; fail "the client dropped before its RTU came was not told"; }
cm_drop off
grep "dropped before its RTU came" "$LAB_OUT/srv6.nbdkit.log" ||
    fail "the server got the client's RTU before its request: nothing tested"
# The server's REP is retried after the client's CM response timeout
# (librdmacm's 20: 4.3 s).
sleep 10
[ "$(cat $reps)" = "$reps0" ] ||
    fail "the server's REP was retried $(($(cat $reps) - reps0)) times after the client was dropped"
t0=$(date +%s)
stop srv6
[ $(($(date +%s) - t0)) -le 10 ] ||
    fail "the server took $(($(date +%s) - t0)) s to exit (its dropped client's connection id)"
echo "rdma-netloss: all checks passed"

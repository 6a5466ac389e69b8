# What the gmblock-rdma bridge counts and says. Its wait counters count
# each piece that waited once: a bridge with one credit under nbdcopy's
# 16 requests in flight has at most as many credit_waits as pieces sent
# (every slot given back wakes every waiter, and each one that found
# none free again counted once more: thousands), and one with a pool of
# one piece under 16 credits at most as many pool_waits.
# lab-disks: virtio:64M
# lab-timeout: 400
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk
rxe_pair
must head -c 16M /dev/urandom >"$LAB_RUN/a.img"
serve srv 10809 /dev/vda --filter=gmblock-rdma -- rdma=10.77.0.1

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

stop srv
echo "rdma-bridge-report: all checks passed"

# The RDMA transport with its pool in device memory (issue 10 item 3):
# trixie-backports' 7.x kernel, two NVMe controllers under one PCIe
# switch, one with a CMB published as p2pmem; gmblock serves the other's
# namespace behind gmblock-rdma rdma-pool-memory=p2pmem:auto, so reads
# DMA from the disk into the CMB. The NIC (soft-RoCE) is asked to
# register that memory; mainline kernels refuse (the RDMA core pins
# P2PDMA pages only through a dma-buf, which p2pmem does not export), so
# the data is staged through registered host memory and counted. A
# 32 MiB round trip through the bridge (in a network namespace of its
# own, across the veth) is byte-exact, the counters show
# where the bytes went, and rdma-pool-fallback=refuse refuses to start
# with the reason.
# lab-disks: nvme:128M nvme:16M:cmb=16
# lab-kernel: trixie-backports
# lab-pci: switch
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
p2p_facts
[ -n "$P2P_MEM" ] && [ -n "$P2P_SWITCH" ] || fail "no p2pmem under a switch: the topology is not what this scenario needs"
disk=$P2P_PEER_DISK
rxe_pair netns
bridge_uri="nbd+unix:///?socket=$LAB_RUN/br.sock"
must head -c 32M /dev/urandom >"$LAB_RUN/img"

step "round trip with the RDMA pool in the CMB of $P2P_CMB_BDF"
serve p2p 10809 "$disk" -v --filter=gmblock-rdma -- rdma=10.77.0.1 rdma-pool=8M \
    rdma-pool-memory=p2pmem:auto rdma-stats="$LAB_OUT/p2p.rdma-stats"
bridge br 10.77.0.1
must nbdcopy "$LAB_RUN/img" "$bridge_uri"
rm -f "$LAB_RUN/back"
must nbdcopy "$bridge_uri" "$LAB_RUN/back"
cmp -n $((32 << 20)) "$LAB_RUN/back" "$LAB_RUN/img" || fail "what came back over RDMA through the CMB differs"
# The bridge ran in the client namespace (rxe_pair netns): the data
# crossed the veth, not rxe0's internal loopback.
tx=$(cat /sys/class/net/gmr0/statistics/tx_bytes)
echo "gmr0 sent $tx bytes to the client namespace"
[ "$tx" -gt $((32 << 20)) ] || fail "the RDMA traffic did not cross the veth (gmr0 sent $tx bytes)"
stop br
stop p2p
dd if="$disk" of="$LAB_RUN/ondisk" bs=1M count=32 iflag=direct status=none &&
    cmp "$LAB_RUN/ondisk" "$LAB_RUN/img" || fail "$disk does not hold what was written through the CMB"
grep -E 'gmblock-rdma: (listening|ibv_reg_mr|.*registered with the NIC)|warning' "$LAB_OUT/p2p.nbdkit.log"
grep -q "pool .* of p2pmem of $P2P_CMB_BDF" "$LAB_OUT/p2p.nbdkit.log" || fail "the RDMA pool is not in the p2pmem of $P2P_CMB_BDF"
mr=$(rdma_counter p2p.rdma-stats device_mr)
staged=$(rdma_counter p2p.rdma-stats staged_bytes)
sent=$(rdma_counter p2p.rdma-stats read_bytes)
fetched=$(rdma_counter p2p.rdma-stats write_bytes)
dma=$(counter p2p dma_client_bytes)
echo "device_mr $mr staged_bytes $staged read_bytes $sent write_bytes $fetched; plugin dma_client_bytes $dma memcpy_read_bytes $(counter p2p memcpy_read_bytes)"
[ "${dma:-0}" -ge $((64 << 20)) ] || fail "dma_client_bytes ${dma:-?}: the disk did not DMA the data into the CMB"
[ "$(counter p2p memcpy_read_bytes)" = 0 ] || fail "the plugin copied read data"
if [ "$mr" = 1 ]; then
    [ "$staged" = 0 ] || fail "device memory registered, yet $staged bytes were staged"
else
    [ "$staged" = $((sent + fetched)) ] ||
        fail "the NIC could not register the CMB: staged_bytes $staged, expected every byte sent and fetched ($((sent + fetched)))"
    grep -q 'warning: the NIC cannot register p2pmem' "$LAB_OUT/p2p.nbdkit.log" ||
        fail "no warning that every byte is staged"
    step "rdma-pool-fallback=refuse: no staging, refuse to start"
    rc=0
    timeout 60 "$LAB_REPO/nbdkit" -f -i 127.0.0.1 -p 10809 --filter=gmblock-rdma gmblock file="$disk" \
        rdma=10.77.0.1 rdma-pool=8M rdma-pool-memory=p2pmem:auto rdma-pool-fallback=refuse \
        >"$LAB_OUT/refuse.log" 2>&1 </dev/null || rc=$?
    cat "$LAB_OUT/refuse.log"
    [ $rc != 0 ] && [ $rc != 124 ] || fail "rdma-pool-fallback=refuse did not refuse (exit $rc)"
    grep -q 'cannot register p2pmem of .*ibv_reg_mr' "$LAB_OUT/refuse.log" || fail "the refusal does not say why"
fi
echo "rdma-p2p: all checks passed"

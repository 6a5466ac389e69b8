# The same NVMe pair on 7.x with P2PDMA, but on the root bus: the CMB is
# published as p2pmem, yet the kernel refuses P2P DMA through the host
# bridge (QEMU's 8086:29c0 is not on its whitelist). gmblock-topology
# says so, buffer=p2pmem:auto refuses to start naming the host bridge,
# and buffer=p2pmem:BDF (forced) refuses after its start-up DMA probe
# with the kernel's EINVAL explained — never a silent host fallback.
# lab-disks: nvme:64M nvme:16M:cmb=16
# lab-kernel: trixie-backports
# lab-pci: root
# lab-timeout: 180
. "$LAB_REPO/tests/vm/guest/lib.sh"
p2p_facts
[ -n "$P2P_MEM" ] || fail "7.x did not publish the CMB as p2pmem"
[ -z "$P2P_SWITCH" ] || fail "the controllers share a switch: this scenario needs the root bus"
disk=$P2P_PEER_DISK

"$LAB_REPO/gmblock-topology" "$disk" | tee "$LAB_OUT/topology.txt"
grep -q "$P2P_PEER_BDF -> p2pmem $P2P_CMB_BDF: host-bridge: P2P refused" "$LAB_OUT/topology.txt" ||
    fail "gmblock-topology does not report the host-bridge path"

refuses auto "no p2pmem provider can take DMA .*crosses the host bridge" buffer=p2pmem:auto
refuses forced "fails \(Invalid argument\): the kernel refuses peer-to-peer DMA.*host-bridge" buffer=p2pmem:$P2P_CMB_BDF

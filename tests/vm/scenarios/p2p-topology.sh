# The lab's P2P topology works: on trixie-backports' 7.x kernel the NVMe
# controller with a 16 MiB CMB publishes it as p2pmem (with memory
# available), both NVMe controllers sit under one PCIe switch, and the
# other controller DMAs into and out of that memory (O_DIRECT, byte for
# byte). Facts for later scenarios: p2p_facts in guest/lib.sh.
# lab-disks: nvme:64M nvme:16M:cmb=16
# lab-kernel: trixie-backports
# lab-pci: switch
# lab-timeout: 120
. "$LAB_REPO/tests/vm/guest/lib.sh"
p2p_facts
case $(uname -r) in 6.1.*) fail "the guest runs $(uname -r), not the trixie-backports kernel" ;; esac
[ -n "$P2P_MEM" ] || fail "$(uname -r) did not publish the CMB of $P2P_CMB_BDF as p2pmem"
for f in size available published allocate; do
    [ -e "$P2P_MEM/$f" ] || fail "no $P2P_MEM/$f"
done
[ "$(p2pmem_bdf)" = "$P2P_CMB_BDF" ] || fail "p2pmem is on $(p2pmem_bdf), not on the CMB controller $P2P_CMB_BDF"
[ "$(cat "$P2P_MEM/available")" -gt 0 ] || fail "p2pmem of $P2P_CMB_BDF has nothing available"
[ -n "$P2P_SWITCH" ] || fail "$P2P_CMB_BDF and $P2P_PEER_BDF are not under one PCIe switch"
step "P2P DMA between $P2P_PEER_DISK and the p2pmem of $P2P_CMB_BDF"
p2p_dma "$P2P_PEER_DISK" "$P2P_CMB_BDF" || fail "P2P DMA under the switch failed"

# The same switch topology on Debian 12's 6.1 kernel (what gmblock's users
# run): it has no CONFIG_PCI_P2PDMA, so the CMB stays a plain BAR, no
# p2pmem/ anywhere, and the nvme driver says "failed to register the CMB".
# lab-disks: nvme:64M nvme:16M:cmb=16
# lab-pci: switch
# lab-timeout: 120
. "$LAB_REPO/tests/vm/guest/lib.sh"
p2p_facts
case $(uname -r) in 6.1.*) ;; *) fail "the guest runs $(uname -r), not 6.1" ;; esac
[ -n "$P2P_SWITCH" ] || fail "$P2P_CMB_BDF and $P2P_PEER_BDF are not under one PCIe switch"
[ "$(stat -c %s "/sys/bus/pci/devices/$P2P_CMB_BDF/resource2")" = $((16 << 20)) ] ||
    fail "the CMB BAR of $P2P_CMB_BDF is not 16 MiB"
b=$(p2pmem_bdf) && fail "6.1 has p2pmem on $b"
dmesg | grep -c 'failed to register the CMB' >/dev/null || fail "no 'failed to register the CMB' in dmesg"

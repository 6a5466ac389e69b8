# The direct path on real P2PDMA: trixie-backports' 7.x kernel, two NVMe
# controllers under one PCIe switch, one with a 16 MiB CMB that the
# kernel publishes as p2pmem. gmblock-topology sees the switch path and
# picks the CMB; gmblock serves the other controller's namespace with
# buffer=p2pmem:auto, so every O_DIRECT read and write DMAs between the
# two NVMe devices with no host RAM in between. nbdcopy round trips and
# an ext4 round trip under nbd-client are byte-exact, and the counters
# show the bytes landed in device memory (and none in the host pool).
# A loop device over the namespace is refused, the reason named
# (EREMOTEIO: its queue does not take peer-to-peer pages).
# lab-disks: nvme:256M nvme:16M:cmb=16
# lab-kernel: trixie-backports
# lab-pci: switch
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
load nbd ext4
p2p_facts
[ -n "$P2P_MEM" ] && [ -n "$P2P_SWITCH" ] || fail "no p2pmem under a switch: the topology is not what this scenario needs"
disk=$P2P_PEER_DISK
topo=$LAB_REPO/gmblock-topology

step "gmblock-topology $disk"
"$topo" "$disk" | tee "$LAB_OUT/topology.txt" || fail "gmblock-topology failed"
grep -q "$P2P_PEER_BDF -> p2pmem $P2P_CMB_BDF: switch at .*: P2P allowed" "$LAB_OUT/topology.txt" ||
    fail "gmblock-topology does not report the switch path $P2P_PEER_BDF -> $P2P_CMB_BDF"
grep -q "buffer=p2pmem:auto would use $P2P_CMB_BDF" "$LAB_OUT/topology.txt" ||
    fail "gmblock-topology would not pick the CMB $P2P_CMB_BDF"
grep -q 'kernel P2PDMA: yes' "$LAB_OUT/topology.txt" || fail "gmblock-topology does not see P2PDMA on $(uname -r)"
"$LAB_REPO/nbdkit" gmblock file="$disk" --dump-plugin >"$LAB_OUT/dump.txt" || fail "--dump-plugin failed"
grep -q "^gmblock_buffer_auto=$P2P_CMB_BDF$" "$LAB_OUT/dump.txt" || fail "--dump-plugin: gmblock_buffer_auto is not $P2P_CMB_BDF"

step "nbdcopy round trip through p2pmem"
head -c 64M /dev/urandom >"$LAB_RUN/img"
serve p2p 10809 "$disk" -v -D gmblock.topology=1 -- buffer=p2pmem:auto
must nbdcopy "$LAB_RUN/img" nbd://127.0.0.1:10809
must nbdcopy nbd://127.0.0.1:10809 "$LAB_RUN/back"
cmp -n $((64 << 20)) "$LAB_RUN/back" "$LAB_RUN/img" || fail "nbdcopy read-back through p2pmem differs"
stop p2p
grep -q "pool .* in p2pmem of $P2P_CMB_BDF" "$LAB_OUT/p2p.nbdkit.log" || fail "the pool is not in the p2pmem of $P2P_CMB_BDF"
dd if="$disk" of="$LAB_RUN/ondisk" bs=1M count=64 iflag=direct status=none &&
    cmp "$LAB_RUN/ondisk" "$LAB_RUN/img" ||
    fail "$disk does not hold what was written through p2pmem"
dev=$(counter p2p dma_device_bytes) pool=$(counter p2p dma_pool_bytes) out=$(counter p2p cpu_copy_from_device_bytes)
echo "dma_device_bytes $dev dma_pool_bytes $pool cpu_copy_from_device_bytes $out dma_avg_us $(counter p2p dma_avg_us)"
[ "${dev:-0}" -ge $((64 << 20)) ] || fail "dma_device_bytes ${dev:-?}: the data did not land in device memory"
[ "${pool:-1}" = 0 ] || fail "dma_pool_bytes $pool: host memory took DMA with buffer=p2pmem"
[ "${out:-0}" -gt 0 ] || fail "no CPU copies out of device memory were counted for the TCP reads"

step "ext4 round trip under nbd-client through p2pmem"
serve p2pfs 10809 "$disk" -- buffer=p2pmem:$P2P_CMB_BDF
attach /dev/nbd0 10809
fs_roundtrip /dev/nbd0 "$disk"
detach /dev/nbd0
stop p2pfs
dev=$(counter p2pfs dma_device_bytes)
echo "ext4: dma_device_bytes $dev"
[ "${dev:-0}" -ge $((32 << 20)) ] || fail "ext4 round trip: dma_device_bytes ${dev:-?}"

# A loop device over the same namespace, on the same switch path: the
# kernel refuses P2PDMA pages to a queue that does not take them
# (get_user_pages: EREMOTEIO). The message said the disk and the device
# did not share a switch, next to the path it had just found allowed.
load loop
loop=$(losetup -f --show --direct-io=on "$P2P_PEER_DISK") || fail "losetup over $P2P_PEER_DISK"
disk=$loop
refuses loopdev "fails \(Remote I/O error\): the kernel refused the device's pages.*does not take peer-to-peer pages" buffer=p2pmem:$P2P_CMB_BDF
disk=$P2P_PEER_DISK
losetup -d "$loop"

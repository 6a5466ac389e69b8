# Debian 12's 6.1 kernel (no CONFIG_PCI_P2PDMA) with the CMB NVMe under a
# switch: buffer=p2pmem refuses naming the kernel option; buffer=bar on
# the CMB BAR maps (iomem=relaxed) but O_DIRECT into it fails with EFAULT
# (no struct pages), so it refuses with that reason; with
# buffer-fallback=stage it serves, staging every byte through host
# memory, byte-exact, counted (staged_bytes, CPU copies into and out of
# the BAR).
# lab-disks: nvme:64M nvme:16M:cmb=16
# lab-pci: switch
# lab-timeout: 180
. "$LAB_REPO/tests/vm/guest/lib.sh"
p2p_facts
case $(uname -r) in 6.1.*) ;; *) fail "the guest runs $(uname -r), not 6.1" ;; esac
disk=$P2P_PEER_DISK

refuses auto "no p2pmem provider can take DMA.*CONFIG_PCI_P2PDMA=y" buffer=p2pmem
refuses bdf "publishes no p2pmem.*CONFIG_PCI_P2PDMA=y" buffer=p2pmem:$P2P_CMB_BDF
refuses bar "fails \(Bad address\): the kernel has no struct pages.*buffer-fallback=stage" buffer=bar:$P2P_CMB_BDF:2
refuses regs "BAR 0 is not a prefetchable memory BAR" buffer=bar:$P2P_CMB_BDF:0

step "buffer-fallback=stage serves through host memory, counted"
head -c 32M /dev/urandom >"$LAB_RUN/img"
serve stage 10809 "$disk" -- buffer=bar:$P2P_CMB_BDF:2 buffer-fallback=stage
must nbdcopy "$LAB_RUN/img" nbd://127.0.0.1:10809
must nbdcopy nbd://127.0.0.1:10809 "$LAB_RUN/back"
cmp -n $((32 << 20)) "$LAB_RUN/back" "$LAB_RUN/img" || fail "read-back through the staged BAR differs"
stop stage
dd if="$disk" of="$LAB_RUN/ondisk" bs=1M count=32 iflag=direct status=none &&
    cmp "$LAB_RUN/ondisk" "$LAB_RUN/img" ||
    fail "$disk does not hold what was written"
staged=$(counter stage staged_bytes) dev=$(counter stage dma_device_bytes)
echo "staged_bytes $staged dma_device_bytes $dev to_device $(counter stage cpu_copy_to_device_bytes) from_device $(counter stage cpu_copy_from_device_bytes)"
[ "${staged:-0}" -ge $((64 << 20)) ] || fail "staged_bytes ${staged:-?} < the 64 MiB moved"
[ "${dev:-1}" = 0 ] || fail "dma_device_bytes $dev: the BAR cannot take DMA on 6.1"
grep -q "warning: BAR 2 of $P2P_CMB_BDF cannot take DMA" "$LAB_OUT/stage.nbdkit.log" || fail "no staging warning in the log"

#!/bin/bash
# The PCI topology code (common/topology.c, libpci) and the buffer=
# providers, on fake sysfs trees (tests/fake-sysfs.py): the build
# machines have no P2PDMA device, no switch and no RDMA NIC.  The real
# thing (a 7.3.4 guest with an NVMe CMB behind a PCIe switch) is proven
# in the guest lab (tests/vm/scenarios/p2p-*.sh).
#
# gmblock-topology on four layouts: which PCI functions lie under md0
# (through a partition and a virtio disk), p2pmem providers, RDMA NICs,
# the path verdicts (switch, root port, same device, host bridge) and
# what buffer=p2pmem:auto would pick; its bad input.  Then the plugin
# with sysfs.path= pointing at a fake tree in which the test's own
# filesystem is an NVMe namespace: --dump-plugin keys, the
# -D gmblock.topology=1 report, refusals with the reason named, and
# buffer=p2pmem:auto serving through the (file-backed) p2pmem mapping
# byte for byte with the device-memory counters moving; a BAR that
# cannot take DMA refused, or staged through host memory.
. "$(dirname "$0")/functions.sh"
require nbdcopy nbdsh cmp /usr/bin/python3
topo=${GMBLOCK_BUILDDIR:-$top}/gmblock-topology
[[ -x $topo ]] || fail "$topo is not built (make)"

fake () {       # fake NAME LAYOUT [args]: a tree at $T/NAME
    /usr/bin/python3 "$top/tests/fake-sysfs.py" "$T/$1" "$2" "${@:3}" ||
        fail "fake-sysfs.py $2 failed"
}
expect () {     # expect FILE REGEX...: every regex matches a line
    local f=$1 re; shift
    for re in "$@"; do
        grep -qE -- "$re" "$f" || { cat "$f" >&2; fail "no line matches /$re/ in $f"; }
    done
}
reject () {     # reject FILE REGEX: no line matches
    if grep -qE -- "$2" "$1"; then cat "$1" >&2; fail "a line matches /$2/ in $1"; fi
}

for l in switch rootbus noprovider rootport; do fake "$l" "$l"; done

info "switch layout: md0 over a partition of an NVMe and a virtio disk"
"$topo" -O sysfs.path="$T/switch/bus/pci" md0 >"$T/sw.txt"
cat "$T/sw.txt"
expect "$T/sw.txt" \
    '^storage behind md0: md0 <- nvme0n1p1 nvme0n1 vda$' \
    '^  0000:03:00.0 .*\[1b36:0010\] driver nvme$' \
    'upstream: 0000:02:00.0 \(switch downstream port\) < 0000:01:00.0 \(switch upstream port\) < 0000:00:06.0 \(root port\) < root bus' \
    '^  0000:00:04.0 .*\[1af4:1001\]' \
    'p2pmem: 16M, 16646144 bytes available, published' \
    'BAR2: 16M 64-bit prefetchable' \
    'mlx5_0 on   0000:00:07.0' \
    'rxe0: software \(no PCI function\), on netdev va' \
    '0000:03:00.0 -> p2pmem 0000:04:00.0: switch at 0000:01:00.0: P2P allowed' \
    '0000:00:04.0 -> p2pmem 0000:04:00.0: host-bridge: P2P refused' \
    '0000:03:00.0 -> RDMA NIC 0000:00:07.0: host-bridge' \
    'buffer=p2pmem:auto would fail: 0000:00:04.0 -> 0000:04:00.0 crosses the host bridge'
# The CMB is p2pmem here (the kernel hands it out) and the NIC's BAR0 is
# its driver's: neither is offered for buffer=bar.
sed -n '/^other device memory/,/^RDMA devices/p' "$T/sw.txt" >"$T/sw.bars"
expect "$T/sw.bars" '^  none$'

"$topo" -O sysfs.path="$T/switch/bus/pci" --keys nvme0n1 >"$T/sw.keys"
expect "$T/sw.keys" \
    '^gmblock_topology_sysfs='"$T"'/switch$' \
    '^gmblock_p2pdma_kernel=yes$' \
    '^gmblock_storage_chain=nvme0n1$' \
    '^gmblock_storage=0000:03:00.0$' \
    '^gmblock_p2pmem=0000:04:00.0:16777216:16646144$' \
    '^gmblock_rdma=.*mlx5_0@0000:00:07.0' '^gmblock_rdma=.*rxe0@va' \
    '^gmblock_path_0000:03:00.0_0000:04:00.0=switch@0000:01:00.0$' \
    '^gmblock_path_0000:03:00.0_0000:00:07.0=host-bridge$' \
    '^gmblock_buffer_auto=0000:04:00.0$'

info "a provider too small for a pool is passed over for one that is not"
# The storage's own function (same-device, the nearest rank) publishes
# 4K: auto used to pick it and the plugin then refused to start.
fake small switch
P=$T/small/bus/pci/devices/0000:03:00.0/p2pmem
mkdir "$P" && echo 16777216 >"$P/size" && echo 4096 >"$P/available" &&
    echo 1 >"$P/published" || fail "cannot make the small provider"
"$topo" -O sysfs.path="$T/small/bus/pci" nvme0n1 >"$T/small.txt"
expect "$T/small.txt" 'buffer=p2pmem:auto would use 0000:04:00.0'

info "an array of 17 functions: every one is checked (16 were, silently)"
# md0 over mdA (16 NVMe functions behind the switch) and vda (behind the
# host bridge): vda, the 17th, used to be dropped, and auto picked the
# switch's CMB although vda cannot reach it.
fake big switch
R=$T/big
D3=$R/devices/pci0000:00/0000:00:06.0/0000:01:00.0/0000:02:00.0
mkdir -p "$R/devices/virtual/block/mdA/slaves"
i=0
for dv in 01 02; do for f in 0 1 2 3 4 5 6 7; do
    b=0000:03:$dv.$f
    cp -a "$D3/0000:03:00.0" "$D3/$b"; rm -rf "$D3/$b/nvme"; mkdir -p "$D3/$b/blk/sd$i"
    ln -s "../../../devices/pci0000:00/0000:00:06.0/0000:01:00.0/0000:02:00.0/$b" "$R/bus/pci/devices/$b"
    ln -s "../../../../pci0000:00/0000:00:06.0/0000:01:00.0/0000:02:00.0/$b/blk/sd$i" \
        "$R/devices/virtual/block/mdA/slaves/sd$i"
    i=$((i + 1))
done; done
rm "$R/devices/virtual/block/md0/slaves/nvme0n1p1"
ln -s ../../mdA "$R/devices/virtual/block/md0/slaves/a-mdA"
"$topo" -O sysfs.path="$R/bus/pci" --keys md0 >"$T/big.keys"
n=$(sed -n 's/^gmblock_storage=//p' "$T/big.keys" | wc -w)
[[ $n == 17 ]] || { cat "$T/big.keys" >&2; fail "big: $n storage functions listed, expected 17"; }
expect "$T/big.keys" '^gmblock_storage=.*0000:00:04.0' '^gmblock_buffer_auto=none$'

info "rootbus layout: the NVMe pair on the root bus (the kernel refuses P2P)"
"$topo" -O sysfs.path="$T/rootbus/bus/pci" nvme0n1 >"$T/rb.txt"
expect "$T/rb.txt" '0000:00:03.0 -> p2pmem 0000:00:04.0: host-bridge: P2P refused' \
    'upstream: root bus' \
    'buffer=p2pmem:auto would fail: 0000:00:03.0 -> 0000:00:04.0 crosses the host bridge'

info "noprovider layout: a CMB BAR but no p2pmem (Debian 12's 6.1 kernel)"
"$topo" -O sysfs.path="$T/noprovider/bus/pci" nvme0n1 >"$T/np.txt"
expect "$T/np.txt" 'kernel P2PDMA: unknown' \
    '^  none: the kernel needs CONFIG_PCI_P2PDMA=y' \
    '^  0000:04:00.0 BAR2 16M' \
    'buffer=p2pmem:auto would fail: no PCI device publishes p2pmem'
"$topo" -O sysfs.path="$T/noprovider/bus/pci" --keys nvme0n1 >"$T/np.keys"
expect "$T/np.keys" '^gmblock_p2pmem=$' '^gmblock_buffer_auto=none$'

info "rootport layout: two functions of one device behind a root port"
"$topo" -O sysfs.path="$T/rootport/bus/pci" --keys nvme0n1 >"$T/rp.keys"
expect "$T/rp.keys" '^gmblock_path_0000:05:00.0_0000:05:00.1=same-device$' \
    '^gmblock_buffer_auto=0000:05:00.1$'

info "machine-wide listing, no file"
"$topo" -O sysfs.path="$T/switch/bus/pci" >"$T/all.txt"
expect "$T/all.txt" 'p2pmem providers' 'RDMA devices:'
reject "$T/all.txt" '^storage behind'

info "gmblock-topology: bad input"
bad () {        # bad STATUS REGEX ARGS...
    local want=$1 re=$2 rc=0; shift 2
    "$topo" "$@" >"$T/bad.out" 2>&1 || rc=$?
    [[ $rc == "$want" ]] || { cat "$T/bad.out" >&2; fail "gmblock-topology $*: exit $rc, not $want"; }
    expect "$T/bad.out" "$re"
    info "refused ($rc): $(head -n1 "$T/bad.out")"
}
bad 1 'there is no devices folder' -O sysfs.path="$T/nowhere/bus/pci"
bad 1 'expected the bus/pci folder' -O sysfs.path="$T/switch"
bad 2 'the only parameter accepted is sysfs.path' -O foo=bar
bad 2 'usage:' a b
bad 2 'usage:' --bogus
"$topo" -O sysfs.path="$T/switch/bus/pci" no-such-disk >"$T/nd.txt"
expect "$T/nd.txt" 'no-such-disk: no such file, and no block device of that name'

info "gmblock-topology: trees that loop end, odd values are no values"
# A function's folder inside one of its own name (its parent is itself),
# and md0's members leading back to md0: each walk must end.
fake loop switch
d=$T/loop/devices/pci0000:00/0000:00:06.0/0000:01:00.0/0000:02:01.0
mv "$d/0000:04:00.0" "$T/moved" && mkdir "$d/0000:04:00.0" && mv "$T/moved" "$d/0000:04:00.0/0000:04:00.0"
ln -sfn "$(realpath --relative-to="$T/loop/bus/pci/devices" "$d/0000:04:00.0/0000:04:00.0")" \
    "$T/loop/bus/pci/devices/0000:04:00.0"
for i in 0 1 2 3 4 5; do ln -s ../../md0 "$T/loop/devices/virtual/block/md0/slaves/self$i"; done
echo 16646144x >"$d/0000:04:00.0/0000:04:00.0/p2pmem/available"
timeout 20 "$topo" -O sysfs.path="$T/loop/bus/pci" md0 >"$T/loop.txt" ||
    fail "gmblock-topology on a tree that loops: exit $? (124: it did not end)"
[[ $(wc -l <"$T/loop.txt") -lt 100 ]] || fail "gmblock-topology on a tree that loops: $(wc -l <"$T/loop.txt") lines"
reject "$T/loop.txt" '16646144'
# The cut walk says so, and auto will not pick from a partial list.
expect "$T/loop.txt" 'note: .*the walk under the file stopped at md0 .*the disks listed may not be all' \
    'buffer=p2pmem:auto would fail: .*the walk under the file stopped'
long=$T/$(printf 'x%.0s' $(seq 300))
bad 1 'sysfs.path=.*too long' -O sysfs.path="$long/bus/pci"

# A tree where the test's own filesystem is nvme0n1 behind the switch.
randfile "$T/disk.img" 8M
devno=$(stat -c %d "$T/disk.img")
fake plug switch --storage-dev-number "$devno"
sp=sysfs.path=$T/plug/bus/pci

info "--dump-plugin: gmblock_* keys for the served file"
"$NBDKIT" gmblock file="$T/disk.img" "$sp" --dump-plugin >"$T/dump.txt"
expect "$T/dump.txt" '^gmblock_buffer_providers=host p2pmem bar$' \
    '^gmblock_storage=0000:03:00.0$' '^gmblock_buffer_auto=0000:04:00.0$'

info "-D gmblock.topology=1 prints the report at start-up"
start_server dbg -v -D gmblock.topology=1 gmblock file="$T/disk.img" "$sp"
stop_server dbg
expect "$T/dbg.log" 'gmblock: topology: gmblock topology \(sysfs ' \
    'gmblock: topology: buffer=p2pmem:auto would use 0000:04:00.0' \
    'gmblock: pool .* in host memory'

info "refusals, each naming what is wrong"
fake np noprovider --storage-dev-number "$devno"
start_fails np 'no p2pmem provider can take DMA' 'no PCI device publishes p2pmem' 'CONFIG_PCI_P2PDMA=y' -- \
    gmblock file="$T/disk.img" sysfs.path="$T/np/bus/pci" buffer=p2pmem
start_fails nodev 'there is no PCI device 0000:0a:00.0' -- \
    gmblock file="$T/disk.img" "$sp" buffer=p2pmem:0a:00.0
start_fails notprov 'publishes no p2pmem' 'the kernel has P2PDMA and these devices do: 0000:04:00.0' -- \
    gmblock file="$T/disk.img" "$sp" buffer=p2pmem:0000:03:00.0
start_fails regbar 'BAR 0 is not a prefetchable memory BAR' -- \
    gmblock file="$T/disk.img" "$sp" buffer=bar:0000:03:00.0:0
# A BAR the kernel publishes as p2pmem holds the NVMe driver's queues
# in its first pages; a NIC's BAR0 is prefetchable but holds its
# doorbells.  Both were mapped from offset 0 and written over.
start_fails p2pbar 'bar:0000:04:00.0:2: gmblock will not put buffers in BAR 2 of 0000:04:00.0: the kernel publishes its memory as p2pmem' 'use buffer=p2pmem:0000:04:00.0' -- \
    gmblock file="$T/disk.img" "$sp" buffer=bar:0000:04:00.0:2
start_fails nicbar 'BAR 0 of 0000:00:07.0, bound to driver mlx5_core: its driver owns its BARs' 'echo 0000:00:07.0 > /sys/bus/pci/drivers/mlx5_core/unbind' -- \
    gmblock file="$T/disk.img" "$sp" buffer=bar:00:07.0:0
start_fails nobardev 'there is no PCI device 0000:0b:00.0 with a BAR 2' -- \
    gmblock file="$T/disk.img" "$sp" buffer=bar:0b:00.0:2
# Slot 3 is the upper half of 64-bit BAR 2: not registers, no BAR.
start_fails unusedbar 'BAR 3 is not implemented' 'upper half of 64-bit BAR 2' -- \
    gmblock file="$T/disk.img" "$sp" buffer=bar:0000:04:00.0:3
start_fails nobar 'BAR number must be 0 to 5' -- \
    gmblock file="$T/disk.img" "$sp" buffer=bar:0000:04:00.0:6
start_fails badbdf 'expected host, p2pmem, p2pmem:auto, p2pmem:BDF or bar:BDF:N' -- \
    gmblock file="$T/disk.img" "$sp" buffer=p2pmem:zz:00.0
start_fails widebdf 'expected host, p2pmem, p2pmem:auto, p2pmem:BDF or bar:BDF:N' -- \
    gmblock file="$T/disk.img" "$sp" buffer=p2pmem:100000000:04:00.0
# Domains past ffff exist (Intel VMD): parsed, then looked for.
start_fails vmdbdf 'there is no PCI device 10000:e1:00.0' -- \
    gmblock file="$T/disk.img" "$sp" buffer=p2pmem:10000:e1:00.0
start_fails widebdf2 'expected host, p2pmem, p2pmem:auto, p2pmem:BDF or bar:BDF:N' -- \
    gmblock file="$T/disk.img" "$sp" buffer=p2pmem:004:00.0
start_fails badkind 'expected host, p2pmem' -- \
    gmblock file="$T/disk.img" "$sp" buffer=gpu
start_fails fallback 'buffer-fallback=stage applies to buffer=bar' -- \
    gmblock file="$T/disk.img" "$sp" buffer=p2pmem buffer-fallback=stage
start_fails fallback2 'buffer-fallback=maybe: expected refuse or stage' -- \
    gmblock file="$T/disk.img" "$sp" buffer-fallback=maybe
start_fails nodirect 'needs direct=true' -- \
    gmblock file="$T/disk.img" "$sp" buffer=p2pmem direct=false
start_fails badsysfs 'expected the bus/pci folder' -- \
    gmblock file="$T/disk.img" sysfs.path="$T/plug" buffer=p2pmem
# Whatever buffer=: a sysfs.path= that cannot be read stops nbdkit.
start_fails badsysfs_host 'sysfs.path=' -- \
    gmblock file="$T/disk.img" sysfs.path="$T/no/such/bus/pci"
fake tiny switch --storage-dev-number "$devno"
echo 4096 >"$T/tiny/bus/pci/devices/0000:04:00.0/p2pmem/available"
start_fails tiny 'only 4096 bytes of p2pmem are available, at least' -- \
    gmblock file="$T/disk.img" sysfs.path="$T/tiny/bus/pci" buffer=p2pmem:04:00.0
# sysfs numbers are decimal: a leading 0 is not octal (read as 32768).
echo 0100000 >"$T/tiny/bus/pci/devices/0000:04:00.0/p2pmem/available"
start_fails tiny_decimal 'only 100000 bytes of p2pmem are available' -- \
    gmblock file="$T/disk.img" sysfs.path="$T/tiny/bus/pci" buffer=p2pmem:04:00.0

# write_through NAME SIZE: SIZE bytes of new data into server NAME by
# nbdcopy, then a read-modify-write by nbdsh; all of it must read back.
# What the disk must now hold is left in $T/NAME.new.
write_through () {
    randfile "$T/$1.new" "$2"
    nbdcopy "$T/$1.new" "$(uri "$1")"
    REF=$T/$1.new nbdsh -u "$(uri "$1")" -c '
import os
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
ref = bytearray(open(os.environ["REF"], "rb").read())
h.pwrite(b"\xa5" * 3000, 1000)          # read-modify-write through the pool
ref[1000:4000] = b"\xa5" * 3000
assert h.pread(len(ref), 0) == bytes(ref), "read-back differs"
assert h.pread(7, 4093) == bytes(ref[4093:4100])
open(os.environ["REF"], "wb").write(ref)
' || fail "$1: what was written does not read back"
}

info "buffer=p2pmem:auto serves through the p2pmem mapping"
start_server p2p -v gmblock file="$T/disk.img" "$sp" buffer=p2pmem stats="$T/p2p.stats"
nbdcopy "$(uri p2p)" "$T/out.img"
cmp "$T/out.img" "$T/disk.img" || fail "read through p2pmem differs"
write_through p2p 8M
stop_server p2p
cmp "$T/disk.img" "$T/p2p.new" || fail "the disk does not hold what was written through p2pmem"
expect "$T/p2p.log" 'gmblock: pool .* in p2pmem of 0000:04:00.0'
dev=$(counter "$T/p2p.stats" dma_device_bytes)
hostdma=$(counter "$T/p2p.stats" dma_pool_bytes)
out=$(counter "$T/p2p.stats" cpu_copy_from_device_bytes)
memcpy=$(counter "$T/p2p.stats" memcpy_read_bytes)
info "p2pmem: dma_device_bytes $dev, dma_pool_bytes $hostdma, cpu_copy_from_device_bytes $out"
client=$(counter "$T/p2p.stats" dma_client_bytes)
# Every transfer goes through the device memory, even when nbdkit's
# buffer happens to be aligned (with ASan's allocator it mostly is).
[[ $dev -ge $((16 << 20)) && $client == 0 ]] ||
    fail "dma_device_bytes $dev, dma_client_bytes $client: not every read and write went through the provider"
[[ $hostdma == 0 ]] || fail "dma_pool_bytes $hostdma: host memory was used with buffer=p2pmem"
# gmblock-cache hands the plugin page-aligned buffers, which a plain
# nbdkit buffer seldom is: the case where DMA straight into the caller's
# memory would be tempting.
start_server p2pc --filter=gmblock-cache gmblock file="$T/disk.img" "$sp" \
    buffer=p2pmem cache-mode=read stats="$T/p2pc.stats"
nbdcopy "$(uri p2pc)" - | cmp - "$T/disk.img" || fail "read through the cache and p2pmem differs"
stop_server p2pc
dev=$(counter "$T/p2pc.stats" dma_device_bytes)
client=$(counter "$T/p2pc.stats" dma_client_bytes)
[[ $dev -ge $((8 << 20)) && $client == 0 ]] ||
    fail "under gmblock-cache: dma_device_bytes $dev, dma_client_bytes $client: not every read went through the provider"
[[ $out == "$memcpy" && $out -gt 0 ]] || fail "cpu_copy_from_device_bytes $out != memcpy_read_bytes $memcpy"
[[ $(counter "$T/p2p.stats" staged_bytes) == 0 ]] || fail "p2pmem staged bytes"

info "buffer=bar on a CMB no p2pmem owns (6.1): served, byte-exact"
fake npplug noprovider --storage-dev-number "$devno"
truncate -s 16M "$T/npplug/bus/pci/devices/0000:04:00.0/resource2"
start_server bar -v gmblock file="$T/disk.img" sysfs.path="$T/npplug/bus/pci" \
    buffer=bar:0000:04:00.0:2 stats="$T/bar.stats"
nbdcopy "$(uri bar)" - | cmp - "$T/disk.img" || fail "read through the BAR differs"
# Everyone maps a raw BAR from offset 0: a second server on it would
# overwrite the first one's buffers in flight.
start_fails bar2 'bar: .*resource2 is in use by another gmblock server' -- \
    gmblock file="$T/disk.img" sysfs.path="$T/npplug/bus/pci" buffer=bar:0000:04:00.0:2
stop_server bar
expect "$T/bar.log" 'gmblock: pool 16M in BAR 2 of 0000:04:00.0'

# A BAR that cannot take DMA (mainline kernels: no struct pages behind
# it): tests/fault-syscalls.c makes the start-up probe's O_DIRECT read
# into it fail with EFAULT.  Refused by default; buffer-fallback=stage
# serves through host memory, every byte copied by the CPU, and the
# data must be right both ways (written, read-modify-written, read).
info "buffer=bar that cannot take DMA: refused, or staged through host memory"
fault_shim
touch "$T/faults/pread-efault"
randfile "$T/stage.img" 4M
FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so start_fails nodma \
    'O_DIRECT from .* into BAR 2 of 0000:04:00.0 fails' 'buffer-fallback=stage serves anyway' -- \
    gmblock file="$T/stage.img" sysfs.path="$T/npplug/bus/pci" buffer=bar:0000:04:00.0:2
FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so start_server stage -v gmblock file="$T/stage.img" \
    sysfs.path="$T/npplug/bus/pci" buffer=bar:0000:04:00.0:2 buffer-fallback=stage \
    stats="$T/stage.stats"
rm "$T/faults/pread-efault"
write_through stage 4M
nbdcopy "$(uri stage)" - | cmp - "$T/stage.new" || fail "read through the stage differs"
stop_server stage
cmp "$T/stage.img" "$T/stage.new" || fail "the disk does not hold what was written through the stage"
expect "$T/stage.log" 'cannot take DMA .*every byte is staged through host memory' \
    'gmblock: pool 16M in BAR 2 of 0000:04:00.0, staged through host memory'
[[ $(counter "$T/stage.stats" staged_bytes) -gt 0 ]] || fail "buffer-fallback=stage: no staged_bytes"
[[ $(counter "$T/stage.stats" dma_device_bytes) == 0 ]] || fail "buffer-fallback=stage: DMA into the BAR counted"

info "the default stays host memory, with device counters at 0"
start_server host gmblock file="$T/disk.img" "$sp" stats="$T/host.stats"
nbdcopy "$(uri host)" - | cmp - "$T/disk.img" || fail "host read differs"
stop_server host
[[ $(counter "$T/host.stats" dma_device_bytes) == 0 ]] || fail "device DMA with buffer=host"
[[ $(( $(counter "$T/host.stats" dma_pool_bytes) + $(counter "$T/host.stats" dma_client_bytes) )) -ge $((8 << 20)) ]] ||
    fail "buffer=host: the reads did not DMA into host memory"
echo "topology OK"

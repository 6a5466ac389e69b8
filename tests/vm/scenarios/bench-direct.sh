# Benchmark (bench/direct/lab-dma runs it; not part of make check): the
# host-memory pool against p2pmem on the switch topology, per request
# size. For each size and buffer, interleaved, RUNS times: a fresh
# gmblock serves the whole source namespace (its first LAB_BENCH_MIB MiB
# random) and nbdcopy reads it (one
# connection, that request size) to null:; recorded per run: wall time,
# the server's CPU time (utime+stime), its dma_ops/dma_ns counters (mean
# O_DIRECT completion time) and copies. TCG emulates both NVMe devices
# and the DMA between them: only ratios mean anything.
# lab-disks: nvme:256M nvme:16M:cmb=16
# lab-kernel: trixie-backports
# lab-pci: switch
# lab-timeout: 1500
# lab-bench: yes
. "$LAB_REPO/tests/vm/guest/lib.sh"
p2p_facts
[ -n "$P2P_MEM" ] && [ -n "$P2P_SWITCH" ] || fail "no p2pmem under a switch"
disk=$P2P_PEER_DISK
mib=${LAB_BENCH_MIB:-32}
runs=${LAB_BENCH_RUNS:-3}
sizes=${LAB_BENCH_SIZES:-65536 262144 1048576 4194304}
tck=$(getconf CLK_TCK)
must dd if=/dev/urandom of="$disk" bs=1M count="$mib" oflag=direct status=none
out=$LAB_OUT/bench.jsonl
: >"$out"
for r in $(seq "$runs"); do
    for size in $sizes; do
        # The starting buffer alternates, so drifts hit both alike.
        order="host p2pmem"
        [ $((r % 2)) = 0 ] && order="p2pmem host"
        for buf in $order; do
            name=b-$buf-$size-$r
            serve "$name" 10809 "$disk" -- buffer=$buf pool-size=16M
            pid=$(server_pid "$name")
            read -r -a st0 </proc/"$pid"/stat
            t0=$(date +%s.%N)
            must nbdcopy --connections=1 --requests=4 --request-size="$size" \
                nbd://127.0.0.1:10809 null:
            t1=$(date +%s.%N)
            read -r -a st1 </proc/"$pid"/stat
            stop "$name"
            cpu=$(( (st1[13] + st1[14]) - (st0[13] + st0[14]) ))
            printf '{"run":%s,"size":%s,"buffer":"%s","bytes":%s,"wall_s":%s,"cpu_s":%s,"dma_ops":%s,"dma_ns":%s,"dma_device_bytes":%s,"dma_pool_bytes":%s,"dma_client_bytes":%s,"copy_from_device":%s,"memcpy_read":%s}\n' \
                "$r" "$size" "$buf" "$(counter "$name" served_bytes)" \
                "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" \
                "$(awk -v c="$cpu" -v t="$tck" 'BEGIN { printf "%.3f", c / t }')" \
                "$(counter "$name" dma_ops)" "$(counter "$name" dma_ns)" \
                "$(counter "$name" dma_device_bytes)" "$(counter "$name" dma_pool_bytes)" \
                "$(counter "$name" dma_client_bytes)" \
                "$(counter "$name" cpu_copy_from_device_bytes)" "$(counter "$name" memcpy_read_bytes)" |
                tee -a "$out"
        done
    done
done

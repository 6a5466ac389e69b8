# Benchmark (bench/stripe/run runs it; not part of make check): what
# gmblock-stripe changes on md, the same stack with and without it,
# interleaved, RUNS times. gmblock-cache (writeback, writeback-interval
# longer than a run: the write-back happens at the flush) over gmblock
# on /dev/md0, nbd-client on /dev/nbd0, fio (direct I/O) on it:
#  - RAID5 (4 members, 64K chunks: 192K stripes): the first LAB_BENCH_MIB
#    MiB read once (the blocks resident: no fills), then random 4K
#    writes at QD16 for LAB_BENCH_SECS s, then a flush; and sequential
#    1M writes over LAB_BENCH_SEQ_MIB MiB (default LAB_BENCH_MIB), then
#    a flush;
#  - RAID5, then RAID0 (4 members, 256K stripes): sequential reads at
#    QD1 in stripe-sized requests from a fresh server, twice
#    LAB_BENCH_SEQ_MIB MiB. (Its own size: the sequential tests span
#    twice it, which a random region of e.g. 192 MiB would push past
#    RAID5's ~288 MiB.)
# Recorded per run: client bytes, seconds (writes: fio plus the flush),
# sectors read and written on the members (/sys/block/vdX/stat) and the
# cache's wb_ counters. TCG: only ratios and I/O counts mean anything.
# The 4 member disks (virtio:96M) come from bench-stripe.host.sh,
# throttled to LAB_BENCH_IOPS I/Os per second each (default 150, a
# rotating disk; 0: unthrottled): unthrottled, TCG serves a member read
# from the host's page cache for nothing, and the reads md saves with
# gmblock-stripe would save no time.
# lab-timeout: 3000
# lab-bench: yes
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd
mib=${LAB_BENCH_MIB:-24}
seqmib=${LAB_BENCH_SEQ_MIB:-$mib}
secs=${LAB_BENCH_SECS:-15}
runs=${LAB_BENCH_RUNS:-3}
members="vda vdb vdc vdd"
out=$LAB_OUT/bench.jsonl
: >"$out"

# sectors read and written on the members: "READ WRITTEN"
member_io() {
    local r=0 w=0 d f
    for d in $members; do
        read -r -a f </sys/block/$d/stat
        r=$((r + f[2])) w=$((w + f[6]))
    done
    echo "$r $w"
}

# up NAME WITH(0/1): the stack on /dev/md0, attached to /dev/nbd0
up() {
    local stripe=()
    [ "$2" = 1 ] && stripe=(--filter=gmblock-stripe)
    rm -f "$LAB_OUT/$1.cache-stats"
    # LAB_BENCH_CACHE: the cache's size and flusher (default: the whole
    # region fits and is written back at the flush; bench/stripe/run
    # SUSTAINED=1: a cache smaller than the region, flushed every second,
    # so the client waits for the write-back to the disks).
    # shellcheck disable=SC2086
    serve "$1" 10809 /dev/md0 --filter=gmblock-cache "${stripe[@]}" -- \
        cache-mode=writeback ${LAB_BENCH_CACHE:-cache-size=128M writeback-interval=600} \
        cache-stats="$LAB_OUT/$1.cache-stats"
    attach /dev/nbd0 10809
}
down() {
    detach /dev/nbd0
    stop "$1"
}

# flush /dev/nbd0: fsync of the device sends NBD_CMD_FLUSH
flush_nbd() { must dd if=/dev/null of=/dev/nbd0 count=0 conv=notrunc,fsync status=none; }

# record TEST ARRAY WITH RUN BYTES SECONDS R0 W0 R1 W1 NAME [FLUSH_SECONDS]:
# member sectors read/written before (R0 W0) and after (R1 W1)
record() {
    printf '{"test":"%s","array":"%s","stripe":%s,"run":%s,"bytes":%s,"secs":%s,"member_read_bytes":%s,"member_write_bytes":%s,"wb_full":%s,"wb_partial":%s,"wb_merged":%s,"wb_blocks":%s,"writebacks":%s,"block_size":%s,"flush_secs":%s}\n' \
        "$1" "$2" "$3" "$4" "$5" "$6" $((($9 - $7) * 512)) $(((${10} - $8) * 512)) \
        "$(cache_counter "${11}" wb_full_stripe_writes)" "$(cache_counter "${11}" wb_partial_stripe_writes)" \
        "$(cache_counter "${11}" wb_merged_writes)" "$(cache_counter "${11}" wb_blocks)" \
        "$(cache_counter "${11}" writebacks)" "$(cache_counter "${11}" block_size)" "${12:-0}" |
        tee -a "$out"
}

now() { cut -d' ' -f1 /proc/uptime; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
fio_bytes() {   # bytes written or read, from fio's terse output
    awk -F';' -v rw="$2" '{ print (rw == "read" ? $6 : $47) * 1024 }' "$1"
}

# wmeasure TEST ARRAY RUN WITH PREWARM FIO_ARGS...: a fresh stack (with
# gmblock-stripe if WITH is 1), its first $mib MiB read first if PREWARM
# is 1, fio writing, then a flush; recorded.
wmeasure() {
    local test=$1 a=$2 r=$3 w=$4 n=$1-$2-$4-$3 t0 tm t1 io0 io1
    up "$n" "$w"
    [ "$5" = 1 ] && must dd if=/dev/nbd0 of=/dev/null bs=1M count="$mib" iflag=direct status=none
    shift 5
    io0=$(member_io) t0=$(now)
    must fio --name="$test" --filename=/dev/nbd0 --direct=1 --ioengine=libaio \
        --output-format=terse --terse-version=3 --output="$LAB_OUT/$n.fio" "$@"
    tm=$(now)
    flush_nbd
    t1=$(now) io1=$(member_io)
    down "$n"
    record "$test" "$a" "$w" "$r" "$(fio_bytes "$LAB_OUT/$n.fio" write)" \
        "$(elapsed "$t0" "$t1")" $io0 $io1 "$n" "$(elapsed "$tm" "$t1")"
}

writes() {      # writes ARRAY RUN WITH: random 4K QD16, then sequential 1M
    wmeasure randwrite4k "$@" 1 --iodepth=16 --rw=randwrite --bs=4k \
        --size="${mib}M" --time_based --runtime="$secs" --randrepeat=0
    wmeasure seqwrite1m "$@" 0 --iodepth=4 --rw=write --bs=1M \
        --size="${seqmib}M" --offset="${seqmib}M"
}

reads() {       # reads ARRAY RUN WITH STRIPE_BYTES: sequential, QD1
    local a=$1 r=$2 w=$3 n t0 t1 io0 io1
    n=read-$a-$w-$r
    up "$n" "$w"
    io0=$(member_io) t0=$(now)
    must fio --name=read --filename=/dev/nbd0 --direct=1 --ioengine=libaio \
        --iodepth=1 --rw=read --bs="$4" --size="$((seqmib * 2))M" \
        --output-format=terse --terse-version=3 --output="$LAB_OUT/$n.fio"
    t1=$(now) io1=$(member_io)
    down "$n"
    record seqread "$a" "$w" "$r" "$(fio_bytes "$LAB_OUT/$n.fio" read)" \
        "$(elapsed "$t0" "$t1")" $io0 $io1 "$n"
}

# The starting stack alternates, so drifts hit both alike.
order() { [ $(($1 % 2)) = 1 ] && echo "0 1" || echo "1 0"; }

make_raid 5 /dev/vda /dev/vdb /dev/vdc /dev/vdd
for r in $(seq "$runs"); do
    for w in $(order "$r"); do writes raid5 "$r" "$w"; done
    for w in $(order "$r"); do reads raid5 "$r" "$w" 196608; done
done
step "mdadm --stop /dev/md0; RAID0 on the same disks"
must mdadm --stop /dev/md0
must mdadm --zero-superblock /dev/vda /dev/vdb /dev/vdc /dev/vdd
make_raid 0 /dev/vda /dev/vdb /dev/vdc /dev/vdd
for r in $(seq "$runs"); do
    for w in $(order "$r"); do reads raid0 "$r" "$w" 262144; done
done

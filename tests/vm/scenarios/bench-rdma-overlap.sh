# Benchmark (bench/rdma/overlap runs it; not part of make check): how
# much of a 1M READ the server sends while it still reads (issue 10 item
# 4, target overlap_1M >= 0.6 on RAID0), with member disks as fast as
# the link. Per setting of LAB_BENCH_SETTINGS (default "0.5 1 0": the
# array's speed as a multiple of the link's LAB_BENCH_LINK_MIBS; 0:
# unthrottled), an md RAID0 of 4 virtio members (64K chunks; the members
# are throttled in QEMU by bench-rdma-overlap.host.sh), /dev/md0, md1...
# in that order, all filled once with the same random LAB_BENCH_MIB MiB.
# Server: nbdkit --filter=gmblock-rdma --filter=gmblock-stripe gmblock
# file=/dev/mdN rdma=10.77.0.1, fresh for each measurement, read through
# the gmblock-rdma bridge by nbdcopy --request-size=1M --connections=1
# at QD1 and QD4 (--requests), the copy compared byte for byte with
# what was written. Modes, interleaved (the order alternates per run):
# pieces (gmblock-stripe's chunks: 16 per 1M, one stream per member;
# rdma-split=always, so also at QD4)
# and whole (rdma-piece=0: read whole, then sent). Recorded per
# measurement: bytes, seconds, the filter's overlap_1M counters.
# LAB_BENCH_DELAY_MS=N puts each member behind dm-delay (reads N ms
# later): disk time as latency rather than bandwidth.
# LAB_BENCH_PARAMS: more server parameters (e.g. rdma-threads=16).
# LAB_BENCH_NBDKIT_OPTS: more nbdkit options for the server (e.g.
# "-v -D gmblock-rdma.trace=1": each READ's piece times in its log).
# TCG + soft-RoCE: only ratios mean anything.
# lab-timeout: 1200
# lab-bench: yes
. "$LAB_REPO/tests/vm/guest/lib.sh"
[ -f "$LAB_REPO/filters/rdma/nbdkit-gmblock-rdma-filter.so" ] &&
    [ -f "$LAB_REPO/plugins/gmblock-rdma/nbdkit-gmblock-rdma-plugin.so" ] ||
    fail "gmblock-rdma not built: run make at the top first"
load virtio_blk md-mod raid0
delay=${LAB_BENCH_DELAY_MS:-0}
case $delay in *[!0-9]*) fail "LAB_BENCH_DELAY_MS=$delay: expected milliseconds (0: none)" ;; esac
[ "$delay" -gt 0 ] && load dm-delay
rxe_pair
settings=(${LAB_BENCH_SETTINGS:-0.5 1 0})
mib=${LAB_BENCH_MIB:-64}
runs=${LAB_BENCH_RUNS:-3}
out=$LAB_OUT/bench.jsonl
: >"$out"
step "load average: $(cat /proc/loadavg)"

# microseconds, from bash's clock (no program to start)
now_us() { echo "${EPOCHREALTIME/./}"; }

# The arrays: settings[i] on vd(4i..4i+3) as /dev/md$i.
letters=(a b c d e f g h i j k l m n o p)
must head -c $((mib << 20)) /dev/urandom >"$LAB_RUN/ref.img"
for i in "${!settings[@]}"; do
    m=()
    for j in 0 1 2 3; do
        d=/dev/vd${letters[$((4 * i + j))]}
        # LAB_BENCH_DELAY_MS: each member read takes that long more
        # (dm-delay; writes undelayed), a disk whose time is latency
        if [ "$delay" -gt 0 ]; then
            must dmsetup create --noudevsync "gmdelay${d#/dev/}" --table \
                "0 $(blockdev --getsz "$d") delay $d 0 $delay $d 0 0"
            must dmsetup mknodes "gmdelay${d#/dev/}"   # no udev in the guest
            d=/dev/mapper/gmdelay${d#/dev/}
        fi
        m+=("$d")
    done
    step "md$i: RAID0 on ${m[*]} (array at ${settings[i]}x the link; 0: unthrottled)"
    must mdadm --create /dev/md$i --run --quiet --level=0 --raid-devices=4 --chunk=64 \
        --assume-clean "${m[@]}"
    [ "$(blockdev --getsize64 /dev/md$i)" -ge $((mib << 20)) ] || fail "md$i is smaller than $mib MiB"
    t=$(now_us)
    must dd if="$LAB_RUN/ref.img" of=/dev/md$i bs=1M oflag=direct status=none
    t=$(($(now_us) - t))
    printf '{"fill":"md%s","setting":%s,"bytes":%s,"secs":%d.%06d}\n' "$i" "${settings[i]}" \
        $((mib << 20)) $((t / 1000000)) $((t % 1000000)) | tee -a "$out"
done

# The link: ib_write_bw of 1M messages on rxe0, as bench-rdma measures it.
step "ib_write_bw -d rxe0 -s 1048576 -N -n 64"
ib_write_bw -d rxe0 -s 1048576 -N -n 64 -p 18600 >"$LAB_OUT/link.server.log" 2>&1 &
lpid=$! ok=
for _ in $(seq 20); do
    sleep 0.5
    ib_write_bw -d rxe0 -s 1048576 -N -n 64 -p 18600 10.77.0.1 >"$LAB_OUT/link.log" 2>&1 && { ok=1; break; }
    kill -0 "$lpid" 2>/dev/null || break
done
# A server no client reached waits for one for ever.
[ -n "$ok" ] || kill "$lpid" 2>/dev/null
wait "$lpid" || fail "ib_write_bw server failed (see link.server.log, link.log)"
# #bytes #iterations BW_peak BW_average[MiB/s] MsgRate[Mpps]
link=$(awk '$1 == 1048576 && NF >= 5 { print $4 }' "$LAB_OUT/link.log")
[ -n "$link" ] || fail "no result from ib_write_bw (see link.log)"
echo "{\"link_mibs\":$link,\"kernel\":\"$(uname -r)\",\"delay_ms\":$delay}" | tee -a "$out"

bridge_uri="nbd+unix:///?socket=$LAB_RUN/br.sock"
# ov NAME COUNTER: the filter's overlap_1M counter (or "null")
ov() {
    local v
    v=$(rdma_counter "$1.rdma-stats" "$2")
    echo "${v:-null}"
}
# measure RUN I QD MODE: one copy of md$I through a fresh server and bridge.
measure() {
    local r=$1 i=$2 qd=$3 mode=$4 n=s$2-qd$3-$4-$1 p=() t
    # pieces: every READ, also at QD4 (the default, rdma-split=alone,
    # splits only a READ alone in service: pieces at QD1, whole at QD4)
    p=(rdma-split=always)
    [ "$mode" = whole ] && p=(rdma-piece=0)
    serve "$n" 10809 /dev/md$i --filter=gmblock-rdma --filter=gmblock-stripe \
        ${LAB_BENCH_NBDKIT_OPTS:-} -- \
        rdma=10.77.0.1 rdma-stats="$LAB_OUT/$n.rdma-stats" "${p[@]}" ${LAB_BENCH_PARAMS:-}
    bridge br 10.77.0.1
    rm -f "$LAB_RUN/out.img"
    t=$(now_us)
    must nbdcopy --no-extents --connections=1 --requests="$qd" --request-size=1048576 \
        "$bridge_uri" "$LAB_RUN/out.img"
    t=$(($(now_us) - t))
    stop br
    stop "$n"
    cmp -n $((mib << 20)) "$LAB_RUN/ref.img" "$LAB_RUN/out.img" ||
        fail "$n: the data read over RDMA differs from what was written"
    printf '{"run":%s,"setting":%s,"qd":%s,"mode":"%s","bytes":%s,"secs":%d.%06d,"split_reads":%s,"pieces":%s,"overlap":%s,"disk_busy":%s,"net_busy":%s,"mean_us":%s,"requests":%s}\n' \
        "$r" "${settings[i]}" "$qd" "$mode" "$(stat -c %s "$LAB_RUN/out.img")" \
        $((t / 1000000)) $((t % 1000000)) "$(ov "$n" split_reads)" "$(ov "$n" pieces)" \
        "$(ov "$n" overlap_1M)" "$(ov "$n" overlap_1M_disk_busy)" "$(ov "$n" overlap_1M_net_busy)" \
        "$(ov "$n" overlap_1M_mean_us)" "$(ov "$n" overlap_1M_requests)" | tee -a "$out"
}
for r in $(seq "$runs"); do
    modes=(pieces whole)
    [ $((r % 2)) = 0 ] && modes=(whole pieces)
    for i in "${!settings[@]}"; do
        for qd in 1 4; do
            for mode in "${modes[@]}"; do measure "$r" "$i" "$qd" "$mode"; done
        done
    done
done
step "load average: $(cat /proc/loadavg)"
echo "bench-rdma-overlap: done"

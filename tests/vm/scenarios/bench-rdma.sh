# Benchmark (bench/rdma/run runs it; not part of make check): the RDMA
# transport beside its peers on the soft-RoCE link of rxe_pair (rxe0 on
# gmr0, 10.77.0.1; client and server in the guest's one network
# namespace: rxe0 loops the traffic back, and TCP to 10.77.0.1 takes lo).
# Targets, each started fresh for every measurement:
#  rdma: nbdkit --filter=gmblock-rdma --filter=gmblock-stripe gmblock
#        file=/dev/md0 rdma=10.77.0.1, read through the gmblock-rdma
#        bridge on a Unix socket;
#  tcp:  the same server command, read over NBD/TCP at 10.77.0.1:10809;
#  qemu: qemu-nbd -f raw -t -e 32 --cache=none --aio=native on /dev/md0
#        at 10.77.0.1:10811;
#  link: perftest on rxe0: ib_write_bw -s SIZE (sequential), ib_read_lat
#        -s 4096 (random QD1), ib_write_bw -s 4096 (random QD32).
# Workloads: fio's nbd engine, LAB_BENCH_SECS s each (time_based) over
# the first LAB_BENCH_MIB MiB of md RAID0 (4 virtio members, 64K chunks,
# filled with fio's data first): sequential read in 64K, 256K, 1M and
# 4M requests at QD LAB_BENCH_SEQ_QD, random 4K reads at QD1 and QD32.
# Per repetition every target runs every workload; the order of targets
# rotates with the repetition. LAB_BENCH_PARAMS: more parameters for
# the gmblock server (both transports). Recorded per measurement: bytes, seconds,
# the CPU ticks of the server, the bridge, the kernel threads and the
# guest's irq+softirq time, and the copy and overlap counters.
# TCG + soft-RoCE: only ratios mean anything.
# lab-disks: virtio:80M virtio:80M virtio:80M virtio:80M
# lab-timeout: 2400
# lab-bench: yes
. "$LAB_REPO/tests/vm/guest/lib.sh"
[ -f "$LAB_REPO/filters/rdma/nbdkit-gmblock-rdma-filter.so" ] &&
    [ -f "$LAB_REPO/plugins/gmblock-rdma/nbdkit-gmblock-rdma-plugin.so" ] ||
    fail "gmblock-rdma not built: run make at the top first"
command -v ib_write_bw >/dev/null || fail "no perftest on the host: scripts/install-deps.sh check"
load virtio_blk
rxe_pair
make_raid 0 /dev/vda /dev/vdb /dev/vdc /dev/vdd
mib=${LAB_BENCH_MIB:-256}
secs=${LAB_BENCH_SECS:-5}
runs=${LAB_BENCH_RUNS:-3}
seq_qd=${LAB_BENCH_SEQ_QD:-4}
addr=10.77.0.1
out=$LAB_OUT/bench.jsonl
: >"$out"
step "fill the first $mib MiB of /dev/md0"
must fio --name=fill --filename=/dev/md0 --direct=1 --ioengine=libaio --rw=write \
    --bs=1M --iodepth=4 --size="${mib}M" --output=/dev/null

# ---- CPU accounting (shell builtins only: every program costs ~0.1 s).

# ticks PID: utime+stime of a process (all its threads), 0 without one.
ticks() {
    local s
    [ -n "$1" ] && read -r s <"/proc/$1/stat" 2>/dev/null || { echo 0; return; }
    set -- ${s##*) }
    echo $((${12} + ${13}))
}
# kthread_ticks: utime+stime of the kernel threads (kthreadd's
# children: kworker, ksoftirqd, md, rxe's, ...) alive now.
kthread_ticks() {
    local f s t=0
    for f in /proc/[0-9]*/stat; do
        read -r s <"$f" 2>/dev/null || continue
        [ "${s%% *}" = 2 ] && { set -- ${s##*) }; t=$((t + ${12} + ${13})); continue; }
        set -- ${s##*) }
        [ "$2" = 2 ] && t=$((t + ${12} + ${13}))
    done
    echo $t
}
# snap SERVER_PID BRIDGE_PID: "server bridge kthreads irq+softirq busy"
# in ticks; irq, softirq and busy (all but idle and iowait) of the whole
# guest from /proc/stat.
snap() {
    local c u n s i w q sq st
    read -r c u n s i w q sq st _ </proc/stat
    echo "$(ticks "$1") $(ticks "$2") $(kthread_ticks) $((q + sq)) $((u + n + s + q + sq + st))"
}
tck=$(getconf CLK_TCK)
# hundredths TICKS: ticks as seconds with two decimals.
hundredths() {
    local c=$(($1 * 100 / tck))
    printf '%d.%02d' $((c / 100)) $((c % 100))
}
# cpu_fields S0 S1: the deltas of two snaps as JSON fields, in seconds.
cpu_fields() {
    local a b i v=() k=(server_cpu_s bridge_cpu_s kthread_cpu_s irq_cpu_s busy_cpu_s)
    read -ra a <<<"$1"
    read -ra b <<<"$2"
    for i in 0 1 2 3 4; do v+=("\"${k[i]}\":$(hundredths $((b[i] - a[i])))"); done
    local IFS=,
    echo "${v[*]}"
}

# ---- the targets

# fio_run NAME URI RW BS QD: fio's nbd engine; leaves terse output in NAME.fio.
fio_run() {
    must fio --name="$1" --ioengine=nbd --uri="$2" --rw="$3" --bs="$4" --iodepth="$5" \
        --size="${mib}M" --time_based --runtime="$secs" --randrepeat=0 \
        --output-format=terse --terse-version=3 --output="$LAB_OUT/$1.fio"
}
# fio_fields NAME: bytes, seconds and IOPS from fio's terse output
# (fields 6, 9, 8: read KiB, runtime ms, IOPS).
fio_fields() {
    local f
    IFS=';' read -ra f <"$LAB_OUT/$1.fio"
    printf '"bytes":%d,"secs":%d.%03d,"iops":%s' $((f[5] * 1024)) $((f[8] / 1000)) \
        $((f[8] % 1000)) "${f[7]}"
}
# stats_obj FILE: a counters file (gmblock.NAME VALUE lines) as a JSON
# object, {} if there is none.
stats_obj() {
    local k v s=
    if [ -r "$1" ]; then
        while read -r k v; do s+="\"${k#*.}\":$v,"; done <"$1"
    fi
    echo "{${s%,}}"
}
# record RUN WORKLOAD TARGET BS QD FIELDS...: one line of bench.jsonl.
# wall_s: the whole measurement with starting and stopping, from t_start;
# phases_s: the times from t_start at each mark (where the time goes).
mark() { phases+=($(((${EPOCHREALTIME/./} - t_start) / 10000))); }
record() {
    local f=("${@:6}") l us=$((${EPOCHREALTIME/./} - t_start))
    local IFS=,
    printf -v l '{"run":%s,"workload":"%s","target":"%s","bs":%s,"qd":%s,%s,"wall_s":%d.%02d,"phases_cs":[%s]}' \
        "$1" "$2" "$3" "$4" "$5" "${f[*]}" $((us / 1000000)) $((us / 10000 % 100)) "${phases[*]}"
    echo "$l"
    echo "$l" >>"$out"
}

# m_gmblock RUN WORKLOAD RW BS QD rdma|tcp: a fresh gmblock server with the
# RDMA filter over gmblock-stripe; read over RDMA through a bridge or
# over TCP from the same command.
m_gmblock() {
    local r=$1 wl=$2 rw=$3 bs=$4 qd=$5 t=$6 n=$6-$2-$1 uri s0 s1 bpid= ov
    serve "$n" "$addr:10809" /dev/md0 --filter=gmblock-rdma --filter=gmblock-stripe -- \
        rdma=$addr rdma-stats="$LAB_OUT/$n.rdma-stats" ${LAB_BENCH_PARAMS:-}
    mark
    uri=nbd://$addr:10809
    if [ "$t" = rdma ]; then
        bridge "br-$n" "$addr"
        bpid=$(server_pid "br-$n")
        uri="nbd+unix:///?socket=$LAB_RUN/br-$n.sock"
    fi
    mark
    s0=$(snap "$(server_pid "$n")" "$bpid")
    mark
    fio_run "$n" "$uri" "$rw" "$bs" "$qd"
    mark
    s1=$(snap "$(server_pid "$n")" "$bpid")
    mark
    [ "$t" = rdma ] && stop "br-$n"
    mark
    stop "$n"
    mark
    record "$r" "$wl" "$t" "$bs" "$qd" "$(fio_fields "$n")" "$(cpu_fields "$s0" "$s1")" \
        "\"server\":$(stats_obj "$LAB_OUT/$n.stats")" \
        "\"rdma\":$(stats_obj "$LAB_OUT/$n.rdma-stats")" \
        "\"bridge\":$(stats_obj "$LAB_OUT/br-$n.stats")"
}

# m_qemu RUN WORKLOAD RW BS QD: qemu-nbd on /dev/md0 over TCP.
m_qemu() {
    local r=$1 wl=$2 n=qemu-$2-$1 s0 s1 i
    rm -f "$LAB_RUN/$n.pid"
    step "qemu-nbd --cache=none --aio=native /dev/md0 on $addr:10811"
    qemu-nbd -f raw -t -e 32 --cache=none --aio=native -b "$addr" -p 10811 \
        --pid-file="$LAB_RUN/$n.pid" /dev/md0 >>"$LAB_OUT/$n.log" 2>&1 &
    for i in $(seq 100); do
        [ -s "$LAB_RUN/$n.pid" ] && break
        kill -0 $! 2>/dev/null || fail "qemu-nbd did not start (see $n.log)"
        sleep 0.2
    done
    mark
    s0=$(snap "$(server_pid "$n")" "")
    mark
    fio_run "$n" "nbd://$addr:10811" "$3" "$4" "$5"
    mark
    s1=$(snap "$(server_pid "$n")" "")
    mark
    stop "$n"
    mark
    record "$r" "$wl" qemu "$4" "$5" "$(fio_fields "$n")" "$(cpu_fields "$s0" "$s1")"
}

# m_link RUN WORKLOAD RW BS QD: perftest between two processes on rxe0,
# a fixed LAB_BENCH_LINK_MIB MiB (ib_write_bw) or 2000 READs (ib_read_lat).
port=18515
link_mib=${LAB_BENCH_LINK_MIB:-64}
m_link() {
    local r=$1 wl=$2 rw=$3 bs=$4 qd=$5 n=link-$2-$1 tool args s0 s1 spid i l f ok=
    port=$((port + 1))
    if [ "$rw" = randread ] && [ "$qd" = 1 ]; then
        tool=ib_read_lat args=(-n 2000)
    else
        tool=ib_write_bw args=(-N -n $(((link_mib << 20) / bs)))
    fi
    step "$tool -d rxe0 -s $bs ${args[*]} (server and client on rxe0)"
    $tool -d rxe0 -s "$bs" -p "$port" "${args[@]}" >"$LAB_OUT/$n.server.log" 2>&1 &
    spid=$!
    s0=$(snap "" "")
    for i in $(seq 20); do
        sleep 0.5
        $tool -d rxe0 -s "$bs" -p "$port" "${args[@]}" "$addr" >"$LAB_OUT/$n.log" 2>&1 && { ok=1; break; }
        kill -0 "$spid" 2>/dev/null || break
    done
    s1=$(snap "" "")
    # A server no client reached waits for one for ever.
    [ -n "$ok" ] || kill "$spid" 2>/dev/null
    wait "$spid" || fail "$tool server failed (see $n.server.log, $n.log)"
    # the result line starts with the message size
    while read -ra f; do [ "${f[0]:-}" = "$bs" ] && [ ${#f[@]} -ge 5 ] && l=("${f[@]}"); done <"$LAB_OUT/$n.log"
    [ -n "${l:-}" ] || fail "no result from $tool (see $n.log)"
    if [ "$tool" = ib_read_lat ]; then
        # #bytes #iterations t_min t_max t_typical t_avg ...
        record "$r" "$wl" link "$bs" "$qd" "\"tool\":\"$tool\"" "\"lat_avg_us\":${l[5]}" \
            "\"lat_typical_us\":${l[4]}" "$(cpu_fields "$s0" "$s1")"
    else
        # #bytes #iterations BW_peak BW_average[MiB/s] MsgRate[Mpps]
        record "$r" "$wl" link "$bs" "$qd" "\"tool\":\"$tool\"" "\"mibs\":${l[3]}" \
            "\"mpps\":${l[4]}" "\"bytes\":$((l[1] * bs))" "$(cpu_fields "$s0" "$s1")"
    fi
}

workloads="seq64K:read:65536:$seq_qd seq256K:read:262144:$seq_qd seq1M:read:1048576:$seq_qd
    seq4M:read:4194304:$seq_qd rand4K-qd1:randread:4096:1 rand4K-qd32:randread:4096:32"
targets=(rdma tcp qemu link)
step "load average: $(cat /proc/loadavg)"
for r in $(seq "$runs"); do
    for w in $workloads; do
        IFS=: read -r wl rw bs qd <<<"$w"
        # LAB_BENCH_ONLY="seq1M rand4K-qd1": only these (trials)
        [[ " ${LAB_BENCH_ONLY:-$wl} " == *" $wl "* ]] || continue
        for k in 0 1 2 3; do
            t=${targets[$(((k + r - 1) % 4))]} t_start=${EPOCHREALTIME/./} phases=()
            case $t in
            rdma|tcp) m_gmblock "$r" "$wl" "$rw" "$bs" "$qd" "$t" ;;
            *) "m_$t" "$r" "$wl" "$rw" "$bs" "$qd" ;;
            esac
        done
    done
done
step "load average: $(cat /proc/loadavg)"

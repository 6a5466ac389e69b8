# Randomized differential stress of the RDMA transport (issue 10), as
# tests/stress does over TCP on the host: per seed, gmblock on a virtio
# disk or md RAID0 behind --filter=gmblock-rdma with the filters the
# seed picks below it (stress.py --pick-stack: gmblock-readahead,
# gmblock-cache in any mode, gmblock-stripe), random RDMA settings
# (pool, workers, pieces, split), a bridge with random credits and pool,
# maybe gmblock-readahead on the bridge. Three stress.py runs at once
# (external mode), each in its own window of the export and checking
# every read against its byte model: two through both the bridge and
# TCP on the server itself (their connections alternate, reads of their
# own writes cross transports), one through the bridge alone. Then the
# bridge and the server stop (SIGTERM) and the disk must hold each
# model byte for byte (cache-mode=unsafe too: a clean shutdown writes
# everything back).
#   LAB_STRESS_SEEDS="1 2 3"  the seeds (one server stack each)
#   LAB_STRESS_OPS=N          operations per stress.py run
#   LAB_STRESS_RESTARTS=N     restart the server (SIGTERM, then start it
#                             again) up to N times while the runs go on,
#                             all three through the bridge alone: its
#                             reconnects must lose and fail nothing
# More seeds take longer: raise LAB_TIMEOUT with them. LAB_CORRUPT=1
# flips a byte on the disk before the comparison (it must then fail).
# lab-disks: virtio:48M virtio:12M virtio:12M virtio:12M virtio:12M
# lab-timeout: 540
# lab-smp: 2
. "$LAB_REPO/tests/vm/guest/lib.sh"
[ -f "$LAB_REPO/filters/rdma/nbdkit-gmblock-rdma-filter.so" ] &&
    [ -f "$LAB_REPO/plugins/gmblock-rdma/nbdkit-gmblock-rdma-plugin.so" ] ||
    fail "gmblock-rdma not built: run make at the top first"
load virtio_blk
rxe_pair
make_raid 0 /dev/vdb /dev/vdc /dev/vdd /dev/vde
PY=/usr/bin/python3
STRESS=$LAB_REPO/tests/stress/stress.py
export STRESS_RUN=$LAB_RUN/stress
mkdir -p "$STRESS_RUN"
seeds=${LAB_STRESS_SEEDS:-1 2 3 4}
ops=${LAB_STRESS_OPS:-300}
restarts=${LAB_STRESS_RESTARTS:-0}
procs=3
# A filter after the plugin's name is nbdkit's (getopt), not ./nbdkit's:
# it takes the module's path.
ra_so=${GMBLOCK_BUILDDIR:-$LAB_REPO}/filters/readahead/nbdkit-gmblock-readahead-filter.so

# pick VAR WORD...: VAR is one of the words, from bash's RANDOM (seeded
# per seed). Not in $(...): a subshell reseeds RANDOM, and the seed's
# stack would not be the same twice.
pick() { local v=$1; shift; local a=("$@"); printf -v "$v" %s "${a[RANDOM % ${#a[@]}]}"; }

# srv_check NAME: a server that has stopped saw no protocol error; its
# RDMA bytes are added to rd and wr (each restart rewrites its counters).
srv_check() {
    echo "server filter: $(tr '\n' ' ' <"$LAB_OUT/$1.rdma-stats")"
    [ "$(rdma_counter "$1.rdma-stats" protocol_errors)" = 0 ] ||
        fail "$1: protocol errors"
    rd=$((rd + $(rdma_counter "$1.rdma-stats" read_bytes)))
    wr=$((wr + $(rdma_counter "$1.rdma-stats" write_bytes)))
}

passed=0
restarted=0
for seed in $seeds; do
    RANDOM=$seed
    pick disk /dev/vda /dev/md0
    size=$(blockdev --getsize64 "$disk")
    # (no process substitution: the guest has no /dev/fd)
    out=$("$PY" "$STRESS" "$seed" --pick-stack --size "$size") ||
        fail "seed $seed: stress.py --pick-stack failed"
    mapfile -t st <<<"$out"
    [ ${#st[@]} = 3 ] || fail "seed $seed: stress.py --pick-stack said: ${st[*]}"
    read -r -a filters <<<"${st[0]}"
    read -r -a params <<<"${st[1]}"
    mode=${st[2]}
    pick pool 1M 4M 32M
    pick threads 1 2 8 8
    rp=(rdma-pool=$pool rdma-threads=$threads)
    pick piece 0 4K 64K 256K 1M
    [ $((RANDOM % 2)) = 0 ] && rp+=(rdma-piece=$piece)
    [ $((RANDOM % 3)) = 0 ] && rp+=(rdma-split=always)
    pick credits 1 4 16 32
    pick bpool 64K 256K 1M 16M
    bp=(credits=$credits pool=$bpool)
    pick ra_min 4K 64K
    pick ra_max 64K 1M
    [ $((RANDOM % 3)) = 0 ] && bp+=(--filter="$ra_so" ra-min=$ra_min ra-max=$ra_max)
    stack="gmblock-rdma ${filters[*]} gmblock $disk ${params[*]} ${rp[*]} | bridge ${bp[*]}"
    # Through the page cache a trim may bring back older data than the
    # last write (stress.py's TRIM_ANY_T says why): NBD allows any.
    trim=()
    [[ " ${params[*]} " == *" direct=false "* ]] && trim=(--trim-any)
    step "seed $seed: $stack"
    rm -f "$LAB_OUT/srv$seed.rdma-stats"
    srv_args=("$disk" --filter=gmblock-rdma "${filters[@]}" --
        rdma=10.77.0.1 rdma-stats="$LAB_OUT/srv$seed.rdma-stats" "${params[@]}" "${rp[@]}")
    serve "srv$seed" 10809 "${srv_args[@]}"
    bridge "br$seed" 10.77.0.1 "${bp[@]}"
    br="nbd+unix:///?socket=$LAB_RUN/br$seed.sock"
    tcp=nbd://127.0.0.1:10809
    # Windows: one slot of the export each, at an unaligned offset, the
    # last one ending at the export's end (a seed's size is at most
    # 8M + 4095, a slot 16M).
    slot=$((size / procs))
    pids=()
    for ((j = 0; j < procs; j++)); do
        s=$((seed * 100 + j))
        if ((j == procs - 1)); then off=end; else off=$((j * slot + RANDOM % 4096)); fi
        uris=(--uri "$br")
        ((j < 2 && restarts == 0)) && uris+=(--uri "$tcp")
        "$PY" "$STRESS" "$s" "${uris[@]}" --offset "$off" --ops "$ops" \
            --stack-desc "$stack" "${trim[@]}" --dump "$STRESS_RUN/m$s" >"$LAB_OUT/stress-$s.txt" 2>&1 &
        pids+=($!)
    done
    # Restarts while they run: a clean stop answers what the server
    # took, flushes and says goodbye; the bridge sends the rest again.
    # A run counts as busy until it says it sent its last request: a
    # restart after every run's last request (one exiting, or writing
    # its model) leaves the bridge nothing to reconnect for (seed 58 at
    # 57e9470: goodbyes 8, reconnects 0, every run passed).
    busy () {
        local j
        for ((j = 0; j < procs; j++)); do
            kill -0 "${pids[j]}" 2>/dev/null &&
                ! grep -qx 'requests done' "$LAB_OUT/stress-$((seed * 100 + j)).txt" && return 0
        done
        return 1
    }
    nr=0 loaded=0 rd=0 wr=0
    for ((k = 0; k < restarts; k++)); do
        sleep $((3 + RANDOM % 8))
        busy || break
        step "seed $seed: restart $((k + 1)) of the server under load"
        stop "srv$seed"
        srv_check "srv$seed"
        serve "srv$seed" 10809 "${srv_args[@]}"
        nr=$((nr + 1))
        busy && loaded=$((loaded + 1))
    done
    restarted=$((restarted + nr))
    bad=
    for ((j = 0; j < procs; j++)); do
        wait "${pids[j]}" || bad+=" $((seed * 100 + j))"
        cat "$LAB_OUT/stress-$((seed * 100 + j)).txt"
    done
    [ -z "$bad" ] || fail "seed $seed: stress.py failed for$bad (stack: $stack)"
    stop "br$seed"
    stop "srv$seed"
    for f in "srv$seed" "br$seed"; do
        [ -s "$LAB_OUT/$f.nbdkit.log" ] || continue
        echo "--- $f.nbdkit.log (first lines):"
        head -n 20 "$LAB_OUT/$f.nbdkit.log"
        ! grep -qE 'Assertion|runtime error|Segmentation|SIGSEGV|double free|stack smashing|\bBUG\b' \
            "$LAB_OUT/$f.nbdkit.log" || fail "seed $seed: $f.nbdkit.log reports a crash or a bug"
    done
    srv_check "srv$seed"
    echo "bridge: $(tr '\n' ' ' <"$LAB_OUT/br$seed.stats")"
    counter_above rdma_read_bytes "$rd" 0 "reads went over RDMA"
    counter_above rdma_write_bytes "$wr" 0 "writes went over RDMA"
    [ "$(rdma_counter "br$seed.stats" lost_write_flushes)" = 0 ] ||
        fail "seed $seed: the bridge failed a flush for writes lost with the server"
    if ((nr > 0)); then
        counter_above goodbyes "$(rdma_counter "br$seed.stats" goodbyes)" 0 "the bridge heard the server's goodbye"
        if ((loaded > 0)); then
            counter_above reconnects "$(rdma_counter "br$seed.stats" reconnects)" 0 "the bridge reconnected after the restarts"
        else
            echo "seed $seed: every run had sent its last request when the server came back: no reconnect to check"
        fi
        [ "$(rdma_counter "br$seed.stats" transport_errors)" = 0 ] ||
            fail "seed $seed: requests failed with EIO across a clean restart"
    fi
    # LAB_CORRUPT=1: one byte the model knows exactly, flipped behind
    # the server's back: the comparison below must fail.
    [ "${LAB_CORRUPT:-0}" = 1 ] && must "$PY" - "$STRESS_RUN/m$((seed * 100))" "$disk" <<'PY'
import json, os, sys
m = json.load(open(sys.argv[1] + ".json"))
i = open(sys.argv[1] + ".mask", "rb").read().index(0)
fd = os.open(sys.argv[2], os.O_RDWR)
o = m["offset"] + i
os.pwrite(fd, bytes([os.pread(fd, 1, o)[0] ^ 0xff]), o)
os.fsync(fd)
print("LAB_CORRUPT=1: flipped the byte at", o)
PY
    drop_caches "$disk"
    for ((j = 0; j < procs; j++)); do
        "$PY" "$LAB_REPO/tests/stress/cmpdump.py" "$STRESS_RUN/m$((seed * 100 + j))" "$disk" ||
            fail "seed $seed: after SIGTERM $disk differs from the model of stress seed $((seed * 100 + j)) (stack: $stack)"
    done
    passed=$((passed + 1))
done
echo "rdma-stress: $passed seeds passed, the server restarted $restarted times under load"

# shellcheck shell=bash disable=SC2154,SC2034   # top, work, tmp, gm_variants: set by the sourcing script
# Shared by bench/run and bench/direct/corunner: start and stop the
# benchmarked NBD servers, the scratch targets they serve, CPU and memory
# readings.  Source it from a bash script (set -euo pipefail) that defines
#
#   top          the repository root
#   work         scratch directory (git-ignored); server logs go to $work/logs
#   tmp          per-run temporary directory (removed by the caller's cleanup)
#   die, log     error exit and progress message functions
#   gm_variants  gmblock rows, "name:opt=val,opt=val" (e.g. "gmblock:")
#
# It keeps server_pids (running servers, for the caller's cleanup: see
# kill_servers) and, after make_ram_loop, loopdev and shmfile.

server_pids=()
loopdev=
shmfile=
next_port=${next_port:-$((20000 + RANDOM % 20000))}

alloc_port () {     # -> sets port to a free TCP port
    while ss -Hltn "sport = :$next_port" | grep -q .; do next_port=$((next_port + 1)); done
    port=$next_port
    next_port=$((next_port + 1))
}

# Copy the built plugin aside and point ./nbdkit at the copy: the tree may
# be rebuilt while a benchmark runs.  Sets plugin_sha.
snapshot_plugin () {
    mkdir -p "$tmp/build/plugins/gmblock"
    cp "$top/plugins/gmblock/nbdkit-gmblock-plugin.so" "$tmp/build/plugins/gmblock/"
    export GMBLOCK_BUILDDIR=$tmp/build
    plugin_sha=$(sha256sum "$tmp/build/plugins/gmblock/nbdkit-gmblock-plugin.so" | cut -c1-16)
}

server_opts () {    # name -> options of a gmblock variant (or fails)
    local v
    for v in "${gm_variants[@]}"; do
        [[ ${v%%:*} == "$1" ]] && { echo "${v#*:}"; return 0; }
    done
    return 1
}
is_gmblock () { server_opts "$1" >/dev/null; }

# start_server NAME FILE ro|rw NULLSIZE TAG -> sets spid, uri, serr, sstats
start_server () {
    local name=$1 file=$2 mode=$3 nullsize=$4 tag=$5 ro=() opts
    alloc_port
    serr=$work/logs/$tag.err
    sstats=
    uri=nbd://127.0.0.1:$port
    [[ $mode == ro ]] && ro=(-r)
    case $name in
        qemu-none|qemu-def)
            local cache=()
            [[ $name == qemu-none ]] && cache=(--cache=none --aio=io_uring)
            qemu-nbd "${ro[@]}" -f raw -t -e 16 -b 127.0.0.1 -p "$port" \
                --pid-file="$tmp/$tag.pid" "${cache[@]}" "$file" 2>"$serr" &
            spid=$! ;;
        nbdkit-file)
            nbdkit -f "${ro[@]}" -i 127.0.0.1 -p "$port" file "$file" 2>"$serr" &
            spid=$! ;;
        null)
            nbdkit -f -r -i 127.0.0.1 -p "$port" null "$nullsize" 2>"$serr" &
            spid=$! ;;
        nbd-server)
            cat > "$tmp/$tag.conf" <<EOF
[generic]
port = $port
listenaddr = 127.0.0.1
[bench]
exportname = $file
readonly = $([[ $mode == ro ]] && echo true || echo false)
EOF
            uri=$uri/bench
            rm -f "$tmp/$tag.pid"
            (cd "$tmp" && nbd-server -C "$tmp/$tag.conf" -p "$tmp/$tag.pid" 2>"$serr")
            for _ in $(seq 100); do [[ -s $tmp/$tag.pid ]] && break; sleep 0.05; done
            spid=$(cat "$tmp/$tag.pid") ;;
        *)
            opts=$(server_opts "$name") || die "unknown server $name"
            sstats=$tmp/$tag.stats
            rm -f "$sstats"
            # shellcheck disable=SC2086
            "$top/nbdkit" -f "${ro[@]}" -i 127.0.0.1 -p "$port" gmblock \
                file="$file" stats="$sstats" ${opts//,/ } 2>"$serr" &
            spid=$! ;;
    esac
    server_pids+=("$spid")
    for _ in $(seq 200); do
        ss -Hltn "sport = :$port" | grep -q . && return 0
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.05
    done
    cat "$serr" >&2
    die "server $name did not start (see $serr)"
}

cpu_ticks () {   # utime+stime+cutime+cstime of a process (all threads, reaped children)
    awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$1/stat"
}
hwm_kb () { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }

# nbd-server's per-connection children must exit and be reaped into its
# cutime/cstime before its CPU is read.
wait_children () {
    for _ in $(seq 60); do pgrep -P "$1" >/dev/null || break; sleep 0.05; done
}

stop_server () {   # stop_server PID
    local p=$1 i rc=0 killed=
    kill -TERM "$p" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$p" 2>/dev/null; then
        log "server $p did not stop on SIGTERM; killing"
        kill -KILL "$p" 2>/dev/null || true
        killed=1
    fi
    wait "$p" 2>/dev/null || rc=$?
    local keep=() q
    for q in "${server_pids[@]}"; do [[ $q == "$p" ]] || keep+=("$q"); done
    server_pids=("${keep[@]}")
    # Dead of another signal than ours, it crashed (during the run or at
    # exit, before its stats file): no measurement to keep.
    if [[ -z $killed && $rc -gt 128 && $rc != 143 ]]; then
        die "server $p died of signal $((rc - 128)) (see ${serr:-its log})"
    fi
}

# For cleanup traps: SIGTERM every server still running, SIGKILL what is
# left after 5 s.
kill_servers () {
    local p
    for p in "${server_pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${server_pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
}

drop_caches () { sync; echo 3 > /proc/sys/vm/drop_caches; }
cached_kb () { awk '/^Cached:/ { print $2 }' /proc/meminfo; }
file_cached () { fincore -b -n -o RES "$1" 2>/dev/null || true; }   # bytes of FILE in page cache

blockdev_or_file_size () {
    if [[ -b $1 ]]; then blockdev --getsize64 "$1"; else stat -c %s "$1"; fi
}

# make_ram_loop BYTES: a RAM-backed loop device with direct I/O over a
# /dev/shm file of random data -> sets shmfile, loopdev (the caller's
# cleanup detaches loopdev and removes shmfile).
make_ram_loop () {
    shmfile=/dev/shm/gmblock-bench-$$.img
    log "creating $(($1 >> 30)) GiB RAM-backed loop device ($shmfile)"
    head -c "$1" /dev/urandom > "$shmfile"
    loopdev=$(losetup --direct-io=on -f --show "$shmfile")
    [[ $(losetup -n -O DIO "$loopdev" | tr -d ' ') == 1 ]] ||
        die "$loopdev: direct I/O did not turn on"
    log "loop device $loopdev (direct-io=on)"
}
free_ram_loop () {
    if [[ -n $loopdev ]]; then losetup -d "$loopdev" 2>/dev/null || true; fi
    if [[ -n $shmfile ]]; then rm -f "$shmfile"; fi
}

# make_disk_img FILE BYTES: a file of random data on the root disk, made
# once and reused while it has the right size.
make_disk_img () {
    if [[ ! -f $1 || $(stat -c %s "$1") != "$2" ]]; then
        log "creating $(($2 >> 30)) GiB random file $1 (once; reused later)"
        rm -f "$1"
        head -c "$2" /dev/urandom | dd of="$1" bs=1M iflag=fullblock \
            conv=fsync status=none
    fi
}

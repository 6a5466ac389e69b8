# Helpers for scenario scripts, sourced inside the guest (bash, chrooted
# into the host's tree, as root). The job file has set LAB_REPO, LAB_KDIR,
# LAB_DATASET, LAB_MANIFEST, LAB_NAME and any LAB_* knobs.
set -u -o pipefail

LAB_OUT=/run/lab/out
LAB_RUN=/run/lab
# LAB_COVERAGE=1 (scripts/coverage.sh --lab): the tree is read-only
# here, so the modules' gcov counters go to the run's out/gcov/.
if [ -n "${LAB_COVERAGE:-}" ]; then
    export GCOV_PREFIX=$LAB_OUT/gcov GCOV_PREFIX_STRIP=0
fi
MNT=$LAB_RUN/mnt
mkdir -p "$MNT"

# step TEXT: a heading with the guest's uptime and the CPU time its
# vCPUs have been busy so far (user, system and interrupts, all vCPUs:
# under TCG on an idle host, about the host's CPU for the guest), to
# tell which steps cost.
# Read without a fork: each one costs about 80 ms of CPU under TCG.
step() {
    local up u n s q sq c
    read -r up _ </proc/uptime
    read -r _ u n s _ _ q sq _ </proc/stat
    c=$((u + n + s + q + sq))
    printf '== [%ss, cpu %d.%02ds] %s\n' "$up" $((c / 100)) $((c % 100)) "$*"
}

# The reason goes to the results share, where the host turns it into
# "FAIL name (reason, ...)".
fail() {
    echo "FAIL: $*"
    echo "$*" >"$LAB_OUT/reason"
    exit 1
}

# Run a command; on failure, fail with its description.
must() { "$@" || fail "command failed ($?): $*"; }

# sleep as a shell builtin (Debian's bash-builtins), for this shell and
# its subshells.  Under TCG each fork and exec of /bin/sleep costs the
# guest about 80 ms of CPU: a wait polling with sleep 0.1 kept 44% of a
# vCPU busy, and 3% with the builtin (measured in a 1-vCPU guest).
enable -f /usr/lib/bash/sleep sleep ||
    fail "no loadable sleep builtin: install bash-builtins (scripts/install-deps.sh check)"

load() {
    for m in "$@"; do
        modprobe -d "$LAB_KDIR" "$m" || fail "cannot load module $m"
    done
}

# serve NAME WHERE FILE [nbdkit options...] [-- plugin params...]
# Start the plugin under test on FILE as a background job (nbdkit -f)
# (its errors land in $LAB_OUT/NAME.nbdkit.log), listening on 127.0.0.1
# port WHERE, on ADDR port PORT if WHERE is ADDR:PORT, or on the Unix
# socket WHERE if it starts with /.
# LAB_PLUGIN=file serves with nbdkit's own file plugin (harness debugging
# only: every scenario is meant to test gmblock).
serve() {
    local name=$1 where=$2 file=$3 opts=() params=() listen plugin nbdkit
    shift 3
    while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    params=("$@")
    case $where in
    /*) listen=(-U "$where") ;;
    *:*) listen=(-i "${where%:*}" -p "${where##*:}") ;;
    *)  listen=(-i 127.0.0.1 -p "$where") ;;
    esac
    case ${LAB_PLUGIN:-gmblock} in
    gmblock)
        nbdkit=$LAB_REPO/nbdkit plugin=gmblock
        [ -x "$nbdkit" ] && [ -f "$LAB_REPO/plugins/gmblock/nbdkit-gmblock-plugin.so" ] ||
            fail "gmblock plugin not built: run make at the top first"
        # Its counters, written when it exits cleanly (see counter).
        params+=(stats="$LAB_OUT/$name.stats")
        ;;
    file) nbdkit=nbdkit plugin=file ;;
    *) fail "unknown LAB_PLUGIN=$LAB_PLUGIN" ;;
    esac
    rm -f "$LAB_RUN/$name.pid"
    step "serve $name: $plugin file=$file ${opts[*]} ${params[*]} on $where"
    "$nbdkit" -f -P "$LAB_RUN/$name.pid" "${listen[@]}" "${opts[@]}" \
        "$plugin" file="$file" "${params[@]}" >>"$LAB_OUT/$name.nbdkit.log" 2>&1 &
    # nbdkit writes the pid file once its socket is listening.
    local i
    for i in $(seq 100); do
        if [ -s "$LAB_RUN/$name.pid" ]; then
            sanitized "$name"
            rdma_listening "$name" "${params[@]}"
            return 0
        fi
        kill -0 $! 2>/dev/null || break
        sleep 0.2
    done
    fail "server $name did not start (see $name.nbdkit.log)"
}

# rdma_listening NAME PARAMS...: with rdma= among PARAMS, wait until
# server NAME's RDMA listener is up.  nbdkit writes its pid file before
# the filters' .after_fork, where gmblock-rdma registers its pool and
# only then listens: a bridge started at once could find nobody there.
rdma_listening() {
    local name=$1 p pid i line
    shift
    for p in "$@"; do
        case $p in rdma=*) break ;; esac
        p=
    done
    [ -n "$p" ] || return 0
    read -r pid <"$LAB_RUN/$name.pid"
    # One fork a poll (rdma itself), the lines matched in bash.
    for ((i = 0; i < 150; i++)); do
        while IFS= read -r line; do
            [[ $line == *"state LISTEN"* && $line == *"pid $pid "* ]] && return 0
        done <<<"$(rdma res show cm_id 2>/dev/null)"
        kill -0 "$pid" 2>/dev/null || return 0   # refused: its caller sees
        sleep 0.2
    done
    rdma res show cm_id
    fail "server $name ($p): no RDMA listener 30 s after it started"
}

# refuses NAME REGEX PARAMS...: gmblock on $disk with PARAMS must exit
# non-zero at start-up (within 60 s) with a message matching REGEX.
refuses() {
    local name=$1 re=$2 rc=0
    shift 2
    step "expect refusal: gmblock file=$disk $*"
    timeout 60 "$LAB_REPO/nbdkit" -f -i 127.0.0.1 -p 10809 gmblock file="$disk" "$@" \
        >"$LAB_OUT/$name.log" 2>&1 </dev/null || rc=$?
    cat "$LAB_OUT/$name.log"
    [ $rc != 0 ] && [ $rc != 124 ] || fail "$name: nbdkit did not refuse (exit $rc)"
    grep -qE "$re" "$LAB_OUT/$name.log" || fail "$name: the message does not match /$re/"
}

# counter NAME COUNTER: a gmblock counter of server NAME, once it has stopped.
counter() {
    sed -n "s/^gmblock\.$2 //p" "$LAB_OUT/$1.stats" 2>/dev/null
}

server_pid() { cat "$LAB_RUN/$1.pid"; }

# serve_stack NAME WHERE FILE [nbdkit options...] [-- params...]: serve
# with the recommended stack of `make serve` (scripts/serve.sh), the
# gmblock-readahead filter over gmblock-cache over the plugin; params go
# to the filters and the plugin (cache-mode=..., ...). Both filters write
# their counters when nbdkit exits cleanly (see cache_counter, ra_counter).
serve_stack() {
    local name=$1 where=$2 file=$3 opts=()
    shift 3
    while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    rm -f "$LAB_OUT/$name.cache-stats" "$LAB_OUT/$name.ra-stats"
    serve "$name" "$where" "$file" \
        --filter=gmblock-readahead --filter=gmblock-cache "${opts[@]}" -- \
        cache-stats="$LAB_OUT/$name.cache-stats" ra-stats="$LAB_OUT/$name.ra-stats" "$@"
}

# reread_cold NAME DEV [STACK OPTIONS...] [-- ARGS...]: with no server
# running, the device alone holds the filesystem: serve DEV afresh with
# the stack (serve_stack's arguments; port 10809, /dev/nbd0), read every
# file back from a cold cache and compare, then stop the server.
reread_cold() {
    local name=$1 dev=$2
    shift 2
    corrupt_if_asked "$dev" "$dev"
    serve_stack "$name" 10809 "$dev" "$@"
    attach /dev/nbd0 10809
    drop_caches /dev/nbd0
    must mount -o ro /dev/nbd0 "$MNT"
    check_data "$MNT"
    must umount "$MNT"
    detach /dev/nbd0
    stop "$name"
}

# cache_counter NAME COUNTER, ra_counter NAME COUNTER: a counter of the
# gmblock-cache or gmblock-readahead filter of server NAME (serve_stack),
# once it has stopped; empty if it did not write them.
cache_counter() {
    sed -n "s/^gmblock-cache\.$2 //p" "$LAB_OUT/$1.cache-stats" 2>/dev/null
}
ra_counter() {
    sed -n "s/^gmblock-readahead\.$2 //p" "$LAB_OUT/$1.ra-stats" 2>/dev/null
}

# counter_above NAME VALUE MIN WHAT: fail unless the counter VALUE
# (from counter, cache_counter or ra_counter) is a number above MIN.
counter_above() {
    echo "$1 = ${2:-?}"
    case $2 in ''|*[!0-9]*) fail "$1 is missing (${2:-no value}): $4" ;; esac
    [ "$2" -gt "$3" ] || fail "$1 = $2, not above $3: $4"
}

# stop NAME [SIGNAL [STATUS]]: stop a server started by serve and wait
# for it. nbdkit does not exit on SIGTERM while a client stays
# connected: detach first. A server that still lingers after 90 s
# (systemd's default stop timeout; Linux 6.1's RDMA connection manager
# can hold a vanished client's rdma_destroy_id for more than 30 s, and
# nothing ends the process before it returns: CI of b16e0ca) fails
# the scenario, and so does one that died of another signal than SIGNAL:
# a crash (in a module's .close or .unload, or earlier), which no log of
# its own says; and one that exits with another status than STATUS (0:
# gmblock-cache exits 1 when its last write-back fails, data lost at
# shutdown, which went unnoticed before). A server already gone (no pid
# file) fails too.
stop() {
    local pid i rc=0
    pid=$(server_pid "$1") || fail "stop $1: no such server (no pid file)"
    kill -"${2:-TERM}" "$pid" 2>/dev/null
    for i in $(seq 900); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        hang_trace "$1" "$pid"
        kill -KILL "$pid"
        fail "server $1 did not exit within 90 s of SIG${2:-TERM} (its threads: $1.hang-bt.txt)"
    fi
    wait "$pid" 2>/dev/null || rc=$?
    rm -f "$LAB_RUN/$1.pid"
    if [ "$rc" -gt 128 ] && [ "$rc" != $((128 + $(kill -l "${2:-TERM}"))) ]; then
        fail "server $1 died of signal $((rc - 128)) (exit $rc; see $1.nbdkit.log)"
    fi
    if [ "$rc" -le 128 ] && [ "$rc" != "${3:-0}" ]; then
        fail "server $1 exited with status $rc, not ${3:-0} (see $1.nbdkit.log)"
    fi
}

# hang_trace NAME PID: where a server that will not exit is stuck, in
# $LAB_OUT/NAME.hang-bt.txt: each thread's kernel stack (a wait in the
# kernel, e.g. the RDMA CM's in rdma_destroy_id, shows only there), then
# its user stack from gdb when the host has it. Twice an RDMA server did
# not exit at SIGTERM and said nothing (tests/stress/README.md).
hang_trace() {
    local out=$LAB_OUT/$1.hang-bt.txt t
    {
        for t in /proc/"$2"/task/*; do
            echo "--- thread ${t##*/} $(cat "$t/comm" 2>/dev/null) wchan $(cat "$t/wchan" 2>/dev/null)"
            cat "$t/stack" 2>/dev/null
        done
        if command -v gdb >/dev/null; then
            timeout 120 gdb -p "$2" -batch -ex "info threads" -ex "thread apply all bt"
        else
            echo "(no gdb on the host: user stacks not taken)"
        fi
    } >"$out" 2>&1
}

# attach DEV WHERE [nbd-client options...]: the kernel NBD client.
attach() {
    local dev=$1 where=$2
    shift 2
    step "nbd-client $where -> $dev $*"
    case $where in
    /*) must nbd-client -unix "$where" "$dev" -N "" "$@" ;;
    *)  must nbd-client 127.0.0.1 "$where" "$dev" -N "" "$@" ;;
    esac
    [ "$(blockdev --getsize64 "$dev")" -gt 0 ] || fail "$dev has no size after connecting"
}

detach() {
    step "disconnect $1"
    nbd-client -d "$1" >/dev/null 2>&1 || fail "nbd-client -d $1 failed"
}

# Forget every cached block of DEV so the next read goes to the server.
drop_caches() {
    sync
    blockdev --flushbufs "$1" 2>/dev/null
    echo 3 >/proc/sys/vm/drop_caches
}

# make_fs DEV [mkfs options...]: ext4; the itables are written now
# rather than by a background thread racing with the scenario.
make_fs() {
    local dev=$1
    shift
    step "mkfs.ext4 $* $dev"
    must mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$@" "$dev"
}

put_data() {
    step "write the dataset to $1"
    must tar -xf "$LAB_DATASET" -C "$1"
    must sync -f "$1"
}

# Compare every file of the dataset under DIR with the host's manifest.
check_data() {
    local bad
    step "verify the dataset under $1"
    # cd's error too: in a folder that is not there nothing is compared.
    bad=$(cd "$1" 2>&1 && md5sum -c --quiet "$LAB_MANIFEST" 2>&1 | grep -v WARNING | head -n 3)
    [ -z "$bad" ] || fail "checksum mismatch under $1: $(echo $bad)"
    echo "all $(wc -l <"$LAB_MANIFEST") files match"
}

fsck_clean() {
    step "e2fsck -fn $1"
    e2fsck -fn "$1" || fail "e2fsck -fn $1 found problems (exit $?)"
}

# With LAB_CORRUPT=1, flip one byte of big.bin on BACKING (the device the
# server exports 1:1 as the filesystem DEV, unmounted), behind the client's
# back: the following re-read must then fail. Shows the checks can fail.
corrupt_if_asked() {
    local dev=$1 backing=$2 blk bs off
    [ "${LAB_CORRUPT:-0}" = 1 ] || return 0
    blk=$(debugfs -R "bmap /big.bin 3" "$dev" 2>/dev/null)
    bs=$(dumpe2fs -h "$dev" 2>/dev/null | sed -n 's/^Block size: *//p')
    [ -n "$blk" ] && [ -n "$bs" ] || fail "LAB_CORRUPT: cannot locate big.bin on $dev"
    off=$((blk * bs + 123))
    step "LAB_CORRUPT=1: flipping the byte at offset $off of $backing"
    must python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
off = int(sys.argv[2])
os.pwrite(fd, bytes([os.pread(fd, 1, off)[0] ^ 0xff]), off)
os.fsync(fd)' "$backing" "$off"
    blockdev --flushbufs "$backing"
}

# The filesystem round trip every data scenario shares: mkfs on DEV,
# write, unmount, fsck, forget the cache, remount, compare byte for byte.
# BACKING is what the server exports (for LAB_CORRUPT), or "".
fs_roundtrip() {
    local dev=$1 backing=${2:-}
    shift 2
    make_fs "$dev" "$@"
    must mount "$dev" "$MNT"
    put_data "$MNT"
    must umount "$MNT"
    fsck_clean "$dev"
    [ -n "$backing" ] && corrupt_if_asked "$dev" "$backing"
    drop_caches "$dev"
    must mount "$dev" "$MNT"
    check_data "$MNT"
    must umount "$MNT"
}

# make_raid LEVEL DEV...: /dev/md0 with 64 KiB chunks. The members are
# fresh sparse (all-zero) files, whose parity is already consistent, so a
# RAID5 needs no initial resync (which would cost minutes under TCG).
make_raid() {
    local level=$1
    shift
    case $level in
    0) load md-mod raid0 ;;
    5) load md-mod raid456 ;;
    *) fail "make_raid: level $level not wired up" ;;
    esac
    step "mdadm --create /dev/md0 level $level on $*"
    must mdadm --create /dev/md0 --run --quiet --level="$level" --raid-devices=$# \
        --chunk=64 --assume-clean "$@"
    [ "$(cat /sys/block/md0/md/chunk_size)" = 65536 ] || fail "md0 chunk size is not 64 KiB"
}

# backing_match FILE BACKING: compare FILE's bytes (through the mounted
# filesystem) with those at its physical extents (FIEMAP) on BACKING, the
# device the server exports 1:1, read with O_DIRECT. Prints "MATCHED
# TOTAL" in bytes, or fails (non-zero, the reason on stderr) if FILE's
# extents are not all allocated yet (written back by the client's
# kernel, e.g. with sync_file_range).
backing_match() {
    python3 - "$1" "$2" <<'PY'
import fcntl, mmap, os, struct, sys
path, backing = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
N = 512                                 # extents asked for at once
req = struct.pack("=QQIIII", 0, size, 0, 0, N, 0) + bytes(56 * N)
buf = bytearray(req)
fcntl.ioctl(fd, 0xC020660B, buf)        # FS_IOC_FIEMAP
mapped = struct.unpack_from("=I", buf, 20)[0]
exts = [struct.unpack_from("=QQQQQIIII", buf, 32 + 56 * i)[:6] for i in range(mapped)]
covered = sum(e[2] for e in exts)
if covered < size or any(e[5] & 0x6 for e in exts):   # UNKNOWN | DELALLOC
    sys.exit("%s: only %d of %d bytes mapped, or extents not yet allocated" % (path, covered, size))
bd = os.open(backing, os.O_RDONLY | os.O_DIRECT)
CH = 1 << 20
dbuf = mmap.mmap(-1, CH)
matched = 0
for logical, physical, length, _, _, flags in exts:
    done = 0
    while done < length:
        n = min(CH, length - done)
        os.preadv(bd, [dbuf], physical + done)
        want = os.pread(fd, n, logical + done)
        a = memoryview(dbuf)[:len(want)]
        # Count matching 4 KiB pieces, not whole chunks.
        for o in range(0, len(want), 4096):
            if a[o:o + 4096] == want[o:o + 4096]:
                matched += len(want[o:o + 4096])
        done += n
print(matched, size)
PY
}

# The number of client TCP connections open to 127.0.0.1:PORT.
connections() {
    ss -Htn state established "( dport = :$1 )" | wc -l
}

# umount_orphan DIR: unmount a filesystem whose server died (after its
# nbd device was disconnected), bounded: a hang dumps the blocked tasks
# to dmesg.log and fails instead of running into the guest's time limit.
umount_orphan () {
    local u i
    step "unmount the orphaned filesystem"
    umount "$1" &
    u=$!
    for i in $(seq 300); do kill -0 "$u" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$u" 2>/dev/null; then
        echo w >/proc/sysrq-trigger
        fail "umount of the orphaned filesystem hung for 30 s (blocked tasks in dmesg.log)"
    fi
    wait "$u" || fail "cannot unmount after the server died"
}

# ---- PCI topology, for scenarios with a lab-pci header (lib/boot.sh):
# which NVMe controller has a controller memory buffer (CMB), whether the
# kernel published it as p2pmem (7.x: CONFIG_PCI_P2PDMA; not 6.1), and
# whether both controllers sit under one PCIe switch, the topology where
# the kernel lets them DMA to each other.

# Under TCG every program started costs about 0.1 s: these helpers use
# shell builtins where they can.

# nvme_bdfs: the PCI addresses of the NVMe controllers, one a line.
nvme_bdfs() {
    local d c
    for d in /sys/bus/pci/devices/*; do
        read -r c <"$d/class" && [ "$c" = 0x010802 ] && echo "${d##*/}"
    done
    return 0
}

# nvme_disk BDF: the block device of the first namespace of the NVMe
# controller at BDF; fails if it has none (yet).
nvme_disk() {
    local ns
    for ns in /sys/bus/pci/devices/"$1"/nvme/nvme*/nvme*n*; do
        [ -b "/dev/${ns##*/}" ] && { echo "/dev/${ns##*/}"; return 0; }
    done
    return 1
}

# nvme_up N: load nvme and wait (10 s at most) for N controllers with a
# block device each.
nvme_up() {
    local i b n=0
    load nvme
    for i in $(seq 100); do
        n=0
        for b in $(nvme_bdfs); do nvme_disk "$b" >/dev/null && n=$((n + 1)); done
        [ "$n" -ge "$1" ] && return 0
        sleep 0.1
    done
    fail "only $n of $1 NVMe disks appeared"
}

# nvme_cmb_bdf: the NVMe controller with a CMB (QEMU puts it in BAR 2,
# whose resource2 file exists on every kernel, p2pmem or not).
nvme_cmb_bdf() {
    local b
    for b in $(nvme_bdfs); do
        [ -e "/sys/bus/pci/devices/$b/resource2" ] && { echo "$b"; return 0; }
    done
    return 1
}

# p2pmem_bdf: the PCI device whose memory the kernel offers for P2P DMA
# (it has p2pmem/{size,available,published,allocate}); fails if none.
p2pmem_bdf() {
    local d
    for d in /sys/bus/pci/devices/*/p2pmem; do
        [ -d "$d" ] && { d=${d%/p2pmem}; echo "${d##*/}"; return 0; }
    done
    return 1
}

# nvme_peer_bdf BDF, nvme_peer_disk BDF: the PCI address and the block
# device of an NVMe controller other than the one at BDF (the other end of
# a P2P transfer).
nvme_peer_bdf() {
    local b
    for b in $(nvme_bdfs); do
        [ "$b" != "$1" ] && { echo "$b"; return 0; }
    done
    return 1
}
nvme_peer_disk() {
    local b
    b=$(nvme_peer_bdf "$1") && nvme_disk "$b"
}

# pci_chain BDF: the bridges above BDF, nearest first, on one line (its
# parents in sysfs); an empty line on a root bus.
pci_chain() {
    local p parts i out=()
    p=$(cd -P "/sys/bus/pci/devices/$1" && pwd) || return 1
    IFS=/ read -ra parts <<<"${p#/sys/devices/pci*/}"
    for ((i = ${#parts[@]} - 2; i >= 0; i--)); do out+=("${parts[i]}"); done
    echo "${out[*]}"
}

# pcie_type BDF...: the PCIe port type of each, on one line: root-port,
# upstream, downstream, endpoint, rciep (integrated in the root complex),
# other, or pci (no PCIe capability). One setpci for all when it can.
pcie_type() {
    local b v out lines=()
    out=$(for b in "$@"; do printf -- '-s %s CAP_EXP+2.w ' "$b"; done)
    # shellcheck disable=SC2086
    out=$(setpci $out 2>/dev/null) && mapfile -t lines <<<"$out"
    if [ "${#lines[@]}" != $# ]; then
        out=$(for b in "$@"; do setpci -s "$b" CAP_EXP+2.w 2>/dev/null || echo none; done)
    fi
    while read -r v; do
        [ "$v" = none ] && { printf 'pci '; continue; }
        case $(((0x$v >> 4) & 0xf)) in
        0) printf 'endpoint ' ;; 4) printf 'root-port ' ;; 5) printf 'upstream ' ;;
        6) printf 'downstream ' ;; 9) printf 'rciep ' ;; *) printf 'other ' ;;
        esac
    done <<<"$out"
    echo
}

# pci_switch BDF: the upstream port of the PCIe switch on one of whose
# downstream ports BDF sits; empty if it is not behind a switch.
pci_switch() {
    local chain
    read -ra chain <<<"$(pci_chain "$1")"
    [ "${#chain[@]}" -ge 2 ] || return 0
    [ "$(pcie_type "${chain[0]}" "${chain[1]}")" = "downstream upstream " ] && echo "${chain[1]}"
    return 0
}

# p2p_facts: wait for two NVMe controllers, one with a CMB, then set and
# print P2P_CMB_BDF (the CMB controller), P2P_CMB_DISK (its disk),
# P2P_MEM (its p2pmem folder in sysfs, empty when the kernel has none),
# P2P_PEER_BDF and P2P_PEER_DISK (the other controller), P2P_SWITCH (the
# upstream port of the switch both sit under, empty if they do not), and
# the PCI tree with each controller's path to the root.
p2p_facts() {
    local b i up types
    command -v setpci >/dev/null || fail "no lspci/setpci on the host: install pciutils (scripts/install-deps.sh check)"
    nvme_up 2
    P2P_CMB_BDF=$(nvme_cmb_bdf) || fail "no NVMe controller with a CMB (BAR 2)"
    P2P_CMB_DISK=$(nvme_disk "$P2P_CMB_BDF")
    P2P_PEER_BDF=$(nvme_peer_bdf "$P2P_CMB_BDF") || fail "no second NVMe controller"
    P2P_PEER_DISK=$(nvme_disk "$P2P_PEER_BDF")
    P2P_MEM=/sys/bus/pci/devices/$P2P_CMB_BDF/p2pmem
    [ -d "$P2P_MEM" ] || P2P_MEM=
    P2P_SWITCH=$(pci_switch "$P2P_CMB_BDF")
    [ "$(pci_switch "$P2P_PEER_BDF")" = "$P2P_SWITCH" ] || P2P_SWITCH=
    step "PCI topology on $(uname -r)"
    lspci -tv
    for b in "$P2P_CMB_BDF" "$P2P_PEER_BDF"; do
        read -ra up <<<"$(pci_chain "$b")"
        types=()
        [ ${#up[@]} = 0 ] || read -ra types <<<"$(pcie_type "${up[@]}")"
        printf '%s' "$b"
        for i in "${!up[@]}"; do printf ' <- %s (%s)' "${up[i]}" "${types[i]}"; done
        echo
    done
    echo "CMB controller $P2P_CMB_BDF ($P2P_CMB_DISK)"
    echo "peer controller $P2P_PEER_BDF ($P2P_PEER_DISK)"
    echo "common switch: ${P2P_SWITCH:-none}"
    if [ -n "$P2P_MEM" ]; then
        echo "p2pmem: size $(<"$P2P_MEM/size") available $(<"$P2P_MEM/available") published $(<"$P2P_MEM/published")"
    else
        echo "p2pmem: none ($(dmesg | grep -m 1 -i cmb || echo 'no CMB message in dmesg'))"
    fi
}

# p2p_dma DISK BDF: 1 MiB from RAM to DISK, then DISK -> BDF's p2pmem and
# p2pmem -> DISK with O_DIRECT (the NVMe controller DMAs to and from the
# other device's memory), compared byte for byte; overwrites DISK's first
# 2 MiB. Fails with the error: EINVAL from the read into p2pmem where the
# kernel refuses P2P between the two (root bus, separate root ports).
p2p_dma() {
    python3 - "$1" "/sys/bus/pci/devices/$2/p2pmem/allocate" <<'PY'
import mmap, os, sys
disk, alloc = sys.argv[1], sys.argv[2]
N = 1 << 20
step = "mmap of " + alloc
try:
    f = os.open(alloc, os.O_RDWR)
    p2p = mmap.mmap(f, N, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    ram = mmap.mmap(-1, N)
    pattern = os.urandom(N)
    ram[:] = pattern
    d = os.open(disk, os.O_RDWR | os.O_DIRECT)
    step = "O_DIRECT write from RAM"
    os.pwritev(d, [ram], 0)
    step = "O_DIRECT read into p2pmem"
    os.preadv(d, [p2p], 0)
    if p2p[:] != pattern:
        sys.exit("%s -> p2pmem: the data differs" % disk)
    step = "O_DIRECT write from p2pmem"
    os.pwritev(d, [p2p], N)
    ram[:] = bytes(N)
    step = "O_DIRECT read back into RAM"
    os.preadv(d, [ram], N)
    if ram[:] != pattern:
        sys.exit("p2pmem -> %s: the data differs" % disk)
except OSError as e:
    sys.exit("%s: %s" % (step, e))
print("1 MiB %s -> p2pmem -> %s by P2P DMA, byte for byte" % (disk, disk))
PY
}

# ---- Soft-RoCE, for the rdma-* scenarios.

# rxe_pair [netns]: soft-RoCE device rxe0 on gmr0 (10.77.0.1), one end
# of a veth pair (rxe does not work on lo); servers listen on 10.77.0.1.
# Without netns, clients run in the same namespace and rxe0 loops the
# traffic back: the only way on 6.1 (with the client in another network
# namespace on rxe1, RDMA CM address resolution times out there, rping
# too, though ping works). With netns (Linux 7.x: measured on 7.3.4,
# where rping and the bridge work across namespaces), the other end
# gmr1 (10.77.0.2) goes into the namespace gmcl with its own soft-RoCE
# device rxe1, and bridge starts the bridges there: two hosts' worth of
# network stack in one guest, the RDMA traffic crossing the veth.
rxe_pair() {
    case $(uname -r) in 6.1.*|6.12.*) load crc32_generic ;; esac
    load veth rdma_rxe ib_uverbs rdma_ucm
    must ip link set lo up
    must ip link add gmr0 type veth peer name gmr1
    must ip addr add 10.77.0.1/24 dev gmr0
    must ip link set gmr0 up
    if [ "${1:-}" = netns ]; then
        step "soft-RoCE rxe0 on gmr0 (10.77.0.1); client namespace gmcl: rxe1 on gmr1 (10.77.0.2)"
        must ip netns add gmcl
        must ip link set gmr1 netns gmcl
        must ip netns exec gmcl ip link set lo up
        must ip netns exec gmcl ip addr add 10.77.0.2/24 dev gmr1
        must ip netns exec gmcl ip link set gmr1 up
        must rdma link add rxe0 type rxe netdev gmr0
        must ip netns exec gmcl rdma link add rxe1 type rxe netdev gmr1
        RXE_CLIENT_NS=gmcl
    else
        step "soft-RoCE rxe0 on gmr0 (10.77.0.1), veth peer gmr1"
        must ip link set gmr1 up
        must rdma link add rxe0 type rxe netdev gmr0
        RXE_CLIENT_NS=
    fi
    rdma link
    ibv_devices
    [ "$(ibv_devices | grep -c rxe0)" = 1 ] || fail "soft-RoCE device rxe0 not listed by ibv_devices"
}

# bridge NAME SERVER [PARAM...]: the gmblock-rdma bridge plugin (in
# rxe_pair's client namespace if it made one), connected to the RDMA
# server SERVER, serving it on the Unix socket
# $LAB_RUN/NAME.sock (counters in $LAB_OUT/NAME.stats, log in
# NAME.nbdkit.log); PARAMs (credits=, zero-copy=...) go to the plugin;
# stop it with stop NAME.
bridge() {
    local name=$1 srv=$2 i
    shift 2
    rm -f "$LAB_RUN/$name.pid" "$LAB_RUN/$name.sock"
    step "bridge $name: gmblock-rdma server=$srv $* on $LAB_RUN/$name.sock"
    # In the client namespace when rxe_pair made one (its Unix socket
    # is reachable from every namespace).
    ${RXE_CLIENT_NS:+ip netns exec "$RXE_CLIENT_NS"} \
        "$LAB_REPO/nbdkit" -f -P "$LAB_RUN/$name.pid" -U "$LAB_RUN/$name.sock" \
        gmblock-rdma server="$srv" stats="$LAB_OUT/$name.stats" "$@" \
        >>"$LAB_OUT/$name.nbdkit.log" 2>&1 &
    for i in $(seq 100); do
        [ -s "$LAB_RUN/$name.pid" ] && { sanitized "$name"; return 0; }
        kill -0 $! 2>/dev/null || break
        sleep 0.2
    done
    fail "bridge $name did not start (see $name.nbdkit.log)"
}

# sanitized NAME: when the scenario runs under a sanitizer
# (guest/run.sh), server or bridge NAME's nbdkit must have its runtime
# loaded: a scenario that passed without it would claim a sanitizer run
# that never happened.  By read, no fork.
sanitized() {
    local lib pid maps
    if [ -n "${LAB_SANITIZE:-}" ]; then lib=libasan
    elif [ -n "${LAB_TSAN:-}" ]; then lib=libtsan
    else return 0
    fi
    read -r pid <"$LAB_RUN/$1.pid"
    IFS= read -r -d '' maps <"/proc/$pid/maps"
    [[ $maps == *"/$lib.so"* ]] ||
        fail "$1: nbdkit (pid $pid) runs without $lib, though this scenario runs under it"
}

# await_file FILE PID SECONDS WHAT: wait until FILE exists (a
# background job PID signals a step so); if the job ends first or
# SECONDS pass, reap it (killed if it still runs: a plain wait would
# hang until the guest's time limit) and fail with WHAT.
await_file() {
    local i
    for i in $(seq $(($3 * 10))); do
        [ -e "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    [ -e "$1" ] || { kill "$2" 2>/dev/null; wait "$2"; fail "$4"; }
}

# logged LOG PATTERN N SECONDS: LOG, a log being appended to, has N
# lines matching PATTERN (an extended regular expression, bash's =~)
# within SECONDS.  The logfile= of nbdkit's log filter placed above its
# delay filter tells when a write sleeps in the storage (its line with
# offset=) and when it has landed (return=).  Without a fork: each poll
# reads only the lines added since the last one (a grep every 0.1 s
# kept the guest's vCPU busy, about 80 ms of CPU a fork under TCG).
logged() {
    local fd= i n=0 line part=
    for ((i = 0; i < $4 * 10; i++)); do
        [ -z "$fd" ] && [ -e "$1" ] && exec {fd}<"$1"
        if [ -n "$fd" ]; then
            # A line still being written is kept until its end comes.
            while IFS= read -r -u "$fd" line; do
                line=$part$line part=
                [[ $line =~ $2 ]] && n=$((n + 1))
            done
            part=$part$line
        fi
        [ $n -ge "$3" ] && break
        sleep 0.1
    done
    [ -n "$fd" ] && exec {fd}<&-
    [ $n -ge "$3" ]
}

# rdma_counter NAME COUNTER: a counter of the gmblock-rdma filter or
# bridge of NAME (its FILE of rdma-stats= or stats=), once it stopped.
rdma_counter() {
    sed -n "s/^gmblock-rdma\.$2 //p" "$LAB_OUT/$1" 2>/dev/null
}

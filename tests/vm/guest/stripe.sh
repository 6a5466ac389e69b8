# Helpers for the gmblock-stripe scenarios (stripe-md, stripe-reshape),
# sourced after lib.sh. Under TCG every program started costs about
# 0.1 s, a python start about 1 s: they start few.

# stripe_serve NAME DEV [nbdkit options...] [-- params...]: gmblock on DEV
# on port 10809 behind gmblock-stripe (and whatever the options add below
# it), its geometry printed (-D gmblock-stripe.verbose=1) into
# NAME.nbdkit.log, its counters into NAME.stripe-stats at exit.
stripe_serve() {
    local name=$1 dev=$2 opts=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    rm -f "$LAB_OUT/$name.stripe-stats"
    serve "$name" 10809 "$dev" -D gmblock-stripe.verbose=1 --filter=gmblock-stripe \
        "${opts[@]}" -- stripe-stats="$LAB_OUT/$name.stripe-stats" "$@"
}

# stripe_counter NAME COUNTER: once server NAME has stopped.
stripe_counter() {
    sed -n "s/^gmblock-stripe\.$2 //p" "$LAB_OUT/$1.stripe-stats" 2>/dev/null
}

# probe [OFFSET COUNT MEMBER...]: one connection to the server on 10809
# (stripe-probe.py): sets MIN PREF MAX (its block sizes) and, with a
# CACHE of COUNT bytes at OFFSET, READERS (members that read meanwhile)
# and SECTORS (read on all of them).
probe() {
    local out
    out=$(/usr/bin/python3 -S "$LAB_REPO/tests/vm/guest/stripe-probe.py" \
        nbd://127.0.0.1:10809 "$@") || fail "stripe-probe.py $* failed"
    echo "$out"
    read -r MIN PREF MAX READERS SECTORS _ <<EOF
$(echo $out)
EOF
}

# md_expect DEV: LEVEL CHUNK DATA PARITY worked out from mdadm --detail
# (level, raid devices, chunk, layout), not from sysfs, which is what
# the filter reads: RAID5 keeps one chunk a stripe for parity, RAID6
# two, RAID10 near=K copies K members' chunks.
md_expect() {
    read -r LEVEL CHUNK DATA PARITY <<EOF
$(mdadm --detail "$1" | awk -F' : ' '
        { sub(/^ +/, "", $1) }
        $1 == "Raid Level" { lvl = $2 }
        $1 == "Raid Devices" { n = $2 }
        $1 == "Chunk Size" { c = $2 }
        $1 == "Layout" { lay = $2 }
        END {
            sub(/K$/, "", c); d = n; p = 0
            if (lvl == "raid5" || lvl == "raid4") { d = n - 1; p = 1 }
            if (lvl == "raid6") { d = n - 2; p = 2 }
            if (lvl == "raid10" && lay ~ /^near=/) {
                k = substr(lay, 6) + 0; if (n % k == 0) d = n / k }
            print lvl, c * 1024, d, p
        }')
EOF
    step "mdadm --detail $1: $LEVEL, chunk $CHUNK, $DATA data disks, parity $PARITY"
}

# array NAME LEVEL LAYOUT MEMBER...: a fresh md0 (64K chunks, no resync)
# on the disks MEMBER (vda, ...), and what mdadm says of it (md_expect).
array() {
    local name=$1 level=$2 layout=$3 devs
    shift 3
    devs=("${@/#//dev/}")
    step "$name: mdadm --create /dev/md0 --level=$level ${layout:+--layout=$layout} on ${devs[*]}"
    mdadm --stop /dev/md0 >/dev/null 2>&1
    must mdadm --create /dev/md0 --run --quiet --level="$level" ${layout:+--layout=$layout} \
        --raid-devices=$# --chunk=64 --assume-clean "${devs[@]}"
    md_expect /dev/md0
}

# size_k BYTES: as the filter prints sizes (64K, 192K, 1M).
size_k() {
    if [ $(($1 % 1048576)) = 0 ]; then echo "$(($1 / 1048576))M"; else echo "$(($1 / 1024))K"; fi
}

# pow2_in BYTES: the largest power of two not above BYTES.
pow2_in() { local p=1; while [ $((p * 2)) -le "$1" ]; do p=$((p * 2)); done; echo $p; }

# check_geometry NAME SOURCE: server NAME (stopped) served md0, or a
# partition or loop device over it (SOURCE is how the filter names it:
# "md0 raid5", "loop0 over md0 raid5"). Its geometry line and counters
# must equal what mdadm --detail said (md_expect), its stripe the
# kernel's own queue/optimal_io_size for md0.
check_geometry() {
    local name=$1 src=$2 want got
    want="$src: chunk $(size_k "$CHUNK"), $DATA data disks, parity $PARITY, full stripe $(size_k $((CHUNK * DATA)))"
    grep -F "$want" "$LAB_OUT/$name.nbdkit.log" || fail "$name: no '$want' in the server's log"
    got="$(stripe_counter "$name" chunk) $(stripe_counter "$name" data_disks) $(stripe_counter "$name" parity)"
    [ "$got" = "$CHUNK $DATA $PARITY" ] || fail "$name: counters say chunk, data disks, parity = $got; mdadm: $CHUNK $DATA $PARITY"
    got=$(stripe_counter "$name" stripe_bytes)
    [ "$got" = "$(cat /sys/block/md0/queue/optimal_io_size)" ] ||
        fail "$name: stripe_bytes $got is not md0's optimal_io_size"
}

# check_block_sizes NAME: the block sizes probe found for a server over
# md0: preferred = the largest power of two in one full stripe (the
# stripe itself when it is one), maximum at least one stripe.
check_block_sizes() {
    echo "$1: block sizes: minimum $MIN, preferred $PREF, maximum $MAX; stripe $((CHUNK * DATA))"
    [ "$PREF" = "$(pow2_in $((CHUNK * DATA)))" ] || fail "$1: preferred block $PREF for a stripe of $((CHUNK * DATA))"
    [ "${MAX:-0}" -ge $((CHUNK * DATA)) ] || fail "$1: maximum block $MAX below one stripe ($((CHUNK * DATA)))"
}

# small_roundtrip DEV BACKING: ext4 on DEV with part of the dataset (200
# files) and 8 MiB of fresh random data (big.bin, which LAB_CORRUPT=1
# flips a byte of on BACKING, the device the server exports), unmount,
# e2fsck -f, forget the cache, remount, every checksum compared; the fs
# is left unmounted. The lab's whole dataset costs 25 s a round trip
# under TCG, too long for a scenario that checks several arrays.
small_roundtrip() {
    local dev=$1 backing=$2
    make_fs "$dev"
    must mount "$dev" "$MNT"
    small_put "$MNT"
    must umount "$MNT"
    fsck_clean "$dev"
    corrupt_if_asked "$dev" "$backing"
    drop_caches "$dev"
    must mount "$dev" "$MNT"
    small_check "$MNT"
    must umount "$MNT"
}

# small_put DIR: small_roundtrip's files, their checksums remembered.
small_put() {
    step "write 200 files and 8 MiB of random data to $1"
    must tar -xf "$LAB_DATASET" -C "$1" --wildcards './small/d0[0-4]'
    must head -c 8M /dev/urandom >"$1/big.bin"
    (cd "$1" && md5sum ./big.bin) >"$LAB_RUN/small.md5"
    grep ' \./small/d0[0-4]/' "$LAB_MANIFEST" >>"$LAB_RUN/small.md5"
    must sync -f "$1"
}

# small_check DIR: the files of small_roundtrip under DIR match.
small_check() {
    local bad
    step "verify $(wc -l <"$LAB_RUN/small.md5") files under $1"
    bad=$(cd "$1" 2>&1 && md5sum -c --quiet "$LAB_RUN/small.md5" 2>&1 | head -n 3)
    [ -z "$bad" ] || fail "checksum mismatch under $1: $(echo $bad)"
}

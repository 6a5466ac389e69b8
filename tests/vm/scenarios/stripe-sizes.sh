# What the clients actually send (issue 11, item 2): md RAID0 (4 x 64K,
# a 256K stripe) and RAID5 on 4 members (3 x 64K, a 192K stripe), each
# served by plain gmblock and by gmblock behind gmblock-stripe, with
# nbdkit's log filter on top to record every request the server gets.
# Each server is used through the kernel client (nbd-client, /dev/nbd0)
# and through QEMU's (qemu-nbd --connect, /dev/nbd1): the queue limits
# the kernel gave the device, then 12 MiB (a whole number of stripes of
# both arrays) written with dd oflag=direct bs=4M, read back with
# iflag=direct bs=4M and (kernel client only: QEMU's adds nothing to
# the kernel's readahead) read buffered from a cold cache. Last, on
# RAID5 with the filter, the kernel client with max_sectors_kb raised
# to 16 stripes (3M) and dd bs=3M: whole-stripe writes. Per step, one line of the table (sizes.txt): the NBD
# requests the server saw (count, mean, largest), and from
# /sys/block/vdX/stat the requests on the members (count, mean size)
# and the member sectors read per sector written (md's read-modify-
# write). Asserted: every read returns the bytes written; the block
# sizes the server advertises are the filter's (preferred = the largest
# power of two in the stripe); no request the server sees exceeds the
# device's max_sectors_kb (the client's limit, not the advertised
# sizes, shapes the requests); RAID0 writes read nothing on the
# members; the 3M whole-stripe writes on RAID5 read nothing either (see filters/stripe/README.md, "What the
# clients send"). TCG: no speeds.
# lab-disks: virtio:32M virtio:32M virtio:32M virtio:32M
# lab-timeout: 420
. "$LAB_REPO/tests/vm/guest/lib.sh"
. "$LAB_REPO/tests/vm/guest/stripe.sh"
load virtio_blk nbd md-mod raid0 raid456
M=(vda vdb vdc vdd)
MIB=12
TABLE=$LAB_OUT/sizes.txt
must head -c ${MIB}M /dev/urandom >"$LAB_RUN/src.bin"
WANT=$(md5sum <"$LAB_RUN/src.bin")

# mstat: reads, sectors read, writes, sectors written, summed over M.
mstat() {
    local r=0 rs=0 w=0 ws=0 d f
    for d in "${M[@]}"; do
        read -r -a f <"/sys/block/$d/stat"
        r=$((r + f[0])) rs=$((rs + f[2])) w=$((w + f[4])) ws=$((ws + f[6]))
    done
    echo "$r $rs $w $ws"
}

# measure ROW OP FUNC ARGS...: run FUNC ARGS, then add ROW to the table
# with the requests of type OP (Read, Write) the server logged meanwhile
# and the members' requests. Sets MRS (member sectors read), NREQ,
# MAXREQ (bytes).
measure() {
    local row=$1 op=$2 before lines out
    shift 2
    before=$(mstat)
    lines=$(wc -l <"$REQLOG")
    "$@"
    out=$(tail -n +$((lines + 1)) "$REQLOG" | awk -v op="$op" -v b="$before" -v a="$(mstat)" -v row="$row" '
        function hex(s,   i, v) {
            v = 0; s = tolower(s)
            for (i = 3; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
            return v
        }
        function kib(sect, n) { return n ? sprintf("%dK", sect * 512 / n / 1024) : "-" }
        $4 == op && $7 ~ /^count=/ { c = hex(substr($7, 7)); n++; t += c; if (c > m) m = c }
        END {
            split(b, x); split(a, y)
            r = y[1] - x[1]; rs = y[2] - x[2]; w = y[3] - x[3]; ws = y[4] - x[4]
            printf "%-34s %4d %6s %6s | %5d %5s %5d %5s %8s\n", row, n, n ? sprintf("%dK", t / n / 1024) : "-",
                sprintf("%dK", m / 1024), r, kib(rs, r), w, kib(ws, w), ws ? sprintf("%.3f", rs / ws) : "-"
            print "VARS", rs, n + 0, m + 0 > "/dev/stderr"
        }' 2>"$LAB_RUN/vars")
    echo "$out" | tee -a "$TABLE"
    read -r _ MRS NREQ MAXREQ <"$LAB_RUN/vars"
    [ "$MAXREQ" -le $((LIM_MAXKB * 1024)) ] ||
        fail "$row: a request of $MAXREQ bytes, above the device's max_sectors_kb $LIM_MAXKB"
}

op_write() { must dd if="$LAB_RUN/src.bin" of="$1" bs="${2:-4M}" oflag=direct status=none; }
op_dread() { GOT=$(dd if="$1" bs=4M count=$((MIB / 4)) iflag=direct status=none | md5sum); }
op_bread() { GOT=$(dd if="$1" bs=1M count=$MIB status=none | md5sum); }

# limits DEV: the queue limits the kernel gave DEV, printed and in LIM_*.
limits() {
    local q=/sys/block/${1#/dev/}/queue
    LIM_MIN=$(<"$q/minimum_io_size") LIM_OPT=$(<"$q/optimal_io_size")
    LIM_MAXKB=$(<"$q/max_sectors_kb") LIM_LBS=$(<"$q/logical_block_size")
    echo "$1 queue: logical_block_size $LIM_LBS minimum_io_size $LIM_MIN optimal_io_size $LIM_OPT" \
        "max_sectors_kb $LIM_MAXKB max_hw_sectors_kb $(<"$q/max_hw_sectors_kb")" \
        "read_ahead_kb $(<"$q/read_ahead_kb")" | tee -a "$TABLE"
}

# steps TAG DEV [buffered]: the steps on DEV, each checked byte for byte;
# W_MRS: member sectors the write read.
steps() {
    local tag=$1 dev=$2
    measure "$tag write direct 4M" Write op_write "$dev"
    W_MRS=$MRS
    measure "$tag read direct 4M" Read op_dread "$dev"
    [ "$GOT" = "$WANT" ] || fail "$tag: the direct read of $dev differs from what was written"
    [ $# = 3 ] || return 0
    drop_caches "$dev"
    measure "$tag read buffered" Read op_bread "$dev"
    [ "$GOT" = "$WANT" ] || fail "$tag: the buffered read of $dev differs from what was written"
}

# no_member_reads ROW: the last write read nothing on the members.
no_member_reads() {
    [ "$W_MRS" = 0 ] || fail "$1: the write read $W_MRS sectors on the members (read-modify-write)"
}

# run ARRAY FILTER(0/1): serve md0, both clients, the table's rows.
run() {
    local name=$1-$2 filt=() conn
    [ "$2" = 1 ] && filt=(--filter=gmblock-stripe)
    REQLOG=$LAB_OUT/$name.reqlog
    rm -f "$REQLOG"
    serve "$name" 10809 /dev/md0 --filter=log "${filt[@]}" -- logfile="$REQLOG"
    attach /dev/nbd0 10809
    conn=$(grep -m 1 ' Connect ' "$REQLOG")
    echo "$name: advertised $(echo "$conn" | grep -o 'minsize=[^ ]* prefsize=[^ ]* maxsize=[^ ]*')" | tee -a "$TABLE"
    ADV_PREF=${conn#* prefsize=}
    ADV_PREF=${ADV_PREF%% *}
    limits /dev/nbd0
    steps "$name nbd-client" /dev/nbd0 buffered
    [ "$1" = raid0 ] && no_member_reads "$name nbd-client"
    if [ "$name" = raid5-1 ]; then
        echo $((16 * 192)) >/sys/block/nbd0/queue/max_sectors_kb || fail "cannot raise max_sectors_kb of nbd0"
        limits /dev/nbd0
        measure "$name nbd-client write direct 3M" Write op_write /dev/nbd0 3M
        W_MRS=$MRS
        no_member_reads "$name nbd-client, 3M whole-stripe writes"
        [ "$NREQ" = $((MIB / 3)) ] && [ "$MAXREQ" = $((3 << 20)) ] ||
            fail "$name: $MIB MiB in 3M writes reached the server as $NREQ requests of at most $MAXREQ bytes"
        measure "$name nbd-client read direct 4M" Read op_dread /dev/nbd0
        [ "$GOT" = "$WANT" ] || fail "$name: the direct read after the 3M writes differs"
    fi
    detach /dev/nbd0
    must qemu-nbd --connect=/dev/nbd1 --format=raw --cache=none nbd://127.0.0.1:10809
    for i in $(seq 50); do [ "$(blockdev --getsize64 /dev/nbd1 2>/dev/null)" -gt 0 ] && break; sleep 0.2; done
    limits /dev/nbd1
    steps "$name qemu-nbd" /dev/nbd1
    [ "$1" = raid0 ] && no_member_reads "$name qemu-nbd"
    must qemu-nbd --disconnect /dev/nbd1
    stop "$name"
}

printf '%-34s %4s %6s %6s | %5s %5s %5s %5s %8s\n' "array-filter client step" "nbd" "mean" "max" \
    "m.rd" "mean" "m.wr" "mean" "rd/wr" | tee "$TABLE"
for level in 0 5; do
    array raid$level $level "" "${M[@]}"
    stripe=$((CHUNK * DATA))
    for f in 0 1; do
        run raid$level $f
        if [ $f = 1 ]; then
            [ $((ADV_PREF)) = "$(pow2_in $stripe)" ] ||
                fail "raid$level: the filter advertised preferred $ADV_PREF for a stripe of $stripe"
        fi
    done
    must mdadm --stop /dev/md0
done
step "the table"
cat "$TABLE"

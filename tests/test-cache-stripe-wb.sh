#!/bin/bash
# gmblock-cache write-back in whole RAID stripes (issue 11): over a
# logging sh plugin, the exact writes a flush sends down: a fully dirty
# stripe as one aligned write of the stripe, neighbours in a partial
# stripe merged, scattered blocks alone, nothing across a stripe
# boundary; with a stripe that is not a power of two (3 data disks),
# the geometry from gmblock-stripe below or above the cache (registry)
# or from the preferred block size below (no stripe filter).  Dirty
# evictions in a tiny cache keep to stripes too; stripes that start
# inside the export (a partition of md) are found.  Data through the
# gmblock plugin byte for byte: nbdcopy both ways, and a kill -9 after
# a flush loses nothing acknowledged before it. nbdkit in the background
# (no -f) still hands the stripe from the filter to the cache.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdcopy python3
cd "$T"

K=4096
ccounter () { awk -v k="gmblock-cache.$2" '$1 == k { print $2 }' "$1"; }
scounter () { awk -v k="gmblock-stripe.$2" '$1 == k { print $2 }' "$1"; }
expect () { [[ $2 == "$3" ]] || fail "$1: got '$2', expected '$3'"; }

# A file-backed plugin that logs every write and flush.  block_size
# comes from $BSIZES when set (the fallback: the preferred size below).
cat >log.sh <<'SH'
#!/bin/bash
case "$1" in
    get_size) stat -c %s "$DISK" ;;
    can_write|can_flush) exit 0 ;;
    thread_model) echo parallel ;;
    block_size) [[ -n ${BSIZES:-} ]] && echo "$BSIZES" || exit 2 ;;
    pread) dd if="$DISK" iflag=skip_bytes,count_bytes skip="$4" count="$3" bs=64K status=none ;;
    pwrite)
        echo "pwrite $3 $4" >>"$BELOW"
        dd of="$DISK" iflag=fullblock oflag=seek_bytes conv=notrunc bs="$3" count=1 seek="$4" status=none ;;
    flush) echo flush >>"$BELOW" ;;
    *) exit 2 ;;
esac
SH
chmod +x log.sh

# Writes 4K blocks one request each, in a shuffled order (so no client
# write is already merged), then flushes once (FLUSH=0: does not).
# Block numbers on argv.
wblocks () {
    /usr/bin/python3 - "$(uri "$1")" "${@:2}" <<'PY'
import os, random, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
blocks = [int(b) for b in sys.argv[2:]]
random.shuffle(blocks)
for b in blocks:
    h.pwrite(bytes([b % 251 + 1]) * 4096, b * 4096)
if os.environ.get("FLUSH") != "0":
    h.flush()
h.shutdown()
PY
}

# want.img: zeroes with block b = b % 251 + 1 for each block given
want_img () {
    python3 - "$@" <<'PY'
import sys
d = bytearray(1 << 20)
for b in map(int, sys.argv[1:]):
    d[b * 4096:(b + 1) * 4096] = bytes([b % 251 + 1]) * 4096
open("want.img", "wb").write(d)
PY
}

# chunk 8K x 3 data disks = 24K stripes of six 4K blocks; 1M export:
# the last stripe (blocks 252-257) is cut to 252-255.
blocks=(0 1 2 3 4 5          # stripe 0 whole: one write
        7 9                  # stripe 1: two alone
        13 14 15             # stripe 2: one merged partial write
        18 19 21 22 23       # stripe 3: two merged runs
        $(seq 24 35)         # stripes 4 and 5 whole: two writes, not one
        252 253 254 255)     # the cut last stripe: partial
printf 'pwrite %s\n' "24576 0" "4096 28672" "4096 36864" "12288 53248" \
       "8192 73728" "12288 86016" "24576 98304" "24576 122880" \
       "16384 1032192" | sort >want
cache=(cache-mode=writeback cache-block-size=4K cache-size=1M writeback-interval=3600)
stripe=(stripe-chunk=8K stripe-data-disks=3 stripe-parity=1)

want_img "${blocks[@]}"

calls () {      # calls NAME FULL PARTIAL MERGED WIDTH [nbdkit args]: checked
    local name=$1 full=$2 partial=$3 merged=$4 width=$5; shift 5
    truncate -s 0 "$name.below"; rm -f "$name.img"; truncate -s 1M "$name.img"
    DISK=$T/$name.img BELOW=$T/$name.below start_server "$name" "$@" \
        "${cache[@]}" cache-stats="$T/$name.stats"
    wblocks "$name" "${blocks[@]}"
    grep -q flush "$name.below" || fail "$name: no flush below"
    grep pwrite "$name.below" | sort >"$name.got"
    diff -u want "$name.got" || fail "$name: the write-back sent other writes below"
    stop_server "$name"
    cmp "$name.img" want.img || fail "$name: data below differs"
    expect "$name: wb_full_stripe_writes" "$(ccounter "$name.stats" wb_full_stripe_writes)" "$full"
    expect "$name: wb_partial_stripe_writes" "$(ccounter "$name.stats" wb_partial_stripe_writes)" "$partial"
    expect "$name: wb_merged_writes" "$(ccounter "$name.stats" wb_merged_writes)" "$merged"
    expect "$name: wb_blocks" "$(ccounter "$name.stats" wb_blocks)" ${#blocks[@]}
    expect "$name: writebacks" "$(ccounter "$name.stats" writebacks)" ${#blocks[@]}
    expect "$name: writeback_writes" "$(ccounter "$name.stats" writeback_writes)" "$(wc -l <"$name.got")"
    # The stripe in use, still in the counters written at exit.
    expect "$name: wb_stripe_bytes" "$(ccounter "$name.stats" wb_stripe_bytes)" "$width"
    info "$name: $(wc -l <"$name.got") writes below for ${#blocks[@]} dirty blocks, as expected"
}

# 1. gmblock-stripe below the cache (options: no gmblock plugin).
calls below 3 6 7 24576 --filter=gmblock-cache --filter=gmblock-stripe sh log.sh "${stripe[@]}" stripe-stats="$T/below.sstats"
# The stripe filter saw the same writes: 3 whole stripes.
expect "below: stripe writes_full_stripe" "$(scounter below.sstats writes_full_stripe)" 3
expect "below: stripe writes_partial" "$(scounter below.sstats writes_partial)" 6
# 2. Above the cache: the geometry still reaches it (read at start-up).
calls above 3 6 7 24576 --filter=gmblock-stripe --filter=gmblock-cache sh log.sh "${stripe[@]}"

# 3. No stripe filter: the preferred block size below (32K = 8 blocks).
blocks=($(seq 8 15) 0 1 3 20)
printf 'pwrite %s\n' "32768 32768" "8192 0" "4096 12288" "4096 81920" | sort >want
want_img "${blocks[@]}"
BSIZES="512 32768 4194304" calls fallback 1 3 2 32768 --filter=gmblock-cache sh log.sh

# 4. Without any geometry and writeback-merge=0: block by block (no
# stripe or merge counters).
truncate -s 0 plain.below; truncate -s 1M plain.img
DISK=$T/plain.img BELOW=$T/plain.below start_server plain --filter=gmblock-cache sh log.sh \
    "${cache[@]}" writeback-merge=0 cache-stats="$T/plain.stats"
wblocks plain 0 1 2 3 4 5
stop_server plain
expect "plain: writes below" "$(grep -c pwrite plain.below)" 6
expect "plain: wb_full_stripe_writes" "$(ccounter plain.stats wb_full_stripe_writes)" 0
expect "plain: wb_stripe_bytes" "$(ccounter plain.stats wb_stripe_bytes)" 0
expect "plain: wb_merge_bytes" "$(ccounter plain.stats wb_merge_bytes)" 0

# 4b. Without any geometry, writeback-merge (default 256K; here 16K =
# 4 blocks, and 18K, which rounds down to it): runs of dirty neighbours
# as one write each, cut at multiples of the merge length, scattered
# blocks alone, no stripe counters.
blocks=(0 1 2 3 4 5 7 9 10 11 12 13 250 251 252 253 254 255)
printf 'pwrite %s\n' "16384 0" "8192 16384" "4096 28672" "12288 36864" \
       "8192 49152" "8192 1024000" "16384 1032192" | sort >want
want_img "${blocks[@]}"
for m in 16K 18K; do
    calls "merge$m" 0 0 6 0 --filter=gmblock-cache sh log.sh writeback-merge=$m
    expect "merge$m: wb_merge_bytes" "$(ccounter "merge$m.stats" wb_merge_bytes)" 16384
done
# The default: 256K (64 blocks), so each run here is one write.
printf 'pwrite %s\n' "24576 0" "4096 28672" "20480 36864" "24576 1024000" | sort >want
calls mergedef 0 0 3 0 --filter=gmblock-cache sh log.sh
expect "mergedef: wb_merge_bytes" "$(ccounter mergedef.stats wb_merge_bytes)" 262144
# Dirty evictions without a stripe go alone (the evicting request does
# not wait for neighbours): 16 blocks of cache, 64 written in order.
truncate -s 0 mevict.below; truncate -s 1M mevict.img
DISK=$T/mevict.img BELOW=$T/mevict.below start_server mevict --filter=gmblock-cache \
    sh log.sh cache-mode=writeback cache-block-size=4K cache-size=64K \
    writeback-interval=3600 cache-stats="$T/mevict.stats"
blocks=($(seq 0 63)); want_img "${blocks[@]}"
FLUSH=0 wblocks mevict "${blocks[@]}"
stop_server mevict
cmp mevict.img want.img || fail "mevict: data below differs"
de=$(ccounter mevict.stats dirty_evictions)
[[ $de -gt 0 ]] || fail "mevict: no dirty evictions (the test does not test them)"
# Every block went down once; at least one 4K write per eviction.
expect "mevict: bytes below" "$(awk '$1 == "pwrite" { n += $2 } END { print n }' mevict.below)" 262144
singles=$(awk '$1 == "pwrite" && $2 == 4096' mevict.below | wc -l)
[[ $singles -ge $de ]] || fail "mevict: $de dirty evictions but only $singles single-block writes below"
info "mevict: $de dirty evictions, $(grep -c pwrite mevict.below) writes below, $singles of one block"

# 5. A tiny cache (16 blocks): sequential 4K writes over 1M force dirty
# evictions; every write below stays inside one 24K stripe and the
# data is exact.
truncate -s 0 evict.below; truncate -s 1M evict.img
DISK=$T/evict.img BELOW=$T/evict.below start_server evict \
    --filter=gmblock-cache --filter=gmblock-stripe sh log.sh "${stripe[@]}" \
    cache-mode=writeback cache-block-size=4K cache-size=64K writeback-interval=3600 \
    cache-stats="$T/evict.stats"
randfile evict.want $((1 << 20))
/usr/bin/python3 - "$(uri evict)" <<'PY'
import sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
d = open("evict.want", "rb").read()
for o in range(0, len(d), 4096):
    h.pwrite(d[o:o + 4096], o)
h.flush()
h.shutdown()
PY
stop_server evict
cmp evict.img evict.want || fail "evict: data below differs"
awk '$1 == "pwrite" { s = int($3 / 24576); e = int(($3 + $2 - 1) / 24576);
     if (s != e || $3 % 4096 || $2 % 4096) { print; bad = 1 } }
     END { exit bad }' evict.below || fail "evict: a write crossed a stripe or a block"
de=$(ccounter evict.stats dirty_evictions) full=$(ccounter evict.stats wb_full_stripe_writes)
[[ $de -gt 0 ]] || fail "evict: no dirty evictions (the test does not test them)"
[[ $full -gt 0 ]] || fail "evict: no full-stripe writes"
info "evict: $de dirty evictions, $(grep -c pwrite evict.below) writes below, $full full-stripe"

# 6. Data through the gmblock plugin: 16M, 64K x 3 stripes, cache blocks
# of 64K: nbdcopy both ways byte for byte.
randfile disk.img $((16 << 20)); randfile new.img $((16 << 20))
gm=(--filter=gmblock-cache --filter=gmblock-stripe gmblock file="$T/disk.img"
    stripe-chunk=64K stripe-data-disks=3 stripe-parity=1 cache-mode=writeback
    cache-size=8M writeback-interval=3600)
start_server data "${gm[@]}" cache-stats="$T/data.stats"
nbdcopy new.img "$(uri data)"
nbdcopy "$(uri data)" back.img
stop_server data
cmp back.img new.img || fail "data: read back through the cache differs"
cmp disk.img new.img || fail "data: the file differs after shutdown"
full=$(ccounter data.stats wb_full_stripe_writes)
[[ $full -gt 0 ]] || fail "data: no full-stripe writes"
info "data: nbdcopy 16M both ways exact; $full full-stripe writes, $(ccounter data.stats wb_partial_stripe_writes) partial"

# 7. Durability: scattered writes and whole stripes, flush, more writes,
# kill -9: everything acknowledged before the flush is in the file.
randfile disk.img $((16 << 20)); cp disk.img before.img
start_server dur "${gm[@]}"
/usr/bin/python3 - "$(uri dur)" <<'PY'
import os, random, sys, nbd
h = nbd.NBD()
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
h.connect_uri(sys.argv[1])
d = bytearray(open("before.img", "rb").read())
rnd = random.Random(11)
for i in range(400):
    n = rnd.choice([4096, 65536, 196608, 5000])
    o = rnd.randrange(0, len(d) - n)
    buf = os.urandom(n)
    h.pwrite(buf, o)
    d[o:o + n] = buf
h.flush()
open("flushed.img", "wb").write(d)
with open("post.txt", "w") as f:      # after the flush: may or may not be there
    for i in range(50):
        o = rnd.randrange(0, 4096) * 4096
        h.pwrite(os.urandom(4096), o)
        print(o, file=f)
PY
pid=$(server_pid dur); kill -KILL "$pid"; wait "$pid" 2>/dev/null || true; _pid_dur=
python3 - <<'PY' || fail "dur: data acknowledged before the flush is missing after kill -9"
import sys
a = open("disk.img", "rb").read(); f = open("flushed.img", "rb").read()
post = {int(l) for l in open("post.txt")}
bad = [o for o in range(0, len(f), 4096) if a[o:o + 4096] != f[o:o + 4096] and o not in post]
changed = sum(a[o:o + 4096] != f[o:o + 4096] for o in post)
print(f"{changed} of {len(post)} blocks written after the flush reached the file")
sys.exit(1 if bad else 0)
PY
info "dur: kill -9 after the flush: everything flushed is in the file"

# 8. Stripes that do not start at the export's start: a partition of md
# RAID5 (64K x 3) starting 1M in (tests/fake-sysfs.py tree, detected by
# gmblock-stripe): stripes start at 128K + k x 192K.  [128K, 320K) is
# one aligned write; [0, 128K), the cut first stripe, and 320K alone are
# partial; gmblock-stripe below counts the same.
randfile part.img $((4 << 20)); cp part.img part.want
python3 "$top/tests/fake-sysfs.py" sys switch --storage-dev "$(stat -c %Hd:%Ld part.img)"
link=sys/dev/block/$(stat -c %Hd:%Ld part.img)
md0=$T/sys/devices/virtual/block/md0
echo raid5 >"$md0/md/level"; echo 4 >"$md0/md/raid_disks"; echo 2 >"$md0/md/layout"
mkdir -p "$md0/md0p1"; echo 1 >"$md0/md0p1/partition"; echo 2048 >"$md0/md0p1/start"
ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$md0/md0p1")" "$link"
start_server part --filter=gmblock-cache --filter=gmblock-stripe gmblock file="$T/part.img" \
    direct=false stripe-sysfs="$T/sys" cache-mode=writeback cache-size=4M \
    writeback-interval=3600 cache-stats="$T/part.stats" stripe-stats="$T/part.sstats"
/usr/bin/python3 - "$(uri part)" <<'PY'
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
d = bytearray(open("part.want", "rb").read())
for k in (5, 0, 3, 1, 2, 4):             # 64K blocks, shuffled
    b = os.urandom(65536)
    h.pwrite(b, k * 65536)
    d[k * 65536:(k + 1) * 65536] = b
h.flush()
h.shutdown()
open("part.want", "wb").write(d)
PY
stop_server part
cmp part.img part.want || fail "part: data below differs"
expect "part: stripe offset" "$(scounter part.sstats offset)" 1048576
expect "part: wb_full_stripe_writes" "$(ccounter part.stats wb_full_stripe_writes)" 1
expect "part: wb_partial_stripe_writes" "$(ccounter part.stats wb_partial_stripe_writes)" 2
expect "part: wb_merged_writes" "$(ccounter part.stats wb_merged_writes)" 2
expect "part: wb_blocks" "$(ccounter part.stats wb_blocks)" 6
expect "part: stripe writes_full_stripe" "$(scounter part.sstats writes_full_stripe)" 1
expect "part: stripe writes_partial" "$(scounter part.sstats writes_partial)" 2
info "part: stripes 1M into the array: one aligned 192K write at 128K, two partial"

# 9. The background flusher on parity RAID (issue 11): whole dirty
# stripes go at its next pass, a partly dirty stripe waits for its
# other blocks for writeback-hold seconds, unless the cache is nearly
# all dirty; a flush writes everything at once.  No client flush here
# until said: what reaches the log comes from the flusher.
# wait_below NAME PATTERN: the log shows PATTERN within 20 s
wait_below () {
    for _ in $(seq 200); do grep -qx "$2" "$1.below" && return 0; sleep 0.1; done
    fail "$1: '$2' never reached the layer below"
}
hold () {       # hold NAME HOLD [args]: a server, writeback-interval 0.2
    local name=$1 h=$2; shift 2
    truncate -s 0 "$name.below"; rm -f "$name.img"; truncate -s 1M "$name.img"
    DISK=$T/$name.img BELOW=$T/$name.below start_server "$name" \
        --filter=gmblock-cache --filter=gmblock-stripe sh log.sh "${stripe[@]}" \
        cache-mode=writeback cache-block-size=4K writeback-interval=0.2 \
        writeback-hold="$h" cache-stats="$T/$name.stats" "$@"
}
# a. hold 3600: the whole stripe 0 goes, stripe 1 (blocks 7, 9) stays
# dirty over many passes; then a flush takes it down.
hold held 3600 cache-size=1M
FLUSH=0 wblocks held 0 1 2 3 4 5 7 9
wait_below held "pwrite 24576 0"
sleep 1.5                       # seven more passes
grep -q "pwrite 4096 " held.below && fail "held: a partly dirty stripe was written before its hold ran out"
/usr/bin/python3 -c 'import nbd, sys; h = nbd.NBD(); h.connect_uri(sys.argv[1]); h.flush(); h.shutdown()' "$(uri held)"
grep -qx "pwrite 4096 28672" held.below && grep -qx "pwrite 4096 36864" held.below ||
    fail "held: the flush did not write the held stripe"
stop_server held
want_img 0 1 2 3 4 5 7 9
cmp held.img want.img || fail "held: data below differs"
[[ $(ccounter held.stats wb_partial_held) -gt 3 ]] || fail "held: wb_partial_held $(ccounter held.stats wb_partial_held), expected several passes holding it"
expect "held: wb_full_stripe_writes" "$(ccounter held.stats wb_full_stripe_writes)" 1
info "held: the whole stripe went at once, the partial one waited $(ccounter held.stats wb_partial_held) passes, until the flush"
# b. hold 1: the partial stripe goes by itself once it is 1 s old.
hold aged 1 cache-size=1M
FLUSH=0 wblocks aged 7 9
wait_below aged "pwrite 4096 28672"
wait_below aged "pwrite 4096 36864"
stop_server aged
# c. hold 0: as before, the first pass writes it.
hold eager 0 cache-size=1M
FLUSH=0 wblocks eager 7 9
wait_below eager "pwrite 4096 36864"
stop_server eager
expect "eager: wb_partial_held" "$(ccounter eager.stats wb_partial_held)" 0
# d. Pressure: 16 slots, one block dirtied in each of 15 stripes (all
# partial): past 14 dirty blocks a pass writes partial stripes too.
hold pressure 3600 cache-size=64K
FLUSH=0 wblocks pressure $(seq 0 6 84)
wait_below pressure "pwrite 4096 0"
stop_server pressure
[[ $(ccounter pressure.stats wb_pressure_passes) -ge 1 ]] || fail "pressure: no pass under pressure counted"
want_img $(seq 0 6 84)
cmp pressure.img want.img || fail "pressure: data below differs"
info "hold 1 s, hold 0 and a nearly all dirty cache write partial stripes without a flush"
# e. The geometry from io hints only (hardware RAID: a RAID
# controller's SCSI disk with io_min 64K, io_opt 192K; an NVMe drive's
# hints are no stripe): parity unknown, so a partial stripe is held as
# on parity RAID (gmblock-stripe published it as parity 0, RAID0).
truncate -s 16M hint.img
hdev=$(stat -c %Hd:%Ld hint.img)
python3 "$top/tests/fake-sysfs.py" hsys switch --storage-dev "$hdev"
hsdb=$T/hsys/devices/pci0000:00/0000:00:05.0/host0/sdb
mkdir -p "$hsdb/queue"
echo 65536 >"$hsdb/queue/minimum_io_size"; echo 196608 >"$hsdb/queue/optimal_io_size"
echo 512 >"$hsdb/queue/physical_block_size"
ln -sfn "$(realpath --relative-to="$T/hsys/dev/block" "$hsdb")" "$T/hsys/dev/block/$hdev"
start_server hint --filter=gmblock-cache --filter=gmblock-stripe gmblock file="$T/hint.img" \
    direct=false stripe-sysfs="$T/hsys" cache-mode=writeback cache-block-size=4K \
    writeback-interval=0.2 writeback-hold=3600 cache-stats="$T/hint.stats"
FLUSH=0 wblocks hint 0
sleep 1.5                       # seven passes
stop_server hint
[[ $(ccounter hint.stats wb_partial_held) -gt 3 ]] ||
    fail "hint: wb_partial_held $(ccounter hint.stats wb_partial_held): a partial stripe of unknown parity was not held"
info "hint: parity unknown (io hints): the partial stripe held $(ccounter hint.stats wb_partial_held) passes"

# 10. Durability while stripes are held (default writeback-hold, flusher
# every 0.2 s): a slow disk (delay filter) with whole stripes being
# written by the flusher and partial ones held, a flush from a second
# connection, kill -9 at its reply: every write acknowledged before the
# flush is in the file, the held partial stripes included.  Then
# failing writes (error filter): the flush fails while the disk fails,
# succeeds once it recovers, and nothing is lost.
randfile hd.img $((4 << 20)); cp hd.img hd.want
hstack=(--filter=gmblock-cache --filter=gmblock-stripe --filter=delay --filter=error
        gmblock file="$T/hd.img" "${stripe[@]}" cache-mode=writeback cache-block-size=4K
        cache-size=1M writeback-interval=0.2 delay-write=300ms
        error-pwrite-rate=1 error-file="$T/hd.fail")
start_server hd "${hstack[@]}"
pid=$(server_pid hd)
/usr/bin/python3 - "$(uri hd)" "$pid" <<'PY' || fail "held: data acknowledged before the flush is missing after kill -9"
import os, signal, sys, time, nbd
uri, pid = sys.argv[1], int(sys.argv[2])
d = bytearray(open("hd.want", "rb").read())
a, b = nbd.NBD(), nbd.NBD()
a.connect_uri(uri); b.connect_uri(uri)
for blk in list(range(0, 6)) + [7, 13, 14, 40] + list(range(48, 54)):
    buf = os.urandom(4096)
    a.pwrite(buf, blk * 4096)
    d[blk * 4096:(blk + 1) * 4096] = buf
time.sleep(0.5)               # passes run: whole stripes going down slowly
b.flush()
os.kill(pid, signal.SIGKILL)
got = open("hd.img", "rb").read()
bad = [o // 4096 for o in range(0, len(d), 4096) if got[o:o + 4096] != d[o:o + 4096]]
print("blocks missing after the flush and kill -9:", bad)
sys.exit(1 if bad else 0)
PY
wait "$pid" 2>/dev/null || true; _pid_hd=
cp hd.img hd.want
start_server hd "${hstack[@]}"
/usr/bin/python3 - "$(uri hd)" <<'PY' || fail "held: failing writes: a flush lied or data was lost"
import os, sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
d = bytearray(open("hd.want", "rb").read())
for blk in (7, 9, 20, 100):   # partial stripes: held by the flusher
    buf = os.urandom(4096)
    h.pwrite(buf, blk * 4096)
    d[blk * 4096:(blk + 1) * 4096] = buf
open("hd.fail", "w").close()
try:
    h.flush()
    sys.exit("the flush succeeded while every write below failed")
except nbd.Error as e:
    print("flush while failing:", e.string)
os.unlink("hd.fail")
h.flush()
got = open("hd.img", "rb").read()
sys.exit(0 if got == d else "after recovery the flushed data differs")
PY
stop_server hd
info "held stripes: flush then kill -9 over a slow disk loses nothing; failing writes fail the flush until they recover"

# 8. nbdkit in the background (no -f): it forks between gmblock-stripe
# publishing the stripe (.get_ready) and gmblock-cache reading it
# (.after_fork); the cache must still get it.
randfile bg.img $((4 << 20))
"$NBDKIT" -U "$T/bg.sock" -P "$T/bg.pid" --log=stderr \
    --filter=gmblock-stripe --filter=gmblock-cache gmblock file="$T/bg.img" \
    stripe-chunk=64K stripe-data-disks=3 stripe-parity=1 cache-mode=writeback \
    cache-stats="$T/bg.stats" 2>"$T/bg.log" || fail "background: nbdkit did not start"
# nbdkit 1.32's parent exits before the daemon writes its pidfile.
for i in $(seq 100); do [[ -s $T/bg.pid ]] && break; sleep 0.05; done
bgpid=$(cat "$T/bg.pid")
_pids+=("$bgpid")
nbdcopy bg.img "nbd+unix:///?socket=$T/bg.sock"
wait_idle bg        # as stop_server: no connection still closing at SIGTERM
kill "$bgpid"
for i in $(seq 100); do kill -0 "$bgpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$bgpid" 2>/dev/null && fail "background: nbdkit did not exit on SIGTERM"
expect "background: wb_stripe_bytes" "$(ccounter bg.stats wb_stripe_bytes)" 196608
info "background: the cache writes back in stripes of 192K"

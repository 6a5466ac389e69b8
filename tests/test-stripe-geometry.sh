#!/bin/bash
# gmblock-stripe: the geometry is found through the registry (the
# gmblock plugin names its file; the filter finds the file's device in
# a fake sysfs tree from tests/fake-sysfs.py): a plain disk passes
# through with one note, md RAID0 / RAID5 / a partition of md are
# detected (a RAID0 over members of different sizes with a note: zones;
# the partition's start said with -v as the offset used, unless
# stripe-offset= overrides it), options override detection with a
# warning; the block sizes nbdinfo sees follow the stripe; data passes
# byte-exact (nbdcopy both ways); NBD_CMD_CACHE is rounded out to whole
# stripes, as the counters and a logging plugin below show.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdinfo nbdcopy python3
cd "$T"

scounter () { awk -v k="gmblock-stripe.$2" '$1 == k { print $2 }' "$1"; }
expect () {     # expect WHAT GOT WANT
    [[ $2 == "$3" ]] || fail "$1: got '$2', expected '$3'"
}
bsize () { nbdinfo --json "$(uri "$1")" | python3 -c "import json,sys; print(json.load(sys.stdin)['exports'][0]['block_size_$2'])"; }

randfile disk.img $((16 << 20))
cp disk.img orig.img
python3 "$top/tests/fake-sysfs.py" sys switch --storage-dev "$(stat -c %Hd:%Ld disk.img)"
link=sys/dev/block/$(stat -c %Hd:%Ld disk.img)   # -> nvme0n1 for now
md0=$T/sys/devices/virtual/block/md0
point () { ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$1")" "$link"; }

gm=(gmblock file="$T/disk.img" stripe-sysfs="$T/sys")
serve () {      # serve NAME [args]: start with -D verbose and stats
    local name=$1; shift
    start_server "$name" -D gmblock-stripe.verbose=1 --filter=gmblock-stripe "$@" stripe-stats="$T/$name.stats"
}

# Without the filter: what the plugin advertises.
start_server plain "${gm[@]:0:2}"
min0=$(bsize plain minimum) pref0=$(bsize plain preferred) max0=$(bsize plain maximum)
stop_server plain
info "gmblock alone: minimum $min0, preferred $pref0, maximum $max0"

# 1. The file's device is a plain NVMe disk: one note, pass-through.
serve disk "${gm[@]}"
expect "disk: preferred" "$(bsize disk preferred)" "$pref0"
for i in 1 2 3; do nbdinfo --size "$(uri disk)" >/dev/null; done
nbdsh -u "$(uri disk)" -c 'h.pwrite(h.pread(4096, 0), 0)'
stop_server disk
# Writes are counted passing through too, none against stripes.
expect "disk: writes" "$(scounter disk.stats writes)" 1
expect "disk: writes_partial" "$(scounter disk.stats writes_partial)" 0
n=$(grep -c 'no RAID geometry' "$T/disk.log" || true)
[[ $n == 1 ]] || { cat "$T/disk.log" >&2; fail "disk: the no-RAID note appeared $n times, expected once"; }
grep -qE 'nvme0n1 \([0-9]+:[0-9]+\) is not a RAID' "$T/disk.log" || fail "disk: the note does not name the device"
expect "disk: active" "$(scounter disk.stats active)" 0
info "disk: $(grep 'no RAID' "$T/disk.log")"

# 1b. dm-stripe or hardware RAID exporting io_min/io_opt (128K x 4): a
# SCSI disk of a RAID controller.
sdb=$T/sys/devices/pci0000:00/0000:00:05.0/host0/sdb
mkdir -p "$sdb/queue"
echo 131072 >"$sdb/queue/minimum_io_size"; echo 524288 >"$sdb/queue/optimal_io_size"
echo 512 >"$sdb/queue/physical_block_size"
point "$sdb"
serve hints "${gm[@]}"
expect "hints: preferred" "$(bsize hints preferred)" 524288
stop_server hints
grep -q 'geometry: sdb io_min/io_opt: chunk 128K, 4 data disks, parity unknown' "$T/hints.log" ||
    { cat "$T/hints.log" >&2; fail "hints: verbose geometry line missing"; }
expect "hints: parity_known" "$(scounter hints.stats parity_known)" 0
# The hints say nothing of parity: stripe-parity= gives it, with no
# warning (there is nothing it disagrees with).
serve hintspar "${gm[@]}" stripe-parity=1
stop_server hintspar
if grep -q 'stripe-parity.*disagrees' "$T/hintspar.log"; then cat "$T/hintspar.log" >&2; fail "hintspar: warned about a parity the hints do not give"; fi
expect "hintspar: parity_known" "$(scounter hintspar.stats parity_known)" 1
expect "hintspar: parity" "$(scounter hintspar.stats parity)" 1
# The same hints on the NVMe drive are its write granularity (NPWG,
# NOWS), not a RAID: pass-through, saying why.
point "$T/sys/class/block/nvme0n1"
echo 131072 >sys/class/block/nvme0n1/queue/minimum_io_size
echo 524288 >sys/class/block/nvme0n1/queue/optimal_io_size
serve nvmehints "${gm[@]}"
expect "nvmehints: preferred" "$(bsize nvmehints preferred)" "$pref0"
stop_server nvmehints
grep -q 'nvme0n1 (.*) is an NVMe namespace, not a RAID: its io_min 131072 and io_opt 524288' "$T/nvmehints.log" ||
    { cat "$T/nvmehints.log" >&2; fail "nvmehints: no note that an NVMe drive's io hints are no stripe"; }

# 1c. Options alone (the real /sys, whatever is under this file: both
# options given, they win), and over a plugin that gives no block
# sizes (the memory plugin: minimum 1, maximum nbdkit's 64M limit).
serve opts gmblock file="$T/disk.img" stripe-chunk=64K stripe-data-disks=4
expect "opts: preferred" "$(bsize opts preferred)" 262144
expect "opts: minimum" "$(bsize opts minimum)" "$min0"
stop_server opts
serve mem memory 16M stripe-chunk=512K stripe-data-disks=6 stripe-parity=2
expect "mem: preferred" "$(bsize mem preferred)" 2097152
expect "mem: minimum" "$(bsize mem minimum)" 1
expect "mem: maximum" "$(bsize mem maximum)" 67108864
stop_server mem
expect "mem: parity_known" "$(scounter mem.stats parity_known)" 1
expect "mem: parity" "$(scounter mem.stats parity)" 2

# A plugin whose maximum (64K) is below one stripe (192K): the maximum
# stays its own (nbdkit does not split requests: a larger one would be
# refused below) and the preferred size is clamped to it; its minimum
# is kept.
cat >"$T/bs.sh" <<'SH'
#!/bin/bash
case "$1" in
    get_size) echo 1048576 ;;
    block_size) echo ${BS:-4096 4096 65536} ;;
    pread) head -c "$3" /dev/zero ;;
    *) exit 2 ;;
esac
SH
chmod +x "$T/bs.sh"
serve small sh "$T/bs.sh" stripe-chunk=64K stripe-data-disks=3
expect "small: minimum" "$(bsize small minimum)" 4096
expect "small: preferred" "$(bsize small preferred)" 65536
expect "small: maximum" "$(bsize small maximum)" 65536
stop_server small
# A stripe that is no whole number of blocks (6K over 4K blocks): the
# block is preferred, the maximum kept; a stripe smaller than a block
# (3 x 512): the block is preferred.
BS="4096 4096 4096" serve small6k sh "$T/bs.sh" stripe-chunk=6K stripe-data-disks=1
expect "small6k: minimum" "$(bsize small6k minimum)" 4096
expect "small6k: preferred" "$(bsize small6k preferred)" 4096
expect "small6k: maximum" "$(bsize small6k maximum)" 4096
stop_server small6k
# A strict client may send the advertised maximum: below a layer that
# refuses more than 16K (nbdkit's blocksize-policy filter), a read of
# the advertised maximum must succeed.
serve strict --filter=blocksize-policy memory 4M stripe-chunk=64K \
    stripe-data-disks=3 blocksize-maximum=16384 blocksize-error-policy=error
expect "strict: maximum" "$(bsize strict maximum)" 16384
/usr/bin/python3 - "$(uri strict)" <<'PY' || fail "strict: a request of the advertised maximum failed"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
m = h.get_block_size(nbd.SIZE_MAXIMUM)
h.pread(m, 0)
h.pwrite(b"\1" * m, m)
h.shutdown()
PY
stop_server strict
serve tiny3 sh "$T/bs.sh" stripe-chunk=512 stripe-data-disks=3
expect "tiny3: preferred" "$(bsize tiny3 preferred)" 4096
expect "tiny3: maximum" "$(bsize tiny3 maximum)" 65536
stop_server tiny3
expect "mem: stripe_bytes" "$(scounter mem.stats stripe_bytes)" 3145728

# 2. md0 (RAID0, 64K chunk, 2 members): preferred 128K, minimum and
# maximum as the plugin's.
point "$md0"
serve raid0 "${gm[@]}"
expect "raid0: preferred" "$(bsize raid0 preferred)" 131072
expect "raid0: minimum" "$(bsize raid0 minimum)" "$min0"
expect "raid0: maximum" "$(bsize raid0 maximum)" "$max0"
nbdcopy "$(uri raid0)" out.img
cmp out.img orig.img || fail "raid0: data read through the filter differs"
randfile new.img $((16 << 20))
nbdcopy new.img "$(uri raid0)"
stop_server raid0
cmp disk.img new.img || fail "raid0: data written through the filter differs"
cp disk.img orig.img
grep -q 'geometry: md0 raid0: chunk 64K, 2 data disks, parity 0, full stripe 128K' "$T/raid0.log" ||
    { cat "$T/raid0.log" >&2; fail "raid0: verbose geometry line missing"; }
expect "raid0: stripe_bytes" "$(scounter raid0.stats stripe_bytes)" 131072
w=$(scounter raid0.stats writes) f=$(scounter raid0.stats writes_full_stripe) p=$(scounter raid0.stats writes_partial)
[[ $w -gt 0 && $((f + p)) == "$w" ]] || fail "raid0: writes $w != full $f + partial $p"
info "raid0: $(grep 'geometry:' "$T/raid0.log"); nbdcopy: $w writes, $f full-stripe"

# 2b. The same RAID0 over members of different sizes: md stripes it in
# zones (both members, then the larger one alone), so the stripe holds
# in the first zone only: shaped as md's io_opt says, with one note at
# start-up naming where the first zone ends; none with both options.
size_vda=$(cat "$md0/md/dev-vda/size")
echo $((size_vda / 2)) >"$md0/md/dev-vda/size"
serve zones "${gm[@]}"
expect "zones: preferred" "$(bsize zones preferred)" 131072
stop_server zones
expect "zones: active" "$(scounter zones.stats active)" 1
n=$(grep -c "note: md0: raid0 over members of different sizes: md stripes the first 1022M over all 2 members" "$T/zones.log" || true)
[[ $n == 1 ]] || { cat "$T/zones.log" >&2; fail "zones: the note appeared $n times, expected once"; }
serve zones_opt "${gm[@]}" stripe-chunk=64K stripe-data-disks=2
stop_server zones_opt
! grep -q "different sizes" "$T/zones_opt.log" || fail "zones: a note although the options give the stripe"
# One of the two, or stripe-offset=, does not give the stripe: the note stays.
for o in stripe-chunk=64K stripe-data-disks=2 stripe-offset=0; do
    serve zones_one "${gm[@]}" "$o"
    stop_server zones_one
    grep -q "note: md0: raid0 over members of different sizes" "$T/zones_one.log" ||
        { cat "$T/zones_one.log" >&2; fail "zones: no note with $o alone"; }
done
echo "$size_vda" >"$md0/md/dev-vda/size"

# 3. RAID5 on 4 members: 3 data chunks = 192K, not a power of two:
# preferred is 128K, the exact stripe is in the counters.
echo raid5 >"$md0/md/level"; echo 4 >"$md0/md/raid_disks"; echo 2 >"$md0/md/layout"
serve raid5 "${gm[@]}"
expect "raid5: preferred" "$(bsize raid5 preferred)" 131072
stop_server raid5
expect "raid5: stripe_bytes" "$(scounter raid5.stats stripe_bytes)" 196608
expect "raid5: parity" "$(scounter raid5.stats parity)" 1
expect "raid5: parity_known" "$(scounter raid5.stats parity_known)" 1
expect "raid5: preferred_block" "$(scounter raid5.stats preferred_block)" 131072
grep -q 'md0 raid5: chunk 64K, 3 data disks, parity 1, full stripe 192K' "$T/raid5.log" ||
    { cat "$T/raid5.log" >&2; fail "raid5: verbose geometry line missing"; }

# 3b. A chunk_size that is not a whole number is no geometry (it was
# read as 64K), and a detected stripe over 32M passes through even with
# stripe-parity= given (only what options make too large is refused).
echo 65536x >"$md0/md/chunk_size"
serve junk "${gm[@]}"
expect "junk chunk: preferred" "$(bsize junk preferred)" "$pref0"
stop_server junk
grep -q 'no RAID geometry: md0: raid5: chunk_size 0' "$T/junk.log" ||
    { cat "$T/junk.log" >&2; fail "junk chunk: no note"; }
echo 16777216 >"$md0/md/chunk_size"
serve huge "${gm[@]}" stripe-parity=1
expect "huge stripe: preferred" "$(bsize huge preferred)" "$pref0"
stop_server huge
grep -q 'larger than 32M.*passing everything through' "$T/huge.log" ||
    { cat "$T/huge.log" >&2; fail "huge stripe: no pass-through note"; }
echo 65536 >"$md0/md/chunk_size"

# 4. RAID1 does not stripe: one note, pass-through.
echo raid1 >"$md0/md/level"; echo 2 >"$md0/md/raid_disks"
serve raid1 "${gm[@]}"
expect "raid1: preferred" "$(bsize raid1 preferred)" "$pref0"
stop_server raid1
grep -q 'no RAID geometry: md0: md level raid1 does not stripe (mirrors)' "$T/raid1.log" ||
    { cat "$T/raid1.log" >&2; fail "raid1: no note"; }

# 5. A reshape in progress: not trusted, pass-through.
echo raid5 >"$md0/md/level"; echo "4 (3)" >"$md0/md/raid_disks"
serve reshape "${gm[@]}"
stop_server reshape
grep -q 'a reshape is in progress' "$T/reshape.log" || { cat "$T/reshape.log" >&2; fail "reshape: no note"; }
expect "reshape: active" "$(scounter reshape.stats active)" 0
expect "reshape: reshape" "$(scounter reshape.stats reshape)" 1
# Options refused at any other start-up are refused during a reshape
# too (they used to start, and then pass everything through).
start_fails reshape_big 'is larger than 32M' -- --filter=gmblock-stripe "${gm[@]}" stripe-chunk=16M stripe-data-disks=4
start_fails reshape_raid6 'stripe-parity=2 .RAID6. with stripe-data-disks=1:' -- --filter=gmblock-stripe "${gm[@]}" \
    stripe-chunk=64K stripe-data-disks=1 stripe-parity=2
serve reshape_ok "${gm[@]}" stripe-chunk=64K stripe-data-disks=3
stop_server reshape_ok
expect "reshape with options: active" "$(scounter reshape_ok.stats active)" 0
echo 4 >"$md0/md/raid_disks"
# A detected RAID6 made one data disk by an option: the message says so.
echo raid6 >"$md0/md/level"
start_fails raid6_detected 'the detected RAID6 with stripe-data-disks=1:' -- \
    --filter=gmblock-stripe "${gm[@]}" stripe-data-disks=1
echo raid5 >"$md0/md/level"

# 6. Options override detection, with a warning naming both; equal
# options give no warning.
serve override "${gm[@]}" stripe-chunk=128K stripe-parity=1
expect "override: preferred" "$(bsize override preferred)" 262144
stop_server override
# Said once, at start-up, not again as each connection reads md.
n=$(grep -c 'warning: stripe-chunk=128K disagrees with the detected 64K (md0 raid5): using 128K' "$T/override.log" || true)
[[ $n == 1 ]] || { cat "$T/override.log" >&2; fail "override: the warning appeared $n times, expected once"; }
expect "override: stripe_bytes" "$(scounter override.stats stripe_bytes)" 393216
if grep -q 'stripe-parity.*disagrees' "$T/override.log"; then fail "override: warned about an equal parity"; fi
serve same "${gm[@]}" stripe-chunk=64K stripe-data-disks=3
stop_server same
if grep -q 'disagrees' "$T/same.log"; then cat "$T/same.log" >&2; fail "same: warned although the options agree"; fi

# 7. A partition of md0 starting 1M in: with 192K stripes, stripes
# start at 128K + k x 192K in the export (128K, 320K, 512K, ...).
# NBD_CMD_CACHE is rounded out to whole stripes, clamped to the export.
# The offset taken from the partition is said once with -v, with how
# to override it (the file's own place in its file system is a guess).
mkdir -p "$md0/md0p1"
echo 1 >"$md0/md0p1/partition"; echo 2048 >"$md0/md0p1/start"
point "$md0/md0p1"
serve part "${gm[@]}" direct=false -v
nbdsh -u "$(uri part)" -c '
h.cache(196608, 131072)         # [128K, 320K): a whole stripe, as is
h.cache(4096, 140000)           # -> [128K, 320K)
h.cache(200000, 300000)         # -> [128K, 512K)
h.cache(4096, 16777216 - 4096)  # -> [16M - 128K, 16M): clamped
h.cache(1000, 0)                # -> [0, 128K): the partial first stripe
# Writes against the array'"'"'s stripes (the same bytes written back):
# whole ones from 128K are full-stripe writes, others partial.
for off, n in ((131072, 196608), (131072, 393216), (0, 196608), (131072, 294912)):
    h.pwrite(h.pread(n, off), off)
'
stop_server part
expect "part: writes" "$(scounter part.stats writes)" 4
expect "part: writes_full_stripe" "$(scounter part.stats writes_full_stripe)" 2
expect "part: writes_partial" "$(scounter part.stats writes_partial)" 2
expect "part: offset" "$(scounter part.stats offset)" 1048576
expect "part: cache_requests" "$(scounter part.stats cache_requests)" 5
expect "part: cache_rounded" "$(scounter part.stats cache_rounded)" 4
expect "part: cache_bytes_in" "$(scounter part.stats cache_bytes_in)" $((196608 + 4096 + 200000 + 4096 + 1000))
expect "part: cache_bytes_out" "$(scounter part.stats cache_bytes_out)" $((196608 + 196608 + 393216 + 131072 + 131072))
info "part: $(grep 'geometry:' "$T/part.log")"
said='debug: gmblock-stripe: offset in the array 1048576, detected: md0p1 starts at byte 1048576 of md0, where the file system holding the file starts (.*); stripe-offset=SIZE overrides it$'
n=$(grep -c "$said" "$T/part.log" || true)
[[ $n == 1 ]] || { grep gmblock-stripe "$T/part.log" >&2; fail "part: the detected offset was said $n times, expected once"; }
info "part: $(grep -o 'gmblock-stripe: offset in the array.*' "$T/part.log")"

# 7b. The same place given by stripe-offset= over md0 itself (what a
# user says when it cannot be detected: a file on the array, a thin
# volume): the same rounding; and over the partition, a disagreeing
# stripe-offset= is warned about and wins.
point "$md0"
serve offopt "${gm[@]}" direct=false stripe-offset=1M
nbdsh -u "$(uri offopt)" -c '
h.cache(4096, 140000)           # -> [128K, 320K)
h.cache(200000, 300000)         # -> [128K, 512K)
'
stop_server offopt
expect "offopt: offset" "$(scounter offopt.stats offset)" 1048576
expect "offopt: cache_bytes_out" "$(scounter offopt.stats cache_bytes_out)" $((196608 + 393216))
grep -q 'geometry: md0 raid5, with options: .*offset in the array 1048576' "$T/offopt.log" ||
    { cat "$T/offopt.log" >&2; fail "offopt: the geometry line does not give offset 1048576 from the options"; }
# A device-mapper volume whose mapping is not followed (thin): io hints
# and a note that its start in the stripes is unknown, which
# stripe-offset= answers.
dm3=$T/sys/devices/virtual/block/dm-3
mkdir -p "$dm3/dm" "$dm3/queue"
echo thinvol >"$dm3/dm/name"; echo "0 32768 thin 253:2 1" >"$dm3/dm/table"
echo 65536 >"$dm3/queue/minimum_io_size"; echo 196608 >"$dm3/queue/optimal_io_size"
echo 512 >"$dm3/queue/physical_block_size"
point "$dm3"
serve thin "${gm[@]}" direct=false
stop_server thin
grep -q 'note: dm-3: device-mapper: a thin segment .*where it starts in the stripes below is not known' "$T/thin.log" ||
    { cat "$T/thin.log" >&2; fail "thin: no note that the volume's start in the stripes is unknown"; }
serve thinoff "${gm[@]}" direct=false stripe-offset=64K
stop_server thinoff
if grep -q 'not known' "$T/thinoff.log"; then cat "$T/thinoff.log" >&2; fail "thinoff: the note stayed although stripe-offset= gives the start"; fi
expect "thinoff: offset" "$(scounter thinoff.stats offset)" 65536
point "$md0/md0p1"
serve offwarn "${gm[@]}" direct=false stripe-offset=0 -v
stop_server offwarn
if grep -q 'offset in the array .*, detected' "$T/offwarn.log"; then cat "$T/offwarn.log" >&2; fail "offwarn: the partition's offset was said as used although stripe-offset= overrides it"; fi
grep -q 'warning: stripe-offset=0 disagrees with the detected 1048576' "$T/offwarn.log" ||
    { cat "$T/offwarn.log" >&2; fail "offwarn: no warning that stripe-offset=0 disagrees with the partition's 1M"; }
expect "offwarn: offset" "$(scounter offwarn.stats offset)" 0
info "offopt: $(grep 'geometry:' "$T/offopt.log"); offwarn: $(grep -o 'warning: stripe-offset.*' "$T/offwarn.log")"

# The same requests as a plugin below sees them (options alone: no
# gmblock plugin, so no phase): exact offsets and lengths.
cat >"$T/log.sh" <<'SH'
#!/bin/bash
case "$1" in
    get_size) echo ${SIZE:-1048576} ;;
    can_cache) echo native ;;
    cache) echo "cache $3 $4" >>"$BELOW" ;;
    pread) head -c "$3" /dev/zero ;;
    *) exit 2 ;;
esac
SH
chmod +x "$T/log.sh"
BELOW=$T/below.log start_server calls --filter=gmblock-stripe sh "$T/log.sh" stripe-chunk=64K stripe-data-disks=3
nbdsh -u "$(uri calls)" -c '
h.cache(196608, 196608)         # a whole stripe: as is
h.cache(4096, 200000)           # -> [192K, 384K)
h.cache(40000, 1000000)         # -> [960K, 1M): clamped
'
stop_server calls
printf 'cache 196608 196608\ncache 196608 196608\ncache 65536 983040\n' >"$T/calls.want"
diff -u "$T/calls.want" "$T/below.log" || fail "calls: the plugin below saw other CACHE requests"
# Rounded out beyond 4G - 1 bytes a CACHE request cannot go down as
# one: it goes as it came (the count would wrap).  Up to 4G - 64K it
# is rounded.
SIZE=$((8 << 30)) BELOW=$T/big.below start_server big --filter=gmblock-stripe sh "$T/log.sh" stripe-chunk=64K stripe-data-disks=3
nbdsh -u "$(uri big)" -c '
h.cache(4294901760, 65536)      # -> [0, 4G + 128K): too large, as is
h.cache(4294836224, 65536)      # -> [0, 4G - 64K)
'
stop_server big
printf 'cache 4294901760 65536\ncache 4294901760 0\n' >"$T/big.want"
diff -u "$T/big.want" "$T/big.below" || fail "big: the plugin below saw other CACHE requests"

# Stacks: readahead over the stripe filter over the cache (the order
# that shapes prefetch: the cache answers NBD_CMD_CACHE itself, so the
# stripe filter must sit above it to round it), and the issue's order
# with the stripe filter at the bottom.  Data byte-exact both ways.
stack () {
    local name=$1; shift
    start_server "$name" "$@" "${gm[@]}" ra-stats="$T/$name.ra" stripe-stats="$T/$name.stats"
    nbdcopy "$(uri "$name")" "$name.out"
    cmp "$name.out" disk.img || fail "$name: data read through the stack differs"
    randfile "$name.new" $((16 << 20))
    nbdcopy "$name.new" "$(uri "$name")"
    stop_server "$name"
    cmp disk.img "$name.new" || fail "$name: data written through the stack differs"
    info "$name: readahead prefetch_requests $(awk '$1 == "gmblock-readahead.prefetch_requests" {print $2}' "$T/$name.ra"), stripe cache_requests $(scounter "$name.stats" cache_requests), rounded $(scounter "$name.stats" cache_rounded)"
}
stack shaped --filter=gmblock-readahead --filter=gmblock-stripe --filter=gmblock-cache
[[ $(scounter shaped.stats cache_rounded) -gt 0 ]] || fail "shaped: no prefetch was rounded to stripes"
stack bottom --filter=gmblock-readahead --filter=gmblock-cache --filter=gmblock-stripe

# 8. A detected chunk larger than a tiny export is refused.
point "$md0"
truncate -s 32K tiny.img
start_fails tiny 'the detected chunk 64K \(md0 raid5\) is larger than the export \(32K\)' 'stripe-chunk=SIZE' -- \
    --filter=gmblock-stripe gmblock file="$T/tiny.img" stripe-sysfs="$T/sys"

# 9. A reshape while serving (md/reshape_position, raid_disks "5 (4)",
# sync_action reshape, chunk_size "NEW (OLD)" as md shows it): each new
# connection reads the geometry again.  During the reshape new
# connections pass through (said once); after it they get the new
# geometry (said once, counted); a connection opened before keeps its
# block sizes, and its CACHE is rounded as a new connection's would be
# (pass-through during the reshape).  Data written and read across it
# is byte-exact.
point "$md0"
md=$md0/md
echo raid5 >"$md/level"; echo 4 >"$md/raid_disks"; echo 2 >"$md/layout"
echo 65536 >"$md/chunk_size"; echo none >"$md/reshape_position"; echo idle >"$md/sync_action"
serve grow "${gm[@]}" direct=false
MD=$md PREF0=$pref0 URI=$(uri grow) DISK=$T/disk.img /usr/bin/python3 - <<'PY' || fail "grow: see above"
import os, nbd
md, pref0, uri = os.environ["MD"], int(os.environ["PREF0"]), os.environ["URI"]
def put(f, v): open(os.path.join(md, f), "w").write(v + "\n")
def conn():
    h = nbd.NBD(); h.connect_uri(uri); return h
def pref(h): return h.get_block_size(nbd.SIZE_PREFERRED)
def check(what, got, want):
    if got != want: raise SystemExit("grow: %s: got %r, expected %r" % (what, got, want))
h1 = conn()                                   # 3 x 64K
check("before: preferred", pref(h1), 131072)
a = os.urandom(1 << 20)
h1.pwrite(a, 3 << 20)
put("raid_disks", "5 (4)"); put("sync_action", "reshape"); put("reshape_position", "1024")
h2, h3 = conn(), conn()                       # during: pass-through
check("during: preferred", pref(h2), pref0)
check("during (2nd): preferred", pref(h3), pref0)
check("during: data written before", h2.pread(1 << 20, 3 << 20), a)
b = os.urandom(1 << 20)
h2.pwrite(b, 5 << 20)
h1.cache(4096, 4096)                          # old connection: as is too
h2.cache(4096, 4096)                          # as is
put("reshape_position", "none"); put("sync_action", "idle"); put("raid_disks", "5")
h4 = conn()                                   # after: 4 x 64K
check("after: preferred", pref(h4), 262144)
check("after: data written during", h4.pread(1 << 20, 5 << 20), b)
check("after: old connection reads it too", h1.pread(1 << 20, 5 << 20), b)
h4.cache(4096, 4096)                          # [0, 256K)
# A chunk change: md shows "NEW (OLD)" and a position.
put("chunk_size", "131072 (65536)"); put("reshape_position", "0")
check("chunk change: preferred", pref(conn()), pref0)
put("chunk_size", "131072"); put("reshape_position", "none")
check("after the chunk change: preferred", pref(conn()), 524288)
for h in (h1, h2, h3, h4): h.shutdown()
with open(os.environ["DISK"], "rb") as f:
    f.seek(3 << 20); check("on the disk: first write", f.read(1 << 20) == a, True)
    f.seek(5 << 20); check("on the disk: write during", f.read(1 << 20) == b, True)
PY
stop_server grow
n=$(grep -c 'a reshape is in progress (reshape_position 1024).*new connections pass through until it ends' "$T/grow.log" || true)
[[ $n == 1 ]] || { cat "$T/grow.log" >&2; fail "grow: the reshape note appeared $n times, expected once"; }
grep -q 'geometry for new connections: md0 raid5: chunk 64K, 4 data disks, parity 1, full stripe 256K.*(was: none (a reshape' "$T/grow.log" ||
    { cat "$T/grow.log" >&2; fail "grow: no note of the new geometry"; }
grep -q 'a reshape is in progress (chunk_size 131072 (65536))\|reshape_position 0' "$T/grow.log" ||
    { cat "$T/grow.log" >&2; fail "grow: no note of the chunk change"; }
grep -q 'geometry for new connections: md0 raid5: chunk 128K, 4 data disks, parity 1, full stripe 512K' "$T/grow.log" ||
    { cat "$T/grow.log" >&2; fail "grow: no note of the new chunk"; }
expect "grow: reshape_connections" "$(scounter grow.stats reshape_connections)" 3
expect "grow: geometry_changes" "$(scounter grow.stats geometry_changes)" 2
expect "grow: cache_rounded" "$(scounter grow.stats cache_rounded)" 1
expect "grow: cache_bytes_out" "$(scounter grow.stats cache_bytes_out)" $((4096 + 4096 + 262144))
expect "grow: chunk at exit" "$(scounter grow.stats chunk)" 131072
expect "grow: data_disks at exit" "$(scounter grow.stats data_disks)" 4
expect "grow: reshape at exit" "$(scounter grow.stats reshape)" 0
info "grow: $(grep -c 'new connections' "$T/grow.log") notes, reshape_connections 3, geometry_changes 2"

# Started during a reshape: pass-through, options or not (neither
# geometry holds for the whole array); shaped once it has ended.
echo 65536 >"$md/chunk_size"; echo 4 >"$md/raid_disks"; echo 2048 >"$md/reshape_position"
serve late "${gm[@]}" stripe-chunk=64K stripe-data-disks=3
expect "late: during, with options: preferred" "$(bsize late preferred)" "$pref0"
echo none >"$md/reshape_position"
expect "late: after: preferred" "$(bsize late preferred)" 131072
stop_server late
grep -q 'a reshape is in progress (reshape_position 2048).*passing everything through until it ends' "$T/late.log" ||
    { cat "$T/late.log" >&2; fail "late: no start-up note"; }
expect "late: geometry_changes" "$(scounter late.stats geometry_changes)" 1
expect "late: active at exit" "$(scounter late.stats active)" 1

# The array stops striping while served (md's takeover of a 2-disk
# RAID5 into RAID1): new connections pass through, with a note.
serve takeover "${gm[@]}"
echo raid1 >"$md/level"; echo 2 >"$md/raid_disks"
expect "takeover: preferred" "$(bsize takeover preferred)" "$pref0"
stop_server takeover
grep -q 'no RAID geometry: md0: md level raid1 does not stripe (mirrors): new connections pass through (was: md0 raid5' "$T/takeover.log" ||
    { cat "$T/takeover.log" >&2; fail "takeover: no note"; }
echo raid5 >"$md/level"; echo 4 >"$md/raid_disks"

# 10. Each new connection's geometry is compared with what new
# connections had, not only with pass-through: a reshape that ends
# where it began (md interrupted it) is no change; a reshape no
# connection saw (it ran between two of them) is one, and so is a
# volume moved in the array (pvmove reloads the dm table of a volume in
# use); a chunk grown past a small export passes new connections
# through.  Every connection counts.
echo none >"$md/reshape_position"; echo idle >"$md/sync_action"; echo 65536 >"$md/chunk_size"
serve unseen "${gm[@]}" direct=false
MD=$md PREF0=$pref0 URI=$(uri unseen) /usr/bin/python3 - <<'PY' || fail "unseen: see above"
import os, nbd
md, pref0, uri = os.environ["MD"], int(os.environ["PREF0"]), os.environ["URI"]
def put(f, v): open(os.path.join(md, f), "w").write(v + "\n")
def pref():
    h = nbd.NBD(); h.connect_uri(uri)
    p = h.get_block_size(nbd.SIZE_PREFERRED); h.shutdown(); return p
def check(what, got, want):
    if got != want: raise SystemExit("unseen: %s: got %r, expected %r" % (what, got, want))
check("before: preferred", pref(), 131072)
put("sync_action", "reshape")
check("during: preferred", pref(), pref0)
put("sync_action", "idle")
check("interrupted: preferred", pref(), 131072)
put("raid_disks", "5")
check("unseen reshape: preferred", pref(), 262144)
PY
stop_server unseen
expect "unseen: geometry_changes" "$(scounter unseen.stats geometry_changes)" 1
expect "unseen: data_disks at exit" "$(scounter unseen.stats data_disks)" 4
# start_server's probe and the four above.
expect "unseen: connections" "$(scounter unseen.stats connections)" 5
expect "unseen: reshape_connections" "$(scounter unseen.stats reshape_connections)" 1
grep -q 'geometry for new connections: md0 raid5: chunk 64K, 4 data disks.*(was: md0 raid5: chunk 64K, 3 data disks' "$T/unseen.log" ||
    { cat "$T/unseen.log" >&2; fail "unseen: no note of the geometry found without a reshape seen"; }
echo 4 >"$md/raid_disks"
# ... and a new geometry's note (md's takeover of the RAID5 into a
# RAID0 over members of different sizes: zones) is said with it.
serve takezones "${gm[@]}" direct=false
echo raid0 >"$md/level"; echo 2 >"$md/raid_disks"; echo $((size_vda / 2)) >"$md0/md/dev-vda/size"
expect "takezones: preferred" "$(bsize takezones preferred)" 131072
stop_server takezones
grep -q "note: md0: raid0 over members of different sizes" "$T/takezones.log" ||
    { cat "$T/takezones.log" >&2; fail "takezones: no zones note with the new geometry"; }
echo raid5 >"$md/level"; echo 4 >"$md/raid_disks"; echo "$size_vda" >"$md0/md/dev-vda/size"

# An LVM volume 1M into md0 (3 x 64K), moved to 1M + 64K while served.
dm1=$T/sys/devices/virtual/block/dm-1
mkdir -p "$dm1/dm"
echo vg-lv >"$dm1/dm/name"; echo "0 16384 linear 9:0 2048" >"$dm1/dm/table"
point "$dm1"
serve moved "${gm[@]}" direct=false
expect "moved: before: preferred" "$(bsize moved preferred)" 131072
echo "0 16384 linear 9:0 2176" >"$dm1/dm/table"
expect "moved: after: preferred" "$(bsize moved preferred)" 131072
stop_server moved
expect "moved: offset at exit" "$(scounter moved.stats offset)" 1114112
expect "moved: geometry_changes" "$(scounter moved.stats geometry_changes)" 1
grep -q 'geometry for new connections: dm-1 over md0 raid5: .*offset in the array 1114112.*(was: dm-1 over md0 raid5: .*offset in the array 1048576' "$T/moved.log" ||
    { cat "$T/moved.log" >&2; fail "moved: no note of the volume's new place"; }

# A 32K export on md0 with 16K chunks; the chunk grows to 64K.
point "$md0"
echo 16384 >"$md/chunk_size"
serve grown gmblock file="$T/tiny.img" stripe-sysfs="$T/sys"
echo 65536 >"$md/chunk_size"
nbdinfo --size "$(uri grown)" >/dev/null
stop_server grown
grep -q 'md0 raid5: the chunk 64K is larger than the export (32K): new connections pass through' "$T/grown.log" ||
    { cat "$T/grown.log" >&2; fail "grown: no note that the chunk outgrew the export"; }
expect "grown: active at exit" "$(scounter grown.stats active)" 0
info "unseen, moved, grown: $(grep -h 'new connections' "$T/unseen.log" "$T/moved.log" "$T/grown.log" | wc -l) notes"

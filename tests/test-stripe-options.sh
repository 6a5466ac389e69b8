#!/bin/bash
# gmblock-stripe: every refused option or combination names the option
# and what it accepts; nbdkit exits non-zero at start-up.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdinfo nbdcopy
cd "$T"

st=(--filter=gmblock-stripe memory 64M)
both=(stripe-chunk=64K stripe-data-disks=4)

start_fails chunk_word 'stripe-chunk=banana' 'multiple of 512 from 512 to 32M' -- "${st[@]}" stripe-chunk=banana stripe-data-disks=4
# Named twice, both instances would share one geometry and its counters.
start_fails twice 'gmblock-stripe: --filter=gmblock-stripe is given twice' 'hold it once' \
    -- --filter=gmblock-stripe "${st[@]}" "${both[@]}"
start_fails chunk_odd 'stripe-chunk=1000: not a multiple of 512' 'such as 64K' -- "${st[@]}" stripe-chunk=1000 stripe-data-disks=4
start_fails chunk_small 'stripe-chunk=256: not a multiple of 512' -- "${st[@]}" stripe-chunk=256 stripe-data-disks=4
start_fails chunk_big 'stripe-chunk=64M: too large' 'from 512 to 32M' -- "${st[@]}" stripe-chunk=64M stripe-data-disks=1
start_fails chunk_zero 'stripe-chunk=0: zero' -- "${st[@]}" stripe-chunk=0 stripe-data-disks=4
start_fails disks_zero 'stripe-data-disks=0' 'whole number from 1 to 4096' -- "${st[@]}" stripe-chunk=64K stripe-data-disks=0
start_fails disks_big 'stripe-data-disks=4097' 'from 1 to 4096' -- "${st[@]}" stripe-chunk=512 stripe-data-disks=4097
start_fails disks_neg 'stripe-data-disks=-2' 'whole number' -- "${st[@]}" stripe-chunk=64K stripe-data-disks=-2
# strtoul takes a minus sign and negates: -18446744073709551615 would
# be 1 data disk, -0 parity 0.
start_fails disks_wrap 'stripe-data-disks=-18446744073709551615' 'whole number from 1 to 4096' -- "${st[@]}" stripe-chunk=64K stripe-data-disks=-18446744073709551615
start_fails parity_negzero 'stripe-parity=-0' '0, 1 or 2' -- "${st[@]}" "${both[@]}" stripe-parity=-0
start_fails disks_word 'stripe-data-disks=three' 'RAID5 on 4 disks has 3' -- "${st[@]}" stripe-chunk=64K stripe-data-disks=three
start_fails chunk_empty 'stripe-chunk=: empty value' 'multiple of 512 from 512 to 32M' -- "${st[@]}" stripe-chunk= stripe-data-disks=4
start_fails chunk_neg 'stripe-chunk=-64K: negative' 'multiple of 512' -- "${st[@]}" stripe-chunk=-64K stripe-data-disks=4
start_fails chunk_frac 'stripe-chunk=1.5M' 'multiple of 512 from 512 to 32M' -- "${st[@]}" stripe-chunk=1.5M stripe-data-disks=2
start_fails disks_frac 'stripe-data-disks=3.5' 'whole number from 1 to 4096' -- "${st[@]}" stripe-chunk=64K stripe-data-disks=3.5
start_fails disks_empty 'stripe-data-disks=:' 'whole number from 1 to 4096' -- "${st[@]}" stripe-chunk=64K stripe-data-disks=
start_fails parity_3 'stripe-parity=3' '0, 1 or 2' -- "${st[@]}" "${both[@]}" stripe-parity=3
start_fails parity_neg 'stripe-parity=-1' '0, 1 or 2' -- "${st[@]}" "${both[@]}" stripe-parity=-1
start_fails parity_word 'stripe-parity=raid5' '0, 1 or 2' -- "${st[@]}" "${both[@]}" stripe-parity=raid5
start_fails offset_word 'stripe-offset=start' 'where the export starts in the array' -- "${st[@]}" "${both[@]}" stripe-offset=start
start_fails offset_neg 'stripe-offset=-1M: negative' 'such as 1M' -- "${st[@]}" "${both[@]}" stripe-offset=-1M
# Above INT64_MAX the offset would turn negative: "not given".
start_fails offset_huge 'stripe-offset=9223372036854775808: too large' 'such as 1M' -- "${st[@]}" "${both[@]}" stripe-offset=9223372036854775808
start_fails offset_empty 'stripe-offset=: empty value' -- "${st[@]}" "${both[@]}" stripe-offset=

# Incomplete or contradictory combinations (nothing is detected below
# the memory plugin, so the options must give the whole geometry).
start_fails only_chunk 'stripe-chunk given without stripe-data-disks' 'no gmblock plugin below' -- "${st[@]}" stripe-chunk=64K
start_fails only_disks 'stripe-data-disks given without stripe-chunk' -- "${st[@]}" stripe-data-disks=4
start_fails only_parity 'stripe-parity given without stripe-chunk and stripe-data-disks' -- "${st[@]}" stripe-parity=1
start_fails only_offset 'stripe-offset given without stripe-chunk and stripe-data-disks' -- "${st[@]}" stripe-offset=1M
start_fails raid6_one 'stripe-parity=2 \(RAID6\) with stripe-data-disks=1:' 'stripe-data-disks=2 or more' -- "${st[@]}" stripe-chunk=64K stripe-data-disks=1 stripe-parity=2
start_fails stripe_big 'full stripe of stripe-data-disks=4 x stripe-chunk=16M is larger than 32M' -- "${st[@]}" stripe-chunk=16M stripe-data-disks=4

# Known only once the export's size is: a chunk larger than the export.
start_fails chunk_export 'stripe-chunk=2M is larger than the export \(1M\)' -- --filter=gmblock-stripe memory 1M stripe-chunk=2M stripe-data-disks=2

# Over the gmblock plugin the size is known before nbdkit forks: the
# refusal also reaches a user of --run or of a daemon.  With another
# kind of filter below, which may change the size, the check waits for
# the fork (truncate makes the 1M file 4M here: a 2M chunk fits).
truncate -s 1M small.img
refused_early chunk_export_gm 'gmblock-stripe: stripe-chunk=2M is larger than the export \(1M\)' \
    -- --filter=gmblock-stripe gmblock file=small.img stripe-chunk=2M stripe-data-disks=2
"$NBDKIT" -U - --filter=gmblock-stripe --filter=truncate gmblock file=small.img truncate=4M \
    stripe-chunk=2M stripe-data-disks=1 --run "$RUN_SIZE" >"$T/trunc.out" 2>&1 ||
    { cat "$T/trunc.out" >&2; fail "a 2M chunk over a 1M file made 4M by the truncate filter was refused"; }
# A chunk as large as the export is no larger than it.
"$NBDKIT" -U - --filter=gmblock-stripe gmblock file=small.img stripe-chunk=1M stripe-data-disks=1 \
    --run "$RUN_SIZE" >"$T/equal.out" 2>&1 ||
    { cat "$T/equal.out" >&2; fail "a 1M chunk over a 1M file was refused"; }
info "a chunk larger than the gmblock plugin's export is refused before the fork (one as large is not); with truncate between, it is not"

start_fails sysfs_missing 'stripe-sysfs=/nonexistent' 'standing for /sys' -- "${st[@]}" "${both[@]}" stripe-sysfs=/nonexistent
start_fails sysfs_empty 'gmblock-stripe: stripe-sysfs= is empty' 'standing for /sys' -- "${st[@]}" "${both[@]}" stripe-sysfs=

# The limits themselves are accepted.
for ok in "stripe-chunk=512 stripe-data-disks=4096" "stripe-chunk=32M stripe-data-disks=1" \
          "stripe-chunk=64K stripe-data-disks=2 stripe-parity=2" "stripe-chunk=1M stripe-data-disks=1 stripe-parity=1" \
          "stripe-chunk=96K stripe-data-disks=3" "stripe-chunk=64K stripe-data-disks=3 stripe-offset=0" \
          "stripe-chunk=64K stripe-data-disks=3 stripe-offset=1114112"; do
    # shellcheck disable=SC2086
    "$NBDKIT" -U - "${st[@]}" $ok --run "$RUN_SIZE" >"$T/ok.out" 2>&1 ||
        { cat "$T/ok.out" >&2; fail "refused valid options: $ok"; }
done
info "the limits (512 x 4096, 32M x 1, RAID6 2+2, RAID5 1+1) and a 96K chunk (md RAID0 takes it) are accepted"

# No gmblock plugin below (the memory plugin names no device): without
# options one note and nothing changed; with both options alone the
# stripe is used, and data passes byte-exact.
bsize () { nbdinfo --json "$(uri "$1")" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['exports'][0].get('block_size_$2'))"; }
start_server plainmem memory 16M
pref0=$(bsize plainmem preferred)
stop_server plainmem
start_server nodev --filter=gmblock-stripe memory 16M
[[ $(bsize nodev preferred) == "$pref0" ]] || fail "nodev: the preferred block size changed without a geometry"
stop_server nodev
n=$(grep -c 'no RAID geometry: no gmblock plugin below names the device: passing everything through' "$T/nodev.log" || true)
[[ $n == 1 ]] || { cat "$T/nodev.log" >&2; fail "nodev: the note appeared $n times, expected once"; }
start_server alone -D gmblock-stripe.verbose=1 --filter=gmblock-stripe memory 16M stripe-chunk=128K stripe-data-disks=3 stripe-parity=1
[[ $(bsize alone preferred) == 262144 ]] || fail "alone: preferred is not 256K (the largest power of two in 3 x 128K)"
# Nothing was detected, so nothing disagrees with the options.
grep -q 'geometry: options: chunk 128K, 3 data disks, parity 1' "$T/alone.log" ||
    { cat "$T/alone.log" >&2; fail "alone: the geometry line does not say the options gave it"; }
if grep -q 'disagrees' "$T/alone.log"; then cat "$T/alone.log" >&2; fail "alone: options warned about as disagreeing with a detection that found nothing"; fi
randfile in.img $((16 << 20))
nbdcopy in.img "$(uri alone)"
nbdcopy "$(uri alone)" out.img
stop_server alone
cmp in.img out.img || fail "alone: data through the filter with options alone differs"
# A chunk that is not a power of two, as md RAID0 takes it: the stripe
# (3 x 96K = 288K) is no power of two either, so 256K is preferred.
start_server odd --filter=gmblock-stripe memory 16M stripe-chunk=96K stripe-data-disks=3
[[ $(bsize odd preferred) == 262144 ]] || fail "odd: preferred is not 256K (the largest power of two in 3 x 96K)"
nbdcopy in.img "$(uri odd)"
nbdcopy "$(uri odd)" out2.img
stop_server odd
cmp in.img out2.img || fail "odd: data through a 96K-chunk stripe differs"
info "no plugin naming a device: one note without options; options alone (128K and 96K chunks): preferred 256K, 16 MiB byte-exact"

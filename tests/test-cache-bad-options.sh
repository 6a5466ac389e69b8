#!/bin/bash
# gmblock-cache: bad options stop nbdkit at start-up with a message that
# names the option, the value and what is accepted; the edges of the
# accepted ranges start.  Unknown keys still reach the plugin, which
# rejects them.
. "$(dirname "$0")/functions.sh"

randfile "$T/disk.img" 4M
f=file=$T/disk.img
c=--filter=gmblock-cache

start_fails mode 'gmblock-cache:' 'cache-mode=fast' 'bypass, read, writethrough, writeback, unsafe or adaptive' \
    -- $c gmblock "$f" cache-mode=fast
start_fails mode_empty 'gmblock-cache:' 'cache-mode=:' 'unknown mode' -- $c gmblock "$f" cache-mode=
# Named twice, both instances shared one cache: nbdkit hung at start-up.
start_fails twice 'gmblock-cache: --filter=gmblock-cache is given twice' 'hold it once' \
    -- $c --filter=gmblock-readahead $c gmblock "$f"
for v in banana -1 12Q '' 1.5M 0% 101% 99999999999999999999999; do
    start_fails "size_${v//[^a-zA-Z0-9]/_}" 'gmblock-cache:' "cache-size=$v" \
        'size such as 512M|percentage' -- $c gmblock "$f" "cache-size=$v"
done
start_fails size_small 'gmblock-cache:' 'cache-size=512K is too small' '8 blocks of 64K, at least 16' \
    -- $c gmblock "$f" cache-size=512K
start_fails size_small_bs 'gmblock-cache:' 'cache-size=1M is too small' 'blocks of 1M' \
    -- $c gmblock "$f" cache-size=1M cache-block-size=1M
start_fails size_huge 'gmblock-cache:' 'larger than RAM' -- $c gmblock "$f" cache-size=1000T
for v in 3000 48K 2K 32M banana 0 ''; do
    start_fails "bs_${v:-empty}" 'gmblock-cache:' "cache-block-size=$v" 'power of two from 4K to 16M' \
        -- $c gmblock "$f" "cache-block-size=$v"
done
start_fails aw 'gmblock-cache:' 'adaptive-writes=sometimes' 'around or back' \
    -- $c gmblock "$f" adaptive-writes=sometimes
start_fails scan 'gmblock-cache:' 'adaptive-scan=0' 'must not be zero' -- $c gmblock "$f" adaptive-scan=0
start_fails scan2 'gmblock-cache:' 'adaptive-scan=x' -- $c gmblock "$f" adaptive-scan=x
# A value that does not parse is named for what is wrong with it (the
# zero test used to read the size the parser had not set).
start_fails scan3 'gmblock-cache:' 'adaptive-scan=1Q: unknown suffix' -- $c gmblock "$f" adaptive-scan=1Q
# NaN passes both range checks of a naive parser; infinities and
# out-of-range exponents must be refused too.
for v in 0 -1 soon 7200 nan NaN -nan inf -inf infinity 1e999 0x1p99 ""; do
    start_fails "wbi_$(echo "${v:-empty}" | tr -c 'a-zA-Z0-9\n' _)" 'gmblock-cache:' "writeback-interval=$v" '0.01 to 3600' \
        -- $c gmblock "$f" "writeback-interval=$v"
done
for v in -1 1.5 3601 later nan ""; do
    start_fails "wbh_$(echo "${v:-empty}" | tr -c 'a-zA-Z0-9\n' _)" 'gmblock-cache:' "writeback-hold=$v" \
        'whole seconds from 0 to 3600' -- $c gmblock "$f" "writeback-hold=$v"
done
for v in 33M 1G -1 many 1Q ""; do
    start_fails "wbm_$(echo "${v:-empty}" | tr -c 'a-zA-Z0-9\n' _)" 'gmblock-cache:' "writeback-merge=$v" \
        'expected a size from 0' -- $c gmblock "$f" "writeback-merge=$v"
done
start_fails huge 'gmblock-cache:' 'cache-hugepages=maybe' 'auto, on or off' \
    -- $c gmblock "$f" cache-hugepages=maybe
# Not ours: the plugin names it.
# A % that is not at the end was taken for a size's unknown suffix.
for v in 50%x 5%0; do
    start_fails "pct_${v//[^a-zA-Z0-9]/_}" "cache-size=$v: a percentage must be a whole number followed by %" \
        -- $c gmblock "$f" "cache-size=$v"
done
start_fails unknown 'gmblock:' "unknown parameter 'foo'" -- $c gmblock "$f" foo=bar
# Blanks before a percentage, as before a size (it said: expected a number).
start_server blank $c gmblock "$f" "cache-size= 1%"
stop_server blank

# Accepted edges: 16 blocks exactly, 4K and 16M blocks, a percentage.
for opts in "cache-size=1M" "cache-size=64K cache-block-size=4K" \
            "cache-size=256M cache-block-size=16M" "cache-size=1%" \
            "cache-mode=bypass cache-size=1K" "writeback-interval=0.01 cache-mode=writeback cache-size=1M" \
            "writeback-hold=0 cache-mode=writeback cache-size=1M" "writeback-hold=3600" \
            "writeback-merge=0 cache-mode=writeback" "writeback-merge=32M cache-mode=writeback" \
            "writeback-merge=100K cache-mode=writeback"; do
    # shellcheck disable=SC2086
    start_server ok $c gmblock "$f" $opts
    nbdcopy "$(uri ok)" "$T/out.img" && cmp "$T/out.img" "$T/disk.img" || fail "$opts: data differs"
    stop_server ok
    info "accepted: $opts"
done

# An empty export has nothing to cache.  Over the gmblock plugin its
# size is known before nbdkit forks, so --run and a daemon get the
# error and a non-zero exit too (not a hang, not exit 0); over the
# memory plugin the check waits for the fork, as -f shows.
: >"$T/empty.img"
refused_early empty_gm 'gmblock-cache: the export is empty' \
    -- --filter=gmblock-readahead $c gmblock "file=$T/empty.img"
start_fails empty_mem 'gmblock-cache: the export is empty' -- $c memory 0
# ... but bypass caches nothing, and serves it.
"$NBDKIT" -U - $c gmblock "file=$T/empty.img" cache-mode=bypass \
    --run "$RUN_SIZE" >"$T/bypass.out" 2>&1 ||
    { cat "$T/bypass.out" >&2; fail "cache-mode=bypass refused an empty export"; }
info "an empty export: refused before the fork over gmblock, after it over memory; served with bypass"

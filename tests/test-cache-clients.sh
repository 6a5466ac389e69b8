#!/bin/bash
# gmblock-cache with real clients, in every mode: nbdcopy round trips
# checked with cmp, qemu-img compare (with a negative control), and
# fio's nbd engine with 4 jobs (4 connections) x iodepth 16 writing
# with verify=crc32c, then verifying again after a restart (which
# needs the shutdown write-back in the write-back modes); and that fills
# are zero-copy for the plugin.
. "$(dirname "$0")/functions.sh"
require nbdcopy qemu-img fio
cd "$T"

M=1048576
randfile "$T/src.img" $((40 * M + 4096))

fio_job () {
    local name=$1 log=$2; shift 2
    fio --name=w --ioengine=nbd --uri="$(uri "$name")" --rw=randwrite \
        --iodepth=16 --numjobs=4 --size=8M --offset_increment=8M \
        --bssplit=4k/40:16k/30:64k/20:256k/10 \
        --verify=crc32c --verify_fatal=1 --do_verify=1 --group_reporting=1 \
        --randseed=99 --verify_state_save=0 "$@" >"$T/$log.out" 2>&1
}

run () {
    local name=$1; shift
    local img=$T/$name.img
    cp "$T/src.img" "$img"
    start_server "$name" --filter=gmblock-cache gmblock file="$img" \
        cache-stats="$T/$name.stats" "$@"
    # Read out, twice (the second from the cache where it caches).
    nbdcopy "$(uri "$name")" "$T/out1.img" && cmp "$T/src.img" "$T/out1.img" ||
        fail "$name: nbdcopy out differs"
    nbdcopy "$(uri "$name")" "$T/out2.img" && cmp "$T/src.img" "$T/out2.img" ||
        fail "$name: second nbdcopy out differs"
    # Write new contents in, read them back.
    randfile "$T/new.img" $((40 * M + 4096))
    nbdcopy "$T/new.img" "$(uri "$name")" || fail "$name: nbdcopy in failed"
    nbdcopy "$(uri "$name")" "$T/out3.img" && cmp "$T/new.img" "$T/out3.img" ||
        fail "$name: data written with nbdcopy reads back differently"
    qemu-img compare -q -f raw -F raw "$T/new.img" "$(uri "$name")" ||
        fail "$name: qemu-img compare found a difference"
    if qemu-img compare -q -f raw -F raw "$T/src.img" "$(uri "$name")"; then
        fail "$name: qemu-img compare did not notice different contents"
    fi
    # fio, 4 connections, then verify-only after a restart.
    fio_job "$name" "$name-fio" || { cat "$T/$name-fio.out" >&2; fail "$name: fio write+verify failed"; }
    stop_server "$name"
    [[ $(ccounter "$T/$name.stats" errors) == 0 ]] || fail "$name: errors counted"
    start_server "$name" --filter=gmblock-cache gmblock file="$img" "$@"
    fio_job "$name" "$name-verify" --verify_only=1 ||
        { cat "$T/$name-verify.out" >&2; fail "$name: fio verify after restart failed"; }
    stop_server "$name"
    info "$name: ok: $(ccounter "$T/$name.stats" hits) hits, $(ccounter "$T/$name.stats" fills) fills, $(ccounter "$T/$name.stats" bypass_bytes) bytes bypassed, $(ccounter "$T/$name.stats" writebacks) write-backs"
}

run bypass cache-mode=bypass
run read cache-mode=read cache-size=16M
run wt cache-mode=writethrough cache-size=16M cache-block-size=16K
run wb cache-mode=writeback cache-size=16M
run unsafe cache-mode=unsafe cache-size=8M cache-block-size=32K
run adaptive cache-mode=adaptive cache-size=16M
run adback cache-mode=adaptive adaptive-writes=back cache-size=16M

# The second read-out in read mode came from the cache.
[[ $(ccounter "$T/read.stats" hits) -gt 0 ]] || fail "read: no hits"
# Adaptive: a single sequential reader bypasses.
[[ $(ccounter "$T/adaptive.stats" bypass_bytes) -gt 0 ]] || fail "adaptive: nothing bypassed"

# Fills are zero-copy for the plugin: its O_DIRECT reads land straight
# in the cache's aligned blocks (dma_client_bytes), nothing is bounced.
start_server zc --filter=gmblock-cache gmblock file="$T/src.img" cache-mode=read \
    cache-size=64M stats="$T/zc.plugin" cache-stats="$T/zc.stats"
nbdcopy "$(uri zc)" null:
stop_server zc
fb=$(ccounter "$T/zc.stats" fill_bytes)
[[ $fb -gt 0 && $(counter "$T/zc.plugin" dma_client_bytes) -ge $((fb - 4096)) ]] ||
    fail "fills were not read straight into the cache blocks ($(counter "$T/zc.plugin" dma_client_bytes) of $fb)"
mc=$(counter "$T/zc.plugin" memcpy_read_bytes)
# Missing, it is empty, which -le would take for 0.
[[ -n $mc ]] || fail "no memcpy_read_bytes in the plugin's stats"
[[ $mc -le 4096 ]] || fail "the plugin copied $mc bytes on fills"
info "zero-copy fills: $fb bytes filled, plugin dma_client_bytes $(counter "$T/zc.plugin" dma_client_bytes), memcpy_read_bytes $(counter "$T/zc.plugin" memcpy_read_bytes)"

#!/bin/bash
# gmblock-cache, write-back with a cache full of dirty blocks that cannot
# be written back (writes fail below: error filter, switched on by a
# trigger file).  Reads and NBD_CMD_CACHE of healthy blocks that are not
# cached must still succeed, with the right data: the cache is bypassed
# when no clean slot can be had (they used to fail with EIO, the error
# of a victim's write-back).  A write to a block not cached goes below
# directly and fails or succeeds on its own merits (it used to be
# acknowledged without being stored anywhere: silent loss).  The dirty blocks
# still read back as written; once the disk heals, a flush writes them
# all and the disk holds exactly what the clients wrote.  The counters
# tell the truth meanwhile: a dirty eviction whose write-back failed made
# no room and is not a dirty_eviction (ten reads counted ten before).
. "$(dirname "$0")/functions.sh"
cd "$T"

K=1024 M=1048576
randfile "$T/base" $((4 * M))
randfile "$T/new" $((4 * M))
cp "$T/base" "$T/disk.img"
touch "$T/broken"
# start_full NAME: 16 slots of 4K, the smallest cache (all of it will
# be dirty), over a disk that fails writes while $T/broken exists.
start_full () {
    start_server "$1" --filter=gmblock-cache --filter=error gmblock \
        file="$T/disk.img" cache-mode=writeback cache-size=64K \
        cache-block-size=4K writeback-interval=3600 \
        error-pwrite-rate=100% error-pwrite-file="$T/broken" \
        cache-stats="$T/$1.stats"
}
# cache_counter NAME COUNTER: a gmblock-cache counter of server NAME, once stopped.
cache_counter () { awk -v k="gmblock-cache.$2" '$1 == k { print $2 }' "$T/$1.stats"; }
start_full df

nbdsh -u "$(uri df)" -c "
import os
base = open('$T/base', 'rb').read()
new = open('$T/new', 'rb').read()
# Dirty every slot (16 blocks of 4K), acknowledged into the cache; the
# flusher (kicked at a quarter dirty) cannot write them back.
for i in range(16):
    h.pwrite(new[i * 4096:(i + 1) * 4096], i * 4096)
# Healthy blocks not in the cache: reads must succeed and be right.
for off in (1 << 20, 2 << 20, 3 << 20, (4 << 20) - 4096, 65536):
    got = h.pread(4096, off)
    assert got == base[off:off + 4096], f'wrong data at {off}'
got = h.pread(256 * 1024, 1 << 20)
assert got == base[1 << 20:(1 << 20) + 256 * 1024], 'wrong data (256K read)'
# NBD_CMD_CACHE is advisory: it succeeds without caching.
h.cache(64 * 1024, 2 << 20)
# The dirty blocks read back as written.
assert h.pread(65536, 0) == new[:65536], 'dirty blocks wrong'
# A write to an uncached block cannot be cached (no clean slot): it goes
# below, where it fails while the disk is broken ...
try:
    h.pwrite(new[:4096], 2 << 20)
    raise SystemExit('a write to a broken disk succeeded')
except nbd.Error as e:
    assert e.errno == 'EIO', e
# ... and the flush fails too, honestly.
try:
    h.flush()
    raise SystemExit('a flush succeeded with the disk broken')
except nbd.Error as e:
    assert e.errno == 'EIO', e
os.unlink('$T/broken')
# Healed: an uncached write goes through, and a flush writes back all.
h.pwrite(new[2 << 20:(2 << 20) + 4096], 2 << 20)
h.flush()
# The flush reply means every acknowledged write is below now, with the
# server still running (not only after the shutdown write-back).
want = bytearray(base)
want[:65536] = new[:65536]
want[2 << 20:(2 << 20) + 4096] = new[2 << 20:(2 << 20) + 4096]
open('$T/want', 'wb').write(want)
assert open('$T/disk.img', 'rb').read() == bytes(want), 'not on the disk after the flush'
"
stop_server df
cmp "$T/disk.img" "$T/want" || fail "the disk does not hold what was written"
[[ $(cache_counter df errors) -gt 0 && $(cache_counter df no_slot) -gt 0 ]] ||
    { cat "$T/df.stats" >&2; fail "errors=$(cache_counter df errors) no_slot=$(cache_counter df no_slot): the test did not exercise a full dirty cache"; }
info "full dirty cache, disk failing: healthy reads and prefetch served below; errors=$(cache_counter df errors) no_slot=$(cache_counter df no_slot)"

# Counters with the disk still broken: ten reads, each of which tried to
# evict a dirty block and failed, wrote nothing back.
cp "$T/base" "$T/disk.img"
touch "$T/broken"
start_full dc
nbdsh -u "$(uri dc)" -c "
new = open('$T/new', 'rb').read()
for i in range(16):
    h.pwrite(new[i * 4096:(i + 1) * 4096], i * 4096)
for i in range(10):
    h.pread(4096, (1 << 20) + i * 65536)
"
stop_server dc                  # status 1: the 16 blocks are lost
[[ $(cache_counter dc no_slot) -ge 10 && $(cache_counter dc writebacks) == 0 ]] ||
    { cat "$T/dc.stats" >&2; fail "no_slot=$(cache_counter dc no_slot) writebacks=$(cache_counter dc writebacks): the reads did not meet a full dirty cache"; }
[[ $(cache_counter dc dirty_evictions) == 0 ]] ||
    { cat "$T/dc.stats" >&2; fail "dirty_evictions=$(cache_counter dc dirty_evictions) although no dirty block was written back"; }
info "disk broken: no_slot=$(cache_counter dc no_slot), dirty_evictions=0, writebacks=0"

#!/bin/bash
# gmblock-cache over a layer that takes no request larger than 16K
# (nbdkit's blocksize-policy filter, which refuses larger ones with
# EINVAL), or none smaller than 16K.  The cache fills and writes back a whole block in one
# request: with its default 64K blocks every fill was refused, so every
# read failed, and so did partial writes in write-back mode.  The block
# size it chooses must fit (16K here); a merged stripe write-back that
# would not fit goes block by block; a cache-block-size= that cannot fit
# is refused at start-up, naming both sizes, and so is one smaller than
# the minimum below (its fills were refused too).  In every caching mode, a
# random sequence of reads, writes, zeros and flushes (up to the 16K
# the export advertises) over a 64-slot cache is compared with a model,
# then the file after a clean stop.
. "$(dirname "$0")/functions.sh"
cd "$T"

M=1048576
policy=(blocksize-minimum=512 blocksize-preferred=4096
        blocksize-maximum=16384 blocksize-error-policy=error)

check () {
    local name=$1
    out=$(timeout 120 /usr/bin/python3 - "$(uri "$name")" "$T/$name.img" "$T/$name.want" <<'PY' 2>&1
import nbd, random, sys
uri, img, want_path = sys.argv[1], sys.argv[2], sys.argv[3]
h = nbd.NBD()
h.connect_uri(uri)
size = h.get_size()
if h.get_block_size(nbd.SIZE_MAXIMUM) != 16384:
    sys.exit(f"maximum block size {h.get_block_size(nbd.SIZE_MAXIMUM)}, expected 16384")
model = bytearray(open(img, "rb").read())
rng = random.Random(7)
for step in range(3000):
    n = rng.randint(1, 32) * 512
    off = rng.randrange(0, (size - n) // 512 + 1) * 512
    op = rng.random()
    if op < 0.45:
        got = h.pread(n, off)
        if got != model[off:off + n]:
            sys.exit(f"step {step}: read of {n} at {off} differs from the model")
    elif op < 0.85:
        data = rng.randbytes(n)
        h.pwrite(data, off)
        model[off:off + n] = data
    elif op < 0.95:
        h.zero(n, off)
        model[off:off + n] = bytes(n)
    else:
        h.flush()
h.flush()
open(want_path, "wb").write(model)
print("3000 steps agree with the model")
PY
) || { cat "$T/$name.log" >&2; fail "$name: $out"; }
}

for mode in read writethrough writeback adaptive; do
    randfile "$T/$mode.img" $((4 * M))
    start_server "$mode" --filter=gmblock-cache --filter=blocksize-policy \
        file "$T/$mode.img" cache-mode=$mode cache-size=1M \
        "${policy[@]}" cache-stats="$T/$mode.stats"
    check "$mode"
    stop_server "$mode"
    cmp "$T/$mode.img" "$T/$mode.want" || fail "$mode: the file differs from what was written"
    bs=$(ccounter "$T/$mode.stats" block_size)
    [[ $bs == 16384 ]] || fail "$mode: cache blocks of $bs bytes, expected 16384"
    info "cache-mode=$mode: 16K blocks; $out"
done

# Stripes of 3 x 16K = 48K: a whole stripe would be one 48K write, more
# than the layer below takes, so write-back goes block by block.
randfile "$T/stripe.img" $((4 * M))
start_server stripe --filter=gmblock-cache --filter=blocksize-policy \
    --filter=gmblock-stripe file "$T/stripe.img" cache-mode=writeback \
    cache-size=1M stripe-chunk=16K stripe-data-disks=3 stripe-parity=1 \
    "${policy[@]}" cache-stats="$T/stripe.stats"
check stripe
stop_server stripe
cmp "$T/stripe.img" "$T/stripe.want" || fail "stripe: the file differs from what was written"
sw=$(ccounter "$T/stripe.stats" wb_stripe_bytes)
[[ $sw == 0 ]] || fail "stripe: write-back in stripes of $sw bytes, larger than the layer below takes"
info "stripe 48K over a 16K maximum: block by block; $out"

randfile "$T/bad.img" $((4 * M))
start_fails bs64 'gmblock-cache: cache-block-size=64K is larger than the largest request the layer below takes \(16K\)' \
    -- --filter=gmblock-cache --filter=blocksize-policy file "$T/bad.img" \
    cache-block-size=64K "${policy[@]}"
start_fails bs4 'gmblock-cache: cache-block-size=4K is smaller than the smallest request the layer below takes \(16K\)' \
    -- --filter=gmblock-cache --filter=blocksize-policy file "$T/bad.img" \
    cache-block-size=4K blocksize-minimum=16384 blocksize-preferred=16384 \
    blocksize-maximum=1M blocksize-error-policy=error
# A layer below that takes less than the cache's smallest block: no
# block size fits, and the default one is not forced on it.
start_fails bs2k 'gmblock-cache: the layer below takes requests of 2K at most: the cache needs blocks of 4K at least' \
    -- --filter=gmblock-cache --filter=blocksize-policy file "$T/bad.img" \
    blocksize-minimum=512 blocksize-preferred=512 blocksize-maximum=2048 \
    blocksize-error-policy=error

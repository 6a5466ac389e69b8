#!/bin/bash
# gmblock-cache is one cache for all connections: multi-conn is
# advertised; a write on connection 1, a flush on connection 2, and a
# read on connection 3 sees the data, in every mode.  In write-back
# mode the flush on connection 2 makes connection 1's writes durable:
# they survive a kill -9.
. "$(dirname "$0")/functions.sh"
cd "$T"

M=1048576
randfile "$T/orig.img" $((8 * M))

mc () {
    /usr/bin/python3 - "$(uri "$1")" "$2" <<'PY'
import random, sys, nbd
uri, out = sys.argv[1], sys.argv[2]
h = []
for i in range(3):
    x = nbd.NBD()
    x.set_strict_mode(x.get_strict_mode() & ~nbd.STRICT_ALIGN)
    x.connect_uri(uri)
    h.append(x)
assert h[0].can_multi_conn(), "multi-conn not advertised"
size = h[0].get_size()
rng = random.Random(5)
model = bytearray(h[2].pread(size, 0))       # warm the cache from conn 3
for i in range(60):
    off, n = rng.randrange(0, size - 70000), rng.randint(1, 70000)
    data = rng.randbytes(n)
    h[0].pwrite(data, off)
    model[off:off + n] = data
    if i % 10 == 9:
        h[1].flush()
        if h[2].pread(size, 0) != model:
            sys.exit(f"connection 3 does not see connection 1's writes after step {i}")
h[1].flush()
open(out, "wb").write(model)
PY
}

for mode in bypass read writethrough writeback unsafe adaptive; do
    cp "$T/orig.img" "$T/$mode.img"
    start_server "$mode" --filter=gmblock-cache gmblock file="$T/$mode.img" \
        cache-mode=$mode cache-size=4M cache-block-size=16K writeback-interval=3600
    mc "$mode" "$T/$mode.want" || fail "$mode: multi-conn check failed"
    if [[ $mode == writeback ]]; then
        pid=$(server_pid "$mode"); kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
        eval "_pid_$mode="
        cmp "$T/$mode.img" "$T/$mode.want" || fail "writeback: a flush on another connection did not make the writes durable"
    else
        stop_server "$mode"
        cmp "$T/$mode.img" "$T/$mode.want" || fail "$mode: backing file differs after shutdown"
    fi
    info "$mode: ok"
done

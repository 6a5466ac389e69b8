#!/bin/bash
# gmblock-cache write-back durability: write, flush, write more, then
# kill -9 nbdkit.  On the backing file everything flushed must be there;
# each block written after the flush must be either its old or its new
# contents, whole, never a mix or garbage.  Then the same with a flush
# before the kill: everything must be there.  And FUA: a FUA write is
# durable without a flush, and so is every write acknowledged before it.
. "$(dirname "$0")/functions.sh"
cd "$T"

M=1048576 BS=65536
randfile "$T/A" $((16 * M))
randfile "$T/B" $((16 * M))
randfile "$T/C" $((16 * M))

kill9 () {
    local pid
    pid=$(server_pid "$1")
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    eval "_pid_$1="
}

# write NAME FILE OFFSET LENGTH FLUSH(0/1) FUA(0/1): copy FILE[OFFSET,+LENGTH) there.
write () {
    /usr/bin/python3 - "$(uri "$1")" "$2" "$3" "$4" "$5" "$6" <<'PY'
import sys, nbd
uri, src, off, n, flush, fua = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
h = nbd.NBD()
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
h.connect_uri(uri)
data = open(src, "rb").read()[off:off + n]
step = 256 * 1024
for o in range(0, n, step):
    h.pwrite(data[o:o + step], off + o, nbd.CMD_FLAG_FUA if fua else 0)
# Some small unaligned writes too, inside the range.
for o in range(off + 1000, off + n, 3 * 65536 + 777):
    h.pwrite(data[o - off:o - off + 5000], o, nbd.CMD_FLAG_FUA if fua else 0)
if flush:
    h.flush()
h.shutdown()
PY
}

# check IMG LO HI ALLOWED...: every block of IMG in [LO,HI) equals the
# same block of one of the ALLOWED files; prints how many matched each.
check () {
    /usr/bin/python3 - "$@" <<'PY'
import sys
img, lo, hi, *allowed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
BS = 65536
d = open(img, "rb").read()
srcs = [open(a, "rb").read() for a in allowed]
counts = [0] * len(srcs)
for o in range(lo, hi, BS):
    for i, s in enumerate(srcs):
        if d[o:o + BS] == s[o:o + BS]:
            counts[i] += 1
            break
    else:
        sys.exit(f"{img}: block at {o} is none of {allowed}")
print(" ".join(f"{a.rsplit('/', 1)[1]}={c}" for a, c in zip(allowed, counts)))
PY
}

opts=(cache-mode=writeback cache-size=32M writeback-interval=3600)

# 1. Flushed B over [0,8M), unflushed C over [4M,12M), kill -9.
cp "$T/A" "$T/disk.img"
start_server wb --filter=gmblock-cache gmblock file="$T/disk.img" "${opts[@]}"
write wb "$T/B" 0 $((8 * M)) 1 0
write wb "$T/C" $((4 * M)) $((8 * M)) 0 0
kill9 wb
check "$T/disk.img" 0 $((4 * M)) "$T/B" >/dev/null || fail "flushed data lost"
[[ $(check "$T/disk.img" 0 $((4 * M)) "$T/B") == "B=64" ]] || fail "flushed data incomplete"
r1=$(check "$T/disk.img" $((4 * M)) $((8 * M)) "$T/B" "$T/C") || fail "unflushed region (over flushed data) is not whole old or new blocks"
r2=$(check "$T/disk.img" $((8 * M)) $((12 * M)) "$T/A" "$T/C") || fail "unflushed region (over old data) is not whole old or new blocks"
[[ $(check "$T/disk.img" $((12 * M)) $((16 * M)) "$T/A") == "A=64" ]] || fail "untouched region changed"
info "after kill -9: flushed data all there; unflushed blocks: $r1 / $r2"

# The restarted server serves what is on disk.
start_server wb --filter=gmblock-cache gmblock file="$T/disk.img" "${opts[@]}"
nbdcopy "$(uri wb)" "$T/out.img"
cmp "$T/out.img" "$T/disk.img" || fail "restarted server does not serve the backing file"
stop_server wb

# 2. The same with a flush at the end: everything is there.
cp "$T/A" "$T/disk.img"
start_server wb --filter=gmblock-cache gmblock file="$T/disk.img" "${opts[@]}"
write wb "$T/B" 0 $((8 * M)) 1 0
write wb "$T/C" $((4 * M)) $((8 * M)) 1 0
kill9 wb
[[ $(check "$T/disk.img" 0 $((4 * M)) "$T/B") == "B=64" ]] || fail "flushed B lost"
[[ $(check "$T/disk.img" $((4 * M)) $((12 * M)) "$T/C") == "C=128" ]] || fail "flushed C lost"
info "flush then kill -9: all there"

# 3. FUA writes, no flush: all there.
cp "$T/A" "$T/disk.img"
start_server wb --filter=gmblock-cache gmblock file="$T/disk.img" "${opts[@]}"
write wb "$T/C" $((2 * M)) $((4 * M)) 0 1
kill9 wb
[[ $(check "$T/disk.img" $((2 * M)) $((6 * M)) "$T/C") == "C=64" ]] || fail "FUA writes lost"
info "FUA then kill -9: all there"

# 3b. A FUA reply covers every write acknowledged before it, not only
# its own: unflushed writes, then one small FUA write (or FUA zero)
# elsewhere, kill -9: the earlier writes are all there.  In writeback
# mode and in adaptive mode writing back.
fua_one () {    # fua_one NAME OFFSET write|zero
    /usr/bin/python3 - "$(uri "$1")" "$2" "$3" <<'PY'
import sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
off = int(sys.argv[2])
if sys.argv[3] == "zero":
    h.zero(65536, off, nbd.CMD_FLAG_FUA)
else:
    h.pwrite(b"\x5a" * 4096, off, nbd.CMD_FLAG_FUA)
h.shutdown()
PY
}
for mode in "cache-mode=writeback" "cache-mode=adaptive adaptive-writes=back"; do
    for op in write zero; do
        cp "$T/A" "$T/disk.img"
        # shellcheck disable=SC2086
        start_server wb --filter=gmblock-cache gmblock file="$T/disk.img" \
            $mode cache-size=32M writeback-interval=3600
        write wb "$T/C" $((4 * M)) $((4 * M)) 0 0
        fua_one wb $((14 * M)) $op
        kill9 wb
        [[ $(check "$T/disk.img" $((4 * M)) $((8 * M)) "$T/C") == "C=64" ]] ||
            fail "$mode: a FUA $op did not cover the writes acknowledged before it"
        info "$mode: unflushed writes, then a FUA $op elsewhere, kill -9: all there"
    done
done

# 4. Control: without a flush, a kill -9 does lose write-back data
# (otherwise case 1 proved nothing about write-back).
cp "$T/A" "$T/disk.img"
start_server wb --filter=gmblock-cache gmblock file="$T/disk.img" "${opts[@]}"
write wb "$T/C" 0 $((4 * M)) 0 0
kill9 wb
r=$(check "$T/disk.img" 0 $((4 * M)) "$T/A" "$T/C") || fail "unflushed blocks not whole"
[[ $r != "A=0 C=64" ]] || fail "control: unflushed writes were all on disk, so write-back was not in effect"
info "control: unflushed, killed: $r"

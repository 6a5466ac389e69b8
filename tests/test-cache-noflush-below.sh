#!/bin/bash
# gmblock-cache above a layer that has no flush: nbdkit's eval plugin
# with no flush method (nbdkit then advertises neither flush nor FUA for
# it, and asserts that no flush reaches it).  NBD semantics: a server
# that does not advertise flush has no volatile cache of its own, its
# writes are as durable as they will be once acknowledged (the Linux
# client then runs the device as write-through).  The cache is such a
# volatile cache, so it advertises flush and FUA in every caching mode:
# a flush (or a FUA write) writes back what is dirty and succeeds
# without a flush below.  The plugin sees no flush (nbdkit would abort
# on its assertion), and the file has every flushed or FUA write before
# nbdkit stops.  Control: the plugin alone advertises neither.  Clients:
# nbdsh, and qemu-io (write, write -f for FUA, flush).
. "$(dirname "$0")/functions.sh"
require nbdkit qemu-io
cd "$T"

M=1048576 blk=65536
# EVAL: an eval plugin over file $1, with no flush, logging its calls
# to $2.
eval_args () {
    local f=$1 log=$2
    EVAL=(eval get_size="stat -c %s $f" \
         pread="echo pread \$3 \$4 >>$log; dd if=$f skip=\$4 count=\$3 iflag=skip_bytes,count_bytes status=none" \
         pwrite="echo pwrite \$3 \$4 >>$log; dd of=$f seek=\$4 conv=notrunc oflag=seek_bytes status=none" \
         can_write="exit 0")
}

truncate -s $M "$T/plain.img"
eval_args "$T/plain.img" "$T/plain.calls"
start_server plain "${EVAL[@]}"
flags=$(nbdsh -u "$(uri plain)" -c 'print(h.can_flush(), h.can_fua())')
[[ $flags == "False False" ]] || fail "control: the eval plugin alone advertises flush/FUA: $flags"
stop_server plain

for mode in writethrough writeback "adaptive adaptive-writes=back"; do
    name=m${mode%% *}
    truncate -s $M "$T/$name.img"
    eval_args "$T/$name.img" "$T/$name.calls"
    # shellcheck disable=SC2086
    start_server "$name" --filter=gmblock-cache "${EVAL[@]}" \
        cache-mode=$mode cache-block-size=64K cache-size=2M \
        writeback-interval=3600 cache-stats="$T/$name.stats"
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$name")" "$T/$name.img" "$mode" <<'PY'
import nbd, os, sys
uri, img, mode = sys.argv[1:]
blk = 64 * 1024
h = nbd.NBD()
h.connect_uri(uri)
if not (h.can_flush() and h.can_fua()):
    sys.exit(f"the cache does not advertise flush and FUA: {h.can_flush()} {h.can_fua()}")

def on_disk(n, off):
    with open(img, "rb") as f:
        f.seek(off)
        return f.read(n)

a, b = os.urandom(blk), os.urandom(blk)
h.pwrite(a, 0)
below = on_disk(blk, 0) == a
if below != (mode == "writethrough"):
    sys.exit(f"control: a write without FUA is {'' if below else 'not '}in the file at once")
h.flush()
if on_disk(blk, 0) != a:
    sys.exit("a flush succeeded and the file lacks the write before it")
h.pwrite(b, 2 * blk, nbd.CMD_FLAG_FUA)
if on_disk(blk, 2 * blk) != b:
    sys.exit("a FUA write succeeded and the file lacks it")
h.shutdown()
print("flush and FUA advertised, succeed, and leave the writes in the file")
PY
) || fail "cache-mode=$mode: $out"
    qemu-io -f raw -t writeback -c "write -P 0x55 $((4 * blk)) $blk" -c flush \
        -c "write -f -P 0x66 $((6 * blk)) $blk" "$(uri "$name")" >"$T/$name.qio" 2>&1 ||
        { cat "$T/$name.qio" >&2; fail "cache-mode=$mode: qemu-io failed"; }
    grep -q failed "$T/$name.qio" && { cat "$T/$name.qio" >&2; fail "cache-mode=$mode: a qemu-io request failed"; }
    for p in "4 55" "6 66"; do
        set -- $p
        [[ $(od -An -tx1 -v -j $(($1 * blk)) -N $blk "$T/$name.img" | tr -s ' \n' '\n' | sort -u | xargs) == "$2" ]] ||
            fail "cache-mode=$mode: qemu-io's flushed or FUA write is not in the file before shutdown"
    done
    grep -qv '^p\(read\|write\) ' "$T/$name.calls" &&
        fail "cache-mode=$mode: the plugin got other calls: $(grep -v '^p\(read\|write\) ' "$T/$name.calls")"
    stop_server "$name"
    s=$T/$name.stats
    got="flushes=$(ccounter "$s" flushes) fua=$(ccounter "$s" fua) fua_flushes=$(ccounter "$s" fua_flushes) writebacks=$(ccounter "$s" writebacks) errors=$(ccounter "$s" errors)"
    # nbdsh and qemu-io: a flush and a FUA write each, and qemu's flush
    # at close.  In the write-back modes each FUA write is a flush, and
    # the four writes are written back.
    case $mode in
        writethrough) want="flushes=3 fua=2 fua_flushes=0 writebacks=0 errors=0" ;;
        *)            want="flushes=3 fua=2 fua_flushes=2 writebacks=4 errors=0" ;;
    esac
    [[ $got == "$want" ]] || fail "cache-mode=$mode: counters $got, want $want"
    info "cache-mode=$mode: $out (nbdsh, qemu-io); $got"
done
echo PASS

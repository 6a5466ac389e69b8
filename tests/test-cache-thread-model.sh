#!/bin/bash
# gmblock-cache over a plugin that is not parallel.  The filter's own
# threads (write-back helpers, the flusher) and every client share one
# context below, outside nbdkit's request locks; over an sh plugin that
# declares serialize_all_requests, one flush used to produce 20
# concurrent pwrite calls.  The plugin below records any call that
# starts while another is running; there must be none, in every mode,
# with 4 clients reading, writing, flushing and asking for extents at
# once (serialize_requests: writeback only, the busiest).  Control: the same plugin declaring parallel does see overlaps
# (so the detector works).  Also: over a plugin that gives no block
# sizes the advertised maximum is one nbdkit accepts (it was 4 GiB - 1).
. "$(dirname "$0")/functions.sh"
require nbdinfo
cd "$T"

M=1048576
cat >"$T/disk.sh" <<'SH'
#!/bin/bash
dir=$(dirname "$0") img=$(dirname "$0")/disk.img
# A call that finds the busy marker taken overlaps another one.
enter () { mkdir "$dir/busy" 2>/dev/null || echo "$1 $2" >>"$dir/overlaps"; }
leave () { rmdir "$dir/busy" 2>/dev/null || true; }
case "$1" in
    thread_model) cat "$dir/model" ;;
    get_size) stat -c %s "$img" ;;
    can_write|can_flush|can_extents) exit 0 ;;
    pread) enter pread "$4"
           dd if="$img" iflag=skip_bytes,count_bytes skip="$4" count="$3" status=none
           leave ;;
    pwrite) enter pwrite "$4"; sleep 0.01
            dd of="$img" oflag=seek_bytes conv=notrunc seek="$4" status=none
            leave ;;
    flush) enter flush; sync "$img"; leave ;;
    extents) enter extents; echo "$4 $3 0"; leave ;;
    *) exit 2 ;;
esac
SH
chmod +x "$T/disk.sh"
randfile "$T/data" $((4 * M))

# load NAME: 4 clients at once; each writes 16 blocks of its own quarter,
# reads them back, asks for extents and flushes; finally all is compared.
load () {
    /usr/bin/python3 - "$(uri "$1")" "$T/data" <<'PY'
import nbd, sys, threading
uri, data = sys.argv[1], open(sys.argv[2], "rb").read()
q = len(data) // 4
errors = []
def client(k):
    try:
        h = nbd.NBD()
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
        h.connect_uri(uri)
        for i in range(16):
            o = k * q + i * 65536
            h.pwrite(data[o:o + 65536], o)
        h.block_status(q, k * q, lambda *a: 0)
        h.flush()
        assert h.pread(q, k * q) == data[k * q:(k + 1) * q], f"client {k}: wrong data"
        h.shutdown()
    except Exception as e:
        errors.append(e)
ts = [threading.Thread(target=client, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
if errors:
    sys.exit(f"errors: {errors}")
PY
}

for model in serialize_all_requests serialize_requests; do
    modes=(writeback writethrough adaptive)
    [[ $model == serialize_requests ]] && modes=(writeback)
    for mode in "${modes[@]}"; do
        echo "$model" >"$T/model"
        head -c $((4 * M)) /dev/zero >"$T/disk.img"
        rm -f "$T/overlaps"
        start_server s --filter=gmblock-cache sh "$T/disk.sh" \
            cache-mode=$mode writeback-interval=0.05
        load s || fail "$model/$mode: clients failed"
        stop_server s
        cmp "$T/disk.img" <(head -c $((4 * M)) "$T/data" | python3 -c "
import sys
d = sys.stdin.buffer.read(); q = len(d) // 4; out = bytearray(len(d))
for k in range(4):
    out[k * q:k * q + 16 * 65536] = d[k * q:k * q + 16 * 65536]
sys.stdout.buffer.write(out)") || fail "$model/$mode: disk contents wrong"
        [[ ! -s $T/overlaps ]] ||
            fail "$model/$mode: $(wc -l <"$T/overlaps") calls below overlapped another: $(head -3 "$T/overlaps" | tr '\n' ' ')"
        info "$model/$mode: no overlapping calls below, data right"
    done
done

# Control: a parallel plugin does get concurrent calls (the detector works).
echo parallel >"$T/model"
head -c $((4 * M)) /dev/zero >"$T/disk.img"
rm -f "$T/overlaps"
start_server p --filter=gmblock-cache sh "$T/disk.sh" cache-mode=writeback
load p || fail "parallel: clients failed"
stop_server p
[[ -s $T/overlaps ]] || fail "control: a parallel plugin saw no overlapping calls: the detector proves nothing"
info "control: parallel plugin saw $(wc -l <"$T/overlaps") overlapping calls"

# No block sizes below: the advertised maximum must be one nbdkit accepts.
echo parallel >"$T/model"
start_server b --filter=gmblock-cache sh "$T/disk.sh"
max=$(nbdinfo --json "$(uri b)" | python3 -c "import json,sys; print(json.load(sys.stdin)['exports'][0]['block_size_maximum'])")
(( max <= 64 * M )) || fail "block_size_maximum is $max, above nbdkit's 64M request limit"
info "no block sizes below: maximum advertised $max"
stop_server b

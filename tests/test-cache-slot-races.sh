#!/bin/bash
# gmblock-cache in the write-around modes (read, writethrough): slots
# that readers use while a write, zero or trim changes their block.
# nbdkit's delay filter below widens the windows; 1M blocks make every
# hit's copy out of the slot long.  Checked against a model: a read
# sent after a request's reply must see that request, and every byte a
# read returns must belong to a version of the block that was current
# at some time while the read ran.
#  1. zero / trim of a block the cache does not hold, slow below
#     (400 ms, four times): readers fill the block meanwhile (from the
#     old data) and keep hitting it; at the reply the filter must drop that copy,
#     waiting for the readers' copies out of it to end (blocks.c
#     release_one).  Reads after the reply: zeros.
#  2. writes to a block readers keep hitting: the update of the
#     resident copy after the write below waits for the readers' copies
#     out of it (blocks.c block_update); reads after each reply see it.
#  3. writethrough: every slot being filled (16 slots, 20 reads, 200 ms
#     below) when a whole-block write, whose block is not resident,
#     wants a slot for its data: it waits for one (take_slot's retry),
#     and the data and the reads are right.
# Not reliably hit on every run (each is a race): instrumented, a run
# reached block_update's wait 3-9 times, the retry 1-2 times and
# release_one's wait 1-2 times.
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"

M=1048576
for mode in read writethrough; do
    randfile "$T/$mode.img" $((32 * M))
    cp "$T/$mode.img" "$T/$mode.want"
    start_server "$mode" --filter=gmblock-cache --filter=delay gmblock \
        file="$T/$mode.img" cache-mode=$mode cache-block-size=1M cache-size=16M \
        cache-stats="$T/$mode.stats" delay-read=200ms delay-write=50ms \
        delay-zero=400ms delay-trim=400ms
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$mode")" "$T/$mode.want" "$mode" <<'PY'
import nbd, os, sys, threading
uri, want, mode = sys.argv[1:]
M = 1 << 20
disk = bytearray(open(want, "rb").read())
lock = threading.Lock()
versions = {}               # block -> its versions so far (bytes), newest last
errors = []

def conn():
    h = nbd.NBD()
    h.connect_uri(uri)
    return h

def acked(b, data):
    with lock:
        versions.setdefault(b, [bytes(disk[b * M:(b + 1) * M])]).append(data)
        disk[b * M:(b + 1) * M] = data

def check(b, got, first, n):
    with lock:
        vs = versions.get(b, [bytes(disk[b * M:(b + 1) * M])])
        # Versions current during the read: the newest acknowledged
        # before it was sent, those after, and one still in flight.
        ok = vs[first:] + pending.get(b, [])
    if got in ok:
        n[0] += 1
        return True
    for i in range(0, M, 4096):
        if all(got[i:i + 4096] != v[i:i + 4096] for v in ok):
            errors.append(f"block {b}: a read returned bytes at {i} of no "
                          f"version current while it ran ({len(ok)} candidates)")
            return False
    n[0] += 1
    return True

def reader(b, stop, n):
    h = conn()
    while not stop.is_set():
        with lock:
            first = len(versions.get(b, [None])) - 1
        if not check(b, h.pread(M, b * M), first, n):
            return
    h.shutdown()

pending = {}

def with_readers(b, nreaders, body):
    stop, counts = threading.Event(), []
    ts = []
    for _ in range(nreaders):
        counts.append([0])
        ts.append(threading.Thread(target=reader, args=(b, stop, counts[-1])))
    for t in ts:
        t.start()
    body()
    stop.set()
    for t in ts:
        t.join()
    if errors:
        sys.exit(errors[0])
    return sum(c[0] for c in counts)

h = conn()
# 1. A zero and a trim of a block not resident, readers filling it meanwhile.
reads = 0
for b in (1, 2, 3, 4):
    what = ("zero", "trim")[b % 2]
    def change():
        pending[b] = [bytes(M)]
        (h.zero if what == "zero" else h.trim)(M, b * M)
        acked(b, bytes(M))
        del pending[b]
        # Reads sent from now on must see zeros.
        for _ in range(20):
            if h.pread(M, b * M) != bytes(M):
                sys.exit(f"a read after the {what}'s reply returned old data")
    reads += with_readers(b, 6, change)
# 2. Writes to a block readers keep hitting.
h.pread(M, 8 * M)                               # resident
def writes():
    for i in range(12):
        data = bytes([i + 1]) * (M - 4096) + os.urandom(4096)
        pending[8] = [data]
        h.pwrite(data, 8 * M)
        acked(8, data)
        del pending[8]
        if h.pread(M, 8 * M) != data:
            sys.exit("a read after a write's reply did not return it")
reads += with_readers(8, 6, writes)
# 3. Every slot being filled when a whole-block write wants one.
if mode == "writethrough":
    hs = [conn(), conn()]
    cmds = []
    for k, b in enumerate(range(12, 32)):
        buf = nbd.Buffer(M)
        cmds.append((hs[k % 2], hs[k % 2].aio_pread(buf, b * M), buf, b))
    data = os.urandom(M)
    h.pwrite(data, 9 * M)
    acked(9, data)
    for hh, c, buf, b in cmds:
        while not hh.aio_command_completed(c):
            hh.poll(-1)
        if buf.to_bytearray() != disk[b * M:(b + 1) * M]:
            sys.exit(f"a read of block {b}, filled while the slots ran out, differs")
    if h.pread(M, 9 * M) != data:
        sys.exit("the write that waited for a slot reads back differently")
    for hh in hs:
        hh.shutdown()
if h.pread(32 * M, 0) != disk:
    sys.exit("at the end the export differs from the model")
h.shutdown()
open(want, "wb").write(disk)
print(f"{reads} racing reads, each as the model allows")
PY
) || fail "cache-mode=$mode: $out"
    stop_server "$mode"
    cmp "$T/$mode.img" "$T/$mode.want" || fail "cache-mode=$mode: the file differs from the model"
    s=$T/$mode.stats
    [[ $(ccounter "$s" hits) -gt 100 ]] || fail "cache-mode=$mode: only $(ccounter "$s" hits) hits: the readers did not race"
    info "cache-mode=$mode: $out; $(ccounter "$s" hits) hits, $(ccounter "$s" fill_waits) fill waits, $(ccounter "$s" invalidations) invalidations"
done
echo PASS

#!/bin/bash
# A FUA reply covers every write acknowledged before the FUA request was
# sent (README), whatever the request: a FUA trim or zero must
# fdatasync the writes before it, even when it has nothing to do itself
# (discard=ignore: it used to answer at once).  Plain and through
# gmblock-cache in the modes that pass FUA down.  The fdatasyncs are
# counted with strace (ring=none: the plugin makes the syscall itself).
# Control: the same requests without FUA make none.
. "$(dirname "$0")/functions.sh"
require strace
cd "$T"

# check NAME: after an acknowledged write, each request without FUA
# makes no fdatasync and each with FUA makes one at least.
check () {
    timeout 60 /usr/bin/python3 - "$(uri "$1")" "$T/$1.strace" <<'PY'
import nbd, sys, time
h = nbd.NBD()
h.connect_uri(sys.argv[1])

def syncs():
    return open(sys.argv[2]).read().count("fdatasync(")

def settled(n, patience):      # strace writes as it goes: wait for it
    for _ in range(patience):
        time.sleep(0.05)
        if syncs() != n:
            return syncs()
    return n

bad = []
for name, op in [("trim", lambda f: h.trim(4096, 524288, f)),
                 ("trim 512 bytes", lambda f: h.trim(512, 524288 + 512, f)),
                 ("zero", lambda f: h.zero(4096, 589824, f))]:
    h.pwrite(b"A" * 65536, 0)             # acknowledged, not synced
    n = settled(syncs(), 6)
    op(0)
    m = settled(n, 6)
    if m != n:
        bad.append(f"{name} without FUA made {m - n} fdatasync(s)")
    h.pwrite(b"B" * 65536, 0)
    n = settled(m, 6)
    op(nbd.CMD_FLAG_FUA)
    m = settled(n, 40)
    if m == n:
        bad.append(f"{name} with FUA did not fdatasync the write before it")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
}

truncate -s 1M "$T/disk.img"
n=0
for discard in ignore unmap; do
    for stack in "" cache-mode=writethrough cache-mode=read cache-mode=bypass; do
        n=$((n + 1)) name=s$n
        filter=() args=()
        [[ -n $stack ]] && filter=(--filter=gmblock-cache) args=("$stack")
        start_traced "$name" fdatasync "${filter[@]}" gmblock file="$T/disk.img" ring=none \
            discard=$discard "${args[@]}"
        out=$(check "$name") || fail "discard=$discard ${stack:-plain}: $out"
        stop_traced "$name"
        info "discard=$discard ${stack:-plain}: FUA trim and zero sync the writes before them"
    done
done

#!/bin/bash
# A FUA write is durable when it is acknowledged, even when nothing
# before it is left to sync: the plugin then writes it with RWF_DSYNC
# instead of following it with an fdatasync, and nothing else in the
# suite looked at that write's flags.  With ring=none the plugin makes
# the syscalls itself, so strace shows them: after a flush (no write
# left unsynced), a FUA write must reach the file as a pwritev2 with
# RWF_DSYNC or be followed by an fdatasync; a plain write must do
# neither (control), and the flush after it must fdatasync (else only
# test-fault-writeback's race, as root, noticed a flush that syncs
# nothing).  Plain, and through gmblock-cache in every mode
# (writethrough, read and bypass pass FUA down; write-back turns it into
# a flush).  Unaligned FUA writes too (read-modify-write).
. "$(dirname "$0")/functions.sh"
require strace
cd "$T"

# check NAME: run the FUA write checks against server NAME.
check () {
    timeout 60 /usr/bin/python3 - "$(uri "$1")" "$T/$1.strace" <<'PY'
import nbd, re, sys, time
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)  # unaligned too

def durable():
    # syscalls that make a write durable: fdatasync, or a pwritev2 whose
    # flags include RWF_DSYNC (strace -f: "<unfinished ...>" lines keep
    # the arguments, their "resumed" halves only the result)
    n = 0
    for line in open(sys.argv[2]):
        if "fdatasync(" in line:
            n += 1
        elif "pwritev2(" in line and "RWF_DSYNC" in line:
            n += 1
    return n

def settled(n, patience):      # strace writes as it goes: wait for it
    for _ in range(patience):
        time.sleep(0.05)
        if durable() != n:
            return durable()
    return n

bad = []
for name, off, size in [("aligned 64K", 0, 65536),
                        ("unaligned 1000 bytes", 70000 + 3, 1000)]:
    h.pwrite(b"A" * size, off)
    h.flush()                              # nothing left unsynced
    n = settled(durable(), 10)
    h.pwrite(b"B" * size, off)             # plain: no sync owed
    m = settled(n, 6)
    if m != n:
        bad.append(f"{name}: a plain write made {m - n} durable syscall(s)")
    h.flush()                              # owes the plain write a sync
    n = settled(m, 40)
    if n == m:
        bad.append(f"{name}: a flush after a plain write made no fdatasync")
    n = settled(n, 10)
    h.pwrite(b"C" * size, off, nbd.CMD_FLAG_FUA)
    m = settled(n, 40)
    if m == n:
        bad.append(f"{name}: a FUA write after a flush was acknowledged with "
                   "no RWF_DSYNC write and no fdatasync")
    if h.pread(size, off) != b"C" * size:
        bad.append(f"{name}: the FUA write does not read back")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
}

truncate -s 1M "$T/disk.img"
n=0
for stack in "" cache-mode=writethrough cache-mode=read cache-mode=bypass \
        cache-mode=writeback; do
    n=$((n + 1)) name=s$n
    filter=() args=()
    [[ -n $stack ]] && filter=(--filter=gmblock-cache) args=("$stack")
    start_traced "$name" fdatasync,pwritev2 "${filter[@]}" gmblock \
        file="$T/disk.img" ring=none "${args[@]}"
    out=$(check "$name") || fail "${stack:-plain}: $out"
    stop_traced "$name"
    # Negative control of the parser: the strace saw the writes at all.
    grep -q 'pwritev2(' "$T/$name.strace" ||
        fail "${stack:-plain}: strace saw no pwritev2 (ring=none not in effect?)"
    info "${stack:-plain}: FUA writes are made durable, plain writes are not"
done

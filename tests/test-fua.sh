#!/bin/bash
# FUA and flush durability, seen in the syscalls (ring=none: the plugin
# makes them itself, so strace shows them).  A durable syscall is an
# fdatasync or a pwritev2 with RWF_DSYNC.
#  - writes: after a flush (nothing left unsynced), a FUA write must
#    make one (the plugin writes it with RWF_DSYNC instead of following
#    it with an fdatasync; nothing else looked at that write's flags); a
#    plain write must make none (control), and the flush after it must
#    fdatasync (else only test-fault-writeback's race, as root, noticed
#    a flush that syncs nothing).  Aligned, and unaligned (read-modify-
#    write).
#  - trims and zeroes: a FUA reply covers every write acknowledged before
#    the FUA request was sent (README), whatever the request: a FUA trim
#    or zero must fdatasync the writes before it, even when it has
#    nothing to do itself (discard=ignore: it used to answer at once);
#    without FUA, none.
# Plain and through gmblock-cache in the modes that pass FUA down
# (writethrough, read, bypass), and write-back (FUA writes become a
# flush there).
. "$(dirname "$0")/functions.sh"
require strace
cd "$T"

# check NAME WHAT...: run the checks WHAT (writes, trims) on server NAME.
check () {
    local name=$1; shift
    timeout 60 /usr/bin/python3 - "$(uri "$name")" "$T/$name.strace" "$@" <<'PY'
import nbd, sys, time
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)  # unaligned too

def durable():
    # strace -f: "<unfinished ...>" lines keep the arguments, their
    # "resumed" halves only the result
    n = 0
    for line in open(sys.argv[2]):
        if "fdatasync(" in line or ("pwritev2(" in line and "RWF_DSYNC" in line):
            n += 1
    return n

def settled(n, patience):      # strace writes as it goes: wait for it
    for _ in range(patience):
        time.sleep(0.05)
        if durable() != n:
            return durable()
    return n

bad = []
if "writes" in sys.argv[3:]:
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
            bad.append(f"{name}: a FUA write after a flush was acknowledged "
                       "with no RWF_DSYNC write and no fdatasync")
        if h.pread(size, off) != b"C" * size:
            bad.append(f"{name}: the FUA write does not read back")
if "trims" in sys.argv[3:]:
    for name, op in [("trim", lambda f: h.trim(4096, 524288, f)),
                     ("trim 512 bytes", lambda f: h.trim(512, 524288 + 512, f)),
                     ("zero", lambda f: h.zero(4096, 589824, f))]:
        h.pwrite(b"A" * 65536, 0)             # acknowledged, not synced
        n = settled(durable(), 6)
        op(0)
        m = settled(n, 6)
        if m != n:
            bad.append(f"{name} without FUA made {m - n} durable syscall(s)")
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
for run in "unmap writes trims" "ignore trims" "unmap writes writeback"; do
    read -r discard what1 what2 <<<"$run"
    stacks=("" cache-mode=writethrough cache-mode=read cache-mode=bypass)
    [[ $what2 == writeback ]] && stacks=(cache-mode=writeback) what2=
    for stack in "${stacks[@]}"; do
        n=$((n + 1)) name=s$n
        filter=() args=()
        [[ -n $stack ]] && filter=(--filter=gmblock-cache) args=("$stack")
        start_traced "$name" fdatasync,pwritev2 "${filter[@]}" gmblock \
            file="$T/disk.img" ring=none discard="$discard" "${args[@]}"
        # shellcheck disable=SC2086
        out=$(check "$name" $what1 $what2) ||
            fail "discard=$discard ${stack:-plain}: $out"
        stop_traced "$name"
        # Negative control of the parser: the strace saw the writes at all.
        grep -q 'pwritev2(' "$T/$name.strace" ||
            fail "${stack:-plain}: strace saw no pwritev2 (ring=none not in effect?)"
        info "discard=$discard ${stack:-plain}: ${what1}${what2:+ and $what2} made durable as owed, and only then"
    done
done

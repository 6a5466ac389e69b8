#!/bin/bash
# Transfers the kernel cuts short or interrupts (tests/fault-syscalls.c,
# ring=none: the plugin's own preadv2/pwritev2; io_uring completions
# go through the same loop, gm_rw_loop): a read or write that moves
# only part of its bytes is continued from where it stopped, one that
# fails with EINTR is issued again, and a write that moves nothing
# fails with EIO instead of spinning.  Data byte for byte throughout.
. "$(dirname "$0")/functions.sh"
require nbdcopy cmp
cd "$T"
fault_shim

randfile disk.img 8M
serve_faults s "$T/disk.img"

# rounds FAULT: write a new 8M image through the server and read it
# back, both under FAULT; the shim's log must show FAULT at work.
rounds () {
    local fault=$1 what=$2
    : >faults/log
    touch "faults/$fault"
    randfile "new-$fault.img" 8M
    nbdcopy "new-$fault.img" "$(uri s)" || fail "$fault: writing through the server failed"
    nbdcopy "$(uri s)" "back-$fault.img" || fail "$fault: reading through the server failed"
    rm -f "faults/$fault"
    cmp "new-$fault.img" "back-$fault.img" || fail "$fault: read back other bytes"
    cmp "new-$fault.img" disk.img || fail "$fault: the file holds other bytes"
    grep -q "^write .* $what" faults/log || fail "$fault: no write was $what (shim not in effect?): no test"
    grep -q "^read .* $what" faults/log || fail "$fault: no read was $what: no test"
    info "$fault: $(grep -c " $what" faults/log) transfers $what, data intact"
}
rounds rw-short short
rounds rw-eintr EINTR

# A write that moves nothing fails: EIO to the client, the disk as it
# was, and the server goes on serving.
cp disk.img before.img
touch faults/write-zero
timeout 60 /usr/bin/python3 - "$(uri s)" <<'PY' || fail "a write that moved nothing did not fail with EIO"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
try:
    h.pwrite(b"x" * 65536, 1 << 20)
except nbd.Error as e:
    if e.errnum != 5:
        sys.exit(f"expected EIO, got {e}")
else:
    sys.exit("the write succeeded")
PY
rm -f faults/write-zero
grep -q "^write .* zero" faults/log || fail "write-zero was not in effect: no test"
nbdcopy "$(uri s)" after.img || fail "reads failed after the failed write"
cmp before.img after.img || fail "the failed write changed the export"
stop_server s
cmp before.img disk.img || fail "the failed write changed the file"
echo PASS

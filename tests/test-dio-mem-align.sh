#!/bin/bash
# A disk whose DMA alignment is larger than its offset alignment
# (statx: dio_offset_align 512, dio_mem_align 4096; a ublk device can
# say so, as can any driver whose queue dma_alignment exceeds its
# logical block).  gmblock accepted such a file and used 512-byte
# blocks; the read-modify-write of an unaligned write read the partial
# last block into the pool buffer at a 512-byte multiple, an address
# such a disk refuses (EINVAL): a 2-byte write across a 512-byte
# boundary failed.  tests/fault-syscalls.c's mem-align-4096 makes the
# test file look so: statx reports dio_mem_align 4096, and
# preadv2/pwritev2 (ring=none: the plugin calls them itself) fail with
# EINVAL on an O_DIRECT descriptor whose buffer does not start on 4096.
. "$(dirname "$0")/functions.sh"
require cmp
cd "$T"

fault_shim
touch faults/mem-align-4096

randfile "$T/disk.img" 1M
cp disk.img expect.img
FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so \
    start_server m gmblock file="$T/disk.img" ring=none stats="$T/m.stats"
timeout 60 /usr/bin/python3 - "$(uri m)" "$T/expect.img" <<'PY' || fail "unaligned writes failed or read back wrong"
import nbd, os, sys
h = nbd.NBD()
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
h.connect_uri(sys.argv[1])
exp = bytearray(open(sys.argv[2], "rb").read())
# Across 512-byte boundaries inside and across 4K pages, and a long
# one whose last partial block is not at a 4K multiple of its start.
for off, n in [(1023, 2), (511, 1), (4095, 2), (700, 5000), (8192 + 3, 70000),
               (65536 - 1, 513), (123457, 1)]:
    d = os.urandom(n)
    try:
        h.pwrite(d, off)
    except nbd.Error as e:
        sys.exit(f"write of {n} bytes at {off} failed: {e}")
    exp[off:off + n] = d
    if h.pread(n, off) != d:
        sys.exit(f"write of {n} bytes at {off} reads back wrong")
h.flush()
if h.pread(len(exp), 0) != bytes(exp):
    sys.exit("the export differs from what was written")
open(sys.argv[2], "wb").write(exp)
PY
stop_server m
grep misaligned faults/log >&2 && fail "O_DIRECT with a misaligned buffer"
cmp disk.img expect.img || fail "the file differs from what was written"
# The shim must have been in effect, or nothing was tested.
grep -q 'statx dio_mem_align' faults/log ||
    fail "statx was not rewritten (shim not preloaded?): no test"
[[ $(counter "$T/m.stats" rmw_bytes) -gt 0 ]] || fail "no read-modify-write: no test"
info "ok: unaligned writes on a disk with 4096-byte DMA alignment and 512-byte blocks"

# What statx says the file cannot do is refused at start-up, saying so
# and what to use instead: no O_DIRECT at all, or an offset alignment
# above 64K.
rm -f faults/*
touch faults/dio-none
FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so start_fails dio_none 'gmblock:' \
    'the filesystem does not support O_DIRECT' 'use direct=false' -- gmblock file="$T/disk.img"
rm -f faults/dio-none
touch faults/dio-offset-128k
FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so start_fails dio_128k 'gmblock:' \
    'unsupported O_DIRECT alignment .offset 131072,' 'use direct=false' -- gmblock file="$T/disk.img"
grep -q 'statx dio_offset_align .* -> 131072' faults/log || fail "statx was not rewritten: no test"
# direct=false serves such a file.
rm -f faults/*
touch faults/dio-none
FAULT_DIR=$T/faults LD_PRELOAD=$T/fault.so start_server buffered gmblock file="$T/disk.img" direct=false
nbdcopy "$(uri buffered)" "$T/copy.img" || fail "direct=false did not serve the file"
stop_server buffered
cmp disk.img copy.img || fail "direct=false served other bytes"
info "ok: a file without O_DIRECT, or with a 128K offset alignment, is refused; direct=false serves it"

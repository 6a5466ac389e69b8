# FAST_ZERO must stay fast when the kernel turns a device's write-zeroes
# offload off at run time (sd does after a failed WRITE SAME, md when a
# member lacks it).  From then on fallocate(ZERO_RANGE) writes zeros
# itself; gmblock, which saw the offload at start-up, must refuse a
# FAST_ZERO (ENOTSUP) rather than zero slowly.  scsi_debug's disk
# supports WRITE SAME; writing 0 to its max_write_same_blocks is what
# the kernel does itself after a refused WRITE SAME.  Plain zeros keep
# working either way.
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
load sd_mod
modprobe -d "$LAB_KDIR" scsi_debug dev_size_mb=64 lbpws=1 ||
    fail "cannot load scsi_debug"
dev=
for i in $(seq 100); do
    for b in /sys/block/sd*; do
        grep -qs scsi_debug "$b/device/model" && dev=/dev/${b##*/}
    done
    [ -n "$dev" ] && [ -b "$dev" ] && break
    sleep 0.1
done
[ -b "$dev" ] || fail "scsi_debug made no block device"
q=/sys/block/${dev#/dev/}/queue
knob=$(echo /sys/block/${dev#/dev/}/device/scsi_disk/*/max_write_same_blocks)
echo "scsi_debug disk $dev: write_zeroes_max_bytes $(cat $q/write_zeroes_max_bytes)"
[ "$(cat $q/write_zeroes_max_bytes)" -gt 0 ] ||
    fail "$dev has no write-zeroes offload: no test"
serve sd 10809 "$dev"

fast_zero() {   # fast_zero OFFSET: prints ok or the errno name
    /usr/bin/python3 - "$1" <<'PY'
import nbd, sys
h = nbd.NBD()
h.connect_uri("nbd://127.0.0.1:10809")
off = int(sys.argv[1])
h.pwrite(b"\x5a" * 1048576, off)
try:
    h.zero(1048576, off, nbd.CMD_FLAG_FAST_ZERO)
    print("ok")
except nbd.Error as e:
    print(e.errnum == 95 and "ENOTSUP" or f"error {e.errnum} {e.string}")
    h.zero(1048576, off)        # a plain zero still works
if h.pread(1048576, off) != bytes(1048576):
    sys.exit("the zeroed range does not read back as zeros")
h.shutdown()
PY
}

step "FAST_ZERO with the offload on"
r=$(fast_zero 0) || fail "client failed"
[ "$r" = ok ] || fail "FAST_ZERO with the offload on: $r"

step "the kernel turns the offload off ($knob = 0)"
echo 0 >"$knob" || fail "cannot write $knob"
[ "$(cat $q/write_zeroes_max_bytes)" = 0 ] ||
    fail "write_zeroes_max_bytes is $(cat $q/write_zeroes_max_bytes) after $knob = 0: no test"
r=$(fast_zero $((8 << 20))) || fail "client failed"
[ "$r" = ENOTSUP ] ||
    fail "FAST_ZERO after the offload went off: $r (the kernel wrote the zeros: slow)"
stop sd
echo "fast_zero_refused $(counter sd fast_zero_refused)"
[ "$(counter sd fast_zero_refused)" = 1 ] || fail "fast_zero_refused is not 1"

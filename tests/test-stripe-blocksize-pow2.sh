#!/bin/bash
# gmblock-stripe under a layer whose maximum block size is not a power
# of two (nbdkit's blocksize-policy filter here; a remote server through
# the nbd plugin or gmblock-rdma's bridge can say the same): a stripe
# larger than that maximum must still advertise a preferred size that
# is a power of two (the NBD spec's MUST).  The filter clamped it to
# the maximum rounded down to the minimum (3M, 12K), and libnbd then
# ignored every block size constraint of the export ("ignoring improper
# server size constraints"): a client lost the maximum, and a request
# up to its own default limit was refused below with EINVAL.
# Under a layer that gives no block sizes at all (nbdkit's memory and
# file plugins) the maximum is nbdkit's own request limit, 64M: it was
# 0xffffffff, which a client other than libnbd could believe and then
# see its large requests refused by nbdkit; a larger maximum below is
# lowered to it too.
. "$(dirname "$0")/functions.sh"
require nbdkit
cd "$T"

check () {
    local name=$1 want_max=$2 want_pref=$3
    /usr/bin/python3 - "$(uri "$name")" "$want_max" "$want_pref" <<'PY' || fail "$name: block sizes lost or wrong"
import nbd, sys
uri, want_max, want_pref = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
h = nbd.NBD()
h.connect_uri(uri)
mn, pref, mx = (h.get_block_size(k) for k in
                (nbd.SIZE_MINIMUM, nbd.SIZE_PREFERRED, nbd.SIZE_MAXIMUM))
print(f"min {mn} preferred {pref} max {mx}")
if mx != want_max or pref != want_pref:
    sys.exit(f"expected preferred {want_pref} and maximum {want_max}")
# A strict client sending the advertised maximum is served.
h.pwrite(b"\1" * mx, 0)
if h.pread(mx, 0) != b"\1" * mx:
    sys.exit("the data read back differs")
h.shutdown()
PY
}

# 4 x 1M stripe over a 3M maximum: the largest power of two in it, 2M.
start_server max3m --filter=gmblock-stripe --filter=blocksize-policy memory 64M \
    stripe-chunk=1M stripe-data-disks=4 blocksize-maximum=3M \
    blocksize-error-policy=error
check max3m $((3 << 20)) $((2 << 20))
info "under a 3M maximum a 4M stripe prefers 2M"

# 4K minimum, 12K maximum, 64K stripe: 8K.
start_server max12k --filter=gmblock-stripe --filter=blocksize-policy memory 64M \
    stripe-chunk=16K stripe-data-disks=4 blocksize-minimum=4096 \
    blocksize-preferred=4096 blocksize-maximum=12K blocksize-error-policy=error
check max12k 12288 8192
info "under a 12K maximum (4K minimum) a 64K stripe prefers 8K"

# No block sizes below (memory): nbdkit's 64M limit, a 192K stripe
# prefers 128K.
start_server nolimit --filter=gmblock-stripe memory 64M \
    stripe-chunk=64K stripe-data-disks=3
check nolimit $((64 << 20)) $((128 << 10))
info "with no block sizes below, the maximum is nbdkit's 64M"

# A maximum above nbdkit's limit below (128M): 64M, which nbdkit serves.
start_server max128m --filter=gmblock-stripe --filter=blocksize-policy memory 64M \
    stripe-chunk=64K stripe-data-disks=3 blocksize-maximum=128M \
    blocksize-error-policy=error
check max128m $((64 << 20)) $((128 << 10))
info "under a 128M maximum, the maximum is nbdkit's 64M"

# READs sent while they land (issue 10 item 4) on md RAID0 (4 members,
# 64 KiB chunks): gmblock-stripe below gmblock-rdma publishes the
# geometry, so a 1 MiB READ is read as 16 chunk pieces, one stream per
# member, and each piece is RDMA-WRITten the moment it lands.  The data
# must come back byte for byte, with the pieces counted and the overlap
# of disk and network measured; the same copy with rdma-piece=0 (each
# READ read whole, then sent) is the control, whose overlap is 0.  A
# READ is split only while it is its client's one request in service
# (rdma-split=alone): read back at depth 1 it is; at depth 8 most READs
# are read whole, unless rdma-split=always. Two vCPUs: on one, where
# nbdcopy, the bridge and the server take turns, most READs found
# themselves alone (16 of 60 read whole, seen).
# lab-disks: virtio:16M virtio:16M virtio:16M virtio:16M
# lab-timeout: 400
# lab-smp: 2
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk
rxe_pair
make_raid 0 /dev/vda /dev/vdb /dev/vdc /dev/vdd
bridge_uri="nbd+unix:///?socket=$LAB_RUN/br.sock"
must head -c 32M /dev/urandom >"$LAB_RUN/a.img"

# copy NAME QD [filter params...]: a.img in and out through a bridge,
# 1 MiB requests, read back with QD in flight; leaves the server's
# counters in NAME.rdma-stats.
copy() {
    local name=$1 qd=$2
    shift 2
    serve "$name" 10809 /dev/md0 --filter=gmblock-rdma --filter=gmblock-stripe \
        -D gmblock-stripe.verbose=1 \
        -- rdma=10.77.0.1 rdma-stats="$LAB_OUT/$name.rdma-stats" "$@"
    bridge br 10.77.0.1
    must nbdcopy --request-size=1048576 "$LAB_RUN/a.img" "$bridge_uri"
    rm -f "$LAB_RUN/out.img"
    must nbdcopy --request-size=1048576 --connections=1 --requests="$qd" \
        "$bridge_uri" "$LAB_RUN/out.img"
    cmp -n $((32 << 20)) "$LAB_RUN/a.img" "$LAB_RUN/out.img" ||
        fail "$name: what came back over RDMA differs from what was written"
    stop br
    stop "$name"
    echo "$name: $(grep -E 'split_reads|pieces|whole_reads|overlap_1M' "$LAB_OUT/$name.rdma-stats" | tr '\n' ' ')"
}

step "one stream per member: 1 MiB READs in 64 KiB pieces"
copy streams 1
n=$(rdma_counter streams.rdma-stats split_reads)
p=$(rdma_counter streams.rdma-stats pieces)
[ "${n:-0}" -gt 0 ] || fail "no READ was split (split_reads ${n:-none})"
[ "$p" = $((n * 16)) ] || fail "$n split READs in $p pieces: expected 16 each (1 MiB in 64 KiB chunks)"
o=$(rdma_counter streams.rdma-stats overlap_1M)
[ -n "$o" ] || fail "no overlap_1M figure"

step "control: each READ read whole, then sent (rdma-piece=0)"
copy whole 1 rdma-piece=0
[ "$(rdma_counter whole.rdma-stats split_reads)" = 0 ] || fail "rdma-piece=0 still split READs"
w=$(rdma_counter whole.rdma-stats overlap_1M)
echo "overlap of disk and network, 1 MiB READs: $o in pieces, $w whole (TCG + soft-RoCE: a ratio, not a speed)"
# Whole, the send starts when the read has ended: 0 by construction. In
# pieces, a piece goes while the next ones are read: above 0 (how much
# depends on the machine's load; bench/rdma measures it).
awk -v o="$o" -v w="$w" 'BEGIN { exit !(w == 0 && o > 0.01) }' ||
    fail "overlap $o in pieces vs $w whole: expected 0 whole and more than 0.01 in pieces"

step "8 READs in flight: read whole (rdma-split=alone), in pieces with rdma-split=always"
copy busy 8
b=$(rdma_counter busy.rdma-stats whole_reads_busy)
n=$(rdma_counter busy.rdma-stats split_reads)
t=$(rdma_counter busy.rdma-stats overlap_1M_requests)
# The first READ finds itself alone, and some may as the queue drains;
# most arrive while others are queued, served or on the wire.
[ "${b:-0}" -gt $((${t:-0} / 2)) ] || fail "only ${b:-none} of ${t:-none} READs read whole with 8 in flight (split: $n)"
copy always 8 rdma-split=always
[ "$(rdma_counter always.rdma-stats whole_reads_busy)" = 0 ] ||
    fail "rdma-split=always read READs whole"
n=$(rdma_counter always.rdma-stats split_reads)
t=$(rdma_counter always.rdma-stats overlap_1M_requests)
[ -n "$n" ] && [ "$n" = "$t" ] || fail "rdma-split=always split ${n:-none} of ${t:-none} READs"
echo "rdma-stripe: all checks passed"

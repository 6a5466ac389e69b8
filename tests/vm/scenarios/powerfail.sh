# A power failure right after a flush or FUA reply, simulated exactly:
# the disk is dm-log-writes over vda (log on vdb), which logs a write
# only once it is on stable storage (see guest/powerfail.py). For each
# stack and request, 32 writes are acknowledged, then a FUA write, a FUA
# zero or a flush (on the same connection or another), and the log is
# marked the moment its reply arrives; the server is then killed. The
# log replayed up to the mark must hold every write acknowledged before
# that request was sent. The control (no flush at all) must hold none:
# the replay really shows what a power failure loses. kill -9 alone
# cannot test this: the page cache and the disk's cache outlive nbdkit.
# lab-disks: virtio:64M virtio:64M
# lab-timeout: 400
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk dm_mod dm_log_writes
PF="python3 -S $LAB_REPO/tests/vm/guest/powerfail.py"
SOCK=$LAB_RUN/pf.sock
n=0

# case EXPECT OP [nbdkit options...] [-- plugin params...]
case_() {
    local expect=$1 op=$2 name
    shift 2
    n=$((n + 1)) name=pf$n
    step "case $name: $op, expect $expect: $*"
    # A fresh log each time (zeros: a zeroing entry logs no data).
    must dd if=/dev/zero of=/dev/vdb bs=1M count=16 oflag=direct status=none
    must dmsetup create --noudevsync gmlw --table \
        "0 $(blockdev --getsz /dev/vda) log-writes /dev/vda /dev/vdb"
    must dmsetup mknodes gmlw
    rm -f "$SOCK"     # a killed server leaves it behind
    serve "$name" "$SOCK" /dev/mapper/gmlw "$@"
    $PF client "$SOCK" "$op" gmlw "$LAB_RUN/$name.json" ||
        fail "case $name ($op $*): the client failed"
    stop "$name" KILL
    must dmsetup remove --noudevsync gmlw
    must blockdev --flushbufs /dev/vdb
    $PF check /dev/vdb "$LAB_RUN/$name.json" "$expect" ||
        fail "case $name ($op, $*): see above"
}

CACHE=(--filter=gmblock-cache)
WB=(cache-mode=writeback writeback-interval=3600)

# Controls: nothing made the writes durable, so the replay must lack them.
case_ lost none
case_ lost none -- direct=false
# The plugin, O_DIRECT and through the page cache.
for d in direct=true direct=false; do
    case_ covered fua -- $d
    case_ covered fua-other -- $d
    case_ covered flush -- $d
    case_ covered flushes -- $d
done
case_ covered fuazero -- direct=false
case_ covered fuazero -- direct=true
# gmblock-cache holding the writes dirty: FUA and flush must write back.
case_ covered fua "${CACHE[@]}" -- "${WB[@]}"
case_ covered fua-other "${CACHE[@]}" -- "${WB[@]}"
case_ covered flush "${CACHE[@]}" -- "${WB[@]}"
case_ covered fuazero "${CACHE[@]}" -- "${WB[@]}"
case_ covered fua "${CACHE[@]}" -- cache-mode=adaptive adaptive-writes=back writeback-interval=3600
# The recommended stack of make serve, in write-back.
case_ covered fua-other --filter=gmblock-readahead "${CACHE[@]}" -- "${WB[@]}"
step "all $n cases passed"

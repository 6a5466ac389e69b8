# Host side of bench-stripe: its 4 member disks, throttled to
# LAB_BENCH_IOPS I/Os per second each (default 150, what a rotating disk
# does; 0: unthrottled), so that the member reads md saves cost time as
# on real disks. Sourced by lib/scenario.sh.

host_before() {
    iops=${LAB_BENCH_IOPS:-150} opt=
    case $iops in
    '' | *[!0-9]*)
        echo "LAB_BENCH_IOPS=$iops: expected I/Os per second per disk (e.g. 150; 0: unthrottled)"
        return 1 ;;
    esac
    iops=$(echo "$iops" | sed 's/^0*//')     # sh: 010 would be octal
    [ -z "$iops" ] || opt=:iops=$iops
    for _ in 1 2 3 4; do HOST_DISKS="$HOST_DISKS virtio:96M$opt"; done
    echo "member disks:$HOST_DISKS"
}

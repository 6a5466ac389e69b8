# Host side of bench-rdma-overlap: 4 member disks per setting of
# LAB_BENCH_SETTINGS (default "0.5 1 0": each array's speed as a multiple
# of LAB_BENCH_LINK_MIBS, the link's MiB/s, default 27; 0: unthrottled),
# each member throttled in QEMU to a quarter of its array's speed, so a
# RAID0 of 4 reads about that fast. Sourced by lib/scenario.sh.

host_before() {
    local link=${LAB_BENCH_LINK_MIBS:-27} mib=${LAB_BENCH_MIB:-64} f bps
    case $link in '' | *[!0-9.]* | *.*.*)
        echo "LAB_BENCH_LINK_MIBS=$link: expected the link's MiB/s (e.g. 27)"; return 1 ;;
    esac
    case $mib in '' | *[!0-9]* | 0*)
        echo "LAB_BENCH_MIB=$mib: expected the MiB read per array (e.g. 64)"; return 1 ;;
    esac
    for f in ${LAB_BENCH_SETTINGS:-0.5 1 0}; do
        case $f in *[!0-9.]* | *.*.*)
            echo "LAB_BENCH_SETTINGS: '$f': expected multiples of the link (0.5 1 ...; 0: unthrottled)"; return 1 ;;
        esac
        bps=$(awk -v f="$f" -v l="$link" 'BEGIN { printf "%d", f * l * 1048576 / 4 }')
        # members a little over a quarter of the region: md's superblock
        for _ in 1 2 3 4; do
            HOST_DISKS="$HOST_DISKS virtio:$((mib / 4 + 1))M"
            [ "$bps" -gt 0 ] && HOST_DISKS="$HOST_DISKS:bps=$bps"
        done
    done
    echo "member disks:$HOST_DISKS"
}

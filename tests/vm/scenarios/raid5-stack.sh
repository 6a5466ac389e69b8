# The recommended stack of `make serve` (gmblock-readahead over
# gmblock-cache in its default adaptive mode, over gmblock) on md RAID5
# over 4 disks, under the kernel NBD client: ext4 round trip with the
# server running throughout, then every file read again from a restarted
# server (cold cache: what reached md0 is right). Both filters' counters
# must show they were in the path: prefetches issued, cache fills and hits.
# lab-disks: virtio:96M virtio:96M virtio:96M virtio:96M
# lab-timeout: 400
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd ext4
make_raid 5 /dev/vda /dev/vdb /dev/vdc /dev/vdd

# in_path NAME: the counters of server NAME show both filters at work.
in_path() {
    step "counters of $1: the filters were in the path"
    counter_above "readahead active" "$(ra_counter "$1" active)" 0 "readahead was turned off"
    counter_above "prefetch_requests" "$(ra_counter "$1" prefetch_requests)" 0 "no prefetch was issued"
    counter_above "prefetch_bytes" "$(ra_counter "$1" prefetch_bytes)" 0 "no prefetch succeeded"
    counter_above "cache admit_prefetch" "$(cache_counter "$1" admit_prefetch)" 0 "no prefetch reached the cache"
    counter_above "cache fills" "$(cache_counter "$1" fills)" 0 "nothing was read into the cache"
    counter_above "cache hits" "$(cache_counter "$1" hits)" 0 "no read was served from the cache"
    echo "useful_bytes = $(ra_counter "$1" useful_bytes), hit_bytes = $(cache_counter "$1" hit_bytes)"
}

# Round trip: mkfs, write, unmount, fsck, drop caches, remount, compare.
serve_stack md0 10809 /dev/md0
attach /dev/nbd0 10809
fs_roundtrip /dev/nbd0 ""
detach /dev/nbd0
stop md0
in_path md0

# The server gone, md0 holds everything (the shutdown wrote back the cache).
reread_cold md0-cold /dev/md0
in_path md0-cold

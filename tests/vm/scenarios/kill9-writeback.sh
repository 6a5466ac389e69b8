# gmblock-cache in write-back mode (readahead stack, flusher idle for an
# hour, so written data sits dirty in the cache) under the kernel client:
# a first copy of the dataset is written, and shown to be in the cache
# only (its bytes are not on the disk) until `sync` flushes, after which
# they all are; the server is killed (kill -9) while more copies are
# being written, after a journal commit; restart, reconnect, journal
# replay, `e2fsck -fn` clean, and the synced first copy, re-read from a
# fresh server, matches entirely.
# lab-disks: virtio:512M
# lab-timeout: 500
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd ext4
WB=(cache-mode=writeback writeback-interval=3600 cache-size=384M)
serve_stack vda 10809 /dev/vda -- "${WB[@]}"
attach /dev/nbd0 10809
make_fs /dev/nbd0
# No periodic journal commit (each one flushes) until the sync below.
must mount -o commit=3600 /dev/nbd0 "$MNT"
step "write the first copy of the dataset, unsynced"
must tar -xf "$LAB_DATASET" -C "$MNT"
step "send big.bin to the server without a flush (sync_file_range)"
must python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY)
# SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER: write the pages, no flush
if libc.sync_file_range(fd, ctypes.c_longlong(0), ctypes.c_longlong(0), 7) != 0:
    sys.exit("sync_file_range: " + os.strerror(ctypes.get_errno()))' "$MNT/big.bin"
# The control: the server acknowledged big.bin's writes, yet the disk
# does not have them: write-back is really in effect.
r=$(backing_match "$MNT/big.bin" /dev/vda) || fail "cannot compare big.bin with /dev/vda"
read -r m total <<<"$r"
echo "before the flush: $m of $total bytes of big.bin on /dev/vda"
[ "$m" = 0 ] || fail "write-back not in effect: $m of $total acknowledged bytes of big.bin were on the disk before any flush"

step "sync: the kernel flushes, the cache must write everything back"
must sync
r=$(backing_match "$MNT/big.bin" /dev/vda) || fail "cannot compare big.bin with /dev/vda after sync"
read -r m total <<<"$r"
echo "after the flush: $m of $total bytes of big.bin on /dev/vda"
[ "$m" = "$total" ] || fail "after sync (flush) only $m of $total bytes of big.bin are on the disk"

# From here on journal commits (with their flushes) every 5 s again, and
# the client's kernel writes back early, so writes flow to the server.
must mount -o remount,commit=5 "$MNT"
echo $((4 << 20)) >/proc/sys/vm/dirty_background_bytes
# progress: sets written (sectors written to nbd0) and commits (jbd2's
# committed transactions on it), without a fork: each costs the TCG
# guest about 80 ms of CPU, taken from the writer the poll waits for.
progress() {
    local info=(/proc/fs/jbd2/nbd0-*/info)
    read -r _ _ _ _ _ _ written _ </sys/block/nbd0/stat
    commits=
    [ -r "${info[0]}" ] && read -r commits _ <"${info[0]}"
}
progress
w0=$written c0=$commits
[ -n "$c0" ] || fail "no jbd2 statistics for nbd0"
step "more copies of the dataset in the background"
( for i in 1 2 3 4 5; do
    mkdir -p "$MNT/late$i" && tar -xf "$LAB_DATASET" -C "$MNT/late$i" || exit
done ) 2>"$LAB_RUN/writer.err" &
writer=$!
# Let 16 MiB of the later copies reach the server and at least one
# journal commit (a flush) go by, then pull the plug.
for i in $(seq 1200); do
    progress
    [ $((written - w0)) -gt 32768 ] && [ "$commits" -gt "$c0" ] && break
    kill -0 "$writer" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$writer" 2>/dev/null || fail "the writer finished before the kill: nothing was in flight"
progress
step "kill -9 the server while writing ($(((written - w0) / 2048)) MiB and $((commits - c0)) journal commits since the sync)"
stop vda KILL
# Disconnect at once: that fails the requests that were in flight when
# the server died, which otherwise stay queued for good (no nbd timeout)
# and can block a journal commit, the writer and the unmount with it.
detach /dev/nbd0
wait "$writer"
echo "writer exited $? (it may fail or not: its data was never synced); its first errors:"
head -n 3 "$LAB_RUN/writer.err"
# grep -c reads all of dmesg: with grep -q, dmesg could die of SIGPIPE
# after the match and pipefail would call the pipeline failed.
dmesg | grep -c 'I/O error, dev nbd0, .*WRITE' >/dev/null ||
    fail "no write to /dev/nbd0 failed: the kill did not hit writes in flight"

umount_orphan "$MNT"

serve_stack vda-restart 10809 /dev/vda -- "${WB[@]}"
attach /dev/nbd0 10809
step "replay the journal"
must mount /dev/nbd0 "$MNT"
must umount "$MNT"
fsck_clean /dev/nbd0
detach /dev/nbd0
stop vda-restart
d=$(cache_counter vda-restart dirty_bytes)
[ "$d" = 0 ] || fail "the restarted server left ${d:-?} dirty bytes at a clean shutdown"

# The disk alone now holds the filesystem: re-read it all from a fresh server.
reread_cold vda-check /dev/vda -- "${WB[@]}"

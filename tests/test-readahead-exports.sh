#!/bin/bash
# gmblock-readahead over a plugin serving several exports: the prefetch
# workers read export "" (the plugin's default; they open their
# contexts with no client), so only the clients of "" may drive them.
# Before, a client reading export "b" got export "a" (the default)
# prefetched: the plugin saw NBD_CMD_CACHE on "a" only, wasted I/O
# that never helped the reader, and "b"'s writes invalidated "a"'s
# windows.  An sh plugin serving "a" (default) and "b" logs every call
# with the export its handle was opened for.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdsh
cd "$T"

cat >"$T/disk.sh" <<'SH'
#!/bin/bash
log=${0%.sh}.log
case "$1" in
    thread_model) echo parallel ;;
    list_exports) echo a; echo b ;;
    default_export) echo a ;;
    open) echo "${3:-default}" ;;     # the handle: the export name
    get_size) echo 1073741824 ;;
    can_cache) echo native ;;
    pread) echo "pread $2 $3 $4" >>"$log"; head -c "$3" /dev/zero ;;
    cache) echo "cache $2 $3 $4" >>"$log" ;;
    *) exit 2 ;;
esac
SH
chmod +x "$T/disk.sh"

rcounter () { awk -v k="gmblock-readahead.$1" '$1 == k { print $2 }' "$T/ra.stats"; }
scan () {       # scan EXPORT: 16 sequential reads of 64K
    nbdsh -u "nbd+unix:///$1?socket=$T/ra.sock" -c '
for off in range(0, 1 << 20, 65536):
    h.pread(65536, off)
'
}

: >"$T/disk.log"
start_server ra --filter=gmblock-readahead sh "$T/disk.sh" ra-stats="$T/ra.stats"
scan b
wait_idle ra
sleep 0.5                       # prefetches are in the background
[[ $(grep -c '^pread b ' "$T/disk.log") == 16 ]] || fail "the reader of b was not served by b"
if grep '^cache ' "$T/disk.log"; then
    fail "a client of export b made the filter prefetch (the workers read the default export)"
fi
# The default export's clients still get readahead.
scan ""
wait_idle ra
sleep 0.5
stop_server ra
grep -q '^cache default ' "$T/disk.log" || fail "no prefetch for a client of the default export"
[[ $(rcounter streams_detected) == 1 ]] || fail "streams_detected is $(rcounter streams_detected), expected 1"
info "export b: passed through; default export: $(grep -c '^cache default ' "$T/disk.log") prefetches"

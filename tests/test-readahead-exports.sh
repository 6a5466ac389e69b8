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
grep -q '^cache default ' "$T/disk.log" || fail "no prefetch for a client of the default export"
ncache () { grep -c '^cache default ' "$T/disk.log"; }
# NBD_OPT_INFO then NBD_OPT_GO on one connection (libnbd's opt mode,
# as nbdinfo does): nbdkit asks .default_export once per connection and
# keeps the answer, so the GO's open came with no fresh mark and a
# client of "" lost its readahead.  INFO "" then GO "b" still passes
# through.
scan_info_go () {       # scan_info_go GO-EXPORT: INFO "", GO, 16 reads of 64K
    nbdsh -c '
h.set_opt_mode(True)
h.connect_uri("nbd+unix:///?socket='"$T"'/ra.sock")
h.opt_info()
h.set_export_name("'"$1"'")
h.opt_go()
for off in range(512 << 20, 513 << 20, 65536):
    h.pread(65536, off)
'
}
before=$(ncache)
scan_info_go ""
wait_idle ra
sleep 0.5
(( $(ncache) > before )) || fail "INFO \"\" then GO \"\": no prefetch (the connection lost its readahead)"
before=$(ncache)
scan_info_go b
wait_idle ra
sleep 0.5
[[ $(ncache) == "$before" ]] || fail "INFO \"\" then GO \"b\": the workers prefetched the default export for b"
grep -q '^cache b ' "$T/disk.log" && fail "INFO \"\" then GO \"b\": a prefetch reached b"
stop_server ra
[[ $(rcounter streams_detected) == 2 ]] || fail "streams_detected is $(rcounter streams_detected), expected 2"
info "export b: passed through; default export: $(grep -c '^cache default ' "$T/disk.log") prefetches"

# A default export's name may be as long as nbdkit lets it be (4096
# bytes): the name kept for the connection was cut off at 255, so a
# client of "" over a plugin whose default has a 300-byte name passed
# through, no readahead.
long=$(printf 'l%.0s' $(seq 300))
sed "s/default_export) echo a/default_export) echo $long/" "$T/disk.sh" >"$T/longdef.sh"
chmod +x "$T/longdef.sh"
start_server long --filter=gmblock-readahead sh "$T/longdef.sh"
nbdsh -u "nbd+unix:///?socket=$T/long.sock" -c '
for off in range(0, 1 << 20, 65536):
    h.pread(65536, off)
'
wait_idle long
sleep 0.5
stop_server long
[[ $(grep -c "^pread $long " "$T/longdef.log") == 16 ]] || fail "the reader of the long-named default was not served by it"
grep -q '^cache default ' "$T/longdef.log" || fail "a default export named with 300 bytes: no prefetch for its client"

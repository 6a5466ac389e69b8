#!/bin/bash
# gmblock-cache over a plugin that sizes each connection anew (nbdkit's
# file plugin): the file grows, or shrinks, while nbdkit runs.  Every
# read, write and write-back of the cache goes through its one shared
# context, opened at start-up with the old size; a client that was
# shown the new, larger size read past it and nbdkit aborted
# (backend_pread: assertion 'backend_valid_range' failed), taking every
# client with it.  A connection made after the change must be shown no
# more than both sizes (the old one after growth, the new one after
# shrinking), read and write up to its end, be refused beyond it, and
# block status must work; the server must stay up and stop cleanly.
# In the caching modes (unsafe as writeback, but its flush would not
# write back); bypass shows the plugin's size (control).
. "$(dirname "$0")/functions.sh"
cd "$T"

M=1048576
for mode in read writethrough writeback adaptive bypass; do
    randfile "$T/$mode.img" $((4 * M))
    cp "$T/$mode.img" "$T/$mode.orig"
    start_server "$mode" --filter=gmblock-cache file "$T/$mode.img" \
        cache-mode=$mode
    truncate -s $((8 * M)) "$T/$mode.img"
    out=$(timeout 60 /usr/bin/python3 - "$(uri "$mode")" "$T/$mode.orig" "$mode" <<'PY' 2>&1
import nbd, sys
uri, orig, mode = sys.argv[1], open(sys.argv[2], "rb").read(), sys.argv[3]
M = 1 << 20
h = nbd.NBD()
h.set_strict_mode(0)
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(uri)
size = h.get_size()
want = 8 * M if mode == "bypass" else 4 * M
if size != want:
    sys.exit(f"grown to 8M: the export is {size} bytes, expected {want}")
if h.pread(64 * 1024, 4 * M - 64 * 1024) != orig[-64 * 1024:]:
    sys.exit("the last 64K before the old end read wrong")
if mode != "bypass":
    try:
        h.pread(4096, 6 * M)
        sys.exit("a read past the export succeeded")
    except nbd.Error as e:
        if e.errnum != 22:
            sys.exit(f"a read past the export failed with {e}, not EINVAL")
h.pwrite(b"E" * 4096, 4 * M - 4096)
h.flush()
if h.pread(4096, 4 * M - 4096) != b"E" * 4096:
    sys.exit("the write before the old end did not read back")
h.block_status(size, 0, lambda *a: 0)
h.shutdown()
print(f"grown: {size} bytes shown")
PY
) || { cat "$T/$mode.log" >&2; fail "cache-mode=$mode: $out"; }
    kill -0 "$(server_pid "$mode")" 2>/dev/null || { cat "$T/$mode.log" >&2; fail "cache-mode=$mode: nbdkit died"; }
    cmp -s -n 4096 -i $((4 * M - 4096)):0 "$T/$mode.img" <(head -c 4096 /dev/zero | tr '\0' E) ||
        fail "cache-mode=$mode: the write before the old end is not in the file after the flush"

    # Shrunk to 2M: no connection may be shown more than the file has.
    truncate -s $((2 * M)) "$T/$mode.img"
    size=$(nbdinfo --size "$(uri "$mode")") || { cat "$T/$mode.log" >&2; fail "cache-mode=$mode: nbdinfo after shrinking"; }
    [[ $size == $((2 * M)) ]] || fail "cache-mode=$mode: shrunk to 2M, the export is $size bytes"
    nbdinfo --map "$(uri "$mode")" >/dev/null ||
        { cat "$T/$mode.log" >&2; fail "cache-mode=$mode: block status after shrinking"; }
    nbdcopy "$(uri "$mode")" "$T/$mode.copy" ||
        { cat "$T/$mode.log" >&2; fail "cache-mode=$mode: reading the whole export after shrinking"; }
    stop_server "$mode"
    [[ $server_rc == 0 ]] || { cat "$T/$mode.log" >&2; fail "cache-mode=$mode: exit status $server_rc"; }
    info "cache-mode=$mode: $out; shrunk: $size bytes shown, read whole"
done

#!/bin/bash
# gmblock-cache over a plugin that serves several exports.  Every client
# shares one cache, filled through one context below that nbdkit opens
# with no client and so no export name: the plugin's default export.  A
# client that named another export was served the default's blocks
# (here: 'zzzz' where export a holds 'aaaa').  In every caching mode
# only the default export is listed, and a client naming another is
# refused with the reason; bypass (no shared context) serves each
# export its own data.  The plugin: an nbdkit sh plugin script, exports
# a and b, each read as its own letter, the default as z.  Over the
# gmblock plugin, which serves one disk under any name, names are taken.
. "$(dirname "$0")/functions.sh"
require nbdinfo
cd "$T"

cat >"$T/exports.sh" <<'SH'
#!/bin/bash
case "$1" in
    list_exports) echo a; echo b ;;
    open) echo "h$3" ;;
    get_size) echo 1048576 ;;
    thread_model) echo parallel ;;
    pread) case $2 in ha) c=a;; hb) c=b;; *) c=z;; esac
           head -c "$3" /dev/zero | tr '\0' "$c" ;;
    *) exit 2 ;;
esac
SH
chmod +x "$T/exports.sh"
ev=(sh "$T/exports.sh")

# read4 NAME EXPORT: the first 4 bytes of EXPORT, or the error.
read4 () {
    nbdsh -u "nbd+unix:///$2?socket=$T/$1.sock" -c 'print(h.pread(4, 0).decode())' 2>&1 | tail -1
}

for mode in read writethrough writeback adaptive unsafe bypass; do
    start_server "$mode" --filter=gmblock-cache "${ev[@]}" cache-mode=$mode
    list=$(nbdinfo --list "$(uri "$mode")" | sed -n 's/^export="\(.*\)":$/\1/p' | tr '\n' ' ')
    a=$(read4 "$mode" a) b=$(read4 "$mode" b) d=$(read4 "$mode" "")
    info "cache-mode=$mode: exports listed: '$list'; a: $a; b: $b; default: $d"
    [[ $d == zzzz ]] || fail "cache-mode=$mode: the default export read '$d', not zzzz"
    if [[ $mode == bypass ]]; then
        [[ $list == "a b " ]] || fail "bypass: exports listed '$list', not the plugin's a and b"
        [[ $a == aaaa && $b == bbbb ]] || fail "bypass: exports a and b read '$a' and '$b'"
    else
        [[ $list == " " ]] || fail "cache-mode=$mode: exports listed '$list', not only the default"
        [[ $a != aaaa && $a != zzzz ]] || fail "cache-mode=$mode: export a was served ('$a'), not refused"
        [[ $b != bbbb && $b != zzzz ]] || fail "cache-mode=$mode: export b was served ('$b'), not refused"
        grep -q 'gmblock-cache: export "a" refused: the cache serves only the default export' "$T/$mode.log" ||
            fail "cache-mode=$mode: the refusal does not say why: $(grep -i error "$T/$mode.log")"
    fi
    stop_server "$mode"
done
# Over the gmblock plugin (and only gmblock's filters) every name is
# the one disk, as without the cache: a client naming one is served.
randfile "$T/disk.img" $((1 << 20))
start_server gm --filter=gmblock-cache gmblock file="$T/disk.img" direct=false
got=$(nbdsh -u "nbd+unix:///foo?socket=$T/gm.sock" -c 'import sys; sys.stdout.buffer.write(h.pread(65536, 0))' | od -An -tx1 | md5sum)
[[ $got == "$(head -c 65536 "$T/disk.img" | od -An -tx1 | md5sum)" ]] ||
    fail "over the gmblock plugin, export foo was not served the disk"
stop_server gm
echo "test-cache-exports: all checks passed"

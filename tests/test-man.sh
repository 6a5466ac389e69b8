#!/bin/bash
# Man pages: one for every module and for gmblock-topology; each renders
# with man -l without a groff warning; every option a module's --help
# lists (its .config_help "key=..." lines) appears in its page, so an
# option added without documentation fails here, and so does every
# counter the host can make a module write; make install puts the
# pages where man -M finds them.
. "$(dirname "$0")/functions.sh"
require man groff podchecker make nbdinfo
bld=${GMBLOCK_BUILDDIR:-$top}
mandir=$bld/man/man1
export MANWIDTH=80 LC_ALL=C.UTF-8 MANPAGER=cat PAGER=cat

# page NAME: the built page, which must exist (make builds it).
page () {
    [[ -f $mandir/$1.1 ]] || fail "$1: no man page $mandir/$1.1 (is there a POD source for it? run make)"
    echo "$mandir/$1.1"
}

# text PAGE: the page as a reader sees it, without hyphenation and with
# lines broken after a hyphen joined again, so option names stay whole.
text () {
    man --nh --nj -E ascii -l "$1" 2>/dev/null | perl -0pe 's/-\n\s+/-/g'
}

# check NAME KEY...: NAME's page renders cleanly and names every KEY=.
check () {
    local name=$1 p out k n=0; shift
    p=$(page "$name")
    out=$(man --warnings -E UTF-8 -l "$p" 2>&1 >/dev/null) ||
        fail "$name: man -l failed: $out"
    [[ -z $out ]] || fail "$name: man -l warns: $out"
    text "$p" >"$T/$name.txt"
    grep -q "^NAME" "$T/$name.txt" && grep -q "^SEE ALSO" "$T/$name.txt" ||
        fail "$name: the page lacks NAME or SEE ALSO"
    for k in "$@"; do
        grep -qP -- "(?<![\w.-])\Q$k\E" "$T/$name.txt" || fail "$name: option '$k' is not in its man page"
        n=$((n + 1))
    done
    info "$name: renders without warnings, names its $n options"
}

# keys NAME HELP-FILE: set ks to the "key=" of each .config_help line in
# the module's own section of nbdkit --help.  Not in a process
# substitution, whose fail ended only itself: checked 0 options (a test
# audit finding).
keys () {
    grep -oE '^[a-z][a-z0-9._-]*=' "$2" >"$2.keys" ||
        fail "$1: no options found in its --help"
    mapfile -t ks <"$2.keys"
}

# A page must show up missing options: this key is in none of them.
check_absent () { ! grep -qF 'no-such-option=' "$T/$1.txt" || fail "$1: the check cannot fail"; }

for dir in "$top"/plugins/*/; do
    m=$(basename "$dir")
    [[ -f $bld/plugins/$m/nbdkit-$m-plugin.so ]] || continue
    "$NBDKIT" "$m" --help 2>&1 | sed -n "/^plugin: $m (/,/^filter:/p" >"$T/$m.help"
    keys "$m" "$T/$m.help"
    check "nbdkit-$m-plugin" "${ks[@]}"
done
for dir in "$top"/filters/*/; do
    f=$(basename "$dir")
    [[ -f $bld/filters/$f/nbdkit-gmblock-$f-filter.so ]] || continue
    "$NBDKIT" --filter="gmblock-$f" null --help 2>&1 |
        sed -n "/^filter: gmblock-$f (/,/^plugin:/p" >"$T/$f.help"
    keys "gmblock-$f" "$T/$f.help"
    check "nbdkit-gmblock-$f-filter" "${ks[@]}"
done
check_absent nbdkit-gmblock-plugin

# debug_flags NAME SO PAGE: every -D NAME.FLAG the module exports (its
# NAME_debug_FLAG symbols, with NAME's hyphens or underscores) is named
# in its page, as the options are.
debug_flags () {
    local name=$1 so=$2 page=$3 sym flag n=0
    for sym in $(nm -D --defined-only "$so" | awk '{print $3}'); do
        case $sym in
            "${name}_debug_"*) flag=${sym#"${name}_debug_"} ;;
            "${name//-/_}_debug_"*) flag=${sym#"${name//-/_}_debug_"} ;;
            *) continue ;;
        esac
        grep -qF -- "$name.$flag" "$T/$page.txt" ||
            fail "$page: debug flag -D $name.$flag is not in its man page"
        n=$((n + 1))
    done
    info "$page: names its $n debug flag symbols"
}
require nm
for dir in "$top"/plugins/*/; do
    m=$(basename "$dir")
    so=$bld/plugins/$m/nbdkit-$m-plugin.so
    [[ -f $so ]] && debug_flags "$m" "$so" "nbdkit-$m-plugin"
done
for dir in "$top"/filters/*/; do
    f=$(basename "$dir")
    so=$bld/filters/$f/nbdkit-gmblock-$f-filter.so
    [[ -f $so ]] && debug_flags "gmblock-$f" "$so" "nbdkit-gmblock-$f-filter"
done

# counters NAME STATS-KEY nbdkit-args...: every counter the module
# writes to its stats file is named in its page (whose text check made).
counters () {
    local name=$1 key=$2 c n=0; shift 2
    rm -f "$T/stats"
    "$NBDKIT" -U - "$@" "$key=$T/stats" --run "$RUN_SIZE" >/dev/null 2>"$T/stats.err" ||
        fail "$name: nbdkit failed: $(cat "$T/stats.err")"
    [[ -s $T/stats ]] || fail "$name: no counters written to $key="
    for c in $(sed 's/^[^.]*\.//; s/ .*//' "$T/stats"); do
        grep -qP -- "(?<![\w.])\Q$c\E(?![\w])" "$T/$name.txt" ||
            fail "$name: counter '$c' is not in its man page"
        n=$((n + 1))
    done
    info "$name: names its $n counters"
}
truncate -s 1M "$T/disk.img"
counters nbdkit-gmblock-plugin stats gmblock file="$T/disk.img"
counters nbdkit-gmblock-cache-filter cache-stats --filter=gmblock-cache memory 1M
counters nbdkit-gmblock-readahead-filter ra-stats --filter=gmblock-readahead memory 1M
counters nbdkit-gmblock-stripe-filter stripe-stats --filter=gmblock-stripe memory 1M \
    stripe-chunk=64K stripe-data-disks=2

# The command: the options of its usage line.
"$bld/gmblock-topology" --help >"$T/topology.help"
mapfile -t ks < <(grep -oE -- '--[a-z]+|-O [a-z.]+=' "$T/topology.help" | sort -u)
[[ ${#ks[@]} -ge 3 ]] || fail "gmblock-topology: options not found in its --help"
check gmblock-topology "${ks[@]}"

# Every POD source is clean (pod2man --errors=die only stops on errors).
for pod in $(cd "$top" && ls plugins/*/*.pod plugins/*/cmd/*.pod filters/*/*.pod); do
    out=$(podchecker "$top/$pod" 2>&1) || fail "$pod: $out"
    ! grep -q WARNING <<<"$out" || fail "$pod: $out"
done

# The counters of the RDMA modules need an RDMA device: the lab runs them.

# make install puts the pages where man -M finds them.
make -s -C "$top" B="$bld" ${GMBLOCK_SANITIZE:+SANITIZE=1} ${GMBLOCK_TSAN:+TSAN=1} install DESTDIR="$T/root" >"$T/install.log" 2>&1 ||
    fail "make install: $(cat "$T/install.log")"
n=0
for p in "$mandir"/*.1; do
    name=$(basename "$p" .1)
    man -M "$T/root/usr/local/share/man" "$name" 2>/dev/null | grep -q "$name" ||
        fail "$name: man -M does not find the installed page"
    n=$((n + 1))
done
[[ $n -ge 7 ]] || fail "only $n pages built"
info "make install: $n pages found by man -M"

# Without nbdkit's directories (pkg-config without nbdkit-plugin-dev)
# make install stops with the reason, instead of putting the modules
# into DESTDIR's root.
if make -s -C "$top" B="$bld" ${GMBLOCK_SANITIZE:+SANITIZE=1} ${GMBLOCK_TSAN:+TSAN=1} install DESTDIR="$T/root2" \
        PLUGINDIR= FILTERDIR= >"$T/install2.log" 2>&1; then
    fail "make install with no plugindir succeeded: $(cd "$T/root2" && find . -maxdepth 1 -name '*.so')"
fi
grep -q 'make install: pkg-config knows no nbdkit plugindir/filterdir' "$T/install2.log" ||
    fail "make install with no plugindir: $(cat "$T/install2.log")"
[[ -z $(find "$T/root2" -name '*.so' 2>/dev/null) ]] || fail "make install with no plugindir installed modules"
info "make install without nbdkit's plugindir: refused, nothing installed"
echo PASS

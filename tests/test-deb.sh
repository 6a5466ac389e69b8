#!/bin/bash
# The Debian package: make deb builds it from a clean copy of the tree
# without touching the checkout or its parent; it depends on exactly
# the installed nbdkit version; dpkg -x puts every module where nbdkit
# looks (pkg-config nbdkit), the command in /usr/bin, the man pages and
# docs where dh puts them; the system nbdkit loads every extracted
# module by its path and serves data through the extracted plugin and
# filters byte for byte; debian/rules refuses a mismatched nbdkit.
. "$(dirname "$0")/functions.sh"
require dpkg-buildpackage dh dpkg-deb dpkg-parsechangelog pkg-config nbdkit nbdinfo nbdcopy man cmp
plain_run_only "the package is built without sanitizers: the plain run tests it"
export MANWIDTH=80 LC_ALL=C.UTF-8 MANPAGER=cat PAGER=cat

plugindir=$(pkg-config --variable=plugindir nbdkit)
filterdir=$(pkg-config --variable=filterdir nbdkit)
nbdkit_version=$(dpkg-query -W -f='${Version}' nbdkit)
version=$(cd "$top" && dpkg-parsechangelog -S Version)
# One version everywhere: what the modules and gmblock-topology report.
src_version=$(sed -n 's/^#define GMBLOCK_VERSION "\(.*\)"/\1/p' "$top/common/version.h")
[[ $version == "$src_version" ]] ||
    fail "debian/changelog says $version, common/version.h $src_version"
[[ -n $plugindir && -n $filterdir && -n $nbdkit_version && -n $version ]] ||
    fail "cannot read nbdkit's directories and version or the package version"
# pkg-config's directories are the ones nbdkit searches for short names.
nbdkit --dump-config >"$T/config"
grep -qxF "plugindir=$plugindir" "$T/config" && grep -qxF "filterdir=$filterdir" "$T/config" ||
    fail "nbdkit --dump-config disagrees with pkg-config ($plugindir, $filterdir): $(cat "$T/config")"

# What the build must leave alone: the checkout (its files, dh's
# debian/ outputs, its objects) and its parent (dpkg-buildpackage's).
state () {
    ls -a "$top/.." | grep '^nbdkit-gmblock_' || true
    git -C "$top" status --porcelain 2>/dev/null || true
    (cd "$top" && ls -d debian/files debian/nbdkit-gmblock debian/.debhelper 2>/dev/null) || true
    find "$top/common" "$top/plugins" "$top/filters" -newer "$T/marker" -name '*.[oa]' -o \
        -newer "$T/marker" -name '*.so'
}
touch "$T/marker"
state >"$T/before"

# A DEBDIR that is a file is refused before anything is built.
touch "$T/afile"
if make -s -C "$top" deb DEBDIR="$T/afile" >"$T/bad.out" 2>&1; then fail "make deb accepted DEBDIR=a file"; fi
grep -q "'$T/afile' is not a directory" "$T/bad.out" || fail "make deb DEBDIR=a file: $(cat "$T/bad.out")"

info "make deb (a full build from a clean copy)"
start=$SECONDS
make -s -C "$top" deb DEBDIR="$T/dist" >"$T/deb.out" 2>&1 || fail "make deb: $(cat "$T/deb.out")"
deb=$T/dist/nbdkit-gmblock_${version}_amd64.deb
[[ -f $deb ]] || fail "make deb made no $deb: $(cat "$T/deb.out")"
grep -qxF "$deb" "$T/deb.out" || fail "make deb did not print the path of the .deb: $(cat "$T/deb.out")"
info "built $(basename "$deb") in $((SECONDS - start)) s"
state >"$T/after"
diff "$T/before" "$T/after" >&2 || fail "make deb changed the checkout or its parent (diff above)"

# The control fields, and the exact nbdkit the filters were built for.
for f in Package:nbdkit-gmblock Version:"$version" Architecture:amd64; do
    got=$(dpkg-deb -f "$deb" "${f%%:*}")
    [[ $got == "${f#*:}" ]] || fail "${f%%:*} is '$got', expected '${f#*:}'"
done
depends=$(dpkg-deb -f "$deb" Depends)
grep -qF "nbdkit (= $nbdkit_version)" <<<"$depends" ||
    fail "Depends lacks 'nbdkit (= $nbdkit_version)': $depends"
for lib in liburing2 libpci3 libibverbs1 librdmacm1 libc6; do
    grep -qE "(^|, )$lib( |,|$)" <<<"$depends" || fail "Depends lacks $lib (shlibs): $depends"
done
info "Depends: $depends"

# Nothing outside the Debian paths (make install's defaults are /usr/local).
dpkg-deb -c "$deb" | awk '{ print $6 }' >"$T/contents"
! grep -E '^\./usr/local|^\./(etc|opt|home|root|var)/' "$T/contents" ||
    fail "files outside the Debian paths (above)"

# Every module the tree has lands where nbdkit looks.
root=$T/root
dpkg -x "$deb" "$root"
want=()
for d in "$top"/plugins/*/; do want+=("$plugindir/nbdkit-$(basename "$d")-plugin.so"); done
for d in "$top"/filters/*/; do want+=("$filterdir/nbdkit-gmblock-$(basename "$d")-filter.so"); done
for p in "$top"/plugins/*/*.pod "$top"/plugins/*/cmd/*.pod "$top"/filters/*/*.pod; do
    want+=("/usr/share/man/man1/$(basename "$p" .pod).1.gz")
done
want+=(/lib/systemd/system/gmblock@.service /lib/systemd/system/gmblock@.socket)
# The units' README and settings file, which the units and README.md
# point at (they were left out of the package).
want+=(/usr/share/doc/nbdkit-gmblock/systemd/README.md.gz
       /usr/share/doc/nbdkit-gmblock/systemd/example.conf)
want+=(/usr/bin/gmblock-topology /usr/share/doc/nbdkit-gmblock/README.md.gz
       /usr/share/doc/nbdkit-gmblock/copyright /usr/share/doc/nbdkit-gmblock/changelog.gz)
[[ ${#want[@]} -ge 17 ]] || fail "only ${#want[@]} files expected: is the tree complete?"
for f in "${want[@]}"; do [[ -f $root$f ]] || fail "$f is not in the package"; done
[[ -x $root/usr/bin/gmblock-topology ]] || fail "gmblock-topology is not executable"
[[ $("$root/usr/bin/gmblock-topology" --version) == "gmblock-topology $version" ]] ||
    fail "gmblock-topology --version: $("$root/usr/bin/gmblock-topology" --version 2>&1)"
grep -q 'Redistribution and use in source and binary forms' "$root/usr/share/doc/nbdkit-gmblock/copyright" ||
    fail "the copyright file lacks the BSD licence text"
info "${#want[@]} files where nbdkit, man and dpkg look"

# The system nbdkit loads every extracted module by its path (a filter
# only if it was built for this very nbdkit).
n=0
for so in "$root$plugindir"/*.so; do
    nbdkit "$so" --dump-plugin >"$T/dump" 2>&1 || fail "nbdkit cannot load $so: $(cat "$T/dump")"
    grep -qx "version=$version" "$T/dump" || fail "$so reports $(grep '^version=' "$T/dump"), not $version"
    n=$((n + 1))
done
for so in "$root$filterdir"/*.so; do
    name=$(basename "$so" -filter.so); name=${name#nbdkit-}
    nbdkit --filter="$so" null --help >"$T/help" 2>&1 || fail "nbdkit cannot load $so: $(cat "$T/help")"
    grep -q "^filter: $name (" "$T/help" || fail "$so: nbdkit --help does not show filter $name"
    n=$((n + 1))
done
info "nbdkit $nbdkit_version loads the $n extracted modules"

# Data through the extracted plugin under the extracted filters.
NBDKIT=nbdkit
randfile "$T/orig.img" 16M
cp "$T/orig.img" "$T/disk.img"
randfile "$T/new.img" 16M
start_server stack --filter="$root$filterdir/nbdkit-gmblock-readahead-filter.so" \
    --filter="$root$filterdir/nbdkit-gmblock-cache-filter.so" \
    --filter="$root$filterdir/nbdkit-gmblock-stripe-filter.so" \
    "$root$plugindir/nbdkit-gmblock-plugin.so" file="$T/disk.img" \
    stripe-chunk=64K stripe-data-disks=2
[[ $(nbdinfo --size "$(uri stack)") == 16777216 ]] || fail "nbdinfo: wrong size"
nbdcopy "$(uri stack)" "$T/out.img"
cmp "$T/out.img" "$T/orig.img" || fail "read through the packaged modules differs"
nbdcopy --connections=4 --flush "$T/new.img" "$(uri stack)"
nbdcopy "$(uri stack)" - | cmp - "$T/new.img" || fail "read back after write differs"
stop_server stack
[[ $server_rc == 0 ]] || fail "nbdkit exited with $server_rc"
cmp "$T/disk.img" "$T/new.img" || fail "the disk differs from what was written"
info "16M read and written byte-exact through readahead, cache, stripe and the plugin"

"$root/usr/bin/gmblock-topology" "$T/disk.img" >"$T/topo" 2>&1 ||
    fail "the packaged gmblock-topology failed: $(cat "$T/topo")"

# The gzipped pages render as man reads them, without a warning.
for p in "$root"/usr/share/man/man1/*.1.gz; do
    name=$(basename "$p" .1.gz)
    out=$(man --warnings -E UTF-8 -l "$p" 2>&1 >"$T/page") || fail "$name: man -l failed: $out"
    [[ -z $out ]] || fail "$name: man -l warns: $out"
    grep -q "$name" "$T/page" || fail "$name: the page does not name itself"
done
info "the packaged man pages render"

# debian/rules refuses to build for an nbdkit other than the headers'.
mkdir -p "$T/src" "$T/bin"
cp -a "$top/debian" "$T/src/"
cat >"$T/bin/dpkg-query" <<'EOF'
#!/bin/sh
case "$*" in *nbdkit-plugin-dev*) printf %s "$FAKE_DEV" ;; *) printf %s "$FAKE_RUN" ;; esac
EOF
chmod +x "$T/bin/dpkg-query"
# gencontrol_fails DEV-VERSION RUN-VERSION PATTERN
gencontrol_fails () {
    if (cd "$T/src" && FAKE_DEV=$1 FAKE_RUN=$2 PATH=$T/bin:$PATH debian/rules override_dh_gencontrol) \
        >"$T/gc.err" 2>&1; then
        fail "debian/rules accepted nbdkit-plugin-dev '$1' with nbdkit '$2'"
    fi
    grep -q "$3" "$T/gc.err" || fail "debian/rules: expected '$3', got: $(cat "$T/gc.err")"
    [[ ! -e $T/src/debian/nbdkit-gmblock ]] || fail "debian/rules went on after refusing"
}
gencontrol_fails 1.32.5-1 1.34.0-1 'nbdkit 1.34.0-1 differs from nbdkit-plugin-dev 1.32.5-1'
gencontrol_fails '' 1.32.5-1 'nbdkit-plugin-dev is not installed'
info "debian/rules refuses a mismatched or missing nbdkit-plugin-dev"

# lintian is big: it runs only where it is installed.
if command -v lintian >/dev/null; then
    lintian --fail-on error "$deb" >"$T/lintian" 2>&1 || fail "lintian: $(cat "$T/lintian")"
    info "lintian: $(grep -c '^[WE]:' "$T/lintian" || true) warnings"; cat "$T/lintian"
else
    info "lintian is not installed: not run"
fi
echo PASS

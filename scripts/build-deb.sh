#!/bin/sh
# Build the Debian package from a clean copy of this tree, so that
# dpkg-buildpackage neither cleans the working tree (make clean) nor
# writes its outputs into the checkout's parent directory.
# Usage: scripts/build-deb.sh [OUTDIR]   (default: dist)
# Prints the path of the .deb, which it puts in OUTDIR.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-dist}
[ ! -e "$out" ] || [ -d "$out" ] ||
    { echo "build-deb: '$out' is not a directory: DEBDIR= names where the .deb goes" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gmblock-deb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
src=$tmp/nbdkit-gmblock

# The files git tracks or would track (uncommitted edits included);
# without git, everything, which debian/rules clean then cleans.
mkdir "$src"
if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$top" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
        (cd "$top" && tar --null -T - -cf -) | tar -xf - -C "$src"
else
    cp -a "$top/." "$src"
fi

# Two jobs at most: the build machines are small and shared.
jobs=$(nproc 2>/dev/null || echo 1)
[ "$jobs" -le 2 ] || jobs=2
(cd "$src" && dpkg-buildpackage -us -uc -b -j"$jobs" >"$tmp/build.log" 2>&1) || {
    tail -n 40 "$tmp/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed (the last 40 lines of its log are above)" >&2
    exit 1
}
set -- "$tmp"/nbdkit-gmblock_*.deb
[ -f "$1" ] || { echo "build-deb: dpkg-buildpackage made no nbdkit-gmblock_*.deb" >&2; exit 1; }
rm -f "$out"/nbdkit-gmblock_*.deb
cp "$1" "$out/"
echo "$out/$(basename "$1")"

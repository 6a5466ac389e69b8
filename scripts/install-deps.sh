#!/bin/sh
# Install the Debian 12 packages gmblock needs to build, test and benchmark.
# Usage: scripts/install-deps.sh [build|serve|deb|check|bench|coverage|all]   (default: all)
#        scripts/install-deps.sh --list [SET]   print the set's packages
# Prints what it installs; needs root only when something is missing.
set -e

build="gcc make pkg-config perl nbdkit nbdkit-plugin-dev liburing-dev libpci-dev pci.ids libibverbs-dev librdmacm-dev"
serve="$build libnbd-bin qemu-utils"
debtools="debhelper dpkg-dev"   # make deb, and the test that builds the package
check="$serve $debtools man-db groff-base python3-libnbd fio nbd-server e2fsprogs util-linux fuse3 procps psmisc iproute2 curl valgrind clang libclang-rt-14-dev stress-ng systemd strace prometheus-node-exporter python3-prometheus-client"
bench="$serve fio nbd-server util-linux iproute2 python3 bc linux-perf"   # bench/run, bench/*/run
lab="qemu-system-x86 bash-builtins busybox-static cpio xz-utils zstd binutils kmod mdadm nbd-client pciutils gdb ibverbs-providers ibverbs-utils rdmacm-utils perftest"

list=
if [ "${1:-}" = --list ]; then list=1; shift; fi

case "${1:-all}" in
    build) want="$build" ;;
    serve) want="$serve" ;;
    deb)   want="$build $debtools" ;;
    check) want="$check $lab" ;;
    bench) want="$bench" ;;
    coverage) want="$check gcovr" ;;   # make coverage
    all)   want="$check $lab $bench" ;;
    *) echo "install-deps: unknown set '$1' (accepted: build, serve, deb, check, bench, coverage, all)" >&2; exit 2 ;;
esac

if [ -n "$list" ]; then
    printf '%s\n' $want
    exit 0
fi

missing=
for p in $want; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "install-deps: missing Debian packages:$missing"
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: not root: run 'sudo $0 ${1:-all}' or install them yourself:" >&2
    echo "    apt-get install$missing" >&2
    exit 1
fi
echo "install-deps: installing with apt-get (non-interactive)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q || echo "install-deps: apt-get update failed, trying the cached lists" >&2
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing </dev/null
echo "install-deps: done"

# Fetch and unpack a Debian guest kernel into the cache. Sourced.
# Flavours (a scenario's "# lab-kernel:" header; LAB_KERNEL overrides it):
#   bookworm (default)  Debian 12's 6.1, what gmblock's users run:
#                       linux-image-6.1.0-N-amd64-unsigned from the
#                       system's apt; LAB_KVER=6.1.0-N-amd64 picks one
#   trixie-backports    linux-binary, linux-modules and linux-base
#                       -V+deb13-amd64 (7.3.4 when written; it has
#                       CONFIG_PCI_P2PDMA) from a private apt list under
#                       the cache, the system's apt sources untouched;
#                       LAB_KVER_BACKPORTS=7.3.4+deb13-amd64 picks one
# kernel_prepare FLAVOUR sets KVER, KDIR (tree with lib/modules/KVER) and
# KERNEL_IMAGE, what QEMU boots (kernel_pvh). Each flavour keeps its
# newest kernel only: a new one replaces the older one of the same
# flavour and leaves the others alone.

KERNEL_FLAVOURS="bookworm trixie-backports"

# The kernel trees of FLAVOUR under $VM_CACHE/kernel, as a glob.
kernel_glob() {
    case $1 in
    bookworm) echo '6.1.0-*-amd64' ;;
    trixie-backports) echo '*+deb13-amd64' ;;
    *) return 1 ;;
    esac
}

# Newest linux-image-6.1.0-N-amd64-unsigned known to apt, as its version
# string 6.1.0-N-amd64; empty if apt knows none.
kernel_newest_bookworm() {
    apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' 2>/dev/null |
        sed -n 's/^linux-image-\(6\.1\.0-[0-9]*-amd64\)-unsigned .*/\1/p' | sort -V | tail -n 1
}

# The Debian archive the system's apt uses (first .../debian URI of its
# sources, one-line or deb822 format).
debian_mirror() {
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
        sed -n -e 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' -e 's/^URIs: *//p' |
        tr ' ' '\n' | sed 's,/*$,,' | grep -m 1 '/debian$' ||
        echo http://deb.debian.org/debian
}

# bpo_apt apt-get|apt-cache ARGS...: apt on the private trixie-backports
# list in $VM_CACHE/apt-trixie-backports, never the system's.
BPO_APT=$VM_CACHE/apt-trixie-backports
bpo_apt() {
    tool=$1; shift
    "$tool" -q -o Dir::Etc::sourcelist="$BPO_APT/sources.list" -o Dir::Etc::sourceparts=/dev/null \
        -o Dir::State::Lists="$BPO_APT/lists" -o Dir::Cache="$BPO_APT/cache" "$@"
}

# Refresh the private list when it is missing or a week old (backports
# keeps only its newest kernel; a failed refresh keeps the old list).
bpo_lists() {
    mkdir -p "$BPO_APT/lists/partial" "$BPO_APT/cache/archives/partial"
    echo "deb $(debian_mirror) trixie-backports main" >"$BPO_APT/sources.list"
    [ -f "$BPO_APT/updated" ] && [ -z "$(find "$BPO_APT/updated" -mtime +6)" ] && return 0
    say "apt-get update of the private trixie-backports list ($(cat "$BPO_APT/sources.list"))"
    if bpo_apt apt-get update >"$BPO_APT/update.log" 2>&1; then
        touch "$BPO_APT/updated"
    else
        say "apt-get update of trixie-backports failed (see $BPO_APT/update.log)"
    fi
}

kernel_newest_trixie_backports() {
    bpo_apt apt-cache search --names-only '^linux-binary-[0-9.]+\+deb13-amd64$' 2>/dev/null |
        sed -n 's/^linux-binary-\([0-9.]*+deb13-amd64\) .*/\1/p' | sort -V | tail -n 1
}

kernel_prepare() {
    flavour=$1
    glob=$(kernel_glob "$flavour") ||
        die "unknown lab-kernel '$flavour' (have: $KERNEL_FLAVOURS)"
    case $flavour in
    bookworm)
        want=${LAB_KVER:-$(kernel_newest_bookworm)}
        if [ -z "$want" ] && [ "$(id -u)" = 0 ]; then
            say "apt knows no 6.1 kernel: running apt-get update"
            apt-get update -q >/dev/null 2>&1 || true
            want=$(kernel_newest_bookworm)
        fi
        pkgs="linux-image-$want-unsigned" size="about 70 MB"
        ;;
    trixie-backports)
        bpo_lists
        want=${LAB_KVER_BACKPORTS:-$(kernel_newest_trixie_backports)}
        pkgs="linux-binary-$want linux-modules-$want linux-base-$want" size="about 120 MB"
        ;;
    esac
    if [ -z "$want" ]; then
        # Offline and no apt lists: settle for whatever was cached before.
        want=$(for d in "$VM_CACHE"/kernel/$glob; do
            [ -f "$d/.done" ] && echo "${d##*/}"; done | sort -V | tail -n 1)
        [ -n "$want" ] || die "no $flavour kernel known to apt and none cached"
    fi
    KVER=$want
    KDIR=$VM_CACHE/kernel/$KVER
    [ -f "$KDIR/.done" ] || kernel_fetch
    # 6.1 ships boot/vmlinuz-KVER; trixie's merged-/usr packages ship
    # usr/lib/modules/KVER/vmlinuz.
    for vmlinuz in "$KDIR/boot/vmlinuz-$KVER" "$KDIR/lib/modules/$KVER/vmlinuz"; do
        [ -f "$vmlinuz" ] && { kernel_pvh "$vmlinuz"; return 0; }
    done
    die "no vmlinuz in $KDIR"
}

# kernel_pvh VMLINUZ: set KERNEL_IMAGE to the kernel unpacked from
# VMLINUZ, an ELF that QEMU starts at its PVH entry point (Debian's
# kernels have CONFIG_PVH), kept as KDIR/vmlinux-pvh; to VMLINUZ itself
# when none can be unpacked. Booted from a bzImage, the guest first
# unpacks its kernel under TCG: 3 (zstd, 7.x) to 5 s (xz, 6.1) of CPU
# in every scenario's boot of 4 to 10.
kernel_pvh() {
    KERNEL_IMAGE=$KDIR/vmlinux-pvh
    [ -f "$KERNEL_IMAGE" ] && return 0
    tmp=$KERNEL_IMAGE.tmp
    # The compressed kernel sits after the setup code and the unpacker;
    # try where each format's magic is found until one unpacks to an
    # ELF with a PVH entry (Xen note type 18, XEN_ELFNOTE_PHYS32_ENTRY).
    for f in "xz $(printf '\3757zXZ')" "zstd $(printf '\050\265\057\375')" "gzip $(printf '\037\213\010')"; do
        tool=${f%% *} magic=${f#* }
        command -v "$tool" >/dev/null || continue
        for at in $(LC_ALL=C grep -abo -- "$magic" "$1" | head -n 3 | cut -d: -f1); do
            tail -c +$((at + 1)) "$1" | "$tool" -dc >"$tmp" 2>/dev/null
            [ "$(head -c 4 "$tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] &&
                readelf -n "$tmp" 2>/dev/null | grep -q 'Xen .*0x00000012' &&
                { mv "$tmp" "$KERNEL_IMAGE"; return 0; }
        done
    done
    rm -f "$tmp"
    say "no PVH kernel could be unpacked from $1: booting it as it is (slower)"
    KERNEL_IMAGE=$1
}

# Download $pkgs ($size), unpack them into KDIR, index the modules.
kernel_fetch() {
    say "fetching guest kernel $KVER ($flavour: $size, once)"
    rm -rf "$KDIR" "$VM_CACHE/kernel/.dl"
    mkdir -p "$VM_CACHE/kernel/.dl" "$KDIR"
    # apt-get download writes to the current directory; _apt cannot write
    # into root's folders, which only costs a warning.
    # shellcheck disable=SC2086
    if [ "$flavour" = bookworm ]; then
        (cd "$VM_CACHE/kernel/.dl" && apt-get download -q $pkgs >/dev/null 2>&1)
    else
        (cd "$VM_CACHE/kernel/.dl" && bpo_apt apt-get download $pkgs >/dev/null 2>&1)
    fi || die "apt-get download $pkgs failed"
    for deb in "$VM_CACHE"/kernel/.dl/*.deb; do
        dpkg-deb -x "$deb" "$KDIR" || die "dpkg-deb -x $deb failed"
    done
    rm -rf "$VM_CACHE/kernel/.dl"
    # Merged /usr: depmod -b and modprobe -d look in KDIR/lib/modules.
    [ -d "$KDIR/lib" ] || ln -s usr/lib "$KDIR/lib"
    # So that modprobe -d KDIR resolves dependencies inside the guest.
    depmod -b "$KDIR" "$KVER" || die "depmod failed"
    touch "$KDIR/.done"
    # A newer kernel replaces the old one of its flavour (130-400 MB).
    for old in "$VM_CACHE"/kernel/$glob; do
        [ "$old" = "$KDIR" ] || rm -rf "$old" "$VM_CACHE/initramfs-${old##*/}.gz"*
    done
}

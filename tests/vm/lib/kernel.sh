# Fetch and unpack Debian's 6.1 guest kernel into the cache. Sourced.
# Sets KVER (e.g. 6.1.0-56-amd64) and KDIR (tree with boot/ and lib/modules/).

# Newest linux-image-6.1.0-N-amd64-unsigned known to apt, as its version
# string 6.1.0-N-amd64; empty if apt knows none.
kernel_newest() {
    apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' 2>/dev/null |
        sed -n 's/^linux-image-\(6\.1\.0-[0-9]*-amd64\)-unsigned .*/\1/p' | sort -V | tail -n 1
}

kernel_prepare() {
    want=${LAB_KVER:-$(kernel_newest)}
    if [ -z "$want" ] && [ "$(id -u)" = 0 ]; then
        say "apt knows no 6.1 kernel: running apt-get update"
        apt-get update -q >/dev/null 2>&1 || true
        want=$(kernel_newest)
    fi
    if [ -z "$want" ]; then
        # Offline and no apt lists: settle for whatever was cached before.
        want=$(ls "$VM_CACHE/kernel" 2>/dev/null | sort -V | tail -n 1)
        [ -n "$want" ] || die "no linux-image-6.1.0-*-amd64-unsigned known to apt and none cached"
    fi
    KVER=$want
    KDIR=$VM_CACHE/kernel/$KVER
    [ -f "$KDIR/.done" ] && return 0

    say "fetching guest kernel linux-image-$KVER-unsigned (about 70 MB)"
    rm -rf "$KDIR" "$VM_CACHE/kernel/.dl"
    mkdir -p "$VM_CACHE/kernel/.dl"
    # apt-get download writes to the current directory; _apt cannot write
    # into root's folders, which only costs a warning.
    (cd "$VM_CACHE/kernel/.dl" && apt-get download -q "linux-image-$KVER-unsigned" >/dev/null 2>&1) ||
        die "apt-get download linux-image-$KVER-unsigned failed"
    mkdir -p "$KDIR"
    dpkg-deb -x "$VM_CACHE"/kernel/.dl/*.deb "$KDIR" || die "dpkg-deb -x failed"
    rm -rf "$VM_CACHE/kernel/.dl"
    # So that modprobe -d KDIR resolves dependencies inside the guest.
    depmod -b "$KDIR" "$KVER" || die "depmod failed"
    [ -f "$KDIR/boot/vmlinuz-$KVER" ] || die "no vmlinuz in the kernel package"
    touch "$KDIR/.done"
    # A newer kernel replaces the old one (400 MB unpacked).
    for old in "$VM_CACHE"/kernel/*; do
        [ "$old" = "$KDIR" ] || rm -rf "$old" "$VM_CACHE/initramfs-${old##*/}.gz"*
    done
}

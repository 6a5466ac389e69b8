# Build the guest's initramfs: static busybox, /init and the few modules
# needed to reach the host's root over 9p. Sourced; needs KVER and KDIR.
# Sets INITRD (one per kernel). Rebuilt only when one of its inputs changes.

# Modules to load before the host tree is visible, dependencies resolved
# by the host's modprobe against the guest kernel's modules.dep. Those
# built into a kernel (virtio_pci on 7.x) are skipped.
INITRAMFS_MODULES="virtio_pci 9pnet_virtio 9p"

initramfs_prepare() {
    INITRD=$VM_CACHE/initramfs-$KVER.gz
    # The guest has no libraries until 9p is up: busybox must be static.
    busybox=/bin/busybox
    [ -x "$busybox" ] || die "no $busybox (Debian package busybox-static)"
    ldd "$busybox" 2>&1 | grep -q 'not a dynamic' ||
        die "$busybox is dynamically linked: install busybox-static"
    stamp=$(cat "$VM_DIR/initramfs/init" "$VM_DIR/initramfs/lab-modprobe" "$VM_DIR/lib/initramfs.sh" "$busybox" |
        sha256sum | cut -c1-16)
    [ -f "$INITRD" ] && [ "$(cat "$INITRD.stamp" 2>/dev/null)" = "$stamp" ] && return 0

    say "building initramfs for $KVER"
    command -v cpio >/dev/null || die "cpio not found (Debian package cpio)"
    root=$VM_CACHE/initramfs.d
    rm -rf "$root"
    mkdir -p "$root/bin" "$root/lib/mod" "$root/proc" "$root/sys" "$root/dev" "$root/host"
    cp "$busybox" "$root/bin/busybox"
    cp "$VM_DIR/initramfs/init" "$root/init"
    cp "$VM_DIR/initramfs/lab-modprobe" "$root/bin/lab-modprobe"
    chmod 755 "$root/init" "$root/bin/lab-modprobe"
    : >"$root/lib/mod/order"
    for m in $INITRAMFS_MODULES; do
        modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" >>"$root/deps" ||
            die "module $m not in the guest kernel"
    done
    while read -r ko; do
        # busybox insmod takes plain .ko files: unpack trixie's .ko.xz here.
        case $ko in
        *.xz) "$busybox" xz -dc "$ko" >"$root/lib/mod/$(basename "$ko" .xz)" ;;
        *) cp "$ko" "$root/lib/mod/" ;;
        esac || die "cannot copy $ko into the initramfs"
        basename "$ko" .xz >>"$root/lib/mod/order"
    done <<EOF
$(awk '$1 == "insmod" && !seen[$2]++ { print $2 }' "$root/deps")
EOF
    rm "$root/deps"
    [ -s "$root/lib/mod/order" ] || die "no modules resolved for the initramfs"
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$INITRD.tmp" ||
        die "cpio failed"
    mv "$INITRD.tmp" "$INITRD"
    echo "$stamp" >"$INITRD.stamp"
    rm -rf "$root"
}

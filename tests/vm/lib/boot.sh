# Boot the lab guest once, with the disks a scenario asks for, and wait for
# it to power off or time out. Sourced; needs KVER, KDIR, INITRD.

# Turn disk specs into qemu arguments (appended to QEMU_DISK_ARGS).
#   virtio:SIZE                  sparse file as a virtio-blk disk (/dev/vdX)
#   nvme:SIZE[:lbs=N][:cmb=MiB]  sparse file as an NVMe namespace; lbs sets
#                                the logical block size, cmb adds a
#                                controller memory buffer BAR
#   nbd:URI                      an NBD export as a virtio-blk disk (QEMU
#                                is the NBD client)
# Files go to $1 (the run folder) as diskN.img.
disk_args() {
    dir=$1; shift
    n=0
    QEMU_DISK_ARGS=
    for spec in "$@"; do
        kind=${spec%%:*}; rest=${spec#*:}
        case $kind in
        virtio)
            truncate -s "$rest" "$dir/disk$n.img" || return 1
            QEMU_DISK_ARGS="$QEMU_DISK_ARGS -drive file=$dir/disk$n.img,format=raw,if=virtio,cache=unsafe"
            ;;
        nvme)
            size=${rest%%:*}; props=
            [ "$size" = "$rest" ] && opts= || opts=${rest#*:}
            for o in $(echo "$opts" | tr ':' ' '); do
                case $o in
                lbs=*) props="$props,logical_block_size=${o#lbs=},physical_block_size=${o#lbs=}" ;;
                cmb=*) props="$props,cmb_size_mb=${o#cmb=}" ;;
                *) say "unknown nvme option $o"; return 1 ;;
                esac
            done
            truncate -s "$size" "$dir/disk$n.img" || return 1
            QEMU_DISK_ARGS="$QEMU_DISK_ARGS -drive file=$dir/disk$n.img,format=raw,if=none,id=nv$n,cache=unsafe"
            QEMU_DISK_ARGS="$QEMU_DISK_ARGS -device nvme,serial=lab$n,drive=nv$n$props"
            ;;
        nbd)
            QEMU_DISK_ARGS="$QEMU_DISK_ARGS -drive file=$rest,format=raw,if=virtio,cache=none"
            ;;
        *) say "unknown disk kind in '$spec'"; return 1 ;;
        esac
        n=$((n + 1))
    done
}

# boot_guest RUNDIR TIMEOUT DISKSPEC...: the guest finds its job in
# RUNDIR/out (shared read-write); the serial console goes to
# RUNDIR/console.log. Returns 124 on timeout, qemu's status otherwise.
boot_guest() {
    dir=$1 limit=$2; shift 2
    disk_args "$dir" "$@" || return 1
    # TCG only: this host's /dev/kvm cannot run an ordinary guest kernel.
    # -cpu max so host binaries built for newer x86 features still run.
    # shellcheck disable=SC2086
    timeout -k 10 "$limit" qemu-system-x86_64 \
        -machine pc,accel=tcg -cpu max -smp 2 -m 1024 \
        -display none -monitor none -serial "file:$dir/console.log" \
        -no-reboot -nic none \
        -kernel "$KDIR/boot/vmlinuz-$KVER" -initrd "$INITRD" \
        -append "console=ttyS0 quiet panic=-1 iomem=relaxed lab.repo=$REPO lab.kdir=$KDIR lab.keep=$REPO:$VM_CACHE" \
        -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
        -virtfs "local,path=$dir/out,mount_tag=labout,security_model=none" \
        $QEMU_DISK_ARGS \
        </dev/null >"$dir/qemu.log" 2>&1
}

# Boot the lab guest once, with the disks a scenario asks for, and wait for
# it to power off or time out. Sourced; needs KDIR, KERNEL_IMAGE, INITRD and
# PCI_TOPOLOGY.

# PCI topologies (a scenario's "# lab-pci:" header; LAB_PCI overrides it):
#   (none)   machine pc, every device on the PCI root bus, as always
#   root     machine q35, the NVMe controllers on the root complex (pcie.0)
#   ports    q35, each NVMe controller behind its own root port
#   switch   q35, all NVMe controllers behind one PCIe switch, each on its
#            own downstream port: the one topology where Linux allows
#            peer-to-peer DMA between them (it refuses it across the
#            root complex, whose host bridge it does not whitelist)
# Virtio disks and the 9p shares sit on the root bus in every case.
PCI_TOPOLOGIES="root ports switch"

# QEMU_PCI_ARGS: the machine and the devices that come before all others
# (the switch's root port claims slot 6 before anything is placed
# automatically). Fails on an unknown topology.
# KERNEL_ARGS: what the topology adds to the kernel command line. On
# machine pc, acpi=noirq: the guest then takes its PCI interrupt routing
# from the BIOS's table instead of enabling each ACPI interrupt link,
# which took TCG 0.4 to 1 s a link (boot to the first step 7.4 to 8.4 s,
# with it 5.1 to 6.3 s). Every device there uses MSI-X anyway. q35's
# PCIe ports keep ACPI's routing.
pci_args() {
    KERNEL_ARGS=
    case $PCI_TOPOLOGY in
    '') QEMU_PCI_ARGS="-machine pc,accel=tcg" KERNEL_ARGS="acpi=noirq" ;;
    root|ports) QEMU_PCI_ARGS="-machine q35,accel=tcg" ;;
    switch)
        QEMU_PCI_ARGS="-machine q35,accel=tcg -device ioh3420,id=rp1,bus=pcie.0,addr=0x6,chassis=1,slot=1"
        QEMU_PCI_ARGS="$QEMU_PCI_ARGS -device x3130-upstream,id=up1,bus=rp1"
        ;;
    *) return 1 ;;
    esac
}

# nvme_place N: for the Nth (1, 2...) NVMe controller, append the port it
# needs to QEMU_DISK_ARGS and set NVME_BUS (",bus=ID", empty on machine pc).
nvme_place() {
    NVME_BUS=
    case $PCI_TOPOLOGY in
    root) NVME_BUS=,bus=pcie.0 ;;
    ports)
        QEMU_DISK_ARGS="$QEMU_DISK_ARGS -device ioh3420,id=rp$1,bus=pcie.0,chassis=$1,slot=$1"
        NVME_BUS=,bus=rp$1
        ;;
    switch)
        QEMU_DISK_ARGS="$QEMU_DISK_ARGS -device xio3130-downstream,id=dn$1,bus=up1,chassis=$(($1 + 1)),slot=$(($1 + 1))"
        NVME_BUS=,bus=dn$1
        ;;
    esac
}

# throttle_opt O: a disk's iops=N or bps=N (a positive integer) appended
# to drv, its -drive options; fails on anything else.
throttle_opt() {
    case $1 in
    iops=[1-9]*|bps=[1-9]*) ;;
    *) return 1 ;;
    esac
    case ${1#*=} in *[!0-9]*) return 1 ;; esac
    case $1 in
    iops=*) drv="$drv,throttling.iops-total=${1#iops=}" ;;
    bps=*) drv="$drv,throttling.bps-total=${1#bps=}" ;;
    esac
}

# Turn disk specs into qemu arguments (appended to QEMU_DISK_ARGS).
#   virtio:SIZE[:iops=N][:bps=N] sparse file as a virtio-blk disk (/dev/vdX)
#   nvme:SIZE[:lbs=N][:cmb=MiB][:iops=N][:bps=N]
#                                sparse file as an NVMe namespace; lbs sets
#                                the logical block size, cmb adds a
#                                controller memory buffer BAR
#   iops=N, bps=N throttle the disk in QEMU (throttling.iops-total,
#   throttling.bps-total: reads and writes together) so that it costs
#   time like a real one: under TCG an unthrottled disk is served from
#   the host's page cache and a member I/O costs next to nothing.
#   nbd:URI                      an NBD export as a virtio-blk disk (QEMU
#                                is the NBD client)
# Files go to $1 (the run folder) as diskN.img.
disk_args() {
    dir=$1; shift
    n=0 nvmes=0
    QEMU_DISK_ARGS=
    for spec in "$@"; do
        kind=${spec%%:*}; rest=${spec#*:}
        case $kind in
        virtio)
            size=${rest%%:*} drv=
            [ "$size" = "$rest" ] && opts= || opts=${rest#*:}
            for o in $(echo "$opts" | tr ':' ' '); do
                throttle_opt "$o" || { say "unknown virtio option $o"; return 1; }
            done
            truncate -s "$size" "$dir/disk$n.img" || return 1
            QEMU_DISK_ARGS="$QEMU_DISK_ARGS -drive file=$dir/disk$n.img,format=raw,if=virtio,cache=unsafe$drv"
            ;;
        nvme)
            size=${rest%%:*}; props= drv=
            [ "$size" = "$rest" ] && opts= || opts=${rest#*:}
            for o in $(echo "$opts" | tr ':' ' '); do
                case $o in
                lbs=*) props="$props,logical_block_size=${o#lbs=},physical_block_size=${o#lbs=}" ;;
                cmb=*) props="$props,cmb_size_mb=${o#cmb=}" ;;
                *) throttle_opt "$o" || { say "unknown nvme option $o"; return 1; } ;;
                esac
            done
            truncate -s "$size" "$dir/disk$n.img" || return 1
            nvmes=$((nvmes + 1))
            nvme_place "$nvmes"
            QEMU_DISK_ARGS="$QEMU_DISK_ARGS -drive file=$dir/disk$n.img,format=raw,if=none,id=nv$n,cache=unsafe$drv"
            QEMU_DISK_ARGS="$QEMU_DISK_ARGS -device nvme,serial=lab$n,drive=nv$n$props$NVME_BUS"
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
    pci_args && disk_args "$dir" "$@" || return 1
    # TCG only: this host's /dev/kvm cannot run an ordinary guest kernel.
    # -cpu max so host binaries built for newer x86 features still run,
    # but without ERMS and FSRM: with them the guest's kernel and libc
    # copy and clear memory with rep movsb/stosb, which TCG runs one
    # byte per pass through its translated loop. Without them they copy
    # 8 or 32 bytes a step: dd, tmpfs, page-cache and nbdcopy copies in
    # the guest took 2.5 to 3 times less CPU (zero to null 4.2 s against
    # 0.8 s), and a probe scenario, its boot included, 26 CPU s, not 43.
    # shellcheck disable=SC2086
    timeout -k 10 "$limit" qemu-system-x86_64 \
        $QEMU_PCI_ARGS -cpu max,erms=off,fsrm=off -smp "${GUEST_CPUS:-2}" -m "${GUEST_MEM:-1024}" \
        -display none -monitor none -serial "file:$dir/console.log" \
        -pidfile "$dir/qemu.pid" \
        -no-reboot -nic none \
        -kernel "$KERNEL_IMAGE" -initrd "$INITRD" \
        -append "console=ttyS0 quiet panic=-1 iomem=relaxed $KERNEL_ARGS lab.repo=$REPO lab.kdir=$KDIR lab.keep=$REPO:$VM_CACHE" \
        -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
        -virtfs "local,path=$dir/out,mount_tag=labout,security_model=none" \
        $QEMU_DISK_ARGS \
        </dev/null >"$dir/qemu.log" 2>&1
}

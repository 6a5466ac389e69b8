# Run one scenario: scenarios/NAME.sh runs inside the guest; its header
# says what the guest needs:
#   # lab-disks: virtio:96M nvme:64M:lbs=4096 ...   (see lib/boot.sh)
#   # lab-timeout: 300                              (seconds, whole boot)
#   # lab-kernel: trixie-backports                  (see lib/kernel.sh)
#   # lab-pci: switch                               (see lib/boot.sh)
#   # lab-bench: yes             (a benchmark: runs only when named)
#   # lab-smp: 2                 (vCPUs, when the default 1 or 2 of
#                                  lib/parallel.sh would not do)
#   # lab-sanitizer: asan        (nbdkit runs with the ASan+UBSan build
#                                  of the modules, or tsan: the TSan
#                                  build; see scenario_sanitizer)
#   # lab-mem: 2048              (guest memory in MiB, default 1024)
# An optional scenarios/NAME.host.sh is sourced on the host and may define
# host_before DIR (start host-side servers; append disk specs to
# HOST_DISKS), host_after DIR (check the result on the host; write a
# reason to DIR/host.reason and return non-zero on failure) and
# host_cleanup DIR (always runs). Sourced.

# Benchmarks (header "# lab-bench: yes") run only when named: they
# measure, they do not test, and they would cost make check minutes.
scenario_list() {
    for f in "$VM_DIR"/scenarios/*.sh; do
        case $f in *.host.sh) continue ;; esac
        [ "$(header "$f" lab-bench)" = yes ] && continue
        basename "$f" .sh
    done
}

# header FILE KEY: the value of "# KEY: value" in FILE.
header() { sed -n "s/^# $2: *//p" "$1" | head -n 1; }

# The kernel flavour scenario NAME boots (LAB_KERNEL overrides all).
scenario_kernel() {
    k=${LAB_KERNEL:-$(header "$VM_DIR/scenarios/$1.sh" lab-kernel)}
    echo "${k:-bookworm}"
}

# scenario_sanitizer NAME: which build of the modules nbdkit runs in
# scenario NAME: asan (ASan+UBSan), tsan (ThreadSanitizer) or none.
# Its "lab-sanitizer:" header says, so that make check runs the RDMA
# server and bridge (which the host cannot run) under a sanitizer too;
# LAB_SANITIZE=1 (asan) or LAB_TSAN=1 (tsan) applies one to every
# scenario, LAB_SANITIZE=0 none to any.
scenario_sanitizer() {
    local s
    if [ -n "${LAB_SANITIZE:-}" ] && [ "$LAB_SANITIZE" != 0 ]; then
        s=asan
    elif [ -n "${LAB_TSAN:-}" ] && [ "$LAB_TSAN" != 0 ]; then
        s=tsan
    elif [ "${LAB_SANITIZE:-}" = 0 ]; then
        s=none
    else
        s=$(header "$VM_DIR/scenarios/$1.sh" lab-sanitizer)
    fi
    case ${s:-none} in
    asan | tsan | none) echo "${s:-none}" ;;
    *) echo "scenario $1: lab-sanitizer '$s' is none of asan, tsan, none" >&2
       return 1 ;;
    esac
}

# kernel_remember FLAVOUR: note KVER, KDIR, KERNEL_IMAGE and INITRD, as
# kernel_prepare and initramfs_prepare set them, for kernel_use FLAVOUR.
PREPARED_KERNELS=
kernel_remember() {
    PREPARED_KERNELS="$PREPARED_KERNELS$1|$KVER|$KDIR|$KERNEL_IMAGE|$INITRD
"
}
kernel_use() {
    line=$(printf %s "$PREPARED_KERNELS" | grep -m 1 "^$1|") || return 1
    IFS='|' read -r _ KVER KDIR KERNEL_IMAGE INITRD <<EOF
$line
EOF
}

# Quote a value for the job file (a shell fragment the guest sources).
q() { printf "'%s'" "$(printf %s "$1" | sed "s/'/'\\\\''/g")"; }

scenario_job() {
    echo "LAB_NAME=$(q "$1")"
    echo "LAB_SCENARIO=$(q "$VM_DIR/scenarios/$1.sh")"
    echo "LAB_REPO=$(q "$REPO")"
    echo "LAB_KDIR=$(q "$KDIR")"
    echo "LAB_DATASET=$(q "$DATASET")"
    echo "LAB_MANIFEST=$(q "$MANIFEST")"
    # Knobs a scenario may honour, passed through unchanged; the
    # sanitizer as scenario_sanitizer chose it (guest/run.sh).
    env | grep '^LAB_[A-Z_]*=' | grep -v -e '^LAB_TIMEOUT=' -e '^LAB_SANITIZE=' -e '^LAB_TSAN=' |
        while IFS='=' read -r k v; do
            echo "export $k=$(q "$v")"
        done
    case $2 in
    asan) echo "export LAB_SANITIZE=1" ;;
    tsan) echo "export LAB_TSAN=1" ;;
    esac
    echo "export LAB_NAME LAB_SCENARIO LAB_REPO LAB_KDIR LAB_DATASET LAB_MANIFEST"
}

# guest_tail RUNDIR: why a guest ended without a result, for the FAIL
# line (CI shows that line, not the console log): qemu's last message,
# else the console's last lines.
guest_tail() {
    if [ -s "$1/qemu.log" ]; then
        printf ': %s' "$(tail -n 1 "$1/qemu.log")"
    elif [ -s "$1/console.log" ]; then
        printf '; console ends: %s' "$(grep -v '^[[:space:]]*$' "$1/console.log" |
            tail -n 4 | tr -d '\r' | paste -sd '|')"
    fi
}

# boot_scenario RUNDIR NAME LIMIT DISKS: boot the guest (sets rc). A guest
# that ends before the scenario even started (its console never printed
# the runner's start line: a boot that died in the kernel or in the
# initramfs, nothing the scenario did) boots once more, saying so, and
# so does one that has not started it LAB_BOOT_TIMEOUT seconds (120)
# into the boot (it takes 5 to 30 s; once, under CI, a guest printed
# nothing at all until its scenario's time limit killed it); a scenario
# that started is never rerun, whatever happened to it.
boot_scenario() {
    local attempt pid waited hung
    BOOT_HUNG=
    for attempt in 1 2; do
        rm -f "$1/qemu.pid"
        # shellcheck disable=SC2086
        boot_guest "$1" "$3" $4 $HOST_DISKS &
        pid=$! waited=0 hung=
        while kill -0 "$pid" 2>/dev/null; do
            grep -q "^lab: scenario $2 starting" "$1/console.log" 2>/dev/null && break
            if [ "$waited" -ge "${LAB_BOOT_TIMEOUT:-120}" ] && [ "$waited" -lt "$3" ]; then
                hung=1
                kill "$(cat "$1/qemu.pid" 2>/dev/null)" 2>/dev/null
                break
            fi
            sleep 1
            waited=$((waited + 1))
        done
        wait "$pid"
        rc=$?
        if [ -n "$hung" ] && [ "$attempt" = 1 ]; then
            say "$2: the guest has not started the scenario ${waited} s into its boot$(guest_tail "$1"); booting once more"
            mv "$1/console.log" "$1/console.boot1.log"
            continue
        fi
        [ -z "$hung" ] || BOOT_HUNG=$waited
        if [ "$attempt" = 2 ] || [ "$rc" = 124 ] || [ "$rc" = 137 ] ||
            grep -q "^lab: scenario $2 starting" "$1/console.log" 2>/dev/null; then
            return
        fi
        say "$2: the guest ended before the scenario started (qemu exit $rc$(guest_tail "$1")); booting once more"
        mv "$1/console.log" "$1/console.boot1.log"
    done
}

# cpu_seconds FILE: the CPU time (user and system, whole seconds) that
# "times" wrote to FILE for the shell's ended children: the guest's qemu
# and any host-side servers. With two guests at once, it tells what a
# scenario costs apart from what the other guest makes it wait. (times
# must run in the scenario's shell itself: in a pipe or $(...) it would
# be a fresh child's, with no children yet.)
cpu_seconds() {
    tail -n 1 "$1" | awk '{ t = 0
        for (i = 1; i <= 2; i++) { split($i, ms, "m"); t += ms[1] * 60 + ms[2] }
        printf "%d\n", t + 0.5 }'
}

scenario_run() (
    set -f     # disk specs and URIs are split on spaces, never globbed
    name=$1
    script=$VM_DIR/scenarios/$name.sh
    dir=$VM_CACHE/runs/$name
    rm -rf "$dir"
    mkdir -p "$dir/out"
    disks=$(header "$script" lab-disks)
    kernel=$(scenario_kernel "$name")
    PCI_TOPOLOGY=${LAB_PCI:-$(header "$script" lab-pci)}
    # A scenario that needs its guest's work to run side by side (a
    # client's requests arriving while the server works) says how many
    # vCPUs it needs; LAB_SMP overrides.
    GUEST_CPUS=${LAB_SMP:-$(header "$script" lab-smp)}
    GUEST_CPUS=${GUEST_CPUS:-${GUEST_CPUS_DEFAULT:-2}}
    GUEST_MEM=${LAB_MEM:-$(header "$script" lab-mem)}
    sanitizer=$(scenario_sanitizer "$name" 2>&1) || {
        echo "FAIL $name ($sanitizer, log: none)"
        return 1
    }
    limit=${LAB_TIMEOUT:-$(header "$script" lab-timeout)}
    limit=${limit:-300}
    left=$((LAB_DEADLINE - $(date +%s)))
    if [ "$left" -lt 30 ]; then
        echo "FAIL $name (the lab's time budget is spent, log: none)"
        return 1
    fi
    [ "$limit" -le "$left" ] || limit=$left
    if ! kernel_use "$kernel"; then
        echo "FAIL $name (kernel $kernel was not prepared, log: none)"
        return 1
    fi
    if ! pci_args; then
        echo "FAIL $name (unknown lab-pci '$PCI_TOPOLOGY' (have: $PCI_TOPOLOGIES), log: none)"
        return 1
    fi
    HOST_DISKS=
    host_before() { :; }
    host_after() { :; }
    host_cleanup() { :; }
    [ -f "$VM_DIR/scenarios/$name.host.sh" ] && . "$VM_DIR/scenarios/$name.host.sh"
    # Host-side servers must not outlive the scenario, even on ^C.
    trap 'host_cleanup "$dir" >>"$dir/host.log" 2>&1' EXIT
    trap 'exit 130' INT TERM
    scenario_job "$name" "$sanitizer" >"$dir/out/job"

    start=$(date +%s) reason= log=$dir/console.log
    if ! host_before "$dir" >"$dir/host.log" 2>&1; then
        reason="host setup failed" log=$dir/host.log
    else
        boot_scenario "$dir" "$name" "$limit" "$disks"
        status=$(cat "$dir/out/status" 2>/dev/null)
        if [ -n "$BOOT_HUNG" ]; then
            reason="the guest did not start the scenario within ${BOOT_HUNG} s of booting, twice$(guest_tail "$dir")"
        elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            reason="guest killed after the ${limit}s time limit"
        elif [ -z "$status" ]; then
            reason="guest ended without a result, qemu exit $rc$(guest_tail "$dir")"
        elif [ "$status" != 0 ]; then
            log=$dir/out/scenario.log
            reason=$(cat "$dir/out/reason" 2>/dev/null)
            [ -n "$reason" ] || reason="scenario exited $status: $(tail -n 1 "$log")"
        elif ! host_after "$dir" >>"$dir/host.log" 2>&1; then
            log=$dir/host.log
            reason="host check: $(cat "$dir/host.reason" 2>/dev/null || echo failed)"
        fi
    fi
    times >"$dir/times"
    say "$name took $(($(date +%s) - start)) s, $(cpu_seconds "$dir/times") CPU s (kernel $KVER, $GUEST_CPUS vCPU${PCI_TOPOLOGY:+, pci $PCI_TOPOLOGY}$([ "$sanitizer" = none ] || echo ", $sanitizer"))"
    if [ -n "$reason" ]; then
        echo "FAIL $name ($reason, log: $log)"
        return 1
    fi
    echo "PASS $name"
)

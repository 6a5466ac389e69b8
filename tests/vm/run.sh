#!/bin/sh
# The guest lab: boot a QEMU (TCG) guest per scenario, run the scenario
# inside it against the gmblock plugin, report one line per scenario and a
# summary. Usage: tests/vm/run.sh [scenario...]   (default: all of them)
# LAB_JOBS guests run at once (default 2; benchmarks always run alone),
# each with LAB_SMP vCPUs (default: 2, or 1 if the host has fewer than 2
# cores per guest at once); see lib/parallel.sh.
# Environment: SKIP_VM=1 skips (not under CI), LAB_CORRUPT=1 corrupts the
# backing data before re-reads (the checks must then fail), LAB_TIMEOUT
# overrides every scenario's time limit, LAB_BUDGET (seconds, default
# 4200) bounds the whole lab, LAB_BOOT_TIMEOUT (seconds, default 120)
# how long a guest may boot before its scenario starts (else it boots
# once more), LAB_MEM the guest's memory (MiB, default 1024), VM_CACHE
# moves the cache, LAB_KERNEL, LAB_PCI and LAB_MEM override every
# scenario's lab-kernel, lab-pci and lab-mem headers; LAB_SANITIZE=1
# (ASan+UBSan), LAB_TSAN=1 (ThreadSanitizer) or LAB_SANITIZE=0 (none)
# its lab-sanitizer header.
. "$(dirname "$0")/lib/common.sh"
. "$VM_DIR/lib/kernel.sh"
. "$VM_DIR/lib/initramfs.sh"
. "$VM_DIR/lib/dataset.sh"
. "$VM_DIR/lib/boot.sh"
. "$VM_DIR/lib/scenario.sh"
. "$VM_DIR/lib/parallel.sh"

# Whatever stops the lab before the summary still ends in a FAIL line.
summary_done=
trap '[ -n "$summary_done" ] || {
    echo "FAIL guest-lab (the lab could not run: see the messages above)"
    echo "0 passed, 1 failed"; }' EXIT

if [ "${SKIP_VM:-0}" = 1 ]; then
    if in_ci; then
        say "SKIP_VM=1 is ignored under CI: the guest lab always runs there"
    else
        echo "SKIP guest-lab (SKIP_VM=1 set: the guest lab was not run)"
        echo "0 passed, 0 failed, 1 skipped"
        summary_done=1
        exit 0
    fi
fi

names=$*
[ -n "$names" ] || names=$(scenario_list)
for n in $names; do
    [ -f "$VM_DIR/scenarios/$n.sh" ] || die "no scenario '$n' (have: $(scenario_list | tr '\n' ' '))"
done

check_jobs
# Everything the guest needs; a failure here fails the lab loudly.
for tool in qemu-system-x86_64 apt-get dpkg-deb depmod modprobe cpio timeout; do
    command -v "$tool" >/dev/null ||
        die "missing $tool: run scripts/install-deps.sh (or SKIP_VM=1 to skip the lab locally)"
done
if [ "${LAB_PLUGIN:-gmblock}" = gmblock ] &&
    ! [ -f "$REPO/plugins/gmblock/nbdkit-gmblock-plugin.so" ]; then
    die "the gmblock plugin is not built: run make at the top of the tree first"
fi
# The sanitizer builds the chosen scenarios need (lib/scenario.sh's
# scenario_sanitizer; make check-vm makes both).
for n in $names; do
    scenario_sanitizer "$n" >/dev/null || die "fix scenarios/$n.sh's header"
done
need_build() { # SANITIZER SHIM HOW: die unless SHIM is built
    local n who=
    for n in $names; do
        [ "$(scenario_sanitizer "$n")" = "$1" ] && who="$who $n"
    done
    [ -z "$who" ] || [ -f "$2" ] ||
        die "$1 runs (a lab-sanitizer header or LAB_SANITIZE/LAB_TSAN) need its build, missing:$who; build it with $3, or run them without it with LAB_SANITIZE=0"
}
need_build asan "$REPO/.build-sanitize/tests/sanitizer-shim.so" "make build-sanitize"
need_build tsan "$REPO/.build-tsan/tests/sanitizer-shim.so" "make build-tsan"
# One lab at a time per cache: runs share the scenario folders.
exec 9>"$VM_CACHE/.lock"
flock -n 9 || { say "waiting for another guest lab run to finish"; flock 9; }
# Each kernel the chosen scenarios boot, with its initramfs.
for k in $(for n in $names; do scenario_kernel "$n"; done | sort -u); do
    kernel_prepare "$k"
    initramfs_prepare
    kernel_remember "$k"
done
dataset_prepare

# The whole lab must end within LAB_BUDGET seconds even if every guest
# hangs: each scenario gets at most what is left of it.
LAB_DEADLINE=$(($(date +%s) + ${LAB_BUDGET:-4200}))
passed=0 failed=0 t0=$(date +%s)
run_all $names
times >"$VM_CACHE/runs/times"
say "guest lab took $(($(date +%s) - t0)) s, $(cpu_seconds "$VM_CACHE/runs/times") CPU s"
echo "$passed passed, $failed failed"
summary_done=1
[ "$failed" = 0 ]

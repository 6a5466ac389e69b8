# Running the scenarios LAB_JOBS guests at a time. Sourced by run.sh.
#
# A scenario's guest spends much of its time waiting: for a timeout to
# expire, a server to restart, a client to reconnect. One guest at a
# time kept about one core of two busy (5 scenarios: 655 s, 563 CPU s);
# two at once use both. Each scenario already has its own run folder,
# disks, host socket and guest, so nothing else is shared.

# lab_jobs NAME...: how many guests at once: LAB_JOBS (default 2), but
# one when a benchmark is among NAMEs: a benchmark measures, so nothing
# may run beside it.
lab_jobs() {
    local n
    for n; do
        [ "$(header "$VM_DIR/scenarios/$n.sh" lab-bench)" = yes ] && { echo 1; return; }
    done
    echo "${LAB_JOBS:-2}"
}

# guest_cpus JOBS: how many vCPUs each of JOBS guests at once gets by
# default: 2, or 1 when the host has fewer than 2 cores per guest. Two
# 2-vCPU guests on 2 cores cost a third to a half more CPU per scenario
# than one at a time (most likely a descheduled vCPU leaving the other
# spinning on its locks); two 1-vCPU guests cost less than one 2-vCPU
# guest at a time: 4 scenarios took 156 s and 202 CPU s so, against
# 279 s and 229 CPU s. LAB_SMP, else a scenario's "lab-smp: N" header,
# overrides this (lib/scenario.sh).
guest_cpus() {
    if [ $(($(nproc) / $1)) -ge 2 ]; then echo 2; else echo 1; fi
}

# longest_first NAME...: NAMEs by their lab-timeout, longest first (then
# by name), so that no long scenario starts last and runs alone at the
# end while the other guest's slot stays empty.
longest_first() {
    local n t
    for n; do
        t=$(header "$VM_DIR/scenarios/$n.sh" lab-timeout)
        echo "${t:-300} $n"
    done | sort -k1,1rn -k2,2 | cut -d' ' -f2
}

# check_jobs: LAB_JOBS and LAB_SMP are whole numbers, 1 or more.
check_jobs() {
    case ${LAB_JOBS:-2} in
    '' | *[!0-9]* | 0*) die "LAB_JOBS='$LAB_JOBS': give the number of guests to run at once, 1 or more" ;;
    esac
    case ${LAB_SMP:-1} in
    '' | *[!0-9]* | 0*) die "LAB_SMP='$LAB_SMP': give the number of vCPUs per guest, 1 or more" ;;
    esac
}

# run_all NAME...: run every scenario, at most $(lab_jobs) at once, and
# count passed and failed. A scenario's lines are kept until it ends and
# then shown together, so two guests' lines never interleave. Each one
# leaves its exit status in a file: the shell's wait cannot say which of
# several children ended first, and one may have ended already.
run_all() {
    local jobs order n running
    jobs=$(lab_jobs "$@")
    [ "$jobs" -le $# ] || jobs=$#
    GUEST_CPUS_DEFAULT=$(guest_cpus "$jobs")
    order=$*
    [ "$jobs" = 1 ] || order=$(longest_first "$@")
    mkdir -p "$VM_CACHE/runs" || die "cannot create $VM_CACHE/runs"
    running=
    for n in $order; do
        while [ "$(count $running)" -ge "$jobs" ]; do reap_some; done
        rm -f "$VM_CACHE/runs/$n.rc"
        (
            scenario_run "$n" >"$VM_CACHE/runs/$n.out" 2>"$VM_CACHE/runs/$n.err"
            echo $? >"$VM_CACHE/runs/$n.rc"
        ) &
        running="$running $n:$!"
    done
    while [ -n "$running" ]; do reap_some; done
}

count() { echo $#; }

# reap_some: wait until one or more of run_all's running scenarios have
# ended; show their lines and count them. One whose job ended without
# leaving its status fails, saying so, rather than being waited for
# for ever.
reap_some() {
    local job n pid still rc
    while :; do
        still=
        for job in $running; do
            n=${job%:*} pid=${job##*:}
            # Alive first: a job writes its status just before it ends.
            if kill -0 "$pid" 2>/dev/null; then
                still="$still $job"
                continue
            fi
            rc=$(cat "$VM_CACHE/runs/$n.rc" 2>/dev/null) || rc=lost
            cat "$VM_CACHE/runs/$n.err" >&2 2>/dev/null
            cat "$VM_CACHE/runs/$n.out" 2>/dev/null
            [ "$rc" = lost ] && echo "FAIL $n (its job ended without an exit status, log: none)"
            rm -f "$VM_CACHE/runs/$n.out" "$VM_CACHE/runs/$n.err" "$VM_CACHE/runs/$n.rc"
            if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
        done
        [ "$still" = "$running" ] || { running=$still; return; }
        sleep 1
    done
}

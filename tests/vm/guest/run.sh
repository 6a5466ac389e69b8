#!/bin/sh
# Runs inside the guest, chrooted into the host's tree: execute the
# scenario named in the job file and leave its log and exit status in the
# results share, where the host harness picks them up.
OUT=/run/lab/out
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/run/lab TMPDIR=/tmp LC_ALL=C
# shellcheck source=/dev/null
. "$OUT/job" || { echo 99 >"$OUT/status"; exit 1; }
# /var/lock points into /run, a fresh tmpfs here (qemu-nbd needs it).
mkdir -p /run/lock
cd /run/lab || exit 1
echo "lab: scenario $LAB_NAME starting" >/dev/console
bash "$LAB_SCENARIO" >"$OUT/scenario.log" 2>&1 </dev/null
rc=$?
# Soft-RoCE's own counters (retransmissions, RNR, duplicate requests),
# to explain an RDMA scenario's stall after the fact.
for d in /sys/class/infiniband/*/ports/*/hw_counters; do
    [ -d "$d" ] || continue
    echo "== $d"
    grep -H . "$d"/* 2>/dev/null | sed 's|.*/||'
done >"$OUT/rdma-counters" 2>&1
[ -s "$OUT/rdma-counters" ] || rm -f "$OUT/rdma-counters"
echo "$rc" >"$OUT/status"
echo "lab: scenario $LAB_NAME exited $rc" >/dev/console
exit "$rc"

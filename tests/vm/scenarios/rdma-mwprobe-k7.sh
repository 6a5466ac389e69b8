# rdma-mwprobe on trixie-backports' 7.x kernel (its rxe).
# lab-kernel: trixie-backports
# lab-timeout: 300
. "$LAB_REPO/tests/vm/scenarios/rdma-mwprobe.sh"

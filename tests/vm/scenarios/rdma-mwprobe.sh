# Feasibility of per-request memory windows in the gmblock-rdma bridge
# on soft-RoCE: tests/rdma-mwprobe (built by make) asks rxe0 for type-2
# memory windows and checks what the bridge would rely on: a bind
# (IBV_WR_BIND_MW) on an RC QP to a 4 KiB window of an MR registered with
# IBV_ACCESS_MW_BIND only; a peer's RDMA WRITE and READ through the new
# rkey land inside it; rebinding after IBV_WR_LOCAL_INV; a WRITE past,
# straddling or before the window, one the window's access does not
# allow, one after IBV_WR_LOCAL_INV or ibv_dealloc_mw, and one with the
# MR's own rkey each fail with a remote access error and leave the
# memory unchanged.  Boots the default kernel (6.1); rdma-mwprobe-k7
# the same on trixie-backports' 7.x.
#
# Measured (6.1.0-57 and 7.3.4): everything works but the bounds: rxe
# checks a window's rkey, access and state, then the range of the
# window's MR, not the window's (drivers/infiniband/sw/rxe/rxe_resp.c,
# check_rkey), so a write past a request's window but inside the pool
# lands.  The probe says so with exit 4, and this scenario passes on
# that known outcome (what it guards is the rest: binds, access,
# invalidation, deallocation); any other failure or a hang fails it.
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
probe=$LAB_REPO/tests/rdma-mwprobe
[ -x "$probe" ] || fail "tests/rdma-mwprobe not built: run make at the top first"
rxe_pair
step "kernel $(uname -r): rdma-mwprobe on rxe0"
ibv_devinfo -v 2>/dev/null | grep -iE "device_cap_flags|MEM_WINDOW|max_mw" || true
timeout 200 "$probe" 10.77.0.1 20100 >"$LAB_OUT/mwprobe.out" 2>"$LAB_OUT/mwprobe.trace"
rc=$?
cat "$LAB_OUT/mwprobe.out"
case $rc in
0) echo "type-2 memory windows on $(uname -r)'s rxe: usable, bounds included" ;;
4) echo "KNOWN: $(uname -r)'s rxe does not check a memory window's bounds (only its MR's): per-request windows cannot stop a stray write into another request's buffer here" ;;
*) tail -3 "$LAB_OUT/mwprobe.trace"
   fail "rdma-mwprobe: exit $rc (not the known outcome)" ;;
esac

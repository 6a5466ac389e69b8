# The RDMA server killed and restarted under the bridge (issue 10): an
# nbdcopy through the bridge when gmblock is killed -9 mid-transfer must
# fail, not finish with wrong data; the kernel NBD client attached to
# the bridge gets EIO while the server is gone; once it is back, the
# same NBD connection reads again (the bridge reconnects) and the data
# is intact, as is a fresh copy through the bridge.
# lab-disks: virtio:64M
# lab-timeout: 300
. "$LAB_REPO/tests/vm/guest/lib.sh"
load virtio_blk nbd
rxe_pair
must head -c 64M /dev/urandom >"$LAB_RUN/a.img"
must dd if="$LAB_RUN/a.img" of=/dev/vda bs=1M oflag=direct status=none
srv_args=(--filter=gmblock-rdma -- rdma=10.77.0.1)
serve srv 10809 /dev/vda "${srv_args[@]}"
bridge br 10.77.0.1
uri="nbd+unix:///?socket=$LAB_RUN/br.sock"
attach /dev/nbd0 "$LAB_RUN/br.sock"
must dd if=/dev/nbd0 of="$LAB_RUN/head.img" bs=1M count=4 iflag=direct status=none
cmp -n $((4 << 20)) "$LAB_RUN/a.img" "$LAB_RUN/head.img" || fail "first read differs"

step "kill -9 the server while nbdcopy reads through the bridge"
nbdcopy "$uri" "$LAB_RUN/out.img" &
copy=$!
sleep 1
stop srv KILL
if wait "$copy"; then
    # Finished before the kill: then it must be complete and right.
    cmp "$LAB_RUN/a.img" "$LAB_RUN/out.img" || fail "nbdcopy finished with wrong data"
    echo "nbdcopy finished before the kill (data checked)"
else
    echo "nbdcopy failed, as it must (exit $?)"
fi
step "the attached NBD client while the server is gone"
drop_caches /dev/nbd0
if dd if=/dev/nbd0 of=/dev/null bs=1M count=4 skip=8 iflag=direct status=none; then
    fail "a read succeeded with no server"
fi
echo "read failed (EIO), as it must"

step "restart the server; the same NBD connection reads again"
serve srv 10809 /dev/vda "${srv_args[@]}"
drop_caches /dev/nbd0
must dd if=/dev/nbd0 of="$LAB_RUN/all.img" bs=1M iflag=direct status=none
cmp "$LAB_RUN/a.img" "$LAB_RUN/all.img" || fail "after the reconnect the data differs"
must nbdcopy "$uri" "$LAB_RUN/out.img"
cmp "$LAB_RUN/a.img" "$LAB_RUN/out.img" || fail "a fresh copy after the restart differs"
detach /dev/nbd0
stop br
stop srv
echo "bridge: $(tr '\n' ' ' <"$LAB_OUT/br.stats")"
counter_above reconnects "$(rdma_counter br.stats reconnects)" 0 "the bridge reconnected an existing connection"
counter_above transport_errors "$(rdma_counter br.stats transport_errors)" 0 "requests in flight failed with EIO"
echo "rdma-restart: all checks passed"

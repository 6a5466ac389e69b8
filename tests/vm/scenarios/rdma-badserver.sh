# A misbehaving RDMA server against the gmblock-rdma bridge (the other
# side of rdma-malformed): tests/rdma-badserver refuses with a valid
# refusal (said once, not retried), with a reason that holds a line of
# its own or has no NUL (never printed: a malformed refusal, retried),
# or accepts and answers the first request with a handle not in flight,
# a count on a READ, an unknown error, or a goodbye naming another
# instance. Each time the NBD read fails (EIO), in time, the bridge
# says why and stays up.
# lab-timeout: 600
# lab-sanitizer: asan
. "$LAB_REPO/tests/vm/guest/lib.sh"
bad=$LAB_REPO/tests/rdma-badserver
[ -x "$bad" ] || fail "tests/rdma-badserver not built: run make at the top first"
rxe_pair
port=10820
for c in refuse-ok refuse-forged refuse-nonul bad-handle bad-count bad-error bye-other; do
    port=$((port + 1))
    step "rdma-badserver $c on port $port"
    out=$LAB_OUT/$c.server.out
    "$bad" 10.77.0.1 $port $c >"$out" 2>&1 &
    srv=$!
    for i in $(seq 50); do grep -q listening "$out" && break; sleep 0.1; done
    grep -q listening "$out" || fail "rdma-badserver $c did not start: $(cat "$out")"
    bridge "b-$c" 10.77.0.1:$port
    rc=0
    t0=${EPOCHREALTIME/./}
    timeout 120 python3 -m nbd -u "nbd+unix:///?socket=$LAB_RUN/b-$c.sock" \
        -c "h.pread(4096, 0)" >"$LAB_OUT/$c.client.out" 2>&1 || rc=$?
    took=$(( (${EPOCHREALTIME/./} - t0) / 1000000 ))
    [ $rc = 124 ] && fail "$c: the read through the bridge hung"
    [ $rc = 0 ] && fail "$c: the read through the bridge succeeded"
    # In time: each case took at most 12 s in CI (6 tries for a
    # malformed refusal included).
    [ $took -le 60 ] || fail "$c: the client's error took $took s"
    # The failure the case is about, not any failure: a refused server
    # leaves the bridge without an export (the handshake fails), a bad
    # reply fails the read with EIO.
    case $c in
    refuse-*) want="handshake: server has no export" ;;
    *) want="nbd_pread: .*Input/output error" ;;
    esac
    grep -q "$want" "$LAB_OUT/$c.client.out" ||
        fail "$c: the client did not fail with /$want/: $(tail -1 "$LAB_OUT/$c.client.out")"
    kill -0 "$(server_pid "b-$c")" 2>/dev/null || fail "$c: the bridge died"
    log=$LAB_OUT/b-$c.nbdkit.log
    case $c in
    refuse-ok)
        grep -q "refused the connection: go away (error 22)" "$log" ||
            fail "$c: the refusal was not reported"
        [ "$(grep -c refused "$out")" = 1 ] ||
            fail "$c: a refusal was tried again ($(grep -c refused "$out") connects)" ;;
    refuse-*)
        # The old bridge printed the reason unchecked (%s of 48 bytes
        # without a NUL read on; a newline forged a log line).
        grep -q "refused the connection" "$log" &&
            fail "$c: the bridge printed the server's malformed reason: $(grep -A1 'refused the connection' "$log")"
        grep -q "^nbdkit: error: forged" "$log" && fail "$c: the server forged a line of the bridge's log"
        grep -q "malformed refusal: refusal: reason not printable" "$log" ||
            fail "$c: the malformed refusal was not reported" ;;
    bad-handle) grep -q "protocol error from the server: reply for handle 0x.*not in flight" "$log" ||
            fail "$c: no protocol error reported" ;;
    bad-count) grep -q "protocol error from the server: reply to READ: count 1 is not 0" "$log" ||
            fail "$c: no protocol error reported" ;;
    bad-error) grep -q "protocol error from the server: reply: unknown error 4" "$log" ||
            fail "$c: no protocol error reported" ;;
    bye-other) grep -q "protocol error from the server: goodbye from instance" "$log" ||
            fail "$c: no protocol error reported" ;;
    esac
    echo "$c: $(tr '\n' ' ' <"$out")"
    grep -E "error" "$log" | head -5
    stop "b-$c"
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
done
echo "rdma-badserver: all checks passed"

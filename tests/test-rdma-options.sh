#!/bin/bash
# gmblock-rdma (filter and bridge plugin): bad options are refused at
# start-up with a message naming the value and what is accepted; a
# server asked for rdma= on a host without an RDMA device refuses to
# start and says so, and so does the bridge. The transport itself runs in
# the lab (tests/vm/scenarios/rdma-*.sh): the host has no RDMA device.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdinfo
cd "$T"

f=(--filter=gmblock-rdma memory 1M)
start_fails no_addr 'rdma=ADDR\[:PORT\] is required' -- "${f[@]}"
# Named twice, both instances would share one listener and pool.
start_fails twice 'gmblock-rdma: --filter=gmblock-rdma is given twice' 'hold it once' \
    -- --filter=gmblock-rdma "${f[@]}" rdma=127.0.0.1
start_fails port_big 'rdma=1.2.3.4:65536' 'not a number from 1 to 65535' -- "${f[@]}" rdma=1.2.3.4:65536
start_fails port_zero 'rdma=1.2.3.4:0' 'port' -- "${f[@]}" rdma=1.2.3.4:0
start_fails port_word 'rdma=host:http' 'not a number' -- "${f[@]}" rdma=host:http
start_fails no_host 'rdma=:10810' 'no host' -- "${f[@]}" rdma=:10810
start_fails stray_bracket 'rdma=a\]:1' 'unbalanced brackets' -- "${f[@]}" 'rdma=a]:1'
start_fails v6_bare 'rdma=fe80::1' 'needs brackets' -- "${f[@]}" rdma=fe80::1
start_fails v6_open 'rdma=\[fe80::1' 'unbalanced' -- "${f[@]}" 'rdma=[fe80::1'
start_fails pool_small 'rdma-pool=64K' 'from 1M' -- "${f[@]}" rdma=10.0.0.1 rdma-pool=64K
start_fails pool_word 'rdma-pool=lots' -- "${f[@]}" rdma=10.0.0.1 rdma-pool=lots
start_fails rdma_pool_big 'rdma-pool=8G' 'from 1M to 4G' -- "${f[@]}" rdma=10.0.0.1 rdma-pool=8G
start_fails threads_zero 'rdma-threads=0' 'from 1 to 64' -- "${f[@]}" rdma=10.0.0.1 rdma-threads=0
start_fails threads_big 'rdma-threads=65' 'from 1 to 64' -- "${f[@]}" rdma=10.0.0.1 rdma-threads=65
start_fails threads_word 'rdma-threads=many' 'from 1 to 64' -- "${f[@]}" rdma=10.0.0.1 rdma-threads=many
start_fails clients_zero 'rdma-max-clients=0' 'from 1 to 4096' -- "${f[@]}" rdma=10.0.0.1 rdma-max-clients=0
start_fails clients_big 'rdma-max-clients=5000' 'from 1 to 4096' -- "${f[@]}" rdma=10.0.0.1 rdma-max-clients=5000
start_fails clients_word 'rdma-max-clients=lots' 'from 1 to 4096' -- "${f[@]}" rdma=10.0.0.1 rdma-max-clients=lots
start_fails keepalive_frac 'rdma-keepalive=2.5: not a whole number .expected whole seconds from 0, never, to 86400' -- "${f[@]}" rdma=10.0.0.1 rdma-keepalive=2.5
start_fails keepalive_big 'rdma-keepalive=100000: out of range' -- "${f[@]}" rdma=10.0.0.1 rdma-keepalive=100000
start_fails keepalive_word 'rdma-keepalive=often: expected a decimal number' -- "${f[@]}" rdma=10.0.0.1 rdma-keepalive=often
start_fails threads_neg 'rdma-threads=-1' 'from 1 to 64' -- "${f[@]}" rdma=10.0.0.1 rdma-threads=-1
start_fails piece_odd 'rdma-piece=3000' 'power of two from 4K to 1M' -- "${f[@]}" rdma=10.0.0.1 rdma-piece=3000
start_fails piece_small 'rdma-piece=2K' 'power of two from 4K to 1M' -- "${f[@]}" rdma=10.0.0.1 rdma-piece=2K
start_fails piece_big 'rdma-piece=2M' 'power of two from 4K to 1M' -- "${f[@]}" rdma=10.0.0.1 rdma-piece=2M
start_fails piece_word 'rdma-piece=big' -- "${f[@]}" rdma=10.0.0.1 rdma-piece=big
start_fails split_bad 'rdma-split=sometimes: expected alone .* or always' -- "${f[@]}" rdma=10.0.0.1 rdma-split=sometimes
start_fails mem_word 'rdma-pool-memory=gpu' 'host, p2pmem, p2pmem:auto or p2pmem:BDF' -- "${f[@]}" rdma=10.0.0.1 rdma-pool-memory=gpu
start_fails mem_bdf 'rdma-pool-memory=p2pmem:zz:00.0' 'PCI address' -- "${f[@]}" rdma=10.0.0.1 rdma-pool-memory=p2pmem:zz:00.0
start_fails fallback_word 'rdma-pool-fallback=maybe' 'stage or refuse' -- "${f[@]}" rdma=10.0.0.1 rdma-pool-fallback=maybe
# nbdkit's access controls guard only the clients nbdkit accepts: RDMA
# clients would reach the export without TLS, from any address.
echo "alice:$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$T/psk"
start_fails tls_required 'nbdkit runs with --tls=require, which RDMA clients bypass' \
    'add rdma-insecure=true' -- --tls=require --tls-psk="$T/psk" "${f[@]}" rdma=10.0.0.1
start_fails ip_filter 'nbdkit runs with --filter=ip, which RDMA clients bypass' -- \
    --filter=gmblock-rdma --filter=ip memory 1M rdma=10.0.0.1 allow=all
start_fails insecure_word 'rdma-insecure=maybe: expected true or false' -- \
    "${f[@]}" rdma=10.0.0.1 rdma-insecure=maybe

truncate -s 1M "$T/disk.img"
if [[ -z $(ls /sys/class/infiniband 2>/dev/null) ]]; then
    start_fails no_device 'no RDMA device on this host' 'rdma link add' -- \
        "${f[@]}" rdma=127.0.0.1
    start_fails no_device_gmblock 'no RDMA device' -- \
        --filter=gmblock-rdma gmblock file="$T/disk.img" rdma=127.0.0.1:10811
    # Told it is meant, the filter goes on (to the missing device).
    start_fails insecure_tls 'no RDMA device' -- --tls=require --tls-psk="$T/psk" \
        "${f[@]}" rdma=127.0.0.1 rdma-insecure=true
    # The bounds themselves are accepted: the start-up gets past every
    # option and stops only at the missing device.
    for ok in rdma-threads=1 rdma-threads=64 rdma-max-clients=4096 rdma-piece=0 \
              rdma-piece=4K rdma-piece=1M rdma-pool=1M rdma-pool=4G \
              rdma-keepalive=0 rdma-keepalive=86400; do
        start_fails "ok_${ok//[=-]/_}" 'no RDMA device on this host' -- \
            "${f[@]}" rdma=127.0.0.1 "$ok"
    done
else
    info "this host has RDMA devices: the no-device refusal is not tested"
fi

b=(gmblock-rdma)
start_fails no_server 'server=HOST\[:PORT\] is required' -- "${b[@]}"
start_fails server_port 'server=h:70000' '1 to 65535' -- "${b[@]}" server=h:70000
start_fails server_unknown "unknown parameter 'file'" -- "${b[@]}" server=h file=x
start_fails credits_zero 'credits=0: expected a number from 1 to 128' -- "${b[@]}" server=h credits=0
start_fails credits_big 'credits=999: expected a number from 1 to 128' -- "${b[@]}" server=h credits=999
start_fails credits_sign 'credits=-4: expected a number' -- "${b[@]}" server=h credits=-4
start_fails credits_word 'credits=8x: expected a number' -- "${b[@]}" server=h credits=8x
start_fails pool_bad 'pool=bad: .*expected a size from 64K to 1G' -- "${b[@]}" server=h pool=bad
start_fails pool_small 'pool=4K: out of range .expected a size from 64K to 1G' -- "${b[@]}" server=h pool=4K
start_fails pool_big 'pool=2G: out of range' -- "${b[@]}" server=h pool=2G
start_fails zero_copy_bad 'zero-copy=bad: expected auto, on or off' -- "${b[@]}" server=h zero-copy=bad
start_fails timeout_frac 'timeout=1.5: not a whole number .expected whole seconds from 0, no timeout, to 86400' -- "${b[@]}" server=h timeout=1.5
start_fails timeout_big 'timeout=90000: out of range .expected whole seconds' -- "${b[@]}" server=h timeout=90000
start_fails timeout_neg 'timeout=-1: out of range' -- "${b[@]}" server=h timeout=-1
start_fails timeout_word 'timeout=soon: expected a decimal number' -- "${b[@]}" server=h timeout=soon
start_fails timeout_empty 'timeout=: empty value' -- "${b[@]}" server=h timeout=

if [[ -z $(ls /sys/class/infiniband 2>/dev/null) ]]; then
    start_fails bridge_no_device 'server=10.0.0.1:10810: no RDMA device on this host' -- \
        "${b[@]}" server=10.0.0.1
    # Good values pass the options' checks.
    start_fails bridge_timeout_ok 'no RDMA device on this host' -- \
        "${b[@]}" server=10.0.0.1 timeout=120
    start_fails bridge_timeout_off 'no RDMA device on this host' -- \
        "${b[@]}" server=10.0.0.1 timeout=0
fi

# state=FILE: the bridge holds it locked, and reads it before anything
# else; a file of another kind or a bad line refuses the start, and so
# does a file another bridge holds.
start_fails state_empty 'state=: expected a file name' -- "${b[@]}" server=h state=
start_fails state_dir "state=$T: Is a directory" -- "${b[@]}" server=h state="$T"
echo "some text" >"$T/not-state"
start_fails state_other 'not a gmblock-rdma state file' -- \
    "${b[@]}" server=10.0.0.1 state="$T/not-state"
printf 'gmblock-rdma connections 1\n%016x %016x\n%016x %016x\n' 1 2 3 0 \
    >"$T/bad-line"
start_fails state_bad_line 'line 3 is not .CONN_ID INSTANCE.' -- \
    "${b[@]}" server=10.0.0.1 state="$T/bad-line"
: >"$T/held"
flock "$T/held" sleep 30 &
holder=$!
sleep 0.5
start_fails state_held 'in use by another gmblock-rdma bridge' -- \
    "${b[@]}" server=10.0.0.1 state="$T/held"
kill $holder 2>/dev/null; wait $holder 2>/dev/null || true
if [[ -z $(ls /sys/class/infiniband 2>/dev/null) ]]; then
    # A good file (and a new, empty one) passes: the start stops only at
    # the missing device, and the file is rewritten as read.
    printf 'gmblock-rdma connections 1\n%016x %016x\n' 0xab 0x5eed >"$T/good"
    cp "$T/good" "$T/good.orig"
    start_fails state_good 'no RDMA device on this host' -- \
        "${b[@]}" server=10.0.0.1 state="$T/good"
    cmp "$T/good" "$T/good.orig" || fail "state=: a good state file was changed"
    start_fails state_new 'no RDMA device on this host' -- \
        "${b[@]}" server=10.0.0.1 state="$T/new-state"
    [[ $(cat "$T/new-state") = "gmblock-rdma connections 1" ]] ||
        fail "state=: a new state file holds '$(cat "$T/new-state")'"
fi

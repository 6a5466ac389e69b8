#!/bin/bash
# Many busy connections against a small descriptor limit.  Each nbdkit
# worker thread's io_uring is a descriptor (ring=per-thread), so a
# connection keeping its 16 threads busy costs about 20 descriptors,
# not nbdkit's 4: at the usual soft limit of 1024 (systemd's default
# for services, and the gmblock@ unit's) about 50 such clients used
# every descriptor.  nbdkit could then accept no one, and nbdkit 1.32's
# accept loop spun at full CPU, logging "accept: Too many open files"
# millions of times (a review finding: 4.3 GB of log in 13 minutes).
#  - soft limit below the hard one: the plugin raises it to the hard
#    limit at start-up, and every thread gets its ring;
#  - soft = hard: rings never take the last quarter of the descriptors
#    (the threads past that serve with plain system calls): a new
#    client still connects, and is served.
# Both: data read back intact, descriptors and threads back to what
# they were once the clients leave, pool buffers all returned.
. "$(dirname "$0")/functions.sh"
require nbdinfo nbdcopy prlimit

M=1048576
randfile "$T/disk.img" $((64 * M))

# hold.py SOCK NCONN GO: NCONN connections each send 16 reads of 1M and
# read no reply until the file GO exists (every worker thread is then
# busy: it has read, and waits to send); then read them all, check
# them, and say goodbye.
cat >"$T/hold.py" <<'PY'
import os, socket, struct, sys, time
sock, nconn, go, img = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
data = open(img, "rb").read()
M = 1 << 20

def recvn(s, n):
    b = bytearray()
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            sys.exit("FAIL: server closed the connection")
        b += c
    return bytes(b)

def connect():
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    recvn(s, 18)
    s.sendall(struct.pack(">I", 3))                 # fixed newstyle, no zeroes
    s.sendall(struct.pack(">QIIIH", 0x49484156454F5054, 7, 6, 0, 0))  # OPT_GO ""
    while True:
        _, _, rtype, ln = struct.unpack(">QIII", recvn(s, 20))
        recvn(s, ln)
        if rtype == 1:
            return s
        if rtype != 3:
            sys.exit("FAIL: option reply %#x" % rtype)

socks = [connect() for _ in range(nconn)]
for s in socks:
    for q in range(16):
        s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, q, q * M, M))
print("sent", flush=True)
while not os.path.exists(go):
    time.sleep(0.05)
for s in socks:
    for _ in range(16):
        magic, err, h = struct.unpack(">IIQ", recvn(s, 16))
        if magic != 0x67446698 or err:
            sys.exit("FAIL: reply magic %#x error %d" % (magic, err))
        if recvn(s, M) != data[h * M:(h + 1) * M]:
            sys.exit("FAIL: read %d returned the wrong data" % h)
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 2, 0, 0, 0))   # DISC
    s.close()
PY

nfds () { ls "/proc/$1/fd" | wc -l; }
nthreads () { awk '/^Threads:/ { print $2 }' "/proc/$1/status"; }

# settle PID: wait until PID's descriptor count has not changed for 1 s.
settle () {
    local last=-1 n i
    for i in $(seq 100); do
        n=$(nfds "$1")
        [[ $n == "$last" ]] && return 0
        last=$n
        sleep 1
    done
}

# run NAME SOFT HARD NCONN
run () {
    local name=$1 soft=$2 hard=$3 nconn=$4 pid fds0 thr0 hp rc=0
    rm -f "$T/go"
    # The limits are the server's alone (prlimit execs it under them).
    printf '#!/bin/sh\nexec prlimit --nofile=%s:%s %q "$@"\n' "$soft" "$hard" "$top/nbdkit" \
        >"$T/nbdkit-$name"
    chmod +x "$T/nbdkit-$name"
    # (Not NBDKIT=... start_server: exported, ./nbdkit would exec it.)
    NBDKIT=$T/nbdkit-$name
    start_server "$name" gmblock file="$T/disk.img" stats="$T/$name.stats"
    NBDKIT=$top/nbdkit
    pid=$(server_pid "$name")
    # Once the start-up probe's connection has gone with its threads'
    # rings (read at once, 12 were counted, and 10 after: a CI run).
    settle "$pid"
    fds0=$(nfds "$pid") thr0=$(nthreads "$pid")
    info "$name: soft $soft hard $hard: $(awk '/Max open files/ { print $4, $5 }' "/proc/$pid/limits") now, $fds0 descriptors"

    /usr/bin/python3 "$T/hold.py" "$T/$name.sock" "$nconn" "$T/go" "$T/disk.img" \
        >"$T/$name.hold" 2>&1 &
    hp=$!
    track_pid $hp
    for i in $(seq 200); do grep -q sent "$T/$name.hold" && break; sleep 0.1; done
    grep -q sent "$T/$name.hold" || { cat "$T/$name.hold"; fail "$name: the clients could not connect"; }
    settle "$pid"
    info "$name: $nconn busy clients: $(nfds "$pid") descriptors, $(nthreads "$pid") threads"

    # One more client, while they are all busy: it must connect and be served.
    timeout 10 nbdcopy "$(uri "$name")" - | cmp - "$T/disk.img" ||
        rc=1
    touch "$T/go"
    wait $hp || { cat "$T/$name.hold"; fail "$name: the busy clients failed"; }
    local spins
    spins=$(grep -c "accept: Too many open files" "$T/$name.log" || true)
    [[ $rc == 0 ]] || fail "$name: a new client was not served while $nconn clients were busy ($spins failed accepts logged)"
    [[ $spins == 0 ]] || fail "$name: nbdkit ran out of descriptors to accept with ($spins failed accepts logged)"
    wait_idle "$name"
    for i in $(seq 100); do
        [[ $(nfds "$pid") == "$fds0" && $(nthreads "$pid") == "$thr0" ]] && break
        sleep 0.1
    done
    [[ $(nfds "$pid") == "$fds0" ]] || fail "$name: $(nfds "$pid") descriptors open after the clients left, $fds0 before"
    [[ $(nthreads "$pid") == "$thr0" ]] || fail "$name: $(nthreads "$pid") threads after the clients left, $thr0 before"
}

# The soft limit is raised to the hard one: 40 clients x 16 rings fit.
run raised 256 8192 40
lim=$(awk '/Max open files/ { print $4 }' "/proc/$(server_pid raised)/limits")
[[ $lim == 8192 ]] || fail "raised: the soft descriptor limit is $lim, not the hard limit 8192"
stop_server raised
[[ $(counter "$T/raised.stats" pool_in_use) == 0 ]] || fail "raised: pool buffers leaked"

# No higher limit to be had: the rings leave descriptors for clients.
run capped 256 256 20
stop_server capped
[[ $(counter "$T/capped.stats" pool_in_use) == 0 ]] || fail "capped: pool buffers leaked"
grep -q "descriptors" "$T/capped.log" ||
    fail "capped: the log does not say why threads went without a ring"
info "$(grep -m1 "descriptors" "$T/capped.log")"

# Threads that have no ring try again to make one, but at most once a
# second: a try is three system calls (getrlimit, a dup and its
# close), which every request of such a thread paid (256 each for the
# 256 reads of one nbdcopy).  At 16 descriptors, 12 are in use at
# start-up: no thread gets a ring.
printf '#!/bin/sh\nexec prlimit --nofile=16:16 %q "$@"\n' "$top/nbdkit" >"$T/nbdkit-few"
chmod +x "$T/nbdkit-few"
NBDKIT=$T/nbdkit-few
start_server few gmblock file="$T/disk.img"
NBDKIT=$top/nbdkit
strace -f -qq -c -e trace=prlimit64,preadv2,read,io_uring_enter -p "$(server_pid few)" \
    -o "$T/few.strace" &
st=$!
sleep 1                 # attached
nbdcopy --requests=16 "$(uri few)" - | cmp - "$T/disk.img" || fail "few: the copy differs"
kill -INT $st
wait $st || true
calls () { awk -v s="$1" '$NF == s { print $4 }' "$T/few.strace"; }
reads=$(( $(calls preadv2) + 0 )) tries=$(( $(calls prlimit64) + 0 ))
info "few: $reads preadv2 (ringless reads), $tries descriptor checks"
[[ $reads -ge 64 ]] || { cat "$T/few.strace"; fail "few: only $reads plain reads: the threads had rings, nothing was tested"; }
[[ $tries -le $((reads / 4)) ]] ||
    fail "few: $tries descriptor checks for $reads reads: a ringless thread checks at every request"
stop_server few

#!/bin/bash
# gmblock: a connection thread's ring ends after nbdkit has unloaded the
# plugin, and nothing crashes.  With --threads=1 (the README's advice
# for a disk that is slow to the first request) nbdkit's connection
# thread serves requests itself and owns a per-thread ring, freed by a
# thread-specific data destructor as the (detached) thread ends; nbdkit
# waits only for the thread to say it is done, then unloads and
# dlclose()s the plugin.  tests/unload-race.c holds that destructor
# until the plugin is gone: it returned into unmapped code (SIGSEGV; a
# review finding, about once in 200 shutdowns without the shim).  The
# plugin now pins itself.
. "$(dirname "$0")/functions.sh"
require nbdkit gcc
plain_run_only "ASan's shim never dlclose()s modules: the race cannot happen there"
cd "$T"
gcc -shared -fPIC -O2 -o "$T/unload-race.so" "$top/tests/unload-race.c" -ldl ||
    fail "cannot build tests/unload-race.c"
truncate -s 16M disk
LD_PRELOAD=$T/unload-race.so \
    start_server s --threads=1 gmblock file="$T/disk" ring=per-thread
/usr/bin/python3 - "$(uri s)" <<'PY' &
import nbd, sys, time
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pread(4096, 0)                # the connection thread makes its ring
time.sleep(3)                   # after the SIGTERM: nbdkit waits for it
PY
_pids+=($!)
sleep 1
pid=$(server_pid s)
start=$SECONDS
kill -TERM "$pid"
rc=0
wait "$pid" 2>/dev/null || rc=$?
eval "_pid_s="
info "nbdkit exited $((SECONDS - start)) s after SIGTERM"
grep -q "unload-race: a ring ends on thread" s.log ||
    { cat s.log >&2; fail "no ring ended on a connection thread: no test"; }
[[ $rc == 0 ]] || { cat s.log >&2; fail "nbdkit exited with status $rc at shutdown"; }
grep "unload-race:" s.log | sed 's/^/--- /'

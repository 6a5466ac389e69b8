#!/bin/bash
# io_uring refused for good (io_uring_setup fails with EPERM: Docker's
# default seccomp profile, kernel.io_uring_disabled; here a seccomp
# filter, tests/no-uring.c).  The plugin must say so once, at start-up,
# as a warning, and serve every request with the plain system calls,
# data intact.  Each worker thread used to try again at every request
# and log an error once per thread (a review finding: one line per
# thread of every client, none at start-up).  ring=shared, asked for by
# name, refuses to start, naming the reason.
. "$(dirname "$0")/functions.sh"
require gcc nbdcopy

gcc -O2 -o "$T/no-uring" "$top/tests/no-uring.c" || fail "cannot build tests/no-uring.c"
printf '#!/bin/sh\nexec %q %q "$@"\n' "$T/no-uring" "$top/nbdkit" >"$T/nbdkit-nouring"
chmod +x "$T/nbdkit-nouring"

M=1048576
randfile "$T/disk.img" $((32 * M))
cp "$T/disk.img" "$T/orig.img"
randfile "$T/new.img" $((32 * M))

NBDKIT=$T/nbdkit-nouring
start_server nu gmblock file="$T/disk.img" stats="$T/nu.stats"
grep -q "gmblock: warning: io_uring cannot be used here (io_uring_setup: Operation not permitted" "$T/nu.log" ||
    { cat "$T/nu.log"; fail "no warning at start-up that io_uring is refused"; }
nbdcopy --connections=4 --requests=16 "$(uri nu)" - | cmp - "$T/orig.img" ||
    fail "read back differs"
nbdcopy --connections=4 --requests=16 "$T/new.img" "$(uri nu)"
nbdcopy --connections=4 "$(uri nu)" - | cmp - "$T/new.img" ||
    fail "written data reads back differently"
stop_server nu
cmp "$T/disk.img" "$T/new.img" || fail "the file differs from what was written"
[[ $(counter "$T/nu.stats" errors) == 0 ]] || fail "errors counted"
[[ $(counter "$T/nu.stats" pool_in_use) == 0 ]] || fail "pool buffers leaked"
n=$(grep -c "io_uring" "$T/nu.log" || true)
[[ $n == 1 ]] || { grep io_uring "$T/nu.log" | head -5; fail "io_uring's refusal was logged $n times, not once"; }
grep -q "error" "$T/nu.log" && { grep error "$T/nu.log" | head -5; fail "errors logged"; }
info "$(grep io_uring "$T/nu.log")"

start_fails shared "ring=shared" "not permitted" -- gmblock file="$T/disk.img" ring=shared
NBDKIT=$top/nbdkit

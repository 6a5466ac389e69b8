#!/bin/bash
# The gmblock filters open contexts of their own below at start-up,
# before any client.  A plugin that needs a client to name its export
# crashed there and took nbdkit with it (nbdkit 1.32's file plugin with
# dir= hands strchr the NULL nbdkit_export_name returns): SIGSEGV, and
# no word of why.  Each filter now tries that open first in a child
# process and refuses with a message when the child crashes.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdsh nbdcopy
cd "$T"

mkdir -p "$T/dir" "$T/od"
randfile "$T/dir/a" 1M
crash=('opening the layer below without a client crashes it'
       'killed by signal 11|exited with status'
       'no connection in this thread' 'file=PATH')

start_fails cache 'gmblock-cache: ' "${crash[@]}" -- --filter=gmblock-cache file dir="$T/dir"
grep -q 'it said: nbdkit: error:' "$T/cache.err" &&
    fail "the child's line is quoted with nbdkit's prefix: $(cat "$T/cache.err")"
start_fails readahead 'gmblock-readahead: ' "${crash[@]}" \
    -- --filter=gmblock-readahead file dir="$T/dir"
start_fails stripe 'gmblock-stripe: ' "${crash[@]}" \
    -- --filter=gmblock-stripe file dir="$T/dir" stripe-chunk=64K stripe-data-disks=2
# Stacked: the lowest filter's after_fork runs first, and refuses.
start_fails stack 'gmblock-cache: ' "${crash[@]}" \
    -- --filter=gmblock-readahead --filter=gmblock-cache file dir="$T/dir"

# A plugin that refuses such an open cleanly (ondemand) is refused by
# the real open, with the plugin's own message, as before.
start_fails ondemand 'gmblock-cache: cannot open a shared context' \
    -- --filter=gmblock-cache ondemand dir="$T/od" size=64M
grep -q 'crashes it' "$T/ondemand.err" && fail "ondemand's clean refusal was taken for a crash"

# gmblock-stripe with no geometry opens nothing below: it still passes
# a dir= export through.
# (No start_server: it probes export "", which dir= does not serve.)
timeout -k 5 60 "$NBDKIT" -U - --filter=gmblock-stripe file dir="$T/dir" \
    --run "nbdcopy \"nbd+unix:///a?socket=\$unixsocket\" '$T/a.out'; r=\$?; '$top/tests/wait-idle' \"\$unixsocket\"; exit \$r" \
    >"$T/sp.log" 2>&1 || { cat "$T/sp.log" >&2; fail "stripe (no geometry) over dir= did not serve export a"; }
cmp "$T/dir/a" "$T/a.out" || fail "stripe (no geometry) over dir=: data differs"

# Over a plugin that opens without a client, the trial opens it and the
# stack serves; over gmblock's own plugin there is no trial.
start_server ok -v --filter=gmblock-readahead --filter=gmblock-cache file file="$T/dir/a"
nbdcopy "$(uri ok)" "$T/ok.out"
cmp "$T/dir/a" "$T/ok.out" || fail "cache over file=: data differs"
stop_server ok
for f in cache readahead; do
    grep -q "gmblock-$f: trial open of the layer below: a child process opened it" "$T/ok.log" ||
        fail "no trial by gmblock-$f over file=: $(grep trial "$T/ok.log")"
done
start_server gm -v --filter=gmblock-readahead --filter=gmblock-cache gmblock file="$T/dir/a"
nbdcopy "$(uri gm)" "$T/gm.out"
cmp "$T/dir/a" "$T/gm.out" || fail "cache over gmblock: data differs"
stop_server gm
grep -q 'trial open' "$T/gm.log" && fail "a trial over the gmblock plugin"

# A trial that hangs (here the sh plugin's first open, the trial's,
# sleeps) is cut at its 10 s, with a warning; its sleep, in the trial's
# process group, is killed with it; the real open then serves.
cat >"$T/slow.sh" <<SH
#!/bin/bash
case "\$1" in
    thread_model) echo parallel ;;
    open) if mkdir "$T/slow.first" 2>/dev/null; then
              echo \$\$ >"$T/slow.pid"; exec sleep 300
          fi; echo h ;;
    get_size) echo 1048576 ;;
    pread) head -c "\$3" /dev/zero ;;
    *) exit 2 ;;
esac
SH
chmod +x "$T/slow.sh"
start_server slow --filter=gmblock-cache sh "$T/slow.sh"
nbdcopy "$(uri slow)" "$T/slow.out"
cmp -n 1048576 /dev/zero "$T/slow.out" || fail "cache over a slow trial: data differs"
stop_server slow
grep -q 'gmblock-cache: warning: the trial open of the layer below in a child process gave no verdict' "$T/slow.log" ||
    { cat "$T/slow.log" >&2; fail "no warning for a trial cut at its timeout"; }
# Killed, it may stay a zombie a moment until init reaps it.
gone () { local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null); [[ -z $st || $st == Z ]]; }
for i in $(seq 50); do gone "$(cat "$T/slow.pid")" && break; sleep 0.1; done
gone "$(cat "$T/slow.pid")" || fail "the hung trial's sleep outlived it"
info "crashing opens refused by every filter; file= and gmblock stacks serve; a hung trial is cut with a warning"

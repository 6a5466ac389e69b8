#!/bin/bash
# ./nbdkit, the build-tree wrapper, takes every nbdkit option as nbdkit
# parses it: bundled short options whose last letter takes an argument
# (-fU SOCKET, -rD FLAG), long options by any of their names
# (--pid-file, --export-name) or abbreviated (--fil NAME).  Their
# arguments are never taken for the plugin's name, and the filters
# named after them are still this tree's.
. "$(dirname "$0")/functions.sh"
require nbdkit nbdinfo

# The guest lab runs ./nbdkit from an initramfs without /dev/fd, where
# process substitution fails ("/dev/fd/63: No such file or directory").
if grep -nE '[<>]\(' "$NBDKIT"; then
    fail "./nbdkit uses process substitution, which the guest lab cannot run"
fi

randfile "$T/disk.img" 1M
f=file=$T/disk.img
stats=-D\ gmblock-cache.stats=1

# wrapped NAME ARGS...: ./nbdkit ARGS must serve this tree's
# gmblock-cache over gmblock (its counters at exit prove the filter).
wrapped () {
    local name=$1; shift
    timeout -k 5 30 "$NBDKIT" "$@" >"$T/$name.log" 2>&1 </dev/null ||
        { cat "$T/$name.log" >&2; fail "$name: ./nbdkit $*"; }
    grep -q '^gmblock-cache\.reads ' "$T/$name.log" ||
        { cat "$T/$name.log" >&2; fail "$name: no gmblock-cache counters: ./nbdkit $*"; }
    info "$name: ./nbdkit $*"
}
run=(--run "$RUN_SIZE")

wrapped bundled_D -U - -rD gmblock-cache.stats=1 --filter=gmblock-cache gmblock "$f" "${run[@]}"
wrapped bundled_U -rfU - $stats --filter=gmblock-cache gmblock "$f" "${run[@]}"
wrapped bundled_t -U - -ft 4 $stats --filter gmblock-cache gmblock "$f" "${run[@]}"
wrapped pid_file -U - --pid-file "$T/p.pid" $stats --filter=gmblock-cache gmblock "$f" "${run[@]}"
wrapped export_name -U - --export-name foo $stats --filter=gmblock-cache gmblock "$f" "${run[@]}"
wrapped ip_addr -U - --ip-addr 127.0.0.1 $stats --filter=gmblock-cache gmblock "$f" "${run[@]}"
wrapped abbrev_filter -U - $stats --fil gmblock-cache gmblock "$f" "${run[@]}"
wrapped abbrev_filter_eq -U - $stats --filt=gmblock-cache gmblock "$f" "${run[@]}"
wrapped abbrev_debug -U - --deb gmblock-cache.stats=1 --filter=gmblock-cache gmblock "$f" "${run[@]}"
wrapped abbrev_noarg -U - --read $stats --filter=gmblock-cache gmblock "$f" "${run[@]}"
wrapped dashdash -U - $stats "${run[@]}" --filter=gmblock-cache -- gmblock "$f"
echo PASS

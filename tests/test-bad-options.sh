#!/bin/bash
# Unknown and malformed options at start-up: each must make nbdkit exit
# non-zero with a gmblock: message naming the key, the value and what
# is accepted.  Also hugepages=on with no hugetlb pages reserved.
. "$(dirname "$0")/functions.sh"

randfile "$T/disk.img" 1M
f=file=$T/disk.img

start_fails unknown 'gmblock:' "unknown parameter 'foo'" \
    'accepted: file, direct, pool-size, hugepages, discard, stats' \
    -- gmblock "$f" foo=bar

range='1M to 1G'
i=0
for v in banana 0 -1 1E 10G 12Q '' 1023K 2G 99999999999999999999999 1.5M; do
    i=$((i + 1))
    start_fails pool$i 'gmblock:' "pool-size=$v" "$range" -- gmblock "$f" "pool-size=$v"
done
# The edges of the range are accepted (1G with direct=false, which
# parses it but maps no pool: the machine is shared).
start_server ok_1M gmblock "$f" pool-size=1M hugepages=off
stop_server ok_1M
start_server ok_1G gmblock "$f" pool-size=1G direct=false
stop_server ok_1G

start_fails huge 'gmblock:' 'hugepages=maybe' 'auto, on or off' -- gmblock "$f" hugepages=maybe
start_fails ring 'gmblock:' 'ring=bogus' 'per-thread, shared or none' -- gmblock "$f" ring=bogus
for v in bar:zz:00.0:0 bar:0000 bar:; do
    start_fails "buffer_${v//[:.]/_}" 'gmblock:' "buffer=$v" 'bar:BDF:N, where BDF is a PCI address' \
        -- gmblock "$f" "buffer=$v"
done
mkdir "$T/statsdir"
start_fails stats_dir 'gmblock:' "stats=$T/statsdir" 'Is a directory' 'expected a file' \
    -- gmblock "$f" stats="$T/statsdir"
start_fails discard 'gmblock:' 'discard=sometimes' 'unmap or ignore' -- gmblock "$f" discard=sometimes
start_fails direct 'gmblock:' 'direct=perhaps' 'true.*false' -- gmblock "$f" direct=perhaps
start_fails direct_empty 'gmblock:' 'direct=' 'true.*false' -- gmblock "$f" direct=

# Two modules' counters in one file: each replaces the whole file, so
# one module's would be lost.  The same name spelt differently too; a
# symlink or a hard link is a name of its own (renamed over, it leaves
# the other alone).
start_fails stats_shared 'gmblock-cache: cache-stats=' 'gmblock stats=.* names that file too' 'a file of its own' \
    -- --filter=gmblock-cache gmblock "$f" stats="$T/s.txt" cache-stats="$T/s.txt"
mkdir "$T/d"
start_fails stats_shared_spelt 'gmblock-readahead: ra-stats=' 'gmblock-cache cache-stats=.* names that file too' \
    -- --filter=gmblock-readahead --filter=gmblock-cache gmblock "$f" \
    cache-stats="$T/d/s.txt" ra-stats="$T/d/../d/./s.txt"
ln -s "$T/d/s.txt" "$T/link.txt"
"$NBDKIT" -U - --filter=gmblock-cache gmblock "$f" stats="$T/d/s.txt" cache-stats="$T/link.txt" \
    --run "$RUN_SIZE" >"$T/links.out" 2>&1 || { cat "$T/links.out" >&2; fail "a symlink to another module's stats file was refused"; }
grep -q '^gmblock-cache\.reads' "$T/link.txt" && grep -q '^gmblock\.reads' "$T/d/s.txt" ||
    fail "stats= and cache-stats= through a symlink: a module's counters are missing"
info "stats files: one per module (a symlink is a name of its own)"

# hugepages=on needs reserved hugetlb pages.  Make sure none are (and
# put the old value back, whatever happens).
nr=/proc/sys/vm/nr_hugepages
old=$(cat $nr)
if [[ $old != 0 ]]; then
    [[ -w $nr ]] || skip "nr_hugepages is $old and not writable"
    restore_huge () { echo "$old" >$nr; }
    trap 'rc=$?; set +e; restore_huge; (exit $rc); cleanup' EXIT
    echo 0 >$nr
fi
[[ $(awk '/^HugePages_Free/ {print $2}' /proc/meminfo) == 0 ]] ||
    skip "hugetlb pages are still reserved (in use by someone else)"
start_fails huge_on 'gmblock:' 'hugepages=on' 'nr_hugepages' 'set it to auto' \
    -- gmblock "$f" hugepages=on
# The cache's pool names its own option, not the plugin's.
start_fails cache_huge_on 'gmblock-cache:' 'cache-hugepages=on' 'nr_hugepages' 'set it to auto' \
    -- --filter=gmblock-cache gmblock "$f" cache-hugepages=on
# ... while auto quietly falls back.
start_server huge_auto gmblock "$f" hugepages=auto
stop_server huge_auto

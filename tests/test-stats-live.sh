#!/bin/bash
# Live counters: every module's *stats-interval=SECONDS rewrites its
# stats file in the Prometheus text format while nbdkit serves, and
# node_exporter's textfile collector (Debian's prometheus-node-exporter,
# the real consumer) reads all of them from one directory without an
# error; the counters follow the I/O.  A directory that disappears
# gives one error and no crash, and the file comes back with it.
# SIGUSR1 with -D NAME.stats=1 prints the summaries of the modules
# that have the flag and nbdkit carries on: a storm of them during a
# copy loses no data.  Bad values are refused with a message, and so
# is a stats file that names the served file or a device node.
. "$(dirname "$0")/functions.sh"
require nbdcopy nbdinfo curl prometheus-node-exporter
/usr/bin/python3 -c 'import prometheus_client' ||
    fail "python3-prometheus-client is missing (make check installs it)"

randfile "$T/disk.img" 32M
randfile "$T/data" 16M
f=file=$T/disk.img
P=$T/prom
mkdir "$P"

# --- bad values, for every module's option
for v in 0 abc 1.5 '' 86401 99999999999999999999; do
    n=${v//[^a-zA-Z0-9]/_}
    start_fails "plugin_$n" 'gmblock:' "stats-interval=$v" 'whole seconds from 1 to 86400' \
        -- gmblock "$f" stats="$P/x.prom" "stats-interval=$v"
    start_fails "cache_$n" 'gmblock-cache:' "cache-stats-interval=$v" 'whole seconds from 1 to 86400' \
        -- --filter=gmblock-cache gmblock "$f" "cache-stats-interval=$v"
done
start_fails ra_bad 'gmblock-readahead:' 'ra-stats-interval=0' 'whole seconds' \
    -- --filter=gmblock-readahead gmblock "$f" ra-stats-interval=0
start_fails stripe_bad 'gmblock-stripe:' 'stripe-stats-interval=x' 'whole seconds' \
    -- --filter=gmblock-stripe gmblock "$f" stripe-stats-interval=x
start_fails rdma_bad 'gmblock-rdma:' 'rdma-stats-interval=0' 'whole seconds' \
    -- --filter=gmblock-rdma gmblock "$f" rdma=127.0.0.1 rdma-stats-interval=0
start_fails bridge_bad 'gmblock-rdma:' 'stats-interval=7d' 'whole seconds' \
    -- gmblock-rdma server=127.0.0.1 stats-interval=7d
# An interval without a file.
start_fails plugin_nofile 'gmblock:' 'stats-interval=5 needs stats=FILE' \
    -- gmblock "$f" stats-interval=5
start_fails cache_nofile 'gmblock-cache:' 'cache-stats-interval=5 needs cache-stats=FILE' \
    -- --filter=gmblock-cache gmblock "$f" cache-stats-interval=5
start_fails ra_nofile 'gmblock-readahead:' 'ra-stats-interval=1 needs ra-stats=FILE' \
    -- --filter=gmblock-readahead gmblock "$f" ra-stats-interval=1
start_fails stripe_nofile 'gmblock-stripe:' 'needs stripe-stats=FILE' \
    -- --filter=gmblock-stripe gmblock "$f" stripe-stats-interval=1
start_fails rdma_nofile 'gmblock-rdma:' 'needs rdma-stats=FILE' \
    -- --filter=gmblock-rdma gmblock "$f" rdma=127.0.0.1 rdma-stats-interval=1
start_fails bridge_nofile 'gmblock-rdma:' 'stats-interval=1 needs stats=FILE' \
    -- gmblock-rdma server=127.0.0.1 stats-interval=1
# A file that cannot be written is refused at start-up, not later.
start_fails plugin_baddir 'gmblock:' "stats=$T/no/such/dir/x.prom" 'No such file' \
    -- gmblock "$f" stats="$T/no/such/dir/x.prom" stats-interval=1
# The same without an interval: the counters would be lost at exit.
start_fails plugin_baddir_exit 'gmblock:' "stats=$T/no/such/dir/x" 'No such file' \
    -- gmblock "$f" stats="$T/no/such/dir/x"
start_fails cache_baddir_exit 'gmblock-cache:' "cache-stats=$T/no/such/dir/x" 'No such file' \
    -- --filter=gmblock-cache gmblock "$f" cache-stats="$T/no/such/dir/x"
# The counters are renamed over what the path names: never the file
# being served (its clients' writes went to the deleted old one and were
# lost at exit), whichever module's option names it, nor a device node
# (replaced by a regular file).  Neither may be touched.
ino=$(stat -c %i "$T/disk.img")
start_fails plugin_served 'gmblock:' "stats=$T/disk.img: that is the file being served" \
    -- gmblock "$f" stats="$T/disk.img"
start_fails cache_served 'gmblock-cache:' "cache-stats=$T/disk.img: that is the file being served" \
    -- --filter=gmblock-cache gmblock "$f" cache-stats="$T/disk.img"
[[ $(stat -c %i "$T/disk.img") == "$ino" ]] || fail "a refused stats= replaced the served file"
mknod "$T/null" c 1 3
start_fails plugin_node 'gmblock:' "stats=$T/null: not a regular file" 'name a new or regular file' \
    -- gmblock "$f" stats="$T/null"
[[ -c $T/null ]] || fail "a refused stats= replaced a device node"
start_fails plugin_empty 'gmblock:' 'stats= is empty: expected a file path' -- gmblock "$f" stats=
start_fails stripe_empty 'gmblock-stripe:' 'stripe-stats= is empty' -- --filter=gmblock-stripe gmblock "$f" stripe-stats=
start_fails sysfs_empty 'gmblock:' 'sysfs.path= is empty' -- gmblock "$f" sysfs.path=

# Every module checks its file before nbdkit forks: as a daemon, nbdkit
# must exit non-zero (it returned 0 while the server died), and with
# --run it must not wait for ever on a command whose server never
# serves.
refused_before_fork () {
    local name=$1 pat=$2 rc; shift 2
    rc=0
    timeout -k 5 20 "$NBDKIT" -U "$T/$name-d.sock" -P "$T/$name.pid" "$@" \
        >"$T/$name-d.err" 2>&1 </dev/null || rc=$?
    if [ -s "$T/$name.pid" ]; then
        kill "$(cat "$T/$name.pid")" 2>/dev/null || true
        fail "$name: nbdkit started a daemon with an unwritable stats file"
    fi
    [ "$rc" != 0 ] && [ "$rc" -lt 124 ] ||
        { cat "$T/$name-d.err" >&2; fail "$name: daemon mode: exit $rc, expected a refusal"; }
    grep -q -- "$pat" "$T/$name-d.err" ||
        { cat "$T/$name-d.err" >&2; fail "$name: daemon mode: no message naming $pat"; }
    rc=0
    timeout -k 5 20 "$NBDKIT" -U - "$@" --run 'nbdinfo --size "$uri"' \
        >"$T/$name-r.err" 2>&1 </dev/null || rc=$?
    [ "$rc" != 0 ] && [ "$rc" -lt 124 ] ||
        { cat "$T/$name-r.err" >&2; fail "$name: --run: exit $rc, expected a refusal"; }
    grep -q -- "$pat" "$T/$name-r.err" ||
        { cat "$T/$name-r.err" >&2; fail "$name: --run: no message naming $pat"; }
    info "$name: refused as a daemon and with --run"
}
bad=$T/no/such/dir/x
refused_before_fork fork_plugin "stats=$bad" gmblock "$f" stats="$bad"
refused_before_fork fork_cache "cache-stats=$bad" \
    --filter=gmblock-cache gmblock "$f" cache-stats="$bad"
refused_before_fork fork_ra "ra-stats=$bad" \
    --filter=gmblock-readahead gmblock "$f" ra-stats="$bad"
refused_before_fork fork_stripe "stripe-stats=$bad" \
    --filter=gmblock-stripe gmblock "$f" stripe-stats="$bad"
refused_before_fork fork_rdma "rdma-stats=$bad" \
    --filter=gmblock-rdma gmblock "$f" rdma=127.0.0.1 rdma-stats="$bad"
refused_before_fork fork_bridge "stats=$bad" \
    gmblock-rdma server=127.0.0.1 stats="$bad"

# nbdkit -u: the start-up check leaves nothing behind, and the files
# are written as the user nbdkit serves as (a first file made before
# nbdkit changed user belonged to root, and that user could not replace
# it in a sticky directory such as /tmp: the counters were lost at exit).
U=$T/sticky
mkdir "$U"
chmod 1777 "$U"
chmod 1777 "$T"             # nobody writes the pid file here
start_server asuser -u nobody -g nogroup --filter=gmblock-readahead \
    gmblock "$f" stats="$U/plugin" ra-stats="$U/ra.prom" ra-stats-interval=1
for x in plugin ra.prom; do
    [ "$(stat -c %U "$U/$x")" = nobody ] ||
        fail "$x: written by $(stat -c %U "$U/$x"), not by the user nbdkit serves as"
done
nbdcopy "$(uri asuser)" - >/dev/null || fail "read as nobody"
stop_server asuser
[ "$server_rc" = 0 ] || fail "nbdkit -u nobody exited with $server_rc: $(tail -3 "$T/asuser.log")"
! grep -q 'stats' "$T/asuser.log" || fail "a stats file failed as nobody: $(grep stats "$T/asuser.log" | head -3)"
[ "$(counter "$U/plugin" reads)" -gt 0 ] || fail "the exit report as nobody has no reads: $(head -3 "$U/plugin")"
[ "$(ls "$U" | wc -l)" = 2 ] || fail "files left in the stats directory: $(ls "$U")"
info "nbdkit -u nobody: stats files written as nobody, at start and at exit"

# --- live files, read by node_exporter
start_server live \
    --filter=gmblock-readahead --filter=gmblock-cache --filter=gmblock-stripe \
    gmblock "$f" stats="$P/plugin.prom" stats-interval=1 \
    cache-stats="$P/cache.prom" cache-stats-interval=1 cache-mode=writeback \
    ra-stats="$P/readahead.prom" ra-stats-interval=1 \
    stripe-stats="$P/stripe.prom" stripe-stats-interval=1 \
    stripe-chunk=64K stripe-data-disks=2 stripe-parity=0
for m in plugin cache readahead stripe; do
    [ -s "$P/$m.prom" ] || fail "$m.prom was not written at start-up"
done

# value FILE METRIC MODULE: the sample's value, or nothing.
value () {
    awk -v k="$2{module=\"$3\"}" '$1 == k { print $2 }' "$1" 2>/dev/null
}
# wait_value FILE METRIC MODULE MIN: until the file shows at least MIN
# (the writer runs every second: 5 s at most).
wait_value () {
    local v
    for _ in $(seq 50); do
        v=$(value "$@" || true)
        [ -n "$v" ] && [ "${v%.*}" -ge "$4" ] && return 0
        sleep 0.1
    done
    fail "$1: $2{module=\"$3\"} is '${v:-missing}', expected at least $4"
}

nbdcopy "$T/data" "$(uri live)" || fail "write through the stack"
nbdsh -u "$(uri live)" -c 'h.flush()' || fail "flush"
wait_value "$P/plugin.prom" gmblock_write_bytes_total plugin $((16 << 20))
wait_value "$P/cache.prom" gmblock_write_bytes_total cache $((16 << 20))
wait_value "$P/cache.prom" gmblock_writeback_bytes_total cache $((16 << 20))
[ "$(value "$P/stripe.prom" gmblock_stripe_bytes stripe)" = 131072 ] ||
    fail "stripe.prom: stripe_bytes is not 128K: $(grep stripe_bytes "$P/stripe.prom")"
grep -qx 'gmblock_backing_info{module="cache",value="[a-z ]*"} 1' "$P/cache.prom" ||
    fail "cache.prom: the backing setting is not an _info sample"

nbdcopy "$(uri live)" "$T/back" || fail "read back"
cmp -n $((16 << 20)) "$T/back" "$T/data" || fail "data read back differs"
wait_value "$P/readahead.prom" gmblock_read_bytes_total readahead $((32 << 20))
wait_value "$P/plugin.prom" gmblock_reads_total plugin 1
# The pool's takes only grow: counters, not gauges (they were gauges).
for c in pool_gets pool_waits; do
    grep -q "^# TYPE gmblock_${c}_total counter" "$P/plugin.prom" ||
        fail "plugin.prom: $c is not a counter: $(grep "$c" "$P/plugin.prom")"
done

# Strictly valid exposition text (the Python client's parser).
for m in plugin cache readahead stripe; do
    /usr/bin/python3 - "$P/$m.prom" "$m" <<'EOF' || fail "$m.prom does not parse"
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = list(text_string_to_metric_families(open(sys.argv[1]).read()))
assert len(fams) > 10, len(fams)
for fam in fams:
    assert fam.name.startswith("gmblock_"), fam.name
    for s in fam.samples:
        assert s.labels.get("module") == sys.argv[2], s
EOF
done

# node_exporter reads the directory: every module's samples, no error.
port=$((20000 + RANDOM % 20000))
prometheus-node-exporter --web.listen-address="127.0.0.1:$port" \
    --collector.disable-defaults --collector.textfile \
    --collector.textfile.directory="$P" >"$T/ne.log" 2>&1 &
track_pid $!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/metrics" >"$T/metrics" && break
    sleep 0.1
done
[ -s "$T/metrics" ] || fail "node_exporter did not answer: $(tail -3 "$T/ne.log")"
grep -qx 'node_textfile_scrape_error 0' "$T/metrics" ||
    fail "node_exporter could not read a file: $(grep -i 'error' "$T/ne.log" | head -3)"
for m in plugin cache readahead stripe; do
    grep -q "^gmblock_[a-z_]*{module=\"$m\"} " "$T/metrics" ||
        fail "node_exporter shows nothing of module $m"
done
# (node_exporter prints 1.6777216e+07 for 16777216.)
ne=$(awk '$1 == "gmblock_write_bytes_total{module=\"plugin\"}" { printf "%d", $2 }' "$T/metrics")
[ "$ne" = "$(value "$P/plugin.prom" gmblock_write_bytes_total plugin)" ] ||
    fail "node_exporter's plugin write_bytes ($ne) differs from the file"
! grep -qi 'inconsistent\|has help\|error' "$T/ne.log" ||
    fail "node_exporter complained: $(grep -i 'inconsistent\|has help\|error' "$T/ne.log" | head -3)"
echo "node_exporter: $(grep -c '^gmblock_' "$T/metrics") gmblock samples"

# The directory goes away: one error, serving goes on; it comes back.
# Renamed away, not removed: rm -rf fails ("Directory not empty") when
# the server renames a new file in between its unlinks and its rmdir
# (seen under ASan in CI).
mv "$P" "$T/prom.gone"
sleep 2.5
nbdinfo --size "$(uri live)" >/dev/null || fail "the server stopped serving without its stats directory"
n=$(grep -c 'stats=.*plugin.prom.*retrying every 1 s' "$T/live.log")
[ "$n" = 1 ] || fail "expected one error for the missing directory, got $n: $(grep retrying "$T/live.log" | head -3)"
mkdir "$P"
wait_value "$P/plugin.prom" gmblock_write_bytes_total plugin $((16 << 20))
stop_server live
[ "$server_rc" = 0 ] || fail "nbdkit exited with $server_rc"
# The last word at exit is Prometheus text too, with the final counts.
grep -q '^# TYPE gmblock_reads_total counter' "$P/cache.prom" || fail "the exit report is not Prometheus text"
ls -a "$P" | grep -q tmp && fail "temp files left in the textfile directory: $(ls -a "$P")"

# --- SIGUSR1: a summary from the modules with -D NAME.stats=1, and
# nbdkit carries on, even when the signals land during a copy.
start_server usr1 -D gmblock.stats=1 -D gmblock-cache.stats=1 \
    --filter=gmblock-readahead --filter=gmblock-cache gmblock "$f"
pid=$(server_pid usr1)
nbdcopy "$T/data" "$(uri usr1)" &
copy=$!
for _ in $(seq 20); do kill -USR1 "$pid"; sleep 0.05; done
wait "$copy" || fail "the copy failed while SIGUSR1 arrived"
kill -USR1 "$pid"
sleep 0.5
nbdcopy "$(uri usr1)" "$T/back2" || fail "read back after SIGUSR1"
cmp -n $((16 << 20)) "$T/back2" "$T/data" || fail "data differs after the SIGUSR1 storm"
plugin_lines=$(grep -c '^gmblock\.reads ' "$T/usr1.log")
cache_lines=$(grep -c '^gmblock-cache\.reads ' "$T/usr1.log")
grep -q '^gmblock-readahead\.' "$T/usr1.log" && fail "readahead printed a summary without its flag"
[ "$plugin_lines" -ge 2 ] && [ "$cache_lines" -ge 2 ] ||
    fail "expected SIGUSR1 summaries from the plugin and the cache, got $plugin_lines and $cache_lines"
stop_server usr1
[ "$server_rc" = 0 ] || fail "nbdkit exited with $server_rc after the SIGUSR1s"
echo "SIGUSR1: $plugin_lines plugin and $cache_lines cache summaries, data intact"

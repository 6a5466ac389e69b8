#!/bin/bash
# make check, once built: the host suite, the same under ASan+UBSan,
# the quick ThreadSanitizer run and the guest lab, arranged so that the
# two cores stay busy.  The lab (mostly TCG guests) runs from the start
# beside the host suite and then its sanitizer run (one after the
# other: each keeps about 0.6 of a core busy, mostly waiting for its
# servers).  The TSan run starts as soon as either of those two lanes
# ends: run after both, it added its two to three minutes to the end.
#
# The host suite streams its lines; the TSan run's and the lab's are
# kept in tests/logs/{tsan-quick,lab}.log and shown at the end, the
# lab's last, so the last line is still its "N passed, N failed".
# Exit status: 1 if anything failed.
set -u
cd "$(dirname "$0")/.."
make=${MAKE:-make}
logs=tests/logs
mkdir -p "$logs"
rm -f "$logs"/lab.rc "$logs"/tsan-quick.rc

# lane NAME TARGET [NICE]: make TARGET in the background (at niceness
# NICE), its output in $logs/NAME.log and its exit status in
# $logs/NAME.rc.
lane() {
    ( nice -n "${3:-0}" "$make" --no-print-directory "$2" >"$logs/$1.log" 2>&1
      echo $? >"$logs/$1.rc" ) &
}

# The lab at niceness 5 (make check made the ASan and TSan builds that
# its lab-sanitizer scenarios and the host's check-sanitize and
# check-tsan-quick run; each make finds them made).  The host suites
# mostly wait for their servers
# and use the CPU in bursts; given the CPU at once they end sooner (CI:
# after 1507 s, not 1826 s), and the lab's guests (always ready to run)
# take what is left (the lab ended after 1674 s, make check 1702 s;
# since its guests boot faster, 230c859, the lab ends first: after
# 1197 s, make check 1324 s).
lane lab check-vm 5
lab=$!
echo "guest lab started beside the host suites (output: $logs/lab.log)"
( rc=0
  tests/run || rc=1
  "$make" --no-print-directory check-sanitize || rc=1
  exit $rc ) &
host=$!

# Poll rather than wait -n: bash's wait -n can miss a job that ended
# before it was called.
while kill -0 "$lab" 2>/dev/null && kill -0 "$host" 2>/dev/null; do
    sleep 2
done
echo "ThreadSanitizer's quick run started (output: $logs/tsan-quick.log)"
lane tsan-quick check-tsan-quick

rc=0
wait "$host" || rc=1
wait
cat "$logs/tsan-quick.log" "$logs/lab.log"
for l in tsan-quick lab; do
    [ "$(cat "$logs/$l.rc" 2>/dev/null)" = 0 ] || rc=1
done
exit $rc

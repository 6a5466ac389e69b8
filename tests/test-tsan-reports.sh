#!/bin/bash
# The TSan run's own negative control (make check-tsan): a module whose
# parallel preads bump a plain int must leave a data race report that
# names the guilty function and line.  Guards the preload of libtsan
# into nbdkit, TSAN_OPTIONS and tests/sanitizer-shim.c; and that
# tests/tsan.supp hides no race of a module's own.
. "$(dirname "$0")/functions.sh"
[[ -n ${GMBLOCK_TSAN:-} ]] ||
    skip "checks the TSan run's reports; this run has no TSan"
require gcc nbdcopy

cat >"$T/racy.c" <<'EOF'
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>
#include <string.h>
#include <unistd.h>

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
static unsigned reads;
static int64_t racy_get_size (void *h) { return 16 << 20; }
static void *racy_open (int ro) { return NBDKIT_HANDLE_NOT_NEEDED; }
static int racy_pread (void *h, void *buf, uint32_t n, uint64_t off, uint32_t f)
{
  memset (buf, 0, n);
  usleep (1000);                /* keep several requests in here */
  reads++;                      /* the race: no lock, no atomic */
  return 0;
}
static struct nbdkit_plugin plugin = {
  .name = "racy", .open = racy_open, .get_size = racy_get_size,
  .pread = racy_pread,
};
NBDKIT_REGISTER_PLUGIN (plugin)
EOF
# Instrumented as the Makefile builds the modules with TSAN=1.
gcc -g -O1 -fPIC -shared -fsanitize=thread -o "$T/nbdkit-racy-plugin.so" "$T/racy.c"

# Reports go to $T, not to the runner's directory: this test expects
# them (a later option overrides an earlier one).
export TSAN_OPTIONS="$TSAN_OPTIONS:log_path=$T/tsan"

info "parallel reads that race on a counter are reported with function and line"
start_server racy "$T/nbdkit-racy-plugin.so"
nbdcopy --connections=1 --requests=8 --request-size=65536 "$(uri racy)" null:
stop_server racy
cat "$T"/tsan.* 2>/dev/null >"$T/race.report" || true
rm -f "$T"/tsan.*
grep -q "WARNING: ThreadSanitizer: data race" "$T/race.report" ||
    { cat "$T/racy.log" >&2; fail "no race report (TSAN_OPTIONS=$TSAN_OPTIONS)"; }
grep -qE "#0 racy_pread .*racy\.c:[0-9]+" "$T/race.report" ||
    { cat "$T/race.report" >&2; fail "the race report does not name racy_pread in racy.c"; }
info "ok"

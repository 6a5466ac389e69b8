#!/bin/bash
# The sanitizer run's own negative control: a module that leaks and one
# that overflows a signed int must each leave a report that names the
# guilty function and line (tests/run fails any test that leaves one).
# Guards the preload into nbdkit, the options and tests/sanitizer-shim.c
# (without its no-op dlclose a module's leak is reported from an
# "<unknown module>", already unloaded when LeakSanitizer runs).
. "$(dirname "$0")/functions.sh"
[[ -n ${GMBLOCK_SANITIZE:-} ]] ||
    skip "checks the sanitizer run's reports; this run has no sanitizer"
require gcc nbdinfo nbdsh

cat >"$T/bad.c" <<'EOF'
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
static volatile int big = INT_MAX;
static void *bad_open (int ro)
{
  volatile char *p = malloc (77);       /* never freed */
  if (p)
    p[0] = ro;
  p = NULL;
  return NBDKIT_HANDLE_NOT_NEEDED;
}
static int64_t bad_get_size (void *h) { return 1 << 20; }
static int bad_pread (void *h, void *buf, uint32_t n, uint64_t off, uint32_t f)
{
  memset (buf, 0, n);
  if (off == 4096)
    big = big + 1;              /* signed overflow */
  return 0;
}
static struct nbdkit_plugin plugin = {
  .name = "bad", .open = bad_open, .get_size = bad_get_size, .pread = bad_pread,
};
NBDKIT_REGISTER_PLUGIN (plugin)
EOF
# Instrumented as the Makefile builds the modules with SANITIZE=1.
gcc -g -O0 -fPIC -shared -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined -o "$T/nbdkit-bad-plugin.so" "$T/bad.c"

# Reports go to $T, not to the runner's directory: this test expects
# them (a later option overrides an earlier one).
export ASAN_OPTIONS="$ASAN_OPTIONS:log_path=$T/asan"
export UBSAN_OPTIONS="$UBSAN_OPTIONS:log_path=$T/ubsan"

info "a leak in a module's open is reported with its function and line"
for try in 1 2; do
    start_server leak "$T/nbdkit-bad-plugin.so"
    nbdinfo --size "$(uri leak)" >/dev/null
    # The report ends in abort() (abort_on_error): an expected death,
    # which stop_server would fail as a crash.
    wait_idle leak
    kill_now "$(server_pid leak)"
    _pid_leak=
    cat "$T"/asan.* 2>/dev/null >"$T/leak.report" || true
    rm -f "$T"/asan.*
    # LeakSanitizer's own crash (tests/lsan-tool-crash): once more then.
    "$top/tests/lsan-tool-crash" "$T/leak.report" || break
done
grep -q "LeakSanitizer: detected memory leaks" "$T/leak.report" ||
    fail "no leak report (ASAN_OPTIONS=$ASAN_OPTIONS)"
grep -qE "in bad_open .*bad\.c:[0-9]+" "$T/leak.report" ||
    { cat "$T/leak.report" >&2; fail "the leak report does not name bad_open in bad.c"; }

info "undefined behaviour in a module's pread is reported and stops nbdkit"
start_server ub "$T/nbdkit-bad-plugin.so"
nbdsh -u "$(uri ub)" -c 'h.pread(512, 0)' -c 'h.pread(512, 4096)' >/dev/null 2>&1 &&
    fail "the read that overflows succeeded (halt_on_error should stop nbdkit)"
for i in $(seq 100); do kill -0 "$(server_pid ub)" 2>/dev/null || break; sleep 0.05; done
# With ASan present UBSan writes to stderr, which stop_server checks.
cat "$T"/ubsan.* "$T/ub.log" 2>/dev/null >"$T/ub.report" || true
grep -qE "bad\.c:[0-9]+:[0-9]+: runtime error: signed integer overflow" "$T/ub.report" ||
    { cat "$T/ub.report" >&2; fail "no UBSan report naming bad.c"; }
grep -qE "#0 .* in bad_pread " "$T/ub.report" ||
    { cat "$T/ub.report" >&2; fail "the UBSan report has no stack"; }
rm -f "$T"/ubsan.* "$T"/asan.*
kill_now "$(server_pid ub)"      # expected (it died of the report): not
_pid_ub=                        # a failure at cleanup

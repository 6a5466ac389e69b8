# Shared host-side settings for the guest lab. Sourced, not run.

VM_DIR=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM_DIR/../.." && pwd)
# The cache may be pointed elsewhere (e.g. shared between checkouts).
VM_CACHE=${VM_CACHE:-$VM_DIR/.cache}
mkdir -p "$VM_CACHE"

say() { printf 'vm: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# CI sets CI=1 (.ci/run) or CI=true: there the lab must never skip.
in_ci() {
    case "${CI:-}" in ''|0|false|no) return 1 ;; *) return 0 ;; esac
}

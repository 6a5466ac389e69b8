#!/bin/bash
# Every tool a test requires (its `require` line), every tool
# scripts/serve.sh runs and those bench/run checks for come from a
# Debian package that scripts/install-deps.sh installs (sets check,
# serve, bench), or one they depend on, or one every Debian 12 system
# has (Priority: required).  A tool that is only here by chance passes
# on this machine and fails `make check` on a fresh one.
. "$(dirname "$0")/functions.sh"
command -v dpkg-query >/dev/null || skip "not a Debian system (no dpkg-query)"
plain_run_only "it checks package lists, no module code: the plain run runs it"

# A set's packages and everything they depend on (apt installs those).
closure () {
    # shellcheck disable=SC2046
    echo " $(apt-cache depends --recurse --no-recommends --no-suggests \
                 --no-conflicts --no-breaks --no-replaces --no-enhances \
                 $("$top/scripts/install-deps.sh" --list "$1") 2>/dev/null |
             grep -v '^ ' | sort -u | tr '\n' ' ') "
}
check_set=$(closure check)
serve_set=$(closure serve)
[[ $check_set == *" nbdkit "* ]] || fail "apt-cache depends gave no closure of the check set"

# The package that holds PATH (usrmerge: /bin/x may be /usr/bin/x).
package_of () {
    local p=$1 c
    for c in "$p" "$(readlink -f "$p")" "${p#/usr}" "/usr$p"; do
        dpkg-query -S "$c" 2>/dev/null | head -n1 | cut -d: -f1 | cut -d, -f1 && return 0
    done
    return 1
}

# tool_ok TOOL SET WHO: TOOL's package is in SET or Priority: required.
# Most tests require the same few tools: each tool's package is looked
# up once (dpkg-query -S reads every package's file list).
bad=()
declare -A pkg_of
tool_ok () {
    local tool=$1 set=$2 who=$3 path pkg prio
    path=$(command -v "$tool") || { bad+=("$who: $tool is not installed here"); return; }
    if [[ -z ${pkg_of[$path]:-} ]]; then
        pkg_of[$path]=$(package_of "$path") || pkg_of[$path]=
    fi
    pkg=${pkg_of[$path]}
    [[ -n $pkg ]] || { bad+=("$who: $tool ($path) belongs to no Debian package"); return; }
    [[ $set == *" $pkg "* ]] && return
    prio=$(dpkg-query -W -f='${Priority}' "$pkg" 2>/dev/null || true)
    [[ $prio == required ]] && return
    bad+=("$who: $tool comes from $pkg (Priority: ${prio:-?}), which scripts/install-deps.sh does not install")
}

n=0
for t in "$top"/tests/test-*.sh; do
    while read -r -a words; do
        for w in "${words[@]:1}"; do
            [[ $w == '#'* || $w == '||' || $w == ';' ]] && break
            tool_ok "$w" "$check_set" "$(basename "$t")"
            n=$((n + 1))
        done
    done < <(grep -E '^[[:space:]]*require[[:space:]]' "$t")
done
# bench/run: the tools it checks for before it starts.
bench_set=$(closure bench)
read -r -a bench_tools < <(sed -n 's/^for t in \(.*\); do$/\1/p' "$top/bench/run")
[[ ${#bench_tools[@]} -gt 3 ]] || fail "bench/run: its tool check was not found"
for w in "${bench_tools[@]}"; do
    tool_ok "$w" "$bench_set" bench/run
    n=$((n + 1))
done
# make serve: the demo disk and the server.
for w in mkfs.ext4 realpath truncate nbdkit; do
    tool_ok "$w" "$serve_set" scripts/serve.sh
    n=$((n + 1))
done

if [[ ${#bad[@]} -gt 0 ]]; then
    printf '%s\n' "${bad[@]}" >&2
    fail "${#bad[@]} tool(s) not installed by scripts/install-deps.sh"
fi
info "$n required tools: each from a package install-deps.sh installs, or one every Debian has"

#!/bin/bash
# Every nbdkit example command line of the docs works: README.md, the
# READMEs of the modules, their man pages (pods) and docs/*.md.
# tests/doc-examples.py finds them (and says how many per file); each
# one runs here, with the files and addresses of the SUBSTITUTIONS
# below, and must
#   - serve: nbdinfo sees the export (its size), and the server stops
#     cleanly; or
#   - be refused as the doc shows it: a "$ nbdkit ..." example followed by
#     nbdkit's message fails with that message; or
#   - need hardware this host lacks (NEEDS below) and fail for exactly
#     that reason: the specific message of the missing device, so that an
#     option the code no longer takes (refused earlier, with another
#     message) still fails this test.
# A synopsis runs too, with every optional part given and the first of
# each a|b.  A failure names the doc, the line and the command.  An
# example that runs the very command of one before it (the READMEs and
# the man pages share many) is not run again: it has that one's result.
# An nbdkit command in inline code of the prose is listed ("not run"),
# not run: many are fragments ("nbdkit -v", "gmblock ...").
. "$(dirname "$0")/functions.sh"
require nbdinfo /usr/bin/python3

cd "$top"
docs=(README.md plugins/*/README.md filters/*/README.md plugins/*/*.pod filters/*/*.pod docs/*.md)
/usr/bin/python3 tests/doc-examples.py "${docs[@]}" >"$T/examples" ||
    fail "tests/doc-examples.py failed"
cd "$T"

DISK=$T/disk.img
truncate -s 64M "$DISK"
mkdir -p "$T/images"
truncate -s 1M "$T/images/a.img"
echo "alice:$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$T/psk"

# SUBSTITUTIONS: one word of an example (KEY=VALUE or a bare word, for
# the Nth example) -> the word run here.  Options whose value is a
# listening address or a pid file are dropped: each example runs in the
# foreground (-f, a daemon example too) on its own Unix socket
# ($T/exN.sock, for any -U and for TCP port 10809 alike).
subst () {
    local w=$1 n=$2 k= v=$1
    [[ $w == *=* ]] && k=${w%%=*} v=${w#*=}
    case $k=$v in
        # storage: every device, image and PATH -> a 64 MiB file
        file=/dev/*|file=*.img|file=PATH|file=...) w=file=$DISK ;;
        =/dev/*)                        w=$DISK ;;
        # a directory of images (nbdkit's file plugin, dir=)
        dir=/srv/images)                w=dir=$T/images ;;
        # counters and state -> files of this example, one per key
        stats=*|cache-stats=*|ra-stats=*|stripe-stats=*|rdma-stats=*|state=*)
                                        w=$k=$T/ex$n.$k ;;
        --tls-psk=/etc/gmblock/psk)     w=--tls-psk=$T/psk ;;
        # synopsis placeholders -> values the option takes (its default
        # where it has one)
        sysfs.path=DIR)                 w=$k=/sys/bus/pci ;;
        stripe-sysfs=DIR)               w=$k=/sys ;;
        cache-mode=MODE)                w=$k=adaptive ;;
        pool-size=SIZE|rdma-pool=SIZE)  w=$k=32M ;;
        cache-size=SIZE)                w=$k=64M ;;
        pool=SIZE)                      w=$k=16M ;;
        cache-block-size=SIZE|ra-min=SIZE|stripe-chunk=SIZE) w=$k=64K ;;
        ra-max=SIZE)                    w=$k=2M ;;
        adaptive-scan=SIZE)             w=$k=4M ;;
        writeback-merge=SIZE|rdma-piece=SIZE) w=$k=256K ;;
        stripe-offset=SIZE)             w=$k=0 ;;
        ra-max-inflight=N|rdma-threads=N) w=$k=8 ;;
        stripe-data-disks=N)            w=$k=4 ;;
        credits=N)                      w=$k=16 ;;
        rdma-max-clients=N)             w=$k=64 ;;
        *=SECONDS)                      w=$k=10 ;;
        # RDMA addresses stay (TEST-NET for a placeholder): the host has
        # no RDMA device, which is refused before any address is used
        rdma=ADDR|server=HOST)          w=$k=192.0.2.10 ;;
    esac
    printf '%s\n' "$w"
}
dropped_with_value=" -U --unix -P --pidfile --pid-file "
dropped=" -f --foreground --no-fork "

# NEEDS: what an example needs that this host lacks, and the message
# that must refuse it.  needs WORDS... sets need and need_pat.
have_rdma=$(ls /sys/class/infiniband 2>/dev/null || true)
huge_total=$(awk '/^HugePages_Total:/ { print $2 }' /proc/meminfo)
needs () {
    local w
    need= need_pat=
    for w in "$@"; do
        case $w in
            rdma=*)
                need="an RDMA device (server)"
                need_pat="gmblock-rdma: rdma=[^ ]+: no RDMA device on this host" ;;
            gmblock-rdma)
                need="an RDMA device (bridge)"
                need_pat="gmblock-rdma: server=[^ ]+: no RDMA device on this host" ;;
            buffer=p2pmem*)
                need="PCI p2pmem"
                need_pat="gmblock: buffer=p2pmem:[^ ]+: (there is no PCI device|the device publishes no p2pmem|no p2pmem provider)" ;;
            buffer=bar:*)
                need="a PCI BAR"
                need_pat="gmblock: buffer=bar:[^ ]+: (there is no PCI device|no BAR)" ;;
            cache-hugepages=on|hugepages=on)
                [[ $huge_total == 0 ]] || continue
                need="reserved hugetlb pages"
                need_pat="${w%%=*}=on: hugetlb pages required" ;;
        esac
        [[ -z $need ]] || return 0
    done
}

# ERE matching TEXT literally.
literal () { sed 's/[][\.*^$(){}+?|/]/\\&/g' <<<"$1"; }

# serve NAME ARGS...: (in a subshell) start, nbdinfo, stop; fails on
# anything else.  A server that does not start is killed by the trap.
serve () {
    local name=$1 size want=; shift
    trap 'p=$(server_pid '"$name"'); [[ -z $p ]] || { kill -KILL "$p"; wait "$p"; } 2>/dev/null' EXIT
    start_server "$name" "$@"
    [[ " $* " == *[\ =]"$DISK "* ]] && want=$(stat -c %s "$DISK")
    size=$(nbdinfo --size "$(uri "$name")") || fail "nbdinfo failed"
    [[ -z $want || $size == "$want" ]] || fail "nbdinfo says size $size, not $want"
    stop_server "$name"
    [[ $server_rc == 0 ]] || fail "the server exited with status $server_rc"
    if grep -E '(^|: )error: ' "$T/$name.log"; then
        fail "the server logged an error"
    fi
    # nbdkit takes any -D flag, and only warns of one no module has.
    if grep -E 'nbdkit: warning: (-D |debug flag -D )' "$T/$name.log"; then
        fail "a -D flag of the example is no module's"
    fi
    info "served (size $size)"
}

declare -A done_as counts
broken=() nfound=0 i=0
while IFS=$'\t' read -r rec file line kind args text expected; do
    case $rec in
        count) counts[$file]=$line; continue ;;
        skipped) info "not run ($kind): $file:$line: $args"
                 counts[not-a-command]=$((${counts[not-a-command]:-0} + 1)); continue ;;
    esac
    i=$((i + 1))
    eval "words=($args)"
    argv=() skip_next= bad=
    for w in "${words[@]}"; do
        if [[ -n $skip_next ]]; then skip_next=; continue; fi
        [[ $dropped_with_value == *" $w "* ]] && { skip_next=1; continue; }
        [[ $dropped == *" $w "* || $w == --unix=* || $w == --pidfile=* || $w == --pid-file=* ]] && continue
        argv+=("$(subst "$w" "$i")")
    done
    # Nothing of the host's may be touched, and no placeholder is left.
    for w in "${argv[@]}"; do
        v=${w#*=}
        if [[ $v == /* && $v != "$T"/* && $v != /sys && $v != /sys/* ]]; then
            bad="the path $v has no substitution (see SUBSTITUTIONS)"
        elif [[ $v =~ ^[A-Z][A-Z0-9_]*%?$ || $v == ... ]]; then
            bad="the placeholder $w has no substitution (see SUBSTITUTIONS)"
        fi
    done
    [[ $kind == unslashed ]] && bad="a continuation line without a backslash: the command breaks when pasted"
    needs "${argv[@]}"
    if [[ -n $bad ]]; then class="broken"
    elif [[ -n $expected ]]; then class="refused as shown"
    elif [[ -n $need && -n $have_rdma && $need == *RDMA* ]]; then class="not run: this host has an RDMA device"
    elif [[ -n $need ]]; then class="needs $need"
    else class="serves"
    fi
    [[ $kind == synopsis ]] && counts[synopses]=$((${counts[synopses]:-0} + 1))
    key="$class|$expected|${argv[*]}"
    echo "=== $file:$line: $text"
    echo "    runs: nbdkit ${argv[*]}"
    if [[ -n ${done_as[$key]:-} ]]; then
        rc=${done_as[$key]%% *}
        echo "    same as ${done_as[$key]#* }"
    else
        set +e
        case $class in
            broken) echo "$bad"; (exit 1) ;;
            "refused as shown")
                pats=()
                while IFS= read -r part; do
                    part=$(sed 's/^ *//; s/ *$//' <<<"$part")
                    [[ -n $part ]] && pats+=("$(literal "$part")")
                done <<<"${expected//.../$'\n'}"
                (start_fails "ex$i" "${pats[@]}" -- "${argv[@]}") ;;
            needs*) (start_fails "ex$i" "$need_pat" -- "${argv[@]}") ;;
            serves) (set -e; serve "ex$i" "${argv[@]}") ;;
            not\ run*) (exit 0) ;;
        esac 2>&1 | sed 's/^/    /'
        rc=${PIPESTATUS[0]}
        set -e
        done_as[$key]="$rc $file:$line"
    fi
    if [[ $rc != 0 ]]; then
        broken+=("$file:$line: $text")
        counts[broken]=$((${counts[broken]:-0} + 1))
    fi
    counts[class: $class]=$((${counts[class: $class]:-0} + 1))
    nfound=$((nfound + 1))
done <"$T/examples"

echo
echo "examples per file:"
for f in "${docs[@]}"; do printf '  %-55s %s\n' "$f" "${counts[$f]:-0}"; done
echo "examples per class:"
for c in "${!counts[@]}"; do
    if [[ $c == class:* ]]; then printf '  %-55s %s\n' "${c#class: }" "${counts[$c]}"; fi
done | sort
printf '  %-55s %s\n' "(synopses among them, run expanded)" "${counts[synopses]:-0}" \
    "(not run: nbdkit lines of output, listings, inline code)" "${counts[not-a-command]:-0}"
echo "$nfound examples, ${counts[broken]:-0} broken"
[[ $nfound -gt 0 ]] || fail "no example found"
if [[ ${#broken[@]} -gt 0 ]]; then
    printf 'BROKEN: %s\n' "${broken[@]}" >&2
    fail "${#broken[@]} example(s) of the docs do not work as written"
fi

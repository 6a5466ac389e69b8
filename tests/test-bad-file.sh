#!/bin/bash
# Bad file= at start-up: missing, empty, non-existent, a directory, a
# character device, a file the server's user cannot read.  Each must
# make nbdkit exit non-zero with a gmblock: message naming the problem.
. "$(dirname "$0")/functions.sh"
require setpriv

randfile "$T/ok.img" 1M

start_fails missing 'gmblock:' 'file=PATH is required' -- gmblock
start_fails missing2 'gmblock:' 'file=PATH is required' -- gmblock direct=false
start_fails empty 'gmblock:' 'file= is empty' 'file or block device' -- gmblock file=
start_fails noent 'gmblock:' "file=$T/nope.img" 'No such file or directory' \
    -- gmblock file="$T/nope.img"
mkdir "$T/dir"
for d in true false; do
    start_fails dir-$d 'gmblock:' "$T/dir" 'is a directory' \
        'expected a regular file or a block device' \
        -- gmblock file="$T/dir" direct=$d
    start_fails chr-$d 'gmblock:' '/dev/null' 'character device' \
        'expected a regular file or a block device' \
        -- gmblock file=/dev/null direct=$d
done

# Unreadable: root reads anything, so run the server as nobody against
# a root-owned 0600 file (the directory must be searchable for nobody).
use_nobody
randfile "$T/secret.img" 1M
chmod 0600 "$T/secret.img"
"${AS_NOBODY[@]}" test -r "$T/secret.img" && fail "nobody can read a 0600 root file?"
for d in true false; do
    start_fails unreadable-$d 'gmblock:' "file=$T/secret.img" 'Permission denied' \
        -- gmblock file="$T/secret.img" direct=$d
done
# The same wrapper serves a file nobody may read: the failure above is
# the permission, not the wrapper.
chown nobody "$T/ok.img"
start_server nobody_ok gmblock file="$T/ok.img"
[[ $(nbdinfo --size "$(uri nobody_ok)") == 1048576 ]] || fail "nobody_ok: wrong size"
stop_server nobody_ok

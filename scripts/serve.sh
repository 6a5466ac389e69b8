#!/bin/bash
# Serve FILE (or a generated demo disk) with gmblock in the foreground
# on localhost, and print how to connect.  Called by 'make serve'.
# STACK=full (default): the recommended filter stack, client-side
# readahead emulation over a shared server cache over the plugin;
# STACK=plain: the plugin alone (the pure O_DIRECT path).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
port=${PORT:-10809}
file=$1

if [ -z "$file" ]; then
    file=$top/demo/disk.img
    if [ ! -f "$file" ]; then
        echo "serve: creating a 256M demo disk with an ext4 filesystem: $file"
        mkdir -p "$top/demo/content"
        printf 'Hello from gmblock.\nServed with io_uring and O_DIRECT.\n' \
            > "$top/demo/content/README.txt"
        truncate -s 256M "$file"
        mkfs.ext4 -q -F -L gmblock-demo -d "$top/demo/content" "$file"
    fi
fi
file=$(realpath "$file")
uri=nbd://127.0.0.1:$port
case ${STACK:-full} in
    full)  filters=(--filter=gmblock-readahead --filter=gmblock-cache) ;;
    plain) filters=() ;;
    *) echo "serve: STACK=$STACK: expected full or plain" >&2; exit 2 ;;
esac

cat <<EOM

Serving $file on $uri (Ctrl-C stops it) with
    nbdkit ${filters[*]} gmblock file=$file
Connect with:
    nbdinfo $uri
    nbdcopy $uri copy.img                     # or: nbdcopy $uri null:
    qemu-img info $uri
    qemu-img convert -O qcow2 $uri copy.qcow2
    mkdir -p /tmp/gm && nbdfuse /tmp/gm/disk $uri &   # then: losetup -f --show /tmp/gm/disk
EOM
echo
exec "$top/nbdkit" -f -i 127.0.0.1 -p "$port" "${filters[@]}" gmblock file="$file"

#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Write the seed corpora of the parser fuzz targets.

    tests/fuzz/gen-parsers-corpus.py [DIR]   (default: tests/fuzz/corpus)

Writes DIR/options (tests/fuzz/fuzz-options.c: option values),
DIR/stripegeo (fuzz-stripegeo.c: sysfs text, device-mapper tables, the
registry's geometry, stream layouts and whole fake sysfs trees) and
DIR/abstate (fuzz-abstate.c: the RDMA bridge's state= file).  Each seed
is packed here in its target's input format (see the top of each
target), from what the modules' man pages and the kernel print, not by
the C code.  The committed seeds are what this writes:
tests/test-fuzz-parsers.sh checks that.
"""
import os
import shutil
import struct
import sys


def u64(v):
    return struct.pack("<Q", v & (2**64 - 1))


# ---- options: byte 0 (bits 0-1 base of gm_parse_u64: 0 10 16 8; bits
# 2-3 the range of gm_parse_seconds), then the text.
OPTIONS = {
    "size-plain": (1, "4096"),
    "size-units": (1, "64K"),
    "size-kib": (1, "2MiB"),
    "size-kb": (1, "1gb"),
    "size-e": (1, "15E"),
    "size-blank-plus": (1, "  +1T"),
    "size-max": (1, "18446744073709551615"),
    "size-junk": (1, "10Mx"),
    "size-negative": (1, "-1"),
    "percent": (1, "50%"),
    "percent-100": (1, "100%"),
    "percent-bad": (1, "101%"),
    "percent-plus": (1, "+50%"),
    # gm_parse_count's range is byte 0 (lo) and bytes 1-4 (hi).
    "count-plus": (1, "+4"),
    "count-blank": (1, " 3"),
    "count-junk": (1, "3x"),
    "u64-hex": (0, "0x1000"),
    "u64-octal": (0, "0755"),
    "u64-base16": (2, "0xff"),
    "seconds": (4, "0.5"),
    "seconds-exp": (4, "1e-2"),
    "seconds-nan": (0, "nan"),
    "seconds-hexfloat": (0, "0x1p3"),
    "seconds-min": (4, "0.001"),
    "addr-host": (0, "192.168.0.1"),
    "addr-port": (0, "server.example:10810"),
    "addr-ipv6": (0, "[fe80::1]:4791"),
    "addr-ipv6-noport": (0, "[::1]"),
    "addr-bad-port": (0, "host:65536"),
    "addr-ipv6-bare": (0, "fe80::1"),
    "addr-stray-bracket": (0, "a]:1"),
    "bdf-full": (0, "0000:04:00.0"),
    "bdf-short": (0, "04:00.0"),
    "bdf-vmd": (0, "10000:e1:1f.7"),
    "bdf-bad-dev": (0, "00:20.0"),
    # The first 8 bytes are also a number for gm_format_size.
    "format-round": (1, "\x00\x00\x10\x00\x00\x00\x00"),
    "format-odd": (1, "\x01\x00\x10\x00\x00\x00\x01"),
    "format-max": (0xff, "\xff\xff\xff\xff\xff\xff\xff"),
    # Found by the fuzzer: 17 and 18 characters, past the 16 bytes
    # gm_format_size promised to need.
    "regress-format-rounded": u64(0x2bffc8a70000ffc8),
    "regress-format-exact": u64(0xfffffffff5f50000),
}

# ---- stripegeo: byte 0 picks the mode (% 6).
DM, MD, HINTS, LAYOUT, REGISTRY, TREE = range(6)

# Tree devices and files (the order of fuzz-stripegeo.c's tables).
DEVS = ["md0", "dm-0", "loop0", "nvme0n1", "sda", "sda1"]
FILES = ["md/level", "md/raid_disks", "md/chunk_size", "md/layout",
         "md/reshape_position", "md/sync_action", "md/rd0/size",
         "md/rd1/size", "md/rd2/size", "dm/name", "dm/table",
         "loop/backing_file", "loop/offset", "queue/minimum_io_size",
         "queue/optimal_io_size", "queue/physical_block_size", "partition",
         "start"]


def tree(top, node_dev, files):
    """The served file on device 'top'; the node blk is 'node_dev';
    files: (device, file, content) records."""
    out = bytes([TREE, DEVS.index(top) | DEVS.index(node_dev) << 3])
    for dev, name, content in files:
        data = content.encode() if isinstance(content, str) else content
        out += bytes([DEVS.index(dev), FILES.index(name), len(data)]) + data
    return out


def md(dev, level, disks, chunk, layout=None, sizes=()):
    recs = [(dev, "md/level", level + "\n"),
            (dev, "md/raid_disks", disks + "\n"),
            (dev, "md/chunk_size", chunk + "\n")]
    if layout is not None:
        recs.append((dev, "md/layout", layout + "\n"))
    for i, s in enumerate(sizes):
        recs.append((dev, "md/rd%d/size" % i, s + "\n"))
    return recs


def hints(dev, io_min, io_opt, pbs=512):
    return [(dev, "queue/minimum_io_size", "%d\n" % io_min),
            (dev, "queue/optimal_io_size", "%d\n" % io_opt),
            (dev, "queue/physical_block_size", "%d\n" % pbs)]


STRIPEGEO = {
    "dm-linear": bytes([DM]) + b"0 8192 linear 9:0 2048\n",
    "dm-two": bytes([DM]) + b"0 10 linear 8:16 0\n10 5 linear 8:16 99\n",
    "dm-crypt": bytes([DM]) + b"0 409600 crypt aes-xts-plain64 "
    b":64:logon:cryptsetup:0 0 9:0 32768\n",
    "dm-striped": bytes([DM]) + b"0 10 striped 2 128 8:16 0 8:32 0\n",
    "dm-thin": bytes([DM]) + b"0 32768 thin 253:2 1\n",
    # Found by the fuzzer: the sector below read from the dev word's
    # 64th character on; signs; a start that wraps times 512.
    "regress-dm-long-dev": bytes([DM]) + b"0 10 linear 6:" + b"0" * 62
    + b"5 7\n",
    "regress-dm-sign": bytes([DM]) + b"-8 10 linear 8:16 -1\n",
    "regress-dm-wrap": bytes([DM]) + b"36028797018963968 1 linear 8:16 0\n",
    "md-raid5": bytes([MD]) + u64(524288) + u64(2) + b"raid5\x004",
    "md-raid6": bytes([MD]) + u64(65536) + u64(2) + b"raid6\x006",
    "md-raid10": bytes([MD]) + u64(65536) + u64(0x102) + b"raid10\x004",
    "md-reshape": bytes([MD]) + u64(65536) + u64(2) + b"raid5\x004 (3)",
    "md-raid1": bytes([MD]) + u64(0) + u64(0) + b"raid1\x002",
    "hints": bytes([HINTS]) + u64(65536) + u64(262144) + u64(4096),
    "hints-nvme": bytes([HINTS]) + u64(16384) + u64(131072) + u64(512),
    # Found by the fuzzer: 2 * io_min wrapped; one disk "striped".
    "regress-hints-wrap": bytes([HINTS]) + u64(2**63) + u64(2**63)
    + u64(512),
    "layout": bytes([LAYOUT]) + u64(65536) + u64(4) + u64(0) + u64(61440)
    + struct.pack("<I", 1 << 20) + bytes([64]),
    "layout-offset": bytes([LAYOUT]) + u64(65536) + u64(3) + u64(1 << 20)
    + u64(4096) + struct.pack("<I", 300000) + bytes([8]),
    "layout-top": bytes([LAYOUT]) + u64(1 << 20) + u64(2) + u64(2**63)
    + u64(2**63 - (1 << 19)) + struct.pack("<I", 1 << 20) + bytes([64]),
    # Found by the fuzzer: the array's last chunk, cut short by 2^64
    # (3M does not divide it); the next boundary wrapped.
    "regress-layout-wrap": bytes([LAYOUT]) + u64(3 << 20) + u64(3)
    + u64(2**63) + u64(2**63 - (1 << 20)) + struct.pack("<I", 1 << 19)
    + bytes([16]),
    "registry": bytes([REGISTRY]) + b"65536:4:1:0",
    "registry-hints": bytes([REGISTRY]) + b"16384:8:?:1048576",
    "registry-sign": bytes([REGISTRY]) + b"65536:-1:0:0",
    # Found by the fuzzer: any number of disks was taken.
    "regress-registry-disks": bytes([REGISTRY]) + b"65536:46553:1:0",
    "tree-md-raid0": tree("md0", "md0",
                          md("md0", "raid0", "3", "65536",
                             sizes=("1048576", "2097152", "1048576"))),
    "tree-md-raid5": tree("md0", "md0",
                          md("md0", "raid5", "4", "524288", "2")),
    "tree-md-reshape": tree("md0", "md0",
                            md("md0", "raid5", "5 (4)", "65536", "2") +
                            [("md0", "md/reshape_position", "1024\n"),
                             ("md0", "md/sync_action", "reshape\n")]),
    "tree-partition": tree("sda1", "md0",
                           md("sda", "raid6", "6", "65536", "2") +
                           [("sda1", "partition", "1\n"),
                            ("sda1", "start", "2048\n")]),
    "tree-dm-over-md": tree("dm-0", "md0",
                            md("md0", "raid0", "2", "131072") +
                            [("dm-0", "dm/name", "vg-lv\n"),
                             ("dm-0", "dm/table",
                              "0 8192 linear 9:0 2048\n8192 8192 linear "
                              "9:0 10240\n")]),
    "tree-dm-crypt": tree("dm-0", "md0",
                          md("md0", "raid10", "4", "65536", "258") +
                          [("dm-0", "dm/name", "luks\n"),
                           ("dm-0", "dm/table", "0 409600 crypt aes 00 0 "
                            "9:0 4096\n")]),
    "tree-dm-hints": tree("dm-0", "md0",
                          [("dm-0", "dm/name", "stripe\n"),
                           ("dm-0", "dm/table", "0 10 striped 2 128 8:16 0 "
                            "8:32 0\n")] + hints("dm-0", 65536, 131072)),
    "tree-loop-node": tree("loop0", "md0",
                           md("md0", "raid0", "3", "65536") +
                           [("loop0", "loop/backing_file", "#"),
                            ("loop0", "loop/offset", "1048576\n")]),
    "tree-loop-file": tree("loop0", "sda",
                           [("loop0", "loop/backing_file", "@")] +
                           hints("sda", 65536, 262144)),
    "tree-nvme": tree("nvme0n1", "md0", hints("nvme0n1", 16384, 131072)),
    "tree-hints": tree("sda", "md0", hints("sda", 65536, 196608, 4096)),
    "tree-plain": tree("sda", "md0", hints("sda", 512, 0)),
}

# ---- abstate: the state file itself.
HEADER = b"gmblock-rdma connections 1\n"


def line(conn_id, instance):
    return b"%016x %016x\n" % (conn_id, instance)


ABSTATE = {
    "empty": b"",
    "header": HEADER,
    "one": HEADER + line(0x1234, 0x5eed),
    "two-instances": HEADER + line(1, 0x5eed) + line(2, 0x5eed)
    + line(3, 0xbeef),
    "same-twice": HEADER + line(7, 0x5eed) + line(7, 0x5eed),
    "id-two-instances": HEADER + line(7, 0x5eed) + line(7, 0xbeef),
    "cut-last": HEADER + line(1, 0x5eed) + line(2, 0x5eed)[:20],
    "upper-hex": HEADER + b"ABCDEF0123456789 FEDCBA9876543210\n",
    "zero-id": HEADER + line(0, 0x5eed),
    "bad-header": b"gmblock-rdma connections 2\n" + line(1, 2),
}


def write(dirname, seeds):
    shutil.rmtree(dirname, ignore_errors=True)
    os.makedirs(dirname)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(dirname, name), "wb") as f:
            f.write(data)


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus")
    write(os.path.join(top, "options"),
          {k: v if isinstance(v, bytes) else bytes([v[0]]) +
           v[1].encode("latin-1") for k, v in OPTIONS.items()})
    write(os.path.join(top, "stripegeo"), STRIPEGEO)
    write(os.path.join(top, "abstate"), ABSTATE)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Write the seed corpus of tests/fuzz/fuzz-rdmaproto.c.

    tests/fuzz/gen-rdmaproto-corpus.py [DIR]   (default: tests/fuzz/corpus/rdmaproto)

The messages are packed here from the tables of docs/rdma-protocol.md,
not by the C code, so the seeds also check that page against the code:
a seed the C decoder read differently would not reach the states it
was written for.  The input format is the fuzz target's: a 16-byte
header (server offer, client hello; bit 7 of its byte 4 makes the
client an older one, speaking version 2), then records of action byte,
length byte, message.
"""
import os
import struct
import sys

HELLO, WELCOME, REQUEST, END, BEGIN, REPLY, BOTH, CODEC, GOODBYE, BYE = range(10)
READ, WRITE, DISCONNECT, FLUSH, TRIM, CACHE, ZERO, BLOCK_STATUS, ABANDON = \
    range(9)
FUA, NO_HOLE, REQ_ONE, FAST_ZERO = 1, 2, 8, 16
TF_ALL = (1 << 2) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 8) | (1 << 10) \
    | (1 << 11) | (1 << 15)
TF_READ_ONLY = 1 << 1
ADDR, RKEY = 0x7F0000001000, 0x1234
INSTANCE = 0x5EED                        # the fuzz target's server's
BYE_FLUSHED = 1


def header(credits=8, client_credits=4, flags=TF_ALL, min_shift=9,
           pref_shift=12, max_shift=25, req_shift=20, size=64 << 20,
           old_client=False):
    return struct.pack("<BBHBBBBQ", credits, client_credits, flags,
                       min_shift | (0x80 if old_client else 0), pref_shift,
                       max_shift, req_shift, size)


def hello(magic=0x48524D47, version=3, credits=4, max_request=1 << 20):
    return struct.pack("<IHHI20x", magic, version, credits, max_request)


def welcome(error=0, credits=4, flags=TF_ALL, size=64 << 20, blocks=(512, 4096, 32 << 20),
            max_request=1 << 20, reason=b"", instance=None, version=3):
    if instance is None:
        instance = 0 if error else INSTANCE
    return struct.pack("<IHHIIQIIIIQ48s", 0x57524D47, version, credits, error,
                       flags, size, *blocks, max_request, instance, reason)


def request(op, handle, offset=0, length=0, flags=0, buf=None):
    addr, rkey, buf_len = (ADDR, RKEY, length if op != BLOCK_STATUS else 64) \
        if op in (READ, WRITE, BLOCK_STATUS) else (0, 0, 0)
    if buf is not None:
        addr, rkey, buf_len = buf
    return struct.pack("<BBHIQQQII", op, 0, flags, length, handle, offset,
                       addr, rkey, buf_len)


def reply(handle, error=0, count=0):
    return struct.pack("<QII", handle, error, count)


def extent(length, flags):
    return struct.pack("<II", length, flags)


def goodbye(magic=0x42524D47, flags=BYE_FLUSHED, instance=INSTANCE,
            reserved=bytes(8)):
    return struct.pack("<IIQ8s", magic, flags, instance, reserved)


def rec(action, msg=b""):
    return bytes([action, len(msg)]) + msg


CONNECT = rec(HELLO) + rec(WELCOME)      # the client's own hello, the answer
# GOODBYE's byte: bit 0 flushed, bit 1 the client conn is asked instead,
# bit 2 the server conn is given the server's goodbye.
# BYE with 1-3 bytes: the server's goodbye, byte [0] % 24 xor [1], cut
# or zero-padded to [2] % 33 bytes.
SAY_BYE, SAY_BYE_UNFLUSHED = rec(GOODBYE), rec(GOODBYE, bytes([0]))

SEEDS = {
    "handshake": header() + CONNECT,
    "handshake-bytes": header() + rec(HELLO, hello()) + rec(WELCOME, welcome()),
    "handshake-padded": header() + rec(HELLO, hello() + bytes(24)) + rec(WELCOME),
    "refused-version": header() + rec(HELLO, hello(version=1)) + rec(WELCOME),
    "refused-version-4": header() + rec(HELLO, hello(version=4)) + rec(WELCOME),
    "refused-welcome": header() + rec(WELCOME, welcome(
        error=95, credits=0, flags=0, size=0, blocks=(0, 0, 0), max_request=0,
        reason=b"version 1 not supported (server speaks 2 to 3)")),
    # A version 2 hello is served as version 2; this client, of version
    # 3, refuses the welcome.
    "handshake-v2-hello": header() + rec(HELLO, hello(version=2))
    + rec(WELCOME),
    # An older client: version 2 throughout, no goodbye either way.
    "handshake-v2": header(old_client=True) + CONNECT
    + rec(BOTH, request(READ, 1, 0, 4096)) + rec(END, bytes([0]))
    + rec(REPLY, reply(1)) + SAY_BYE + rec(BOTH, request(WRITE, 2, 0, 512))
    + rec(BYE, goodbye()),
    "goodbye": header() + CONNECT + SAY_BYE + rec(BYE)
    + rec(BEGIN, request(READ, 1, 0, 4096)),
    "goodbye-bytes": header() + CONNECT + rec(BYE, goodbye(flags=0))
    + rec(REPLY, reply(1)),
    "goodbye-inflight": header() + CONNECT
    + rec(BOTH, request(READ, 1, 0, 4096))
    + rec(BOTH, request(WRITE, 2, 4096, 4096, FUA))
    + rec(END, bytes([0])) + rec(REPLY, reply(1))
    + SAY_BYE_UNFLUSHED + rec(BYE) + rec(REPLY, reply(2)),
    "goodbye-closing": header() + CONNECT
    + rec(BOTH, request(READ, 1, 0, 512))
    + rec(BOTH, request(DISCONNECT, 0))
    + rec(END, bytes([0])) + SAY_BYE + rec(BYE) + SAY_BYE
    + rec(GOODBYE, bytes([2])) + rec(GOODBYE, bytes([4])),
    "goodbye-bad-magic": header() + CONNECT
    + rec(BYE, goodbye(magic=0x57524D47)),
    "goodbye-bad-flags": header() + CONNECT + SAY_BYE + rec(BYE, bytes([4, 2])),
    "goodbye-bad-reserved": header() + CONNECT
    + rec(BYE, goodbye(reserved=bytes(7) + b"\x01")),
    "goodbye-other-instance": header() + CONNECT
    + rec(BYE, goodbye(instance=INSTANCE + 1)),
    "goodbye-short": header() + CONNECT + SAY_BYE + rec(BYE, bytes([0, 0, 16])),
    "goodbye-long": header() + CONNECT + SAY_BYE + rec(BYE, bytes([0, 0, 25])),
    "goodbye-early": header() + rec(GOODBYE) + rec(HELLO) + rec(BYE)
    + rec(WELCOME),
    "read-write": header() + CONNECT
    + rec(BOTH, request(READ, 1, 0, 4096))
    + rec(BOTH, request(WRITE, 2, 4096, 8192, FUA))
    + rec(END, bytes([0])) + rec(END, struct.pack("<Q", 2))
    + rec(REPLY, reply(1)) + rec(REPLY, reply(2, 5)),
    "every-op": header(credits=16, client_credits=16) + CONNECT
    + rec(REQUEST, request(FLUSH, 10))
    + rec(REQUEST, request(TRIM, 11, 0, 1 << 20, FUA))
    + rec(REQUEST, request(ZERO, 12, 0, 1 << 20, FUA | NO_HOLE | FAST_ZERO))
    + rec(REQUEST, request(CACHE, 13, 1 << 20, 1 << 20))
    + rec(REQUEST, request(BLOCK_STATUS, 14, 0, 64 << 20, REQ_ONE))
    + rec(END, bytes([0])) + rec(END, bytes([3]))
    + rec(REQUEST, request(DISCONNECT, 0)),
    # Version 5: an ABANDON names a conn_id (offset) and an instance
    # (addr); an older client's (version 2 or 3) is malformed.
    "abandon": header() + CONNECT
    + rec(BOTH, request(ABANDON, 1, 0x1122334455667788, buf=(INSTANCE, 0, 0)))
    + rec(END, bytes([0])) + rec(REPLY, reply(1))
    + rec(BOTH, request(ABANDON, 2, 0, buf=(INSTANCE, 0, 0))),
    "abandon-old-client": header(old_client=True) + CONNECT
    + rec(BOTH, request(ABANDON, 1, 7, buf=(INSTANCE, 0, 0))),
    "refused-requests": header(flags=TF_READ_ONLY | (1 << 2)) + CONNECT
    + rec(REQUEST, request(WRITE, 1, 0, 512))
    + rec(REQUEST, request(READ, 2, 64 << 20, 512))
    + rec(REQUEST, request(TRIM, 3, 0, 512))
    + rec(BOTH, request(ZERO, 4, 0, 512)),
    "block-status": header() + CONNECT
    + rec(BEGIN, request(BLOCK_STATUS, 7, 0, 1 << 20))
    + rec(REPLY, reply(7, 0, 2) + extent(4096, 0) + extent(8192, 3))
    + rec(BEGIN, request(BLOCK_STATUS, 8, 0, 4096, REQ_ONE))
    + rec(REPLY, reply(8, 0, 1) + extent(4096, 1))
    + rec(CODEC, extent(4096, 0)) + rec(CODEC, extent(1 << 20, 3)),
    "boundaries": header(size=(64 << 20) + 1) + CONNECT
    + rec(REQUEST, request(READ, 1, 64 << 20, 1))
    + rec(REQUEST, request(READ, 2, 64 << 20, 2))
    + rec(REQUEST, request(WRITE, 3, 0, 1 << 20))
    + rec(END, bytes([0])) + rec(END, bytes([0])) + rec(END, bytes([0]))
    + rec(REQUEST, request(READ, 4, 0, (1 << 20) + 1)),
    "credits-exhausted": header(credits=2) + CONNECT
    + rec(REQUEST, request(READ, 1, 0, 512))
    + rec(REQUEST, request(READ, 2, 512, 512))
    + rec(REQUEST, request(READ, 3, 1024, 512)),
    "duplicate-handle": header() + CONNECT
    + rec(REQUEST, request(READ, 5, 0, 512))
    + rec(REQUEST, request(WRITE, 5, 0, 512)),
    "disconnect-drain": header() + CONNECT
    + rec(BEGIN, request(READ, 1, 0, 512))
    + rec(BEGIN, request(DISCONNECT, 2))
    + rec(REPLY, reply(1)),
    "codec": header() + rec(CODEC, hello()) + rec(CODEC, welcome())
    + rec(CODEC, request(WRITE, 0x0102030405060708, 1 << 40, 65536, FUA))
    + rec(CODEC, reply(9, 28))
    + rec(CODEC, goodbye(flags=0x80000001, instance=1 << 63,
                         reserved=bytes(range(1, 9)))),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus", "rdmaproto")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(SEEDS)} seeds in {out}")


if __name__ == "__main__":
    main()

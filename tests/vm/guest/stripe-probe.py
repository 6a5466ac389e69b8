"""One connection to an NBD server: its block sizes, then one
NBD_CMD_CACHE and the sectors each member disk read meanwhile.

    python3 -S stripe-probe.py URI [OFFSET COUNT MEMBER...]

Prints "MINIMUM PREFERRED MAXIMUM" and, with a CACHE, a second line
"MEMBERS_THAT_READ SECTORS" and a third with each member's sectors.
Run with -S (no site import: under TCG that alone costs about 1 s), so
the libnbd module's folder is added here.
"""
import sys
sys.path.append("/usr/lib/python3/dist-packages")
import nbd


def reads(members):
    # /sys/block/DEV/stat: the third field is sectors read.
    out = []
    for m in members:
        with open("/sys/block/%s/stat" % m) as f:
            out.append(int(f.read().split()[2]))
    return out


h = nbd.NBD()
h.connect_uri(sys.argv[1])
print(h.get_block_size(nbd.SIZE_MINIMUM), h.get_block_size(nbd.SIZE_PREFERRED),
      h.get_block_size(nbd.SIZE_MAXIMUM))
if len(sys.argv) > 3:
    off, count, members = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    before = reads(members)
    h.cache(count, off)
    delta = [a - b for a, b in zip(reads(members), before)]
    print(sum(1 for d in delta if d > 0), sum(delta))
    print(" ".join("%s +%d" % (m, d) for m, d in zip(members, delta)))
h.shutdown()

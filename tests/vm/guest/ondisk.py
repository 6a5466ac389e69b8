# The lab's "is it on the disk" check, bypassing every cache: which
# chunks hold their data when read back from the device with O_DIRECT.
# Used by the RDMA durability scenarios (import it with LAB_REPO's
# tests/vm/guest on sys.path).
import mmap
import os


def on_disk(disk, chunks, data, size):
    """The indexes i in chunks whose size bytes at offset i * size of
    disk equal data[i]."""
    fd = os.open(disk, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, size)
    try:
        return [i for i in chunks
                if os.preadv(fd, [buf], i * size) == size and buf[:] == data[i]]
    finally:
        os.close(fd)

#!/usr/bin/python3
"""Build a fake sysfs tree for the PCI topology tests (common/topology.c).

    fake-sysfs.py ROOT LAYOUT [--storage-dev MAJ:MIN] [--storage-dev-number N]

ROOT stands for /sys; it must not exist or be an empty directory.  Point
libpci at it with pci_set_param(acc, "sysfs.path", "ROOT/bus/pci"), or
lspci -A linux-sysfs -O sysfs.path=ROOT/bus/pci -tv.  Prints nothing on
success; a bad argument exits non-zero with a message.  Python stdlib only.

What the tree holds (all links relative, as in real sysfs):

  devices/pci0000:00/BDF[/BDF...]  PCI functions, a bridge's children nested
      in its directory.  Each has vendor, device, class, revision, irq,
      subsystem_vendor, subsystem_device, numa_node, resource (7 lines
      "start end flags" for BAR0-5 and the ROM, plus 4 window lines for a
      bridge: I/O, memory, prefetchable, empty; a kernel with
      CONFIG_PCI_IOV prints 6 more lines before the windows, libpci
      takes both forms), config (256 bytes: header type 0 or 1, BARs and
      bridge windows matching resource, status bit 0x10, capability list
      at 0x34), driver -> bus/pci/drivers/NAME, subsystem -> bus/pci, and
      for PCIe functions current_link_speed/width, max_link_speed/width.
      PCI Express capability (id 0x10, at 0x40), port type in flags
      bits 7:4: 0 endpoint below a port, 4 root port, 5 switch upstream,
      6 switch downstream, 9 root complex integrated endpoint (a PCIe
      endpoint directly on bus 00, which is what QEMU q35 and Intel
      integrated devices show).  The virtio disk is conventional PCI (as
      QEMU puts it on bus 00): no Express capability, only a virtio
      vendor-specific capability.
  bus/pci/devices/BDF -> the function;  bus/pci/drivers/NAME/BDF -> back.
  BDF/p2pmem/{size,available,published,allocate}  a P2PDMA provider.
      allocate is a sparse regular file of the p2pmem size, so it can be
      mmapped MAP_SHARED (on a real kernel it is a special sysfs file).
  Block devices: BDF/nvme/nvmeX/nvmeXn1 (dev, size in 512-byte sectors,
      ro, removable, device -> the controller, queue/, holders/, slaves/),
      partitions as nvmeXn1/nvmeXn1pN with partition and start;
      BDF/virtio1/block/vda; devices/virtual/block/md0 with slaves/ ->
      the members, md/{level,chunk_size,raid_disks,metadata_version,
      array_state,dev-NAME/}; the members' holders/md0 -> md0.
      class/block/NAME and dev/block/MAJ:MIN -> every block directory.
      class/nvme/nvmeX -> the controllers (model, serial, address, ...).
  RDMA: class/infiniband/mlx5_0 -> NIC_BDF/infiniband/mlx5_0 (device ->
      the PCI function, ports/1/...); class/infiniband/rxe0 ->
      devices/virtual/infiniband/rxe0 with parent = "va" and no device
      link.  class/net/{enp0s7np0,va}.

Every layout has: the RDMA NIC 0000:00:07.0 (15b3:1017, mlx5_core,
mlx5_0, netdev enp0s7np0), rxe0 over netdev va, a virtio disk vda (252:0,
1af4:1001, virtio-pci, on bus 00), and md0 (9:0, raid0, chunk 65536,
2 disks) over nvme0n1p1 (259:2) and vda.  nvme0n1 is 259:0 and nvme1n1
(on the function with the CMB) is 259:1; both NVMe are 1b36:0010, class
0x010802, driver nvme, BAR0 16 KiB 64-bit; the CMB function also has BAR2
64-bit prefetchable 16 MiB; its p2pmem has size 16777216, available
16646144, published 1.

  switch      00:06.0 root port (8086:3420, pcieport, type 4, buses 01-04)
              -> 01:00.0 switch upstream (10b5:8747, type 5, buses 02-04)
              -> 02:00.0 downstream (type 6, bus 03) -> 03:00.0 nvme0n1
              -> 02:01.0 downstream (type 6, bus 04) -> 04:00.0 nvme1n1+CMB
              vda at 00:04.0.  NVMe pair meets at the switch: P2P allowed.
  noprovider  the switch layout with no p2pmem/ anywhere (Debian 12's 6.1
              kernel: the CMB BAR exists, no provider is registered).
  rootbus     03:00.0/04:00.0 become 00:03.0 (nvme0n1) and 00:04.0
              (nvme1n1+CMB, p2pmem), both type 9 on bus 00, no bridge
              shared: the kernel refuses P2P.  vda moves to 00:05.0.
  rootport    00:06.0 root port (type 4, bus 05) -> 05:00.0 (nvme0n1) and
              05:00.1 (nvme1n1+CMB, p2pmem): two functions of one
              multi-function device (header type 0x80), no switch.  Same
              device, and the lowest common bridge is a root port.  vda at
              00:04.0.

--storage-dev MAJ:MIN (repeatable) adds dev/block/MAJ:MIN -> nvme0n1, so a
real file whose st_dev is MAJ:MIN appears to live on the fake nvme0n1.
--storage-dev-number N does the same with st_dev as a number (stat -c %d).
If MAJ:MIN is one of the fake devices' numbers, that link is replaced
(the fake device stays reachable through class/block/NAME).
"""

import argparse
import os
import re
import struct
import sys

K, M = 1024, 1024 * 1024

# Kernel IORESOURCE_* flags as the resource file shows them.
IORESOURCE_IO = 0x100
IORESOURCE_MEM = 0x200
IORESOURCE_PREFETCH = 0x2000
IORESOURCE_SIZEALIGN = 0x40000
IORESOURCE_MEM_64 = 0x100000

PORT_ENDPOINT, PORT_ROOT, PORT_UP, PORT_DOWN, PORT_RCIEP = 0, 4, 5, 6, 9

# Express link speed code -> sysfs text.
SPEED = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe",
         4: "16.0 GT/s PCIe"}


class Fn:
    """A PCI function."""

    def __init__(self, bdf, vendor, device, cls, driver, rev=0,
                 subsys=(0, 0), irq=0, parent=None, port=None,
                 link=(3, 4), bars=(), buses=None, windows=None,
                 multifunction=False, virtio=False, max_speed=None):
        self.bdf, self.vendor, self.device, self.cls = bdf, vendor, device, cls
        self.driver, self.rev, self.subsys, self.irq = driver, rev, subsys, irq
        self.parent, self.port, self.link = parent, port, link
        self.max_speed = max_speed or link[0]   # LnkCap (link: LnkSta)
        # bars: list of (index, kind, start, size); kind is io, mem32,
        # mem64 or mem64pf (a 64-bit BAR also takes the next index).
        self.bars = list(bars)
        self.buses = buses            # (primary, secondary, subordinate)
        self.windows = windows or {}  # io/mem/pref -> (start, size)
        self.multifunction, self.virtio = multifunction, virtio
        self.p2pmem = None            # (size, available, published)
        self.children = []
        if parent:
            parent.children.append(self)

    @property
    def bridge(self):
        return self.buses is not None

    def dirname(self, root):
        if self.parent:
            return os.path.join(self.parent.dirname(root), self.bdf)
        return os.path.join(root, "devices", "pci0000:00", self.bdf)


def bar_flags(kind):
    if kind == "io":
        return IORESOURCE_IO | IORESOURCE_SIZEALIGN | 0x1
    if kind == "mem32":
        return IORESOURCE_MEM | IORESOURCE_SIZEALIGN
    if kind == "mem64":
        return IORESOURCE_MEM | IORESOURCE_SIZEALIGN | IORESOURCE_MEM_64 | 0x4
    if kind == "mem64pf":
        return (IORESOURCE_MEM | IORESOURCE_SIZEALIGN | IORESOURCE_MEM_64
                | IORESOURCE_PREFETCH | 0xc)
    raise ValueError(kind)


def resource_text(fn):
    lines = [(0, 0, 0)] * 7
    for idx, kind, start, size in fn.bars:
        lines[idx] = (start, start + size - 1, bar_flags(kind))
    if fn.bridge:
        win = []
        for key, flags in (("io", IORESOURCE_IO | 0x1),
                           ("mem", IORESOURCE_MEM),
                           ("pref", IORESOURCE_MEM | IORESOURCE_PREFETCH
                            | IORESOURCE_MEM_64 | 0x1)):
            if key in fn.windows:
                start, size = fn.windows[key]
                win.append((start, start + size - 1, flags))
            else:
                win.append((0, 0, 0))
        lines += win + [(0, 0, 0)]
    return "".join("0x%016x 0x%016x 0x%016x\n" % l for l in lines)


def express_cap(cfg, at, fn):
    port = fn.port
    speed, width = fn.link
    struct.pack_into("<BBH", cfg, at, 0x10, 0, 0x0002 | (port << 4))
    ep = port in (PORT_ENDPOINT, PORT_RCIEP)
    # DevCap: MPS 256, ExtTag, RBE, (FLR for endpoints); DevCtl: RlxdOrd,
    # MPS 256, ExtTag, NoSnoop, MRRS 512.
    struct.pack_into("<IHH", cfg, at + 4,
                     0x00008021 | (0x10000000 if ep else 0), 0x2930, 0)
    if port != PORT_RCIEP:
        dlla = port in (PORT_ROOT, PORT_DOWN)
        portno = int(fn.bdf.split(":")[2].split(".")[0], 16)
        lnkcap = (fn.max_speed | (width << 4) | (0x3 << 12) | (0x6 << 15)
                  | (0x100000 if dlla else 0) | (portno << 24))
        lnksta = speed | (width << 4) | 0x1000 | (0x2000 if dlla else 0)
        struct.pack_into("<IHH", cfg, at + 0x0c, lnkcap, 0x0040, lnksta)
        struct.pack_into("<IHH", cfg, at + 0x2c,
                         (1 << (fn.max_speed + 1)) - 2, fn.max_speed, 0)
    struct.pack_into("<I", cfg, at + 0x24,
                     0x00000010 | (0x20 if port in (PORT_ROOT, PORT_DOWN)
                                   else 0))


def config_bytes(fn):
    cfg = bytearray(256)
    has_io = any(k == "io" for _, k, _, _ in fn.bars) or "io" in fn.windows
    struct.pack_into("<HHHH", cfg, 0, fn.vendor, fn.device,
                     0x0406 | (0x1 if has_io else 0), 0x0010)
    struct.pack_into("<I", cfg, 8, (fn.cls << 8) | fn.rev)
    cfg[0x0e] = (1 if fn.bridge else 0) | (0x80 if fn.multifunction else 0)
    for idx, kind, start, size in fn.bars:
        if kind == "io":
            struct.pack_into("<I", cfg, 0x10 + 4 * idx, start | 0x1)
        elif kind == "mem32":
            struct.pack_into("<I", cfg, 0x10 + 4 * idx, start)
        else:
            low = (start & 0xfffffff0) | (0xc if kind == "mem64pf" else 0x4)
            struct.pack_into("<II", cfg, 0x10 + 4 * idx, low, start >> 32)
    if fn.bridge:
        cfg[0x18:0x1b] = bytes(fn.buses)
        if "io" in fn.windows:
            start, size = fn.windows["io"]
            cfg[0x1c] = (start >> 8) & 0xf0
            cfg[0x1d] = ((start + size - 1) >> 8) & 0xf0
        else:
            cfg[0x1c], cfg[0x1d] = 0xf0, 0x00
        if "mem" in fn.windows:
            start, size = fn.windows["mem"]
            struct.pack_into("<HH", cfg, 0x20, (start >> 16) & 0xfff0,
                             ((start + size - 1) >> 16) & 0xfff0)
        else:
            struct.pack_into("<HH", cfg, 0x20, 0xfff0, 0x0000)
        if "pref" in fn.windows:
            start, size = fn.windows["pref"]
            end = start + size - 1
            struct.pack_into("<HHII", cfg, 0x24, ((start >> 16) & 0xfff0) | 1,
                             ((end >> 16) & 0xfff0) | 1, start >> 32,
                             end >> 32)
        else:
            struct.pack_into("<HHII", cfg, 0x24, 0xfff1, 0x0001, 0, 0)
    else:
        struct.pack_into("<HH", cfg, 0x2c, fn.subsys[0], fn.subsys[1])
    cfg[0x34] = 0x40
    cfg[0x3c] = fn.irq & 0xff
    cfg[0x3d] = 1
    if fn.virtio:
        # Vendor-specific virtio capability: common config in BAR4.
        struct.pack_into("<BBBBBxxxII", cfg, 0x40, 0x09, 0, 16, 1, 4,
                         0, 0x1000)
    else:
        express_cap(cfg, 0x40, fn)
    return bytes(cfg)


class Tree:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.blockdirs = {}    # name -> (dir, "maj:min", sectors)

    def p(self, *parts):
        return os.path.join(self.root, *parts)

    def write(self, path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w" if isinstance(text, str) else "wb") as f:
            f.write(text)

    def files(self, d, **kv):
        for k, v in kv.items():
            self.write(os.path.join(d, k), "%s\n" % v)

    def link(self, path, target):
        """path -> target (absolute, inside ROOT), stored relative."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(os.path.relpath(target, os.path.dirname(path)), path)

    # PCI ----------------------------------------------------------------

    def pci(self, fn):
        d = fn.dirname(self.root)
        os.makedirs(d, exist_ok=True)
        self.files(d, vendor="0x%04x" % fn.vendor,
                   device="0x%04x" % fn.device,
                   subsystem_vendor="0x%04x" % fn.subsys[0],
                   subsystem_device="0x%04x" % fn.subsys[1],
                   revision="0x%02x" % fn.rev,
                   irq=fn.irq, numa_node=0, enable=1,
                   **{"class": "0x%06x" % fn.cls})
        self.write(os.path.join(d, "resource"), resource_text(fn))
        self.write(os.path.join(d, "config"), config_bytes(fn))
        if not fn.virtio and fn.port != PORT_RCIEP:
            speed, width = fn.link
            self.files(d, current_link_speed=SPEED[speed],
                       current_link_width=width,
                       max_link_speed=SPEED[fn.max_speed],
                       max_link_width=width)
        drv = self.p("bus", "pci", "drivers", fn.driver)
        os.makedirs(drv, exist_ok=True)
        self.link(os.path.join(d, "driver"), drv)
        self.link(os.path.join(drv, fn.bdf), d)
        self.link(os.path.join(d, "subsystem"), self.p("bus", "pci"))
        self.link(self.p("bus", "pci", "devices", fn.bdf), d)
        if fn.p2pmem:
            size, avail, pub = fn.p2pmem
            pd = os.path.join(d, "p2pmem")
            self.files(pd, size=size, available=avail, published=pub)
            with open(os.path.join(pd, "allocate"), "wb") as f:
                f.truncate(size)
        return d

    # Block --------------------------------------------------------------

    def block(self, d, name, devno, sectors, device=None, rotational=0,
              queue=True, **extra):
        os.makedirs(os.path.join(d, "holders"), exist_ok=True)
        os.makedirs(os.path.join(d, "slaves"), exist_ok=True)
        self.files(d, dev=devno, size=sectors, ro=0, removable=0, **extra)
        if queue:
            self.files(os.path.join(d, "queue"), logical_block_size=512,
                       physical_block_size=512, hw_sector_size=512,
                       minimum_io_size=512, optimal_io_size=0,
                       max_hw_sectors_kb=2048, max_sectors_kb=1280,
                       max_segments=127, rotational=rotational,
                       nr_requests=256, nomerges=0, dax=0,
                       scheduler="[none] mq-deadline",
                       write_cache="write back", discard_granularity=512,
                       discard_max_bytes=2199023255040)
        if device:
            self.link(os.path.join(d, "device"), device)
        self.link(os.path.join(d, "subsystem"), self.p("class", "block"))
        self.link(self.p("class", "block", name), d)
        self.link(self.p("dev", "block", devno), d)
        self.blockdirs[name] = (d, devno, sectors)
        return d

    def nvme(self, fn, ctrl, ns, devno, sectors, partitions=()):
        c = os.path.join(fn.dirname(self.root), "nvme", ctrl)
        self.files(c, model="QEMU NVMe Ctrl", serial="gmblock-%s" % ctrl,
                   firmware_rev="8.0.0", transport="pcie", address=fn.bdf,
                   state="live", cntlid=0,
                   dev="241:%s" % ctrl[len("nvme"):])
        self.link(os.path.join(c, "device"), fn.dirname(self.root))
        self.link(self.p("class", "nvme", ctrl), c)
        d = self.block(os.path.join(c, ns), ns, devno, sectors, device=c,
                       nsid=1, wwid="eui.%016x" % (0x5254000000 + len(ctrl)))
        for n, pdevno, start, size in partitions:
            pname = "%sp%d" % (ns, n)
            self.block(os.path.join(d, pname), pname, pdevno, size,
                       queue=False, partition=n, start=start)
        return d

    def virtio_blk(self, fn, name, devno, sectors):
        v = os.path.join(fn.dirname(self.root), "virtio1")
        self.files(v, vendor="0x1af4", device="0x0002", status="0x0000000f",
                   features="0" * 64)
        drv = self.p("bus", "virtio", "drivers", "virtio_blk")
        os.makedirs(drv, exist_ok=True)
        self.link(os.path.join(v, "driver"), drv)
        self.link(os.path.join(drv, "virtio1"), v)
        self.link(os.path.join(v, "subsystem"), self.p("bus", "virtio"))
        self.link(self.p("bus", "virtio", "devices", "virtio1"), v)
        return self.block(os.path.join(v, "block", name), name, devno,
                          sectors, device=v, rotational=1)

    def md(self, name, devno, level, chunk, members, data_offset=2048):
        d = self.p("devices", "virtual", "block", name)
        per = min((self.blockdirs[m][2] - data_offset)
                  // (chunk // 512) * (chunk // 512) for m in members)
        self.block(d, name, devno, per * len(members))
        self.files(os.path.join(d, "queue"), minimum_io_size=chunk,
                   optimal_io_size=chunk * len(members))
        md = os.path.join(d, "md")
        self.files(md, level=level, chunk_size=chunk,
                   raid_disks=len(members), metadata_version="1.2",
                   array_state="clean", component_size=per // 2)
        for slot, m in enumerate(members):
            mdir = self.blockdirs[m][0]
            self.link(os.path.join(d, "slaves", m), mdir)
            self.link(os.path.join(mdir, "holders", name), d)
            rd = os.path.join(md, "dev-%s" % m)
            self.files(rd, slot=slot, offset=data_offset, size=per // 2,
                       state="in_sync", errors=0)
            self.link(os.path.join(rd, "block"), mdir)
            self.link(os.path.join(md, "rd%d" % slot), rd)
        return d

    # RDMA and net ---------------------------------------------------------

    def netdev(self, name, parent_dir):
        d = os.path.join(parent_dir, "net", name)
        self.files(d, operstate="up", mtu=1500, type=1,
                   address="52:54:00:12:34:%02x" % (len(name) * 7 & 0xff))
        self.link(self.p("class", "net", name), d)
        return d

    def ib(self, d, name, netdev, hca):
        self.files(d, node_type="1: CA", hca_type=hca, fw_ver="16.35.2000",
                   node_guid="5254:00ff:fe12:3456")
        port = os.path.join(d, "ports", "1")
        self.files(port, state="4: ACTIVE", phys_state="5: LinkUp",
                   link_layer="Ethernet", rate="100 Gb/sec (4X EDR)")
        self.files(os.path.join(port, "gid_attrs", "ndevs"), **{"0": netdev})
        self.link(self.p("class", "infiniband", name), d)
        return d


def build(root, layout, storage_devs):
    t = Tree(root)
    os.makedirs(t.p("devices", "pci0000:00"), exist_ok=True)
    for d in ("bus/pci/drivers", "bus/pci/devices", "class/block",
              "dev/block", "dev/char", "class/infiniband", "class/net",
              "class/nvme", "block"):
        os.makedirs(t.p(d), exist_ok=True)
    fns = []

    def nvme_fn(bdf, parent, cmb, port, base, mf=False, irq=16):
        bars = [(0, "mem64", base, 16 * K)]
        if cmb:
            bars.append((2, "mem64pf", 0x800000000, 16 * M))
        f = Fn(bdf, 0x1b36, 0x0010, 0x010802, "nvme", rev=2,
               subsys=(0x1af4, 0x1100), irq=irq, parent=parent, port=port,
               link=(3, 4), bars=bars, multifunction=mf)
        if cmb and layout != "noprovider":
            f.p2pmem = (16 * M, 16 * M - 128 * K, 1)
        fns.append(f)
        return f

    if layout in ("switch", "noprovider"):
        rp = Fn("0000:00:06.0", 0x8086, 0x3420, 0x060400, "pcieport",
                rev=0x22, irq=24, port=PORT_ROOT, link=(2, 8), buses=(0, 1, 4),
                windows={"mem": (0xfe800000, 2 * M),
                         "pref": (0x800000000, 16 * M)})
        up = Fn("0000:01:00.0", 0x10b5, 0x8747, 0x060400, "pcieport",
                rev=0xca, irq=25, parent=rp, port=PORT_UP, link=(2, 8),
                max_speed=3,
                buses=(1, 2, 4), windows=dict(rp.windows))
        d0 = Fn("0000:02:00.0", 0x10b5, 0x8747, 0x060400, "pcieport",
                rev=0xca, irq=26, parent=up, port=PORT_DOWN, link=(3, 4),
                buses=(2, 3, 3), windows={"mem": (0xfe800000, 1 * M)})
        d1 = Fn("0000:02:01.0", 0x10b5, 0x8747, 0x060400, "pcieport",
                rev=0xca, irq=27, parent=up, port=PORT_DOWN, link=(3, 4),
                buses=(2, 4, 4), windows={"mem": (0xfe900000, 1 * M),
                                          "pref": (0x800000000, 16 * M)})
        fns += [rp, up, d0, d1]
        n0 = nvme_fn("0000:03:00.0", d0, False, PORT_ENDPOINT, 0xfe800000,
                     irq=16)
        n1 = nvme_fn("0000:04:00.0", d1, True, PORT_ENDPOINT, 0xfe900000,
                     irq=17)
        vda_bdf = "0000:00:04.0"
    elif layout == "rootbus":
        n0 = nvme_fn("0000:00:03.0", None, False, PORT_RCIEP, 0xfe800000,
                     irq=16)
        n1 = nvme_fn("0000:00:04.0", None, True, PORT_RCIEP, 0xfe804000,
                     irq=17)
        vda_bdf = "0000:00:05.0"
    elif layout == "rootport":
        rp = Fn("0000:00:06.0", 0x8086, 0x3420, 0x060400, "pcieport",
                rev=0x22, irq=24, port=PORT_ROOT, link=(2, 8), buses=(0, 5, 5),
                windows={"mem": (0xfe800000, 1 * M),
                         "pref": (0x800000000, 16 * M)})
        fns.append(rp)
        n0 = nvme_fn("0000:05:00.0", rp, False, PORT_ENDPOINT, 0xfe800000,
                     mf=True, irq=16)
        n1 = nvme_fn("0000:05:00.1", rp, True, PORT_ENDPOINT, 0xfe804000,
                     mf=True, irq=17)
        vda_bdf = "0000:00:04.0"
    else:
        raise ValueError(layout)

    vio = Fn(vda_bdf, 0x1af4, 0x1001, 0x010000, "virtio-pci", rev=0,
             subsys=(0x1af4, 0x0002), irq=11, virtio=True,
             bars=[(0, "io", 0xc000, 128), (1, "mem32", 0xfea00000, 4 * K),
                   (4, "mem64pf", 0x804000000, 16 * K)])
    nic = Fn("0000:00:07.0", 0x15b3, 0x1017, 0x020000, "mlx5_core", rev=0,
             subsys=(0x15b3, 0x0007), irq=10, port=PORT_RCIEP, link=(3, 16),
             bars=[(0, "mem64pf", 0x802000000, 32 * M)])
    fns += [vio, nic]
    for f in fns:
        t.pci(f)

    # Block devices: 1 GiB NVMe namespaces, one partition on nvme0n1.
    gib = 2 * M  # sectors
    t.nvme(n0, "nvme0", "nvme0n1", "259:0", gib,
           partitions=[(1, "259:2", 2048, gib - 2048)])
    t.nvme(n1, "nvme1", "nvme1n1", "259:1", gib)
    t.virtio_blk(vio, "vda", "252:0", gib - 2048)
    t.md("md0", "9:0", "raid0", 64 * K, ["nvme0n1p1", "vda"])
    for name, (d, _, _) in t.blockdirs.items():
        if not os.path.exists(os.path.join(d, "partition")):
            t.link(t.p("block", name), d)

    # RDMA.
    nicdir = nic.dirname(t.root)
    t.netdev("enp0s7np0", nicdir)
    ib = os.path.join(nicdir, "infiniband", "mlx5_0")
    t.ib(ib, "mlx5_0", "enp0s7np0", "MT4119")
    t.link(os.path.join(ib, "device"), nicdir)
    t.netdev("va", t.p("devices", "virtual"))
    rxe = t.p("devices", "virtual", "infiniband", "rxe0")
    t.ib(rxe, "rxe0", "va", "")
    t.files(rxe, parent="va")

    nvme0n1 = t.blockdirs["nvme0n1"][0]
    for devno in storage_devs:
        t.link(t.p("dev", "block", devno), nvme0n1)


def parse_majmin(s):
    m = re.fullmatch(r"(\d+):(\d+)", s)
    if not m:
        raise argparse.ArgumentTypeError("not MAJ:MIN: %r" % s)
    return "%d:%d" % (int(m.group(1)), int(m.group(2)))


def parse_number(s):
    try:
        n = int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError("not a device number: %r" % s)
    if n < 0:
        raise argparse.ArgumentTypeError("negative device number: %r" % s)
    # glibc's major()/minor(), with their 32-bit results.
    major = ((n >> 8) & 0xfff) | ((n >> 32) & 0xfffff000)
    minor = (n & 0xff) | ((n >> 12) & 0xffffff00)
    return "%d:%d" % (major, minor)


def main():
    ap = argparse.ArgumentParser(
        prog="fake-sysfs.py",
        description="Build a fake sysfs tree (ROOT stands for /sys).")
    ap.add_argument("root", metavar="ROOT")
    ap.add_argument("layout", metavar="LAYOUT",
                    choices=["switch", "rootbus", "noprovider", "rootport"],
                    help="switch, rootbus, noprovider or rootport")
    ap.add_argument("--storage-dev", metavar="MAJ:MIN", type=parse_majmin,
                    action="append", default=[],
                    help="make dev/block/MAJ:MIN a link to nvme0n1")
    ap.add_argument("--storage-dev-number", metavar="N", type=parse_number,
                    action="append", default=[],
                    help="the same, with st_dev as a number (stat -c %%d)")
    a = ap.parse_args()
    if os.path.lexists(a.root) and not (os.path.isdir(a.root)
                                        and not os.listdir(a.root)):
        ap.error("%s exists and is not an empty directory" % a.root)
    try:
        build(a.root, a.layout, a.storage_dev + a.storage_dev_number)
    except OSError as e:
        print("fake-sysfs.py: %s" % e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

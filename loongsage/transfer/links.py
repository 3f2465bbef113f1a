"""Nominal link bandwidths and latencies: the one table the topology model, the planner and the
simulator read, each row with where its number comes from.

Bandwidths are GB/s (1e9 bytes per second) in one direction. Latencies are the order of
magnitude of one small message's hop (what a bucket pays per hop on top of bytes / bandwidth),
not measurements of this cluster; a probe can replace any row with a measured value
(`TopologyModel.links`). Link classes, fastest first within a host:

  same_device  both ends on one GPU (CUDA IPC handle opened on the same device)
  nvlink       NVLink / NVSwitch between two GPUs of a host
  pcie         PCIe peer-to-peer between two GPUs of a host (no NVLink between them)
  host_shm     through host memory on one host (a CPU process at either end, or shm staging)
  rdma         InfiniBand / RoCE NIC per GPU, GPUDirect RDMA between hosts
  tcp          TCP between hosts (or over loopback on one host: gloo, HTTP)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LINK_CLASSES = ("same_device", "nvlink", "pcie", "host_shm", "rdma", "tcp")


@dataclass(frozen=True)
class LinkSpec:
    """One link class: `gbps` GB/s each way, `latency_s` per hop, `latency_class` (device |
    intra_host | rdma | tcp: what a simulator groups hops by), `source` of the numbers."""

    name: str
    gbps: float
    latency_s: float
    latency_class: str
    source: str


# Per-link NVLink rate: NVLink 2/3/4 carry 25 GB/s each way per link (H100: 18 links = 900 GB/s
# bidirectional; A100: 12 links = 600; V100: 6 links = 300; NVIDIA data sheets). An `NV<n>` cell of
# `nvidia-smi topo -m` therefore moves n * 25 GB/s each way.
NVLINK_PER_LINK_GBPS = 25.0

# PCIe x16 each way by generation (PCI-SIG: 16 / 32 / 64 GT/s per lane, 128b/130b coding).
PCIE_X16_GBPS = {3: 16.0, 4: 32.0, 5: 64.0}

NOMINAL_LINKS: dict[str, LinkSpec] = {
    "same_device": LinkSpec(
        "same_device",
        2400.0,
        5e-6,
        "device",
        "H200 HBM3e 4.8 TB/s (NVIDIA H200 data sheet, ANCHORS.md); a device-to-device copy reads and writes "
        "every byte, so it runs at half; latency: one kernel launch",
    ),
    "nvlink": LinkSpec(
        "nvlink",
        450.0,
        1e-5,
        "intra_host",
        "H100/H200 NVLink4 900 GB/s bidirectional = 450 GB/s each way per GPU (18 links x 25 GB/s; "
        "ANCHORS.md); latency: CUDA P2P copy, a few microseconds",
    ),
    "pcie": LinkSpec(
        "pcie",
        PCIE_X16_GBPS[5],
        1e-5,
        "intra_host",
        "PCIe Gen5 x16 ~64 GB/s each way (Gen4 ~32, Gen3 ~16; PCI-SIG, ANCHORS.md); latency: P2P DMA setup",
    ),
    "host_shm": LinkSpec(
        "host_shm",
        20.0,
        5e-6,
        "intra_host",
        "one memcpy stream on a DDR4/DDR5 server, ~10-25 GB/s (STREAM-copy class figures); "
        "`python -m loongsage.bench transfer` measures this machine's",
    ),
    "rdma": LinkSpec(
        "rdma",
        50.0,
        5e-6,
        "rdma",
        "InfiniBand NDR 400 Gb/s = 50 GB/s per NIC each way (ANCHORS.md); a probed NIC's own rate wins; "
        "latency: verbs round trip over one switch hop, a few microseconds",
    ),
    "tcp": LinkSpec(
        "tcp",
        12.5,
        5e-5,
        "tcp",
        "100 Gb Ethernet nominal = 12.5 GB/s (IEEE 802.3); a probed port's rate wins; latency: kernel TCP stack, "
        "tens of microseconds",
    ),
}

# RDMA NIC rates the synthetic builder offers (Gb/s on the wire, as sysfs' `rate` spells them).
NIC_RATES = {
    "ib_ndr": ("infiniband", "400 Gb/sec (4X NDR)"),
    "ib_hdr": ("infiniband", "200 Gb/sec (4X HDR)"),
    "roce_400": ("roce", "400 Gb/sec"),
    "roce_200": ("roce", "200 Gb/sec"),
    "roce_100": ("roce", "100 Gb/sec"),
}

_RATE = re.compile(r"([0-9.]+)\s*Gb")


def link_spec(cls: str, links: dict[str, LinkSpec] | None = None) -> LinkSpec:
    """The spec of a link class (from `links`, a model's possibly measured table, or the nominal one)."""
    table = NOMINAL_LINKS if links is None else links
    if cls not in table:
        raise ValueError(f"unknown link class {cls!r}; known: {', '.join(LINK_CLASSES)}")
    return table[cls]


def rate_gbps(rate: str | None) -> float | None:
    """GB/s each way from a sysfs-style rate ('400 Gb/sec (4X NDR)', '100 Gb/sec'); None when unreadable."""
    match = _RATE.search(rate or "")
    return float(match[1]) / 8 if match else None


def nvlink_gbps(links: int) -> float:
    """Each-way rate of a bonded set of `links` NVLinks (an NV<n> cell)."""
    return links * NVLINK_PER_LINK_GBPS

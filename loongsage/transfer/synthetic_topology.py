"""Clusters we cannot probe (8..128 nodes x 8 GPUs for the simulation), written as the probe
would have recorded them, so the planner and the simulator read them through the same code.

A node looks like an HGX box: `interconnect="nvswitch"` makes every GPU pair NV18 (H100/H200);
`"pcie"` makes pairs on one NUMA node NODE and across SYS (an L40S-class box). NIC i sits behind
the PCIe switch of GPU i * gpus // nics (PXB), the NICs of the other GPUs of its NUMA node are
NODE away, the rest SYS: DGX H100's layout. `nic="none"` or `nics_per_node=0` leaves only a
100 GbE port (TCP); `gpus_per_node=0` makes CPU-only hosts.
"""

from __future__ import annotations

from loongsage.cluster.topology import ClusterTopology, Nic, NodeTopology, gather
from loongsage.transfer.links import NIC_RATES

INTERCONNECTS = ("nvswitch", "pcie")


def synthetic_cluster(
    nodes: int,
    gpus_per_node: int = 8,
    interconnect: str = "nvswitch",
    nics_per_node: int = 8,
    nic: str = "ib_ndr",
    host_prefix: str = "node",
) -> ClusterTopology:
    if nodes < 1:
        raise ValueError(f"synthetic topology: nodes must be >= 1, got {nodes}")
    if interconnect not in INTERCONNECTS:
        raise ValueError(f"synthetic topology: interconnect {interconnect!r} is not one of {INTERCONNECTS}")
    if nic != "none" and nic not in NIC_RATES:
        raise ValueError(f"synthetic topology: nic {nic!r} is not one of {sorted(NIC_RATES)} or 'none'")
    rdma = 0 if nic == "none" else nics_per_node
    return gather([_node(f"{host_prefix}{i}", i, gpus_per_node, interconnect, rdma, nic) for i in range(nodes)])


def _node(hostname: str, index: int, gpus: int, interconnect: str, nics: int, nic: str) -> NodeTopology:
    numa = {g: 0 if g < gpus / 2 else 1 for g in range(gpus)}
    links = {(a, b): _gpu_link(interconnect, numa, a, b) for a in range(gpus) for b in range(a + 1, gpus)}
    ports = [Nic("eth0", "ethernet", "up", "Ethernet", "100 Gb/sec")]
    affinity: dict[str, dict[int, str]] = {}
    if nics:
        kind, rate = NIC_RATES[nic]
        layer = "InfiniBand" if kind == "infiniband" else "Ethernet"
        for i in range(nics):
            name = f"mlx5_{i}"
            ports.append(Nic(name, kind, "ACTIVE", layer, rate, 1))
            if gpus:
                home = i * gpus // nics
                affinity[name] = {g: "PXB" if g == home else "NODE" if numa[g] == numa[home] else "SYS" for g in range(gpus)}
    return NodeTopology(
        hostname=hostname,
        gpus=[f"GPU{g}" for g in range(gpus)],
        links=links,
        nics=ports,
        gpu_nic_affinity=affinity,
        gpu_numa=numa,
        addresses=[f"10.0.{index // 256}.{index % 256}"],
        source="synthetic",
    )


def _gpu_link(interconnect: str, numa: dict[int, int], a: int, b: int) -> str:
    if interconnect == "nvswitch":
        return "NV18"
    return "NODE" if numa[a] == numa[b] else "SYS"

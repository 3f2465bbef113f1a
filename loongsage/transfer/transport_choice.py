"""Which transports can carry weights from one endpoint to another, over which link, best first.

What each transport needs (the registry names the mesh runs):
  cuda_ipc  GPUs at both ends on one host; the receiver opens the sender's IPC handle and copies
            over the link between their GPUs (same_device, nvlink or pcie)
  nccl      GPUs at both ends, no GPU shared (NCCL refuses two ranks on one device); NVLink/PCIe
            P2P on one host, RDMA between hosts where both have an active NIC, else sockets (tcp)
  shm       one host; GPU tensors are staged through host memory
  gloo      anywhere, over TCP (loopback on one host); GPU tensors are staged through the host
  inline    the receiver is an engine (the bytes ride in its HTTP request), over TCP
Ranked by the nominal bandwidth of the link used, then by the order above.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from loongsage.transfer.routes import Endpoint
from loongsage.transfer.topology_model import TopologyModel

TRANSPORTS = ("cuda_ipc", "nccl", "shm", "gloo", "inline")
MESH = "mesh"  # trainer.weight_sync: the planner chooses a transport per engine; a transport's name restricts it to that one
WEIGHT_SYNCS = (MESH, *TRANSPORTS)  # trainer.weight_sync's choices


@dataclass(frozen=True)
class Option:
    transport: str
    link: str
    gbps: float


def weight_sync_transports(weight_sync: str) -> set[str] | None:
    """trainer.weight_sync as the transports a plan may use: None (every one) for "mesh", else
    the one named."""
    return None if weight_sync == MESH else {weight_sync}


def allowed_transports(transports: Collection[str] | None) -> tuple[str, ...]:
    """The transports a plan may use, in preference order; all of them when None."""
    if transports is None:
        return TRANSPORTS
    unknown = sorted(set(transports) - set(TRANSPORTS))
    if unknown:
        raise ValueError(f"unknown transport(s) {', '.join(unknown)}; known: {', '.join(TRANSPORTS)}")
    if not transports:
        raise ValueError(f"no transport allowed; pick some of {', '.join(TRANSPORTS)}")
    return tuple(t for t in TRANSPORTS if t in transports)


def options(topology: TopologyModel, sender: Endpoint, receiver: Endpoint, allowed: Collection[str] = TRANSPORTS) -> list[Option]:
    """Every allowed way from sender to receiver, fastest first."""
    found = []
    for transport in TRANSPORTS:
        if transport in allowed:
            link = _link(topology, transport, sender, receiver)
            if link is not None:
                found.append(Option(transport, link, topology.link_spec(link).gbps))
    return sorted(found, key=lambda o: (-o.gbps, TRANSPORTS.index(o.transport)))


def best_option(
    topology: TopologyModel, sender: Endpoint, receiver: Endpoint, allowed: Collection[str] = TRANSPORTS
) -> Option | None:
    found = options(topology, sender, receiver, allowed)
    return found[0] if found else None


def _link(topology: TopologyModel, transport: str, sender: Endpoint, receiver: Endpoint) -> str | None:
    same_host = topology.host(sender.host) == topology.host(receiver.host)
    both_gpu = bool(sender.gpus) and bool(receiver.gpus)
    if transport == "cuda_ipc":
        return topology.link_class(sender, receiver) if same_host and both_gpu else None
    if transport == "nccl":
        shared_gpu = same_host and set(sender.gpus) & set(receiver.gpus)
        return topology.link_class(sender, receiver) if both_gpu and not shared_gpu else None
    if transport == "shm":
        return "host_shm" if same_host else None
    if transport == "gloo":
        return "tcp"
    if transport == "inline":
        return "tcp" if receiver.role == "engine" else None
    raise ValueError(f"unknown transport {transport!r}")

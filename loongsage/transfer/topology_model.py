"""The cluster as the planner and the simulator see it: hosts, their GPUs and NICs, and for any
two endpoints the class of link between them and the physical resources a transfer occupies.

Built from `loongsage.cluster.topology`'s probe of every node (a ClusterTopology) plus the
names Ray knows the nodes by (`with_ray_nodes`). Bandwidths come from `links.NOMINAL_LINKS`,
NIC rates from the probe where sysfs reported them. A model saves to JSON and loads back
(`to_json` / `from_json`); `from_json` also reads a bare ClusterTopology dict, one node's
`python -m loongsage.cluster.topology --json` output, or a list of such nodes.

Resource names (stable: the simulator keys contention on them). Each is one direction of one
physical part, with its GB/s:

  <host>/gpu<g>:hbm             device memory of GPU g, at its copy rate (same_device copies)
  <host>/gpu<g>:nvlink_out      GPU g's NVLink ports, sending (all its links together)
  <host>/gpu<g>:nvlink_in       GPU g's NVLink ports, receiving
  <host>/gpu<a>>gpu<b>:nvlink   the direct links from a to b, on boxes without an NVSwitch
  <host>/gpu<g>:pcie_out        GPU g's PCIe x16 link towards the host (P2P, D2H, GPUDirect RDMA)
  <host>/gpu<g>:pcie_in         the same link, into the GPU
  <host>/<nic>:out, <host>/<nic>:in   an RDMA NIC (e.g. node3/mlx5_2:out)
  <host>/tcp:out, <host>/tcp:in       the host's TCP port
  <host>/loopback               TCP over loopback on one host (gloo, HTTP)
  <host>/mem                    host memory, at one memcpy stream's rate (shm staging)

A resource listed n times in one route's list carries that route's bytes n times (a receiver
with several GPUs: each of them takes in the full tensors).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from loongsage.cluster.topology import PCIE_KINDS, ClusterTopology, NodeTopology, gather
from loongsage.transfer.links import (
    LINK_CLASSES,
    NOMINAL_LINKS,
    LinkSpec,
    link_spec,
    nvlink_gbps,
    rate_gbps,
)
from loongsage.transfer.routes import Endpoint

_GPU_CLASSES = ("same_device", "nvlink", "pcie")  # best first


@dataclass
class TopologyModel:
    """`cluster`: every node's probe. `links`: the link table (nominal unless measured values
    replaced rows). `aliases`: other names of a host (Ray node ids, addresses) -> its hostname."""

    cluster: ClusterTopology
    links: dict[str, LinkSpec] = field(default_factory=lambda: dict(NOMINAL_LINKS))
    aliases: dict[str, str] = field(default_factory=dict)
    _names: dict[str, NodeTopology] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Every name of every node, looked up on each link question (the planner asks thousands).
        self._names = {}
        for node in reversed(self.cluster.nodes):  # the first node wins a name two nodes share, as in ClusterTopology.node
            for name in (*node.addresses, node.hostname.split(".")[0], node.hostname):
                self._names[name] = node

    # ------------------------------------------------------------ hosts and endpoints

    def hosts(self) -> list[str]:
        return [node.hostname for node in self.cluster.nodes]

    def host(self, name: str) -> str:
        """The hostname behind any name of a node (hostname, short name, address, Ray node id)."""
        return self.node(name).hostname

    def node(self, name: str) -> NodeTopology:
        node = self._names.get(self.aliases.get(name, name))
        if node is None:
            raise ValueError(f"no node {name!r} in the cluster topology (nodes: {', '.join(self.hosts()) or 'none'})")
        return node

    def endpoint(self, endpoint: Endpoint) -> Endpoint:
        """The endpoint with its host spelled as this model spells it; ValueError for an unknown
        host or a GPU the host does not have."""
        node = self.node(endpoint.host)
        missing = [g for g in endpoint.gpus if not 0 <= g < len(node.gpus)]
        if missing:
            raise ValueError(
                f"endpoint {endpoint.name!r}: host {node.hostname} has no GPU {missing[0]} (it has {len(node.gpus)})"
            )
        return replace(endpoint, host=node.hostname)

    def with_ray_nodes(self, ray_nodes: Iterable[dict]) -> TopologyModel:
        """A copy that also knows each node by Ray's NodeID and NodeManagerAddress. `ray_nodes` is
        `ray.nodes()`'s table; each entry is matched to a probed node by hostname, then address."""
        aliases = dict(self.aliases)
        for entry in ray_nodes:
            names = [entry.get("NodeManagerHostname"), entry.get("NodeManagerAddress")]
            node = next((self._find(n) for n in names if n and self._find(n)), None)
            if node is None:
                raise ValueError(
                    f"Ray node {entry.get('NodeID', '?')} ({', '.join(n for n in names if n)}) is not in the probed "
                    f"topology (hosts: {', '.join(self.hosts())})"
                )
            for name in (entry.get("NodeID"), *names):
                if name and name != node.hostname:
                    aliases[name] = node.hostname
        return replace(self, aliases=aliases)

    def _find(self, name: str) -> NodeTopology | None:
        return self._names.get(name)

    # ------------------------------------------------------------ links

    def link_spec(self, cls: str) -> LinkSpec:
        return link_spec(cls, self.links)

    def link_class(self, a: Endpoint, b: Endpoint) -> str:
        """The link a transfer from a to b crosses on the fastest path the hardware offers. Between
        hosts: rdma when both ends are GPUs and both hosts have an active RDMA NIC, else tcp. On one
        host: host_shm when either end is a CPU process; between GPUs, the slowest of b's GPUs'
        links to its nearest GPU of a (the one that limits the transfer)."""
        host_a, host_b = self.host(a.host), self.host(b.host)
        if host_a != host_b:
            both_rdma = self.rdma_nics(host_a) and self.rdma_nics(host_b)
            return "rdma" if a.gpus and b.gpus and both_rdma else "tcp"
        if not a.gpus or not b.gpus:
            return "host_shm"
        classes = [self._gpu_class(host_a, self._nearest_gpu(host_a, a.gpus, g), g) for g in b.gpus]
        return max(classes, key=_GPU_CLASSES.index)

    def _gpu_class(self, host: str, a: int, b: int) -> str:
        if a == b:
            return "same_device"
        return "nvlink" if self.node(host).link(a, b).startswith("NV") else "pcie"

    def _nearest_gpu(self, host: str, gpus: tuple[int, ...], to: int) -> int:
        return min(gpus, key=lambda g: _GPU_CLASSES.index(self._gpu_class(host, g, to)))

    # ------------------------------------------------------------ NICs

    def rdma_nics(self, host: str) -> list[str]:
        """Active RDMA NICs of the host (one name per device, in probe order)."""
        names = [nic.name for nic in self.node(host).nics if nic.rdma_active]
        return list(dict.fromkeys(names))

    def nic_of(self, host: str, gpu: int) -> str | None:
        """The RDMA NIC a GPU sends and receives through: the active one with the shortest PCIe path
        (ties: probe order); NICs assigned round robin when the probe has no GPU-NIC matrix."""
        node, active = self.node(host), self.rdma_nics(host)
        if not active:
            return None
        ranked = [
            (PCIE_KINDS.index(node.gpu_nic_affinity[nic][gpu]), n, nic)
            for n, nic in enumerate(active)
            if node.gpu_nic_affinity.get(nic, {}).get(gpu) in PCIE_KINDS
        ]
        return min(ranked)[2] if ranked else active[gpu % len(active)]

    def relay_nics(self, host: str) -> list[tuple[str, int]]:
        """(NIC, the GPU nearest it) for each RDMA NIC some GPU of the host sends through, in GPU
        order: one relay per entry keeps every such NIC busy. Storage NICs no GPU is nearest to
        stay out."""
        chosen: dict[str, int] = {}
        for gpu in range(len(self.node(host).gpus)):
            nic = self.nic_of(host, gpu)
            if nic is not None and nic not in chosen:
                chosen[nic] = gpu
        return list(chosen.items())

    def nic_gbps(self, host: str, nic: str) -> float:
        rates = [rate_gbps(n.rate) for n in self.node(host).nics if n.name == nic]
        return next((r for r in rates if r), self.links["rdma"].gbps)

    def tcp_gbps(self, host: str) -> float:
        """The fastest Ethernet port the probe saw up, else the nominal TCP rate."""
        rates = [rate_gbps(n.rate) for n in self.node(host).nics if n.kind == "ethernet" and n.state.lower() == "up"]
        return max((r for r in rates if r), default=self.links["tcp"].gbps)

    # ------------------------------------------------------------ resources

    def resources(self, sender: Endpoint, receiver: Endpoint, link: str | None = None) -> list[tuple[str, float]]:
        """The physical resources a transfer from sender to receiver occupies, each with its GB/s
        (names in the module docstring). `link`: the class the chosen transport uses (a route's
        `link`); by default `link_class(sender, receiver)`."""
        link = link or self.link_class(sender, receiver)
        if link not in LINK_CLASSES:
            raise ValueError(f"unknown link class {link!r}; known: {', '.join(LINK_CLASSES)}")
        hs, hr = self.host(sender.host), self.host(receiver.host)
        if link in _GPU_CLASSES:
            if hs != hr or not sender.gpus or not receiver.gpus:
                raise ValueError(f"{sender.name} -> {receiver.name}: {link} needs GPUs on one host at both ends")
            if link == "same_device":  # each receiving GPU reads a replica on itself (see routes.Route)
                return [(f"{hr}/gpu{g}:hbm", self.links["same_device"].gbps) for g in receiver.gpus]
            return [r for g in receiver.gpus for r in self._gpu_path(hs, self._nearest_gpu(hs, sender.gpus, g), g)]
        if link == "host_shm":
            if hs != hr:
                raise ValueError(f"{sender.name} -> {receiver.name}: host_shm needs both ends on one host")
            return [*self._staging(hs, sender.gpus[:1], "out"), (f"{hs}/mem", self.links["host_shm"].gbps)] + list(
                self._staging(hr, receiver.gpus, "in")
            )
        if link == "rdma":
            return self._rdma_path(sender, receiver, hs, hr)
        return self._tcp_path(sender, receiver, hs, hr)

    def _gpu_path(self, host: str, a: int, b: int) -> list[tuple[str, float]]:
        cls = self._gpu_class(host, a, b)
        if cls == "same_device":
            return [(f"{host}/gpu{a}:hbm", self.links["same_device"].gbps)]
        if cls == "pcie":
            pcie = self.links["pcie"].gbps
            return [(f"{host}/gpu{a}:pcie_out", pcie), (f"{host}/gpu{b}:pcie_in", pcie)]
        node = self.node(host)
        path = [
            (f"{host}/gpu{a}:nvlink_out", self._nvlink_port_gbps(node, a)),
            (f"{host}/gpu{b}:nvlink_in", self._nvlink_port_gbps(node, b)),
        ]
        if not _nvswitch(node):  # direct links: the pair's own links are the narrow part
            path.append((f"{host}/gpu{a}>gpu{b}:nvlink", nvlink_gbps(node.nvlink_count(a, b))))
        return path

    def _nvlink_port_gbps(self, node: NodeTopology, gpu: int) -> float:
        """All of a GPU's NVLinks together. Behind an NVSwitch every pair shows the GPU's full link
        count; in a direct mesh the GPU's links are the sum over its peers."""
        counts = [node.nvlink_count(gpu, peer) for peer in range(len(node.gpus)) if peer != gpu]
        return nvlink_gbps(max(counts) if _nvswitch(node) else sum(counts))

    def _staging(self, host: str, gpus: tuple[int, ...], direction: str) -> list[tuple[str, float]]:
        """A GPU end of a host-memory or TCP transfer copies through its PCIe link."""
        return [(f"{host}/gpu{g}:pcie_{direction}", self.links["pcie"].gbps) for g in gpus]

    def _rdma_path(self, sender: Endpoint, receiver: Endpoint, hs: str, hr: str) -> list[tuple[str, float]]:
        if hs == hr or not sender.gpus or not receiver.gpus:
            raise ValueError(f"{sender.name} -> {receiver.name}: rdma needs GPUs on two hosts")
        s_gpu, r_gpu = sender.gpus[0], receiver.gpus[0]
        s_nic, r_nic = self.nic_of(hs, s_gpu), self.nic_of(hr, r_gpu)
        if s_nic is None or r_nic is None:
            raise ValueError(f"{sender.name} -> {receiver.name}: {hs if s_nic is None else hr} has no active RDMA NIC")
        # GPUDirect RDMA: GPU -> its PCIe switch -> NIC, over the wire, NIC -> the receiver's first
        # GPU; the receiver's other GPUs get the bytes from that one (NCCL's ring inside the host).
        path = [
            *self._staging(hs, (s_gpu,), "out"),
            (f"{hs}/{s_nic}:out", self.nic_gbps(hs, s_nic)),
            (f"{hr}/{r_nic}:in", self.nic_gbps(hr, r_nic)),
            *self._staging(hr, (r_gpu,), "in"),
        ]
        return path + [r for g in receiver.gpus[1:] for r in self._gpu_path(hr, r_gpu, g)]

    def _tcp_path(self, sender: Endpoint, receiver: Endpoint, hs: str, hr: str) -> list[tuple[str, float]]:
        if hs == hr:
            wire = [(f"{hs}/loopback", self.links["tcp"].gbps)]
        else:
            wire = [(f"{hs}/tcp:out", self.tcp_gbps(hs)), (f"{hr}/tcp:in", self.tcp_gbps(hr))]
        return [*self._staging(hs, sender.gpus[:1], "out"), *wire, *self._staging(hr, receiver.gpus, "in")]

    # ------------------------------------------------------------ saving and loading

    def to_dict(self) -> dict:
        return {
            "cluster": self.cluster.to_dict(),
            "links": {name: vars(spec).copy() for name, spec in self.links.items()},
            "aliases": dict(self.aliases),
        }

    @classmethod
    def from_dict(cls, data: dict | list) -> TopologyModel:
        """A model from `to_dict`'s output, a ClusterTopology dict, one NodeTopology dict, or a list of them."""
        if isinstance(data, list):
            return cls(gather([NodeTopology.from_dict(_node_fields(node)) for node in data]))
        if "cluster" in data:
            links = {name: LinkSpec(**spec) for name, spec in data.get("links", {}).items()}
            return cls(ClusterTopology.from_dict(data["cluster"]), {**NOMINAL_LINKS, **links}, dict(data.get("aliases", {})))
        if "nodes" in data:
            return cls(gather([NodeTopology.from_dict(_node_fields(node)) for node in data["nodes"]]))
        if "hostname" in data:
            return cls(gather([NodeTopology.from_dict(_node_fields(data))]))
        raise ValueError("topology JSON: expected a model ('cluster'), a cluster ('nodes'), a node ('hostname') or a list")

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> TopologyModel:
        """From JSON text or a file holding it (anything `from_dict` reads)."""
        text = str(text_or_path)
        if not text.lstrip().startswith(("{", "[")):
            text = Path(text_or_path).read_text()
        return cls.from_dict(json.loads(text))

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> TopologyModel:
        """One model from several files (each node's probe saved on its own, or whole models)."""
        models = [cls.from_json(Path(p)) for p in paths]
        if len(models) == 1:
            return models[0]
        aliases = {k: v for m in models for k, v in m.aliases.items()}
        return cls(gather([node for m in models for node in m.cluster.nodes]), dict(models[0].links), aliases)

    @classmethod
    def synthetic(cls, nodes: int, **shape) -> TopologyModel:
        """A cluster we cannot probe: `shape` as `synthetic_topology.synthetic_cluster` takes it
        (gpus_per_node, interconnect, nics_per_node, nic, host_prefix)."""
        from loongsage.transfer.synthetic_topology import synthetic_cluster

        return cls(synthetic_cluster(nodes, **shape))


def _nvswitch(node: NodeTopology) -> bool:
    """Every GPU pair shows the same NV<n>: the GPUs hang off NVSwitches (DGX/HGX H100, A100)."""
    kinds = set(node.links.values())
    return len(node.gpus) > 1 and len(kinds) == 1 and next(iter(kinds)).startswith("NV")


def _node_fields(data: dict) -> dict:
    """A node dict as NodeTopology.from_dict wants it (a probe's `--json` output carries `cpu_only` too)."""
    defaults = {"gpus": [], "links": {}, "nics": [], "gpu_nic_affinity": {}, "gpu_numa": {}, "addresses": []}
    return {**defaults, "source": "file", "notes": [], **data}

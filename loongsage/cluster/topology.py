"""What each node of the allocation looks like: its GPUs, how each pair of them is linked, its
NICs and whether they speak RDMA; gathered into one ClusterTopology that TransferMesh routes on.

Link kinds are nvidia-smi's legend, best first: NV<n> (n bonded NVLinks; NVSwitch boxes show
every pair as NV<links per GPU>), PIX (one PCIe bridge), PXB (several bridges, no host bridge),
PHB (through a PCIe host bridge), NODE (between host bridges of one NUMA node), SYS (across
NUMA nodes). The probe reads NVML (`nvidia-ml-py`) where it is installed and `nvidia-smi topo -m`
where it is on PATH; with neither, or with no driver, the node is CPU-only, never an error.
The probe sees the whole machine, not CUDA_VISIBLE_DEVICES: indices are physical GPU indices.

`python -m loongsage.cluster.topology [--json]` prints this machine's topology.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

PCIE_KINDS = ("PIX", "PXB", "PHB", "NODE", "SYS")
NIC_KINDS = ("infiniband", "roce", "ethernet")
_KIND = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CELL_SEPARATOR = re.compile(r"\s*\t\s*|\s{2,}")  # tabs (raw output) or 2+ spaces (pasted output)
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


@dataclass(frozen=True)
class GpuLink:
    """One pair of GPUs on a node and how they are connected (a < b)."""

    a: int
    b: int
    kind: str


@dataclass(frozen=True)
class Nic:
    """A network port. kind: infiniband | roce (RDMA over an Ethernet link layer) | ethernet (TCP only)."""

    name: str
    kind: str
    state: str
    link_layer: str
    rate: str | None = None
    port: int | None = None

    @property
    def rdma_active(self) -> bool:
        return self.kind in ("infiniband", "roce") and self.state == "ACTIVE"


@dataclass
class NodeTopology:
    """One machine. links: (i, j) with i < j -> link kind; gpu_nic_affinity: NIC name -> GPU index
    -> link kind (from `nvidia-smi topo -m`); gpu_numa: GPU index -> NUMA node where known;
    source: where the GPU facts came from (nvml | nvidia-smi | file | none); notes: why a source
    was not used, so a CPU-only result on a GPU node can be explained."""

    hostname: str
    gpus: list[str] = field(default_factory=list)
    links: dict[tuple[int, int], str] = field(default_factory=dict)
    nics: list[Nic] = field(default_factory=list)
    gpu_nic_affinity: dict[str, dict[int, str]] = field(default_factory=dict)
    gpu_numa: dict[int, int] = field(default_factory=dict)
    addresses: list[str] = field(default_factory=list)
    source: str = "none"
    notes: list[str] = field(default_factory=list)

    @property
    def cpu_only(self) -> bool:
        return not self.gpus

    def link(self, a: int, b: int) -> str:
        for gpu in (a, b):
            if not 0 <= gpu < len(self.gpus):
                raise KeyError(f"node {self.hostname} has no GPU {gpu} (it has {len(self.gpus)})")
        if a == b:
            return "X"
        return self.links[(min(a, b), max(a, b))]

    def gpu_links(self) -> list[GpuLink]:
        return [GpuLink(a, b, kind) for (a, b), kind in sorted(self.links.items())]

    def nvlink_count(self, a: int, b: int) -> int:
        kind = self.link(a, b)
        return int(kind[2:]) if kind.startswith("NV") else 0

    def has_rdma(self) -> bool:
        return any(nic.rdma_active for nic in self.nics)

    def nearest_nic(self, gpu: int) -> str | None:
        """The NIC with the shortest PCIe path to `gpu` (ties: the first in the legend)."""
        ranked = [
            (PCIE_KINDS.index(kinds[gpu]), name) for name, kinds in self.gpu_nic_affinity.items() if kinds.get(gpu) in PCIE_KINDS
        ]
        return min(ranked, key=lambda r: r[0])[1] if ranked else None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["links"] = {f"{a}-{b}": kind for (a, b), kind in sorted(self.links.items())}
        data["gpu_nic_affinity"] = {nic: {str(g): k for g, k in kinds.items()} for nic, kinds in self.gpu_nic_affinity.items()}
        data["gpu_numa"] = {str(g): n for g, n in self.gpu_numa.items()}
        data["cpu_only"] = self.cpu_only
        return data

    @classmethod
    def from_dict(cls, data: dict) -> NodeTopology:
        def pair(key: str) -> tuple[int, int]:
            a, b = key.split("-")
            return int(a), int(b)

        return cls(
            hostname=data["hostname"],
            gpus=list(data["gpus"]),
            links={pair(k): v for k, v in data["links"].items()},
            nics=[Nic(**nic) for nic in data["nics"]],
            gpu_nic_affinity={nic: {int(g): k for g, k in kinds.items()} for nic, kinds in data["gpu_nic_affinity"].items()},
            gpu_numa={int(g): n for g, n in data["gpu_numa"].items()},
            addresses=list(data["addresses"]),
            source=data["source"],
            notes=list(data["notes"]),
        )


@dataclass
class ClusterTopology:
    """Every node of the allocation. Nodes are named by hostname, short hostname or any of their
    addresses (Ray reports IPs, Slurm hostnames)."""

    nodes: list[NodeTopology]

    def node(self, name: str) -> NodeTopology:
        for node in self.nodes:
            if name in (node.hostname, node.hostname.split(".")[0], *node.addresses):
                return node
        known = ", ".join(node.hostname for node in self.nodes) or "none"
        raise KeyError(f"no node {name!r} in the cluster topology (nodes: {known})")

    def same_node(self, a: str, b: str) -> bool:
        return self.node(a) is self.node(b)

    def link(self, node: str, gpu_a: int, gpu_b: int) -> str:
        return self.node(node).link(gpu_a, gpu_b)

    def nvlink_connected(self, node: str, gpu_a: int, gpu_b: int) -> bool:
        return self.node(node).nvlink_count(gpu_a, gpu_b) > 0

    def has_rdma(self, node: str) -> bool:
        return self.node(node).has_rdma()

    def nearest_nic(self, node: str, gpu: int) -> str | None:
        return self.node(node).nearest_nic(gpu)

    def to_dict(self) -> dict:
        return {"nodes": [node.to_dict() for node in self.nodes]}

    @classmethod
    def from_dict(cls, data: dict) -> ClusterTopology:
        return gather([NodeTopology.from_dict(node) for node in data["nodes"]])


def gather(nodes: list[NodeTopology]) -> ClusterTopology:
    """One topology from each node's probe (the Slurm bootstrap runs probe_node on every node)."""
    names = Counter(node.hostname for node in nodes)
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        raise ValueError(f"cluster topology: nodes probed twice: {', '.join(twice)}")
    return ClusterTopology(list(nodes))


# ---------------------------------------------------------------- nvidia-smi topo -m


@dataclass
class _Matrix:
    gpus: list[str]
    links: dict[tuple[int, int], str]
    nic_affinity: dict[str, dict[int, str]]
    gpu_numa: dict[int, int]


def parse_nvidia_smi_topo(text: str) -> tuple[list[str], dict[tuple[int, int], str], dict[str, dict[int, str]]]:
    """(GPU labels, {(i, j): kind}, {NIC name: {GPU index: kind}}) from `nvidia-smi topo -m` output."""
    matrix = _parse_matrix(text)
    return matrix.gpus, matrix.links, matrix.nic_affinity


def _parse_matrix(text: str) -> _Matrix:
    lines = _ANSI.sub("", text).replace("\r", "").split("\n")
    start = next((n for n, line in enumerate(lines) if _cells(line)[:1] == ["GPU0"]), None)
    if start is None:
        first = next((line for line in lines if line.strip()), "")
        raise ValueError(f"nvidia-smi topo -m: no header row of GPU0..GPUn columns (line 1: {first!r})")
    header = _cells(lines[start])
    rows = _matrix_rows(lines, start)
    labels = [cells[0] for _, cells in rows]
    for position, (n, cells) in enumerate(rows):
        if position >= len(header) or header[position] != cells[0]:
            raise ValueError(
                f"nvidia-smi topo -m line {n + 1}: row {cells[0]!r} has no column of its own in the header: {lines[n]!r}"
            )
    devices, extra_columns = header[: len(labels)], header[len(labels) :]
    kinds = {}
    for i, (n, cells) in enumerate(rows):
        kinds[i] = _row_kinds(cells, i, len(devices), n, lines[n])
    gpu_index = [i for i, label in enumerate(labels) if re.fullmatch(r"GPU\d+", label)]
    if [labels[i] for i in gpu_index] != [f"GPU{g}" for g in range(len(gpu_index))]:
        raise ValueError(
            f"nvidia-smi topo -m line {start + 1}: GPU rows are not GPU0..GPUn in order: {[labels[i] for i in gpu_index]}"
        )
    links = {}
    for a in gpu_index:
        for b in gpu_index:
            if a < b:
                if kinds[a][b] != kinds[b][a]:
                    n = rows[b][0]
                    raise ValueError(
                        f"nvidia-smi topo -m line {n + 1}: {labels[b]}-{labels[a]} is "
                        f"{kinds[b][a]} but {labels[a]}-{labels[b]} is {kinds[a][b]}: {lines[n]!r}"
                    )
                links[(a, b)] = kinds[a][b]
    legend = _nic_legend(lines)
    nic_affinity = {
        legend.get(labels[i], labels[i]): {g: kinds[g][i] for g in gpu_index} for i in range(len(labels)) if i not in gpu_index
    }
    gpu_numa = {}
    for g in gpu_index:
        extras = dict(zip(extra_columns, rows[g][1][1 + len(devices) :]))
        if extras.get("NUMA Affinity", "").isdigit():
            gpu_numa[g] = int(extras["NUMA Affinity"])
    return _Matrix([labels[g] for g in gpu_index], links, nic_affinity, gpu_numa)


def _cells(line: str) -> list[str]:
    return [cell for cell in _CELL_SEPARATOR.split(line.strip()) if cell]


def _matrix_rows(lines: list[str], start: int) -> list[tuple[int, list[str]]]:
    """(line index, cells) of each matrix row: from below the header to the first blank line or legend."""
    rows = []
    for n in range(start + 1, len(lines)):
        cells = _cells(lines[n])
        if not cells or cells[0].startswith("Legend"):
            break
        rows.append((n, cells))
    if not rows:
        raise ValueError(f"nvidia-smi topo -m line {start + 2}: no matrix rows below the header")
    return rows


def _row_kinds(cells: list[str], row: int, width: int, n: int, line: str) -> list[str]:
    kinds = cells[1 : 1 + width]
    if len(kinds) < width:
        raise ValueError(f"nvidia-smi topo -m line {n + 1}: {len(kinds)} link cells, the header has {width} devices: {line!r}")
    for column, kind in enumerate(kinds):
        if not _KIND.match(kind):
            raise ValueError(
                f"nvidia-smi topo -m line {n + 1}: unknown link kind {kind!r} "
                f"(legend: X, NV#, PIX, PXB, PHB, NODE, SYS): {line!r}"
            )
        if (kind == "X") != (column == row):
            raise ValueError(
                f"nvidia-smi topo -m line {n + 1}: 'X' belongs on the diagonal only, column {column + 1} is {kind!r}: {line!r}"
            )
    # Drivers before the NODE level called the cross-socket path SOC; it is today's SYS.
    return ["SYS" if kind == "SOC" else kind for kind in kinds]


def _nic_legend(lines: list[str]) -> dict[str, str]:
    legend, inside = {}, False
    for line in lines:
        if line.strip().startswith("NIC Legend"):
            inside = True
        elif inside and (match := _NIC_LEGEND.match(line)):
            legend[match[1]] = match[2]
    return legend


# ---------------------------------------------------------------- NICs from sysfs


def probe_nics(sysfs_root: str | Path = "/sys") -> list[Nic]:
    """RDMA ports from <root>/class/infiniband, then physical Ethernet ports from <root>/class/net.
    Virtual interfaces (lo, veth, bridges: no `device` entry) and the netdevs of RDMA devices
    are left out: TCP between nodes always exists, what routing needs to know is RDMA."""
    root = Path(sysfs_root)
    return [*_rdma_ports(root / "class" / "infiniband"), *_ethernet_ports(root / "class" / "net")]


def _rdma_ports(base: Path) -> list[Nic]:
    nics = []
    for device in _children(base):
        for port in sorted(_children(device / "ports"), key=lambda p: (not p.name.isdigit(), p.name)):
            # Kernels before RoCE had no link_layer file: every port was InfiniBand.
            layer = _read(port / "link_layer") or "InfiniBand"
            kind = {"infiniband": "infiniband", "ethernet": "roce"}.get(layer.lower())
            if kind is None:  # iWARP and other link layers: not a transport we route on
                continue
            state = (_read(port / "state") or "unknown").split(":")[-1].strip()  # "4: ACTIVE"
            nics.append(
                Nic(device.name, kind, state, layer, _read(port / "rate"), int(port.name) if port.name.isdigit() else None)
            )
    return nics


def _ethernet_ports(base: Path) -> list[Nic]:
    nics = []
    for iface in _children(base):
        if not (iface / "device").exists() or (iface / "device" / "infiniband").exists():
            continue
        if _read(iface / "type") != "1":  # ARPHRD_ETHER; 32 is IPoIB, listed as its RDMA device
            continue
        speed = _read(iface / "speed")  # Mb/s; unreadable or -1 while the link is down
        rate = f"{int(speed) // 1000} Gb/sec" if speed and speed.isdigit() and int(speed) > 0 else None
        nics.append(Nic(iface.name, "ethernet", _read(iface / "operstate") or "unknown", "Ethernet", rate))
    return nics


def _children(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except OSError:
        return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


# ---------------------------------------------------------------- GPUs through NVML

_PCIE_LEVEL = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def nvml_links(nvml) -> tuple[list[str], dict[tuple[int, int], str]]:
    """GPU labels and pairwise links through NVML (`nvml` is the pynvml module, or a stand-in).
    NVLink counts come from each link's remote PCI device: a GPU is a direct peer, anything else
    is an NVSwitch, through which every switch-attached pair is NV<min links>. Other pairs get
    their PCIe distance from the common ancestor (NVML's level, in nvidia-smi's names)."""
    nvml.nvmlInit()
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        buses = [_bus_id(nvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
        peers = [_nvlink_peers(nvml, h) for h in handles]
        switch_links = [sum(c for bus, c in p.items() if bus not in buses) for p in peers]
        links = {}
        for a in range(len(handles)):
            for b in range(a + 1, len(handles)):
                direct = peers[a][buses[b]]
                through_switch = min(switch_links[a], switch_links[b])
                if direct:
                    links[(a, b)] = f"NV{direct}"
                elif through_switch and _p2p_nvlink_ok(nvml, handles[a], handles[b]):
                    links[(a, b)] = f"NV{through_switch}"
                else:
                    level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])
                    links[(a, b)] = _PCIE_LEVEL.get(int(level), "SYS")
        return [f"GPU{i}" for i in range(len(handles))], links
    finally:
        nvml.nvmlShutdown()


def _nvlink_peers(nvml, handle) -> Counter:
    peers: Counter = Counter()
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(handle, link)
        except nvml.NVMLError:  # no NVLink on this GPU, or past its last link
            continue
        peers[_bus_id(remote.busId)] += 1
    return peers


def _p2p_nvlink_ok(nvml, a, b) -> bool:
    try:
        return nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_NVLINK) == nvml.NVML_P2P_STATUS_OK
    except (AttributeError, nvml.NVMLError):  # older bindings without the call: trust the links
        return True


def _bus_id(bus: str | bytes) -> str:
    """'00000000:07:00.0' and '0000:07:00.0' name the same device."""
    text = bus.decode() if isinstance(bus, bytes) else bus
    domain, rest = text.strip().lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


# ---------------------------------------------------------------- this machine


def probe_node(sysfs_root: str | Path = "/sys", hostname: str | None = None, addresses: list[str] | None = None) -> NodeTopology:
    """This machine's topology. Never raises for missing GPUs, drivers or tools: what could not be
    read is in `notes` and the node is CPU-only."""
    node = NodeTopology(hostname=hostname or socket.gethostname(), addresses=list(addresses or []))
    _probe_nvml(node)
    _probe_nvidia_smi(node)
    node.nics = probe_nics(sysfs_root)
    return node


def _probe_nvml(node: NodeTopology) -> None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        node.notes.append("NVML: nvidia-ml-py is not installed")
        return
    try:
        node.gpus, node.links = nvml_links(pynvml)
        node.source = "nvml" if node.gpus else node.source
    except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: a CPU node
        node.notes.append(f"NVML: {error}")


def _probe_nvidia_smi(node: NodeTopology) -> None:
    """NIC affinity and NUMA nodes always come from here; GPUs and links only without NVML."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        node.notes.append("nvidia-smi: not on PATH")
        return
    try:
        done = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"exit {done.returncode}: {(done.stdout + done.stderr).strip()[:200]}")
        matrix = _parse_matrix(done.stdout)
    except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as error:
        node.notes.append(f"nvidia-smi topo -m: {error}")
        return
    if not node.gpus:
        node.gpus, node.links, node.source = matrix.gpus, matrix.links, "nvidia-smi"
    node.gpu_nic_affinity, node.gpu_numa = matrix.nic_affinity, matrix.gpu_numa


def node_from_topo_text(text: str, hostname: str, nics: list[Nic] | None = None) -> NodeTopology:
    """A node from recorded `nvidia-smi topo -m` output (fixtures, or a node that cannot run NVML)."""
    matrix = _parse_matrix(text)
    return NodeTopology(
        hostname=hostname,
        gpus=matrix.gpus,
        links=matrix.links,
        nics=list(nics or []),
        gpu_nic_affinity=matrix.nic_affinity,
        gpu_numa=matrix.gpu_numa,
        source="file",
    )


# ---------------------------------------------------------------- printing


def render(node: NodeTopology) -> str:
    """The node as text a person reads: a link matrix, then the NICs with their nearest GPUs."""
    if node.cpu_only:
        head = [f"node {node.hostname}: CPU only, no GPUs found"]
        head += [f"  ({note})" for note in node.notes]
    else:
        numa = sorted(set(node.gpu_numa.values()))
        head = [
            f"node {node.hostname}: {len(node.gpus)} GPUs (source: {node.source})"
            + (f", NUMA nodes {', '.join(map(str, numa))}" if numa else "")
        ]
        width = max(6, *(len(g) + 2 for g in node.gpus))
        head.append(("  " + " " * width + "".join(f"{g:<{width}}" for g in node.gpus)).rstrip())
        for a, label in enumerate(node.gpus):
            cells = "".join(f"{node.link(a, b):<{width}}" for b in range(len(node.gpus)))
            head.append(f"  {label:<{width}}{cells}".rstrip())
    lines = head + [f"  RDMA: {'yes' if node.has_rdma() else 'no'}"]
    if not node.nics:
        lines.append("  NICs: none (no RDMA devices, no physical network ports)")
    for nic in node.nics:
        lines.append(
            f"  NIC {nic.name}"
            + (f" port {nic.port}" if nic.port is not None else "")
            + f": {nic.kind}, {nic.state}"
            + (f", {nic.rate}" if nic.rate else "")
            + _near(node, nic.name)
        )
    in_sysfs = {nic.name for nic in node.nics}
    for name in node.gpu_nic_affinity:
        if name not in in_sysfs:
            lines.append(f"  NIC {name}: in nvidia-smi's matrix, not in sysfs" + _near(node, name))
    return "\n".join(lines)


def _near(node: NodeTopology, nic: str) -> str:
    """GPUs that reach the NIC without crossing a host bridge (the ones GPUDirect RDMA serves well)."""
    near = [node.gpus[g] for g, kind in node.gpu_nic_affinity.get(nic, {}).items() if kind in ("PIX", "PXB")]
    return f", near {', '.join(near)}" if near else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loongsage.cluster.topology", description="Print this machine's GPU/NIC topology."
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--topo-file", help="read recorded `nvidia-smi topo -m` output instead of probing GPUs")
    parser.add_argument("--sysfs-root", default="/sys", help="where to read NICs from (default /sys)")
    args = parser.parse_args(argv)
    if args.topo_file:
        node = node_from_topo_text(Path(args.topo_file).read_text(), socket.gethostname(), probe_nics(args.sysfs_root))
    else:
        node = probe_node(args.sysfs_root)
    print(json.dumps(node.to_dict(), indent=2) if args.json else render(node))
    return 0


if __name__ == "__main__":
    sys.exit(main())

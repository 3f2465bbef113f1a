"""Topology probe: recorded `nvidia-smi topo -m` outputs of real machine types, a fake sysfs tree,
a stand-in NVML, and the probe and CLI on this CPU-only machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from loongsage.cluster.topology import (
    ClusterTopology,
    GpuLink,
    Nic,
    NodeTopology,
    gather,
    node_from_topo_text,
    nvml_links,
    parse_nvidia_smi_topo,
    probe_nics,
    probe_node,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "topology"
REPO = Path(__file__).resolve().parents[3]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def all_pairs(n: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(n) for b in range(a + 1, n)]


# ---------------------------------------------------------------- recorded outputs


def test_dgx_h100_every_pair_is_nv18_and_nics_come_from_the_legend():
    gpus, links, nics = parse_nvidia_smi_topo(fixture("dgx_h100_nvswitch.txt"))
    assert gpus == [f"GPU{i}" for i in range(8)]
    assert links == {pair: "NV18" for pair in all_pairs(8)}
    assert list(nics) == [f"mlx5_{i}" for i in range(12)]
    # the compute NIC behind each GPU's PCIe switch, the storage NICs one host bridge further
    assert nics["mlx5_0"][0] == "PXB" and nics["mlx5_3"][1] == "PXB" and nics["mlx5_11"][7] == "PXB"
    assert nics["mlx5_1"][0] == "NODE" and nics["mlx5_1"][4] == "SYS"


def test_dgx_h100_node_helpers():
    node = node_from_topo_text(fixture("dgx_h100_nvswitch.txt"), "dgx01")
    assert [node.nearest_nic(g) for g in range(8)] == [
        "mlx5_0",
        "mlx5_3",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_9",
        "mlx5_10",
        "mlx5_11",
    ]
    assert node.gpu_numa == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert node.nvlink_count(0, 7) == 18
    assert node.gpu_links()[0] == GpuLink(0, 1, "NV18")


def test_pcie_l40s_box_ansi_stripped_pix_pxb_node_sys():
    text = fixture("pcie_l40s_8gpu_ansi.txt")
    assert "\x1b[" in text  # the recording really is coloured
    gpus, links, nics = parse_nvidia_smi_topo(text)
    assert gpus == [f"GPU{i}" for i in range(8)]
    assert {pair for pair, kind in links.items() if kind == "PIX"} == {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert {pair for pair, kind in links.items() if kind == "PXB"} == {(0, 2), (0, 3), (1, 2), (1, 3)}
    assert {pair for pair, kind in links.items() if kind == "NODE"} == {(4, 6), (4, 7), (5, 6), (5, 7)}
    assert {pair for pair, kind in links.items() if kind == "SYS"} == {(a, b) for a in range(4) for b in range(4, 8)}
    assert not any(kind.startswith("NV") for kind in links.values())
    assert nics == {
        "mlx5_0": {0: "PIX", 1: "PIX", 2: "PXB", 3: "PXB", 4: "SYS", 5: "SYS", 6: "SYS", 7: "SYS"},
        "mlx5_1": {0: "SYS", 1: "SYS", 2: "SYS", 3: "SYS", 4: "NODE", 5: "NODE", 6: "PIX", 7: "PIX"},
    }
    node = node_from_topo_text(text, "l40s")
    assert sorted(set(node.gpu_numa.values())) == [0, 1]
    assert node.nearest_nic(5) == "mlx5_1" and node.nearest_nic(2) == "mlx5_0"


def test_four_gpu_box_with_nvlink_bridges_in_pairs():
    gpus, links, nics = parse_nvidia_smi_topo(fixture("a100_pcie_nvlink_pairs_4gpu.txt"))
    assert gpus == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert links == {(0, 1): "NV12", (2, 3): "NV12", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS"}
    assert nics == {"mlx5_0": {0: "NODE", 1: "NODE", 2: "SYS", 3: "SYS"}, "mlx5_1": {0: "NODE", 1: "NODE", 2: "SYS", 3: "SYS"}}


def test_dgx1_legacy_format_nv1_nv2_mix_and_nics_named_in_the_header():
    gpus, links, nics = parse_nvidia_smi_topo(fixture("dgx1_v100_legacy.txt"))
    assert len(gpus) == 8
    assert links[(0, 1)] == "NV1" and links[(0, 3)] == "NV2" and links[(1, 5)] == "NV2"
    assert links[(0, 5)] == "SYS" and links[(3, 7)] == "NV1"
    # every V100 has six NVLinks
    per_gpu = [sum(int(k[2:]) for (a, b), k in links.items() if g in (a, b) and k.startswith("NV")) for g in range(8)]
    assert per_gpu == [6] * 8
    assert list(nics) == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]
    assert nics["mlx5_2"][4] == "PIX" and nics["mlx5_2"][6] == "PHB" and nics["mlx5_2"][0] == "SYS"


def test_cluster_of_recorded_nodes_routes_by_name_and_address():
    dgx = node_from_topo_text(fixture("dgx_h100_nvswitch.txt"), "dgx01.cluster")
    dgx.addresses = ["10.0.0.1"]
    dgx.nics = [Nic("mlx5_0", "infiniband", "ACTIVE", "InfiniBand", "400 Gb/sec (4X NDR)", 1)]
    pcie = node_from_topo_text(fixture("pcie_l40s_8gpu_ansi.txt"), "l40s02")
    pcie.nics = [Nic("mlx5_0", "roce", "DOWN", "Ethernet", None, 1), Nic("eno1", "ethernet", "up", "Ethernet")]
    cluster = gather([dgx, pcie])
    assert cluster.same_node("dgx01", "10.0.0.1") and not cluster.same_node("dgx01", "l40s02")
    assert cluster.nvlink_connected("dgx01", 2, 5)
    assert not cluster.nvlink_connected("l40s02", 0, 1)
    assert cluster.link("l40s02", 4, 6) == "NODE" and cluster.link("l40s02", 3, 3) == "X"
    assert cluster.has_rdma("10.0.0.1") and not cluster.has_rdma("l40s02")  # RoCE port is down
    assert ClusterTopology.from_dict(json.loads(json.dumps(cluster.to_dict()))) == cluster
    with pytest.raises(KeyError, match="no node 'gpu9'.*dgx01.cluster, l40s02"):
        cluster.node("gpu9")
    with pytest.raises(KeyError, match="no GPU 8"):
        cluster.link("dgx01", 0, 8)
    with pytest.raises(ValueError, match="probed twice: l40s02"):
        gather([pcie, pcie])


# ---------------------------------------------------------------- malformed input


def test_text_without_a_gpu_header_is_refused():
    with pytest.raises(ValueError, match="no header row.*line 1: 'No devices were found'"):
        parse_nvidia_smi_topo("No devices were found\n")


@pytest.mark.parametrize(
    "bad, at, message",
    [
        ("GPU1\tFOO\t X \t0-7", 3, r"unknown link kind 'FOO'"),
        ("GPU1\tNV18\tNV18\t0-7", 3, r"'X' belongs on the diagonal only, column 2"),
        ("GPU1\tNV18", 3, r"1 link cells, the header has 2 devices"),
        ("GPU1\tPIX\t X \t0-7", 3, r"GPU1-GPU0 is PIX but GPU0-GPU1 is NV18"),
        ("GPU7\tNV18\t X \t0-7", 3, r"row 'GPU7' has no column of its own"),
    ],
)
def test_malformed_rows_name_the_line(bad, at, message):
    text = f"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-7\n{bad}\n"
    with pytest.raises(ValueError, match=rf"line {at}: {message}"):
        parse_nvidia_smi_topo(text)


def test_header_without_rows_is_refused():
    with pytest.raises(ValueError, match="line 2: no matrix rows"):
        parse_nvidia_smi_topo("\tGPU0\tCPU Affinity\n\nLegend:\n")


# ---------------------------------------------------------------- sysfs


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def fake_sysfs(root: Path) -> Path:
    ib = root / "class" / "infiniband"
    for dev, layer, state, rate in [
        ("mlx5_0", "InfiniBand", "4: ACTIVE", "400 Gb/sec (4X NDR)"),
        ("mlx5_1", "Ethernet", "4: ACTIVE", "200 Gb/sec (4X HDR)"),
        ("mlx5_2", "InfiniBand", "1: DOWN", "10 Gb/sec (4X SDR)"),
    ]:
        write(ib / dev / "ports" / "1" / "link_layer", layer)
        write(ib / dev / "ports" / "1" / "state", state)
        write(ib / dev / "ports" / "1" / "rate", rate)
    net = root / "class" / "net"
    write(net / "lo" / "type", "772")  # loopback: no device
    write(net / "veth1a2b" / "type", "1")  # virtual: no device
    write(net / "eno1" / "type", "1")  # physical Ethernet
    write(net / "eno1" / "operstate", "up")
    write(net / "eno1" / "speed", "25000")
    (net / "eno1" / "device").mkdir()
    write(net / "ens2f0np0" / "type", "1")  # the RoCE port's netdev: listed as mlx5_1
    (net / "ens2f0np0" / "device" / "infiniband").mkdir(parents=True)
    write(net / "ib0" / "type", "32")  # IPoIB netdev of mlx5_0
    (net / "ib0" / "device").mkdir()
    return root


def test_fake_sysfs_gives_ib_roce_and_physical_ethernet(tmp_path):
    nics = probe_nics(fake_sysfs(tmp_path))
    assert nics == [
        Nic("mlx5_0", "infiniband", "ACTIVE", "InfiniBand", "400 Gb/sec (4X NDR)", 1),
        Nic("mlx5_1", "roce", "ACTIVE", "Ethernet", "200 Gb/sec (4X HDR)", 1),
        Nic("mlx5_2", "infiniband", "DOWN", "InfiniBand", "10 Gb/sec (4X SDR)", 1),
        Nic("eno1", "ethernet", "up", "Ethernet", "25 Gb/sec"),
    ]
    assert [nic.rdma_active for nic in nics] == [True, True, False, False]


def test_only_down_or_tcp_ports_mean_no_rdma(tmp_path):
    write(tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "state", "1: DOWN")
    node = NodeTopology("n", nics=probe_nics(tmp_path))
    assert [nic.kind for nic in node.nics] == ["infiniband"] and not node.has_rdma()


def test_missing_sysfs_gives_no_nics(tmp_path):
    assert probe_nics(tmp_path / "nowhere") == []


# ---------------------------------------------------------------- NVML stand-in


class NVMLError(Exception):
    pass


def fake_nvml(buses: list[str], nvlinks: dict[int, list[str]], ancestors: dict[tuple[int, int], int]):
    """pynvml's surface as nvml_links uses it: nvlinks[gpu] = remote bus id of each enabled link."""

    def remote(handle, link):
        if link >= len(nvlinks.get(handle, [])):
            raise NVMLError("Not Supported")
        return SimpleNamespace(busId=nvlinks[handle][link].encode())

    return SimpleNamespace(
        NVMLError=NVMLError,
        NVML_FEATURE_ENABLED=1,
        NVML_NVLINK_MAX_LINKS=18,
        NVML_P2P_CAPS_INDEX_NVLINK=3,
        NVML_P2P_STATUS_OK=0,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(buses),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=buses[h]),
        nvmlDeviceGetNvLinkState=lambda h, link: (remote(h, link), 1)[1],
        nvmlDeviceGetNvLinkRemotePciInfo_v2=remote,
        nvmlDeviceGetP2PStatus=lambda a, b, cap: 0,
        nvmlDeviceGetTopologyCommonAncestor=lambda a, b: ancestors[(a, b)],
    )


def test_nvml_nvswitch_links_count_links_per_gpu():
    buses = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]
    switch = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    nvml = fake_nvml(buses, {g: [switch[link % 4] for link in range(18)] for g in range(4)}, {})
    gpus, links = nvml_links(nvml)
    assert gpus == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert links == {pair: "NV18" for pair in all_pairs(4)}


def test_nvml_direct_bridge_pair_and_pcie_levels():
    buses = ["00000000:17:00.0", "00000000:31:00.0", "00000000:B1:00.0"]
    # GPU0 <-> GPU1 through 4 bridged links (remote ids in the short 4-digit domain form)
    nvml = fake_nvml(buses, {0: ["0000:31:00.0"] * 4, 1: ["0000:17:00.0"] * 4}, {(0, 2): 50, (1, 2): 40})
    _, links = nvml_links(nvml)
    assert links == {(0, 1): "NV4", (0, 2): "SYS", (1, 2): "NODE"}


# ---------------------------------------------------------------- this machine


def no_gpu_env(tmp_path: Path) -> dict[str, str]:
    """An environment where neither NVML nor nvidia-smi can be found, even on a GPU machine."""
    blocker = tmp_path / "block"
    write(blocker / "pynvml.py", "raise ImportError('blocked for this test')")
    env = dict(os.environ, PATH=str(tmp_path / "empty-bin"), PYTHONPATH=os.pathsep.join([str(blocker), str(REPO)]))
    return env


def test_probe_without_gpu_tools_is_cpu_only(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    node = probe_node(fake_sysfs(tmp_path / "sys"), hostname="cpu01")
    assert node.cpu_only and node.gpus == [] and node.links == {} and node.source == "none"
    assert node.notes == ["NVML: nvidia-ml-py is not installed", "nvidia-smi: not on PATH"]
    assert node.has_rdma()  # NICs are probed all the same
    assert gather([node]).node("cpu01") is node


def test_cli_prints_this_cpu_machine_as_text_and_json(tmp_path):
    env = no_gpu_env(tmp_path)
    cmd = [sys.executable, "-m", "loongsage.cluster.topology", "--sysfs-root", str(fake_sysfs(tmp_path / "sys"))]
    text = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "CPU only, no GPUs found" in text
    assert "nvidia-smi: not on PATH" in text
    assert "NIC mlx5_0 port 1: infiniband, ACTIVE, 400 Gb/sec (4X NDR)" in text
    assert "RDMA: yes" in text
    data = json.loads(subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=60, check=True).stdout)
    assert data["cpu_only"] is True and data["gpus"] == [] and data["source"] == "none"
    assert [nic["kind"] for nic in data["nics"]] == ["infiniband", "roce", "infiniband", "ethernet"]


def test_cli_prints_a_recorded_matrix(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "loongsage.cluster.topology",
        "--sysfs-root",
        str(tmp_path),
        "--topo-file",
        str(FIXTURES / "a100_pcie_nvlink_pairs_4gpu.txt"),
    ]
    text = subprocess.run(cmd, env=no_gpu_env(tmp_path), capture_output=True, text=True, timeout=60, check=True).stdout
    assert "4 GPUs (source: file), NUMA nodes 0, 1" in text
    assert "  GPU0  X     NV12  SYS   SYS" in text
    assert "NIC mlx5_0: in nvidia-smi's matrix, not in sysfs" in text

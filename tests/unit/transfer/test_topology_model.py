"""Topology model: link classes and resources on recorded `nvidia-smi topo -m` outputs and a
recorded four-node InfiniBand cluster, the link table, JSON save and replay, Ray names, and the
synthetic clusters the simulation plans on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loongsage.cluster.topology import Nic, gather, node_from_topo_text
from loongsage.transfer.links import LINK_CLASSES, NOMINAL_LINKS, link_spec, rate_gbps
from loongsage.transfer.routes import Endpoint
from loongsage.transfer.topology_model import TopologyModel

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "topology"
IB_CLUSTER = FIXTURES / "dgx_h100_ib_4nodes.json"


def recorded(name: str, hostname: str, nics: list[Nic] | None = None) -> TopologyModel:
    return TopologyModel(gather([node_from_topo_text((FIXTURES / name).read_text(), hostname, nics)]))


def gpu(name: str, host: str, *gpus: int, role: str = "engine") -> Endpoint:
    return Endpoint(name, role, host, gpus)


def cpu(name: str, host: str, role: str = "engine") -> Endpoint:
    return Endpoint(name, role, host)


# ---------------------------------------------------------------- the link table


def test_every_link_class_has_one_row_with_a_source():
    assert tuple(NOMINAL_LINKS) == LINK_CLASSES
    for cls, spec in NOMINAL_LINKS.items():
        assert spec.name == cls and spec.gbps > 0 and 0 < spec.latency_s < 1e-3 and len(spec.source) > 20
    # the public figures the table is built from (ANCHORS.md "Links and measured update times")
    assert link_spec("nvlink").gbps == 450.0 and link_spec("pcie").gbps == 64.0 and link_spec("rdma").gbps == 50.0
    assert link_spec("same_device").gbps == 4800.0 / 2
    with pytest.raises(ValueError, match="unknown link class 'infinityfabric'"):
        link_spec("infinityfabric")


def test_nic_rates_read_as_sysfs_writes_them():
    assert rate_gbps("400 Gb/sec (4X NDR)") == 50.0
    assert rate_gbps("100 Gb/sec") == 12.5
    assert rate_gbps(None) is None and rate_gbps("unknown") is None


# ---------------------------------------------------------------- link classes


def test_nvswitch_box_every_gpu_pair_is_nvlink_and_its_own_gpu_is_same_device():
    model = recorded("dgx_h100_nvswitch.txt", "dgx01")
    assert model.link_class(gpu("t", "dgx01", 0), gpu("e", "dgx01", 0)) == "same_device"
    assert model.link_class(gpu("t", "dgx01", 0), gpu("e", "dgx01", 7)) == "nvlink"
    # a tensor-parallel engine on GPUs 0 and 1 fed from GPU 0: GPU 1 limits it
    assert model.link_class(gpu("t", "dgx01", 0), gpu("e", "dgx01", 0, 1)) == "nvlink"
    assert model.link_class(gpu("t", "dgx01", 3), cpu("e", "dgx01")) == "host_shm"


def test_pcie_box_gpu_pairs_are_pcie_and_nvlink_bridges_are_nvlink():
    pcie = recorded("pcie_l40s_8gpu_ansi.txt", "l40s")
    assert {pcie.link_class(gpu("t", "l40s", 0), gpu("e", "l40s", g)) for g in range(1, 8)} == {"pcie"}
    pairs = recorded("a100_pcie_nvlink_pairs_4gpu.txt", "a100")
    assert pairs.link_class(gpu("t", "a100", 0), gpu("e", "a100", 1)) == "nvlink"
    assert pairs.link_class(gpu("t", "a100", 0), gpu("e", "a100", 2)) == "pcie"
    # with sources on 0 and 2, every GPU of the box has an NVLink peer that holds the weights
    assert pairs.link_class(gpu("t", "a100", 0, 2), gpu("e", "a100", 1, 3)) == "nvlink"


def test_between_hosts_rdma_needs_gpus_and_an_active_nic_at_both_ends():
    model = TopologyModel.from_json(IB_CLUSTER)
    assert model.link_class(gpu("t", "dgx00.cluster", 0), gpu("e", "dgx01.cluster", 3)) == "rdma"
    assert model.link_class(cpu("t", "dgx00.cluster"), gpu("e", "dgx01.cluster", 3)) == "tcp"
    text = (FIXTURES / "dgx_h100_nvswitch.txt").read_text()
    dgx = node_from_topo_text(text, "up", [Nic("mlx5_0", "infiniband", "ACTIVE", "IB")])
    down = node_from_topo_text(text, "down", [Nic("mlx5_0", "roce", "DOWN", "Ethernet")])  # RoCE port down: TCP
    mixed = TopologyModel(gather([dgx, down]))
    assert mixed.link_class(gpu("t", "up", 0), gpu("e", "down", 0)) == "tcp"


# ---------------------------------------------------------------- NICs


def test_each_gpu_sends_through_the_compute_nic_behind_its_switch_and_storage_nics_stay_out():
    model = TopologyModel.from_json(IB_CLUSTER)
    host = "dgx00.cluster"
    expected = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    assert [model.nic_of(host, g) for g in range(8)] == expected
    assert model.relay_nics(host) == list(zip(expected, range(8)))
    assert "mlx5_1" in model.rdma_nics(host) and "mlx5_1" not in dict(model.relay_nics(host))
    assert model.nic_gbps(host, "mlx5_0") == 50.0 and model.nic_gbps(host, "mlx5_1") == 25.0
    assert model.tcp_gbps(host) == 12.5


def test_rdma_nics_without_a_gpu_nic_matrix_go_round_robin():
    node = node_from_topo_text((FIXTURES / "dgx_h100_nvswitch.txt").read_text(), "n", [])
    node.gpu_nic_affinity = {}
    node.nics = [Nic("ib0", "infiniband", "ACTIVE", "InfiniBand"), Nic("ib1", "infiniband", "ACTIVE", "InfiniBand")]
    model = TopologyModel(gather([node]))
    assert [model.nic_of("n", g) for g in range(4)] == ["ib0", "ib1", "ib0", "ib1"]
    assert model.nic_gbps("n", "ib0") == NOMINAL_LINKS["rdma"].gbps


# ---------------------------------------------------------------- resources


def test_resources_name_the_parts_a_transfer_occupies():
    model = TopologyModel.from_json(IB_CLUSTER)
    a, b = "dgx00.cluster", "dgx01.cluster"
    assert model.resources(gpu("t", a, 2), gpu("e", b, 5)) == [
        (f"{a}/gpu2:pcie_out", 64.0),
        (f"{a}/mlx5_4:out", 50.0),
        (f"{b}/mlx5_9:in", 50.0),
        (f"{b}/gpu5:pcie_in", 64.0),
    ]
    assert model.resources(gpu("t", a, 0), gpu("e", a, 0)) == [(f"{a}/gpu0:hbm", 2400.0)]
    assert model.resources(gpu("t", a, 0), gpu("e", a, 7)) == [(f"{a}/gpu0:nvlink_out", 450.0), (f"{a}/gpu7:nvlink_in", 450.0)]
    # a tensor-parallel receiver: each of its GPUs takes the bytes in
    assert [name for name, _ in model.resources(gpu("t", a, 0), gpu("e", a, 1, 2))] == [
        f"{a}/gpu0:nvlink_out",
        f"{a}/gpu1:nvlink_in",
        f"{a}/gpu0:nvlink_out",
        f"{a}/gpu2:nvlink_in",
    ]
    assert model.resources(cpu("t", a), cpu("e", b)) == [(f"{a}/tcp:out", 12.5), (f"{b}/tcp:in", 12.5)]
    assert model.resources(cpu("t", a), cpu("e", a)) == [(f"{a}/mem", 20.0)]
    assert model.resources(gpu("t", a, 1), gpu("e", a, 3), "host_shm") == [
        (f"{a}/gpu1:pcie_out", 64.0),
        (f"{a}/mem", 20.0),
        (f"{a}/gpu3:pcie_in", 64.0),
    ]
    assert model.resources(cpu("t", a), cpu("e", a), "tcp") == [(f"{a}/loopback", 12.5)]
    with pytest.raises(ValueError, match="rdma needs GPUs on two hosts"):
        model.resources(gpu("t", a, 0), gpu("e", a, 1), "rdma")


def test_nvlink_mesh_without_a_switch_adds_the_pair_and_sums_a_gpus_links():
    model = recorded("dgx1_v100_legacy.txt", "dgx1")
    assert model.resources(gpu("t", "dgx1", 0), gpu("e", "dgx1", 3)) == [
        ("dgx1/gpu0:nvlink_out", 150.0),  # six NVLink2 links of 25 GB/s
        ("dgx1/gpu3:nvlink_in", 150.0),
        ("dgx1/gpu0>gpu3:nvlink", 50.0),  # NV2
    ]
    pcie = recorded("pcie_l40s_8gpu_ansi.txt", "l40s")
    assert pcie.resources(gpu("t", "l40s", 0), gpu("e", "l40s", 5)) == [("l40s/gpu0:pcie_out", 64.0), ("l40s/gpu5:pcie_in", 64.0)]


# ---------------------------------------------------------------- names, saving and loading


def test_hosts_answer_to_every_name_and_ray_node_ids_join_them():
    model = TopologyModel.from_json(IB_CLUSTER)
    assert model.host("dgx02") == model.host("10.1.0.3") == "dgx02.cluster"
    ray_nodes = [{"NodeID": "abc123", "NodeManagerAddress": "10.1.0.2", "NodeManagerHostname": "dgx01.cluster"}]
    with_ray = model.with_ray_nodes(ray_nodes)
    assert with_ray.host("abc123") == "dgx01.cluster"
    assert with_ray.endpoint(gpu("e", "abc123", 4)).host == "dgx01.cluster"
    with pytest.raises(ValueError, match="Ray node zz .*not in the probed topology"):
        model.with_ray_nodes([{"NodeID": "zz", "NodeManagerAddress": "10.9.9.9"}])
    with pytest.raises(ValueError, match="no node 'gpu9'"):
        model.host("gpu9")
    with pytest.raises(ValueError, match="host dgx00.cluster has no GPU 8"):
        model.endpoint(gpu("e", "dgx00", 8))


def test_model_json_round_trip_keeps_measured_links_and_aliases(tmp_path):
    model = TopologyModel.from_json(IB_CLUSTER).with_ray_nodes([{"NodeID": "n0", "NodeManagerAddress": "10.1.0.1"}])
    model.links["tcp"] = NOMINAL_LINKS["tcp"].__class__("tcp", 3.1, 5e-5, "tcp", "measured here")
    path = tmp_path / "model.json"
    model.to_json(path)
    again = TopologyModel.from_json(path)
    assert again == model and again.links["tcp"].gbps == 3.1 and again.host("n0") == "dgx00.cluster"
    assert TopologyModel.from_json(model.to_json()) == model


def test_a_probe_saved_by_the_topology_cli_replays(tmp_path):
    """`python -m loongsage.cluster.topology --json` on each node, then one model from the files."""
    for name in ("a", "b"):
        probe = subprocess.run(
            [sys.executable, "-m", "loongsage.cluster.topology", "--json"], capture_output=True, text=True, check=True
        )
        data = json.loads(probe.stdout)
        data["hostname"] = f"node-{name}"
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    model = TopologyModel.load([tmp_path / "a.json", tmp_path / "b.json"])
    assert model.hosts() == ["node-a", "node-b"]
    node = json.loads((tmp_path / "a.json").read_text())
    assert TopologyModel.from_dict([node]).hosts() == ["node-a"]
    with pytest.raises(ValueError, match="expected a model"):
        TopologyModel.from_dict({"something": 1})


# ---------------------------------------------------------------- synthetic clusters


def test_synthetic_cluster_looks_like_the_probe_of_hgx_boxes():
    model = TopologyModel.synthetic(16)
    assert len(model.hosts()) == 16 and model.hosts()[3] == "node3"
    assert model.link_class(gpu("t", "node0", 0), gpu("e", "node0", 5)) == "nvlink"
    assert model.link_class(gpu("t", "node0", 0), gpu("e", "node9", 5)) == "rdma"
    assert model.relay_nics("node4") == [(f"mlx5_{i}", i) for i in range(8)]
    four = TopologyModel.synthetic(2, nics_per_node=4, nic="roce_200")
    assert four.relay_nics("node1") == [("mlx5_0", 0), ("mlx5_1", 2), ("mlx5_2", 4), ("mlx5_3", 6)]
    assert four.nic_gbps("node1", "mlx5_0") == 25.0
    pcie = TopologyModel.synthetic(2, interconnect="pcie", nic="none")
    assert pcie.link_class(gpu("t", "node0", 0), gpu("e", "node0", 7)) == "pcie"
    assert pcie.link_class(gpu("t", "node0", 0), gpu("e", "node1", 0)) == "tcp"
    cpus = TopologyModel.synthetic(3, gpus_per_node=0)
    assert cpus.node("node2").cpu_only and cpus.link_class(cpu("t", "node0"), cpu("e", "node1")) == "tcp"
    with pytest.raises(ValueError, match="interconnect 'ring'"):
        TopologyModel.synthetic(2, interconnect="ring")
    with pytest.raises(ValueError, match="nic 'ib_xdr'"):
        TopologyModel.synthetic(2, nic="ib_xdr")

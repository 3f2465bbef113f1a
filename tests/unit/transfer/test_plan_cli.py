"""`python -m loongsage.transfer.plan`: device ranges over a topology's GPUs (and CPU process
slots), engines of several GPUs, forced transports, text and JSON output, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loongsage.transfer.device_slots import Slot, all_slots, engines_at, parse_slots, sources_at
from loongsage.transfer.plan import main
from loongsage.transfer.routes import Plan
from loongsage.transfer.topology_model import TopologyModel

IB_CLUSTER = Path(__file__).resolve().parents[2] / "fixtures" / "topology" / "dgx_h100_ib_4nodes.json"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- device ranges


def test_ranges_index_gpus_in_host_order_then_gpu_index():
    topology = TopologyModel.from_json(IB_CLUSTER)
    slots = parse_slots("0-1,9,31", topology)
    assert [(s.host, s.index) for s in slots] == [
        ("dgx00.cluster", 0),
        ("dgx00.cluster", 1),
        ("dgx01.cluster", 1),
        ("dgx03.cluster", 7),
    ]
    assert parse_slots("dgx02:4-5", topology) == [Slot("dgx02.cluster", 4, True), Slot("dgx02.cluster", 5, True)]
    assert parse_slots("10.1.0.2:0", topology) == [Slot("dgx01.cluster", 0, True)]
    for spec, message in [
        ("32", "device 32 does not exist: the topology has 32 slot"),
        ("dgx01:8", "device 8 does not exist: dgx01.cluster has 8 slot"),
        ("3-1", "1 < 3"),
        ("a-b", "expected N, A-B, host:N or host:A-B"),
        ("0,0", "names dgx00.cluster:0 twice"),
        ("", "names no device"),
        ("gpu9:0", "no node 'gpu9'"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_slots(spec, topology)


def test_cpu_hosts_give_process_slots():
    topology = TopologyModel.synthetic(2, gpus_per_node=0)
    assert [(s.host, s.index, s.gpu) for s in all_slots(topology, cpu_slots=2)] == [
        ("node0", 0, False),
        ("node0", 1, False),
        ("node1", 0, False),
        ("node1", 1, False),
    ]
    engines = engines_at(parse_slots("1-3", topology, cpu_slots=2))
    assert [(e.name, e.host, e.gpus) for e in engines] == [
        ("engine/0", "node0", ()),
        ("engine/1", "node1", ()),
        ("engine/2", "node1", ()),
    ]
    with pytest.raises(ValueError, match="CPU engines have tp=1"):
        engines_at(parse_slots("0-1", topology, cpu_slots=2), tp=2)


def test_engines_group_consecutive_devices_on_one_host():
    topology = TopologyModel.from_json(IB_CLUSTER)
    engines = engines_at(parse_slots("8-15", topology), tp=4)
    assert [(e.name, e.gpus) for e in engines] == [("engine/0", (0, 1, 2, 3)), ("engine/1", (4, 5, 6, 7))]
    assert [s.name for s in sources_at(parse_slots("0-1", topology))] == ["trainer/0", "trainer/1"]
    with pytest.raises(ValueError, match="would span hosts dgx00.cluster, dgx01.cluster"):
        engines_at(parse_slots("6-9", topology), tp=4)
    with pytest.raises(ValueError, match="do not split into engines of tp=4"):
        engines_at(parse_slots("8-13", topology), tp=4)


# ---------------------------------------------------------------- the command


def test_plan_from_a_recorded_cluster_prints_the_render(capsys):
    code, out, err = run(capsys, "--topology", str(IB_CLUSTER), "--trainer", "0-7", "--engines", "8-15")
    assert code == 0 and err == ""
    assert out.startswith("route plan: 8 source(s), 8 relay(s), 8 engine(s); routes: 64 cuda_ipc, 8 nccl")
    assert "relay relay/dgx01.cluster/0 @ dgx01.cluster/gpu0: trainer/0 --nccl[rdma]--> share 0/8" in out


def test_json_output_is_a_plan(capsys):
    code, out, _ = run(
        capsys, "--topology", str(IB_CLUSTER), "--trainer", "0-7", "--engines", "8-15", "--engine-tp", "2", "--json"
    )
    plan = Plan.from_dict(json.loads(out))
    plan.check()
    assert code == 0 and len(plan.by_role("engine")) == 4 and plan.endpoint("engine/3").gpus == (6, 7)


def test_forced_transports_and_synthetic_clusters(capsys):
    code, out, _ = run(capsys, "--synthetic", "3x8", "--trainer", "0-7", "--engines", "8-23", "--transports", "nccl,gloo")
    assert code == 0 and "cuda_ipc" not in out.split("note:")[0] and "nccl" in out
    code, out, _ = run(capsys, "--synthetic", "2x0", "--cpu-slots", "2", "--trainer", "0", "--engines", "2-3")
    assert code == 0 and "relay relay/node1/0 @ node1/cpu: trainer/0 --gloo[tcp]-->" in out
    assert "engine engine/0 @ node1/cpu: relay/node1/0 --shm[host_shm]-->" in out


def test_errors_are_one_line_and_exit_2(capsys):
    code, out, err = run(
        capsys, "--topology", str(IB_CLUSTER), "--trainer", "0-7", "--engines", "8-15", "--transports", "cuda_ipc"
    )
    assert code == 2 and out == ""
    assert err.startswith("error: engine engine/0 @ dgx01.cluster/gpu0: no allowed transport reaches it")
    code, _, err = run(capsys, "--synthetic", "2x8:ring", "--trainer", "0", "--engines", "1")
    assert code == 2 and "interconnect 'ring'" in err
    code, _, err = run(capsys, "--synthetic", "lots", "--trainer", "0", "--engines", "1")
    assert code == 2 and "expected NODESxGPUS" in err


def test_module_runs_on_this_machines_probe():
    """No topology given: this machine is probed; slot 0 exists on any machine (GPU 0, or a process)."""
    done = subprocess.run(
        [sys.executable, "-m", "loongsage.transfer.plan", "--trainer", "0", "--engines", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("route plan: 1 source(s), 0 relay(s), 1 engine(s)")

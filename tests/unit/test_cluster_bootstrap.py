"""The pure parts of the Ray bootstrap on a Slurm allocation (the process plumbing runs for
real inside a Slurm job in tests/slurm)."""
from __future__ import annotations

import pytest

from loongsage.cluster.bootstrap import Allocation, allocation_from_env, missing_resources, ray_ports


def _expand(hostlist: str) -> list[str]:
    return {"gpu[01-03]": ["gpu01", "gpu02", "gpu03"], "localhost": ["localhost"]}[hostlist]


def test_allocation_from_slurm_environment():
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[01-03]", "SLURM_GPUS_ON_NODE": "8", "SLURM_CPUS_ON_NODE": "64"}
    allocation = allocation_from_env(env, expand=_expand)
    assert allocation == Allocation("4242", ("gpu01", "gpu02", "gpu03"), 8, 64)
    assert allocation.head == "gpu01"
    # Without SLURM_GPUS_ON_NODE the devices Slurm made visible count.
    env.pop("SLURM_GPUS_ON_NODE")
    assert allocation_from_env({**env, "CUDA_VISIBLE_DEVICES": "0,1"}, expand=_expand).gpus_per_node == 2


def test_outside_slurm_names_what_is_missing():
    with pytest.raises(RuntimeError, match="SLURM_JOB_ID, SLURM_JOB_NODELIST unset"):
        allocation_from_env({}, expand=_expand)


def test_ports_differ_between_jobs_and_stay_in_range():
    a, b = ray_ports("1000"), ray_ports("1001")
    assert a.gcs != b.gcs and abs(a.gcs - b.gcs) >= 200
    for job in ("1", "999999", "123_4", "87654321"):
        ports = ray_ports(job)
        assert 10000 <= ports.gcs < ports.max_worker < 65536
        assert ports.min_worker > ports.runtime_env_agent
    assert "--port=" in " ".join(a.start_args(head=True)) and "--port=" not in " ".join(a.start_args(head=False))


def _node(host: str, gpus: float, alive: bool = True) -> dict:
    return {"NodeManagerHostname": host, "Alive": alive, "Resources": {"GPU": gpus, "CPU": 8}}


def test_missing_resources_names_absent_and_short_nodes():
    allocation = Allocation("7", ("gpu01", "gpu02", "gpu03"), 8, 64)
    nodes = [_node("gpu01.cluster", 8), _node("gpu02", 4), _node("gpu03", 8, alive=False)]
    assert missing_resources(allocation, nodes) == ["gpu02: 4 of 8 GPUs registered", "gpu03: not registered"]
    assert missing_resources(allocation, [_node("gpu01", 8), _node("gpu02", 8), _node("gpu03", 8)]) == []


def test_a_slurm_alias_matches_the_node_that_registered():
    allocation = Allocation("7", ("localhost",), 2, 2)
    assert missing_resources(allocation, [_node("build-box-17", 2)]) == []
    assert missing_resources(allocation, []) == ["localhost: not registered"]

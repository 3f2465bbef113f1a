"""The pure parts of the Ray bootstrap on a Slurm allocation (the process plumbing runs for
real inside a Slurm job in tests/slurm)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from loongsage.cluster import bootstrap
from loongsage.cluster.bootstrap import (
    Allocation,
    allocation_from_env,
    head_command,
    ignoring_usr2,
    missing_resources,
    ray_ports,
    start_ray,
    worker_command,
)
from loongsage.config import ContainerConfig

RAY_WORKER = ["/venv/bin/ray", "start", "--block", "--address=10.0.0.1:10000"]
IGNORE = ["bash", "-c", 'trap "" USR2; exec "$@"']


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


def test_usr2_wrapper_leaves_the_program_ignoring_the_signal():
    probe = [sys.executable, "-c", "import signal, sys; sys.exit(signal.getsignal(signal.SIGUSR2) is not signal.SIG_IGN)"]
    assert subprocess.run(ignoring_usr2(probe, "probe")).returncode == 0
    # And it outlives the signal, sent to it as Slurm sends it to a job step's processes.
    sleeper = subprocess.Popen(ignoring_usr2(["sleep", "30"], "probe"))
    try:
        deadline = time.monotonic() + 5
        while _command_of(sleeper.pid) != "sleep":  # bash has exec'd it
            assert time.monotonic() < deadline, "the wrapper did not exec its program"
        sleeper.send_signal(signal.SIGUSR2)
        with pytest.raises(subprocess.TimeoutExpired):
            sleeper.wait(timeout=0.5)
    finally:
        sleeper.kill()
        sleeper.wait()


def _command_of(pid: int) -> str:
    return subprocess.run(["ps", "-o", "comm=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()


def test_head_is_ray_start_ignoring_usr2():
    assert head_command(["ray", "start", "--head"]) == [*IGNORE, "ray-head", "ray", "start", "--head"]


def test_worker_without_container_is_the_plain_srun_ignoring_usr2():
    assert worker_command("gpu02", RAY_WORKER, ContainerConfig(), "/w") == [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "-w",
        "gpu02",
        *IGNORE,
        "ray-worker",
        *RAY_WORKER,
    ]


def test_pyxis_worker_gets_the_container_as_srun_options():
    pyxis = ContainerConfig("pyxis", "nvcr.io#nvidia/pytorch:25.01-py3", ["/lustre:/lustre"])
    assert worker_command("gpu02", RAY_WORKER, pyxis, "/lustre/me") == [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "-w",
        "gpu02",
        "--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
        "--container-mounts=/lustre:/lustre",
        "--container-workdir=/lustre/me",
        *IGNORE,
        "ray-worker",
        *RAY_WORKER,
    ]


def test_apptainer_worker_runs_the_container_and_ray_both_ignoring_usr2():
    apptainer = ContainerConfig("apptainer", "/images/run.sif", ["/lustre:/lustre"])
    assert worker_command("gpu02", RAY_WORKER, apptainer, "/lustre/me") == [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "-w",
        "gpu02",
        *IGNORE,
        "ray-container",
        "apptainer",
        "exec",
        "--nv",
        "--bind",
        "/lustre:/lustre",
        "/images/run.sif",
        *IGNORE,
        "ray-worker",
        *RAY_WORKER,
    ]


def test_workers_need_srun_where_the_controller_runs(monkeypatch):
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: None)
    allocation = Allocation("7", ("gpu01", "gpu02"), 8, 64)
    with pytest.raises(RuntimeError, match=r"srun is not on PATH \(cluster.container.runtime=pyxis\).*other 1 node"):
        start_ray(allocation, container=ContainerConfig("pyxis", "img"))
    with pytest.raises(ValueError, match="cluster.container.image is empty"):
        start_ray(allocation, container=ContainerConfig("pyxis", ""))

"""The pure parts of the Ray bootstrap on a Slurm allocation (the process plumbing runs for
real inside a Slurm job in tests/slurm)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from loongsage.cluster import bootstrap
from loongsage.cluster.bootstrap import (
    Allocation,
    allocation_from_env,
    head_command,
    ignoring_usr2,
    missing_resources,
    node_ip,
    parse_show_node,
    port_slots,
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


def _at(ip: str, gpus: float, host: str = "vm") -> dict:
    return {**_node(host, gpus), "NodeManagerAddress": ip}


def test_nodes_sharing_a_machine_are_told_apart_by_address():
    """Two slurmd on one machine: both Ray nodes report the machine's hostname; only their
    addresses tell node1 from node2 (by hostname alone, node2 was never found)."""
    allocation = Allocation("7", ("node1", "node2"), 2, 2)
    addresses = {"node1": "127.0.0.2", "node2": "127.0.0.3"}
    assert missing_resources(allocation, [_at("127.0.0.2", 2)], addresses) == ["node2: not registered"]
    assert missing_resources(allocation, [_at("127.0.0.3", 2)], addresses) == ["node1: not registered"]
    assert missing_resources(allocation, [_at("127.0.0.3", 2), _at("127.0.0.2", 1)], addresses) == [
        "node1: 1 of 2 GPUs registered"
    ]
    assert missing_resources(allocation, [_at("127.0.0.3", 2), _at("127.0.0.2", 2)], addresses) == []
    # A node whose address Ray found itself is matched as before, by hostname or as an alias.
    assert missing_resources(allocation, [_at("127.0.0.2", 2), _at("10.0.0.9", 2)], {"node1": "127.0.0.2"}) == []


SHOW_NODE = (
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1 Gres=gpu:2 NodeAddr=127.0.0.2 NodeHostName=vm Version=22.05.8 "
    "OS=Linux 6.1 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=11000\n"
    "NodeName=node2 Arch=x86_64 Gres=gpu:2 NodeAddr=127.0.0.3 NodeHostName=vm Port=16819 Version=22.05.8\n"
    "NodeName=gpu07 NodeAddr=gpu07 NodeHostName=gpu07 State=IDLE\n"
)


def test_slurm_view_of_nodes_gives_addresses_and_machines():
    nodes = parse_show_node(SHOW_NODE)
    assert [(name, n.addr, n.machine) for name, n in nodes.items()] == [
        ("node1", "127.0.0.2", "vm"),
        ("node2", "127.0.0.3", "vm"),
        ("gpu07", "gpu07", "gpu07"),
    ]


def test_node_ip_is_slurms_address_unless_ray_would_rewrite_it():
    hosts = {"gpu07": "10.1.2.7", "vm": "127.0.1.1"}

    def resolve(name):
        if name not in hosts:
            raise OSError(f"unknown host {name}")
        return hosts[name]

    assert node_ip("127.0.0.3", resolve) == "127.0.0.3"  # a node of its own on a shared machine
    assert node_ip("10.1.2.8", resolve) == "10.1.2.8"
    assert node_ip("gpu07", resolve) == "10.1.2.7"  # NodeAddr unset: the node's name, resolved
    assert node_ip("127.0.0.1", resolve) is None  # Ray would replace it by the interface address
    assert node_ip("vm", resolve) is None  # a name the machine maps to itself says nothing
    assert node_ip("nowhere", resolve) is None


def test_nodes_on_one_machine_split_the_worker_ports():
    where = parse_show_node(SHOW_NODE)
    assert port_slots(("node1", "node2", "gpu07"), where) == {"node1": (0, 2), "node2": (1, 2), "gpu07": (0, 1)}
    assert port_slots(("gpu01", "gpu02"), {}) == {"gpu01": (0, 1), "gpu02": (0, 1)}
    alone, first, second = ray_ports("55"), ray_ports("55", 0, 2), ray_ports("55", 1, 2)
    # One node per machine, and the first of several, keep the named ports of the job's block.
    assert first.start_args(head=True)[:6] == alone.start_args(head=True)[:6]
    assert first.min_worker == alone.min_worker
    ranges = []
    for ports in (first, second):
        own = [ports.node_manager, ports.object_manager, ports.dashboard_agent_grpc]
        own += [ports.dashboard_agent_listen, ports.metrics_export, ports.runtime_env_agent]
        ranges.append(set(own) | set(range(ports.min_worker, ports.max_worker + 1)))
        assert alone.gcs < min(ranges[-1]) and max(ranges[-1]) <= alone.max_worker
    assert not ranges[0] & ranges[1]
    assert second.gcs == alone.gcs and second.min_worker > second.runtime_env_agent


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
        "--mem=0",
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
        "--mem=0",
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
        "--mem=0",
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


def test_a_worker_srun_that_exits_is_started_once_more_then_fails_the_wait(monkeypatch, caplog):
    import ray

    allocation = Allocation("7", ("node1", "node2"), 2, 2)
    cluster = bootstrap.RayCluster(allocation, ray_ports("7"), "127.0.0.2", node_ips={"node1": "127.0.0.2", "node2": "127.0.0.3"})
    cluster.worker_argv["node2"] = [sys.executable, "-c", "raise SystemExit(3)"]
    cluster.start_worker("node2")
    monkeypatch.setattr(ray, "init", lambda **kwargs: None)
    monkeypatch.setattr(ray, "nodes", lambda: [_at("127.0.0.2", 2)])
    with pytest.raises(RuntimeError, match=r"`srun -w node2 ray start` exited with code 3 twice .*node2: not registered"):
        bootstrap.wait_for_nodes(cluster, timeout_s=60)
    assert len(cluster.processes) == 2
    assert "starting it once more" in caplog.text


def test_a_start_waits_for_its_job_ports_held_by_the_run_before_a_requeue(monkeypatch):
    """A requeued job keeps its id, so its ports; the run before it may still be ending on the node."""
    ports = ray_ports("4242")
    held = socket.socket()
    held.bind(("127.0.0.1", ports.gcs))
    held.listen()
    threading.Timer(1.0, held.close).start()
    started = time.monotonic()
    assert bootstrap._wait_for_free_ports(ports, "4242") == []
    assert time.monotonic() - started >= 0.9

    monkeypatch.setattr(bootstrap, "PORTS_FREE_WAIT_S", 0.3)
    with socket.socket() as still_held:
        still_held.bind(("127.0.0.1", ports.gcs))
        still_held.listen()
        assert bootstrap._wait_for_free_ports(ports, "4242") == [ports.gcs]

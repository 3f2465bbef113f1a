"""An engine's ports: from the Slurm job's block, else free ones."""

from __future__ import annotations

import socket

import pytest

from loongsage.cluster.bootstrap import ENGINES_PER_JOB, ray_ports
from loongsage.cluster.bootstrap import engine_ports as job_engine_ports
from loongsage.inference.sglang.ports import engine_ports, free_ports


def test_engine_ports_sit_past_rays_workers_inside_the_jobs_block():
    job = "1234567"
    ray = ray_ports(job)
    taken = set()
    for index in range(ENGINES_PER_JOB):
        http, nccl, rendezvous = job_engine_ports(job, index)
        assert ray.max_worker < http < nccl < rendezvous < ray.gcs + 200
        taken |= {http, nccl, rendezvous}
    assert len(taken) == 3 * ENGINES_PER_JOB  # no two engines share a port
    # The next job's block starts where this one ends.
    assert max(taken) < ray_ports("1234568").gcs


def test_an_index_beyond_the_block_is_refused_with_the_limit():
    with pytest.raises(ValueError, match=f"holds {ENGINES_PER_JOB} engines.*rollout.num_engines"):
        job_engine_ports("42", ENGINES_PER_JOB)


def test_inside_a_slurm_job_the_ports_are_the_blocks():
    environ = {"SLURM_JOB_ID": "987"}
    assert engine_ports(3, "127.0.0.1", environ) == job_engine_ports("987", 3)
    assert engine_ports(3, "127.0.0.1", environ) == engine_ports(3, "127.0.0.1", environ)


def test_a_busy_block_port_is_named():
    http, _, _ = job_engine_ports("555", 1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", http))
        holder.listen()
        with pytest.raises(RuntimeError, match=f"sglang engine 1: ports \\[{http}\\] of Slurm job 555"):
            engine_ports(1, "127.0.0.1", {"SLURM_JOB_ID": "555"})


def test_outside_slurm_three_distinct_free_ports():
    ports = engine_ports(0, "127.0.0.1", {})
    assert len(set(ports)) == 3
    for port in free_ports("127.0.0.1", 2) + ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: binding works

"""The Ray bootstrap for real, on this machine as a one-node allocation: head started with the
job's ports and token, resources registered, everything torn down (inside a real Slurm job in
tests/slurm)."""

from __future__ import annotations

import os
import random
import subprocess
import sys

from tests.paths import REPO_ROOT


def _bootstrap(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loongsage.cluster.bootstrap"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _job_with_free_ports() -> str:
    """A job id whose Ray ports are free now: half of the job port blocks lie in the kernel's
    ephemeral range, where the suite's own HTTP connections (and their TIME_WAIT) hold ports for
    a while; on a cluster Slurm gives the id, and a busy port fails the job naming it."""
    from loongsage.cluster.bootstrap import busy_ports, ray_ports

    while True:
        job = str(random.randrange(100000, 900000))
        if not busy_ports(ray_ports(job)):
            return job


def test_bootstrap_brings_ray_up_on_the_allocation_and_tears_it_down():
    job = _job_with_free_ports()
    env = {
        **os.environ,
        "SLURM_JOB_ID": job,
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_GPUS_ON_NODE": "2",
        "SLURM_CPUS_ON_NODE": "2",
    }
    env.pop("RAY_ADDRESS", None)
    result = _bootstrap(env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"ray up on job {job}: 1 node(s) localhost; GPU 2 CPU 8" in result.stdout
    # Torn down: the job's head port is free again.
    from loongsage.cluster.bootstrap import busy_ports, ray_ports

    assert busy_ports(ray_ports(job)) == []


def test_bootstrap_outside_slurm_says_so():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    result = _bootstrap(env)
    assert result.returncode != 0 and "not inside a Slurm job" in result.stderr

"""`python -m loongsage.cluster.job_shape [overrides...]`: the sbatch options a run's `cluster.*`
asks for (nodes, GPUs, partition, account, time, signal), and whether the current job has them.

The sbatch template uses it so that `sbatch slurm/loongsage.sbatch recipe=X cluster.nodes=4`
gets 4 nodes: a job of another shape resubmits the script with these options and ends.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def compose_cluster(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from loongsage.config import register

    register()
    with initialize_config_dir(config_dir=str(RECIPES), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    return cfg.cluster


def sbatch_options(cluster) -> list[str]:
    options = [f"--nodes={cluster.nodes}", "--ntasks-per-node=1", f"--time={cluster.time_limit_min}",
               f"--signal=USR2@{cluster.signal_delay_s}", "--requeue"]
    if cluster.gpus_per_node:
        options.append(f"--gpus-per-node={cluster.gpus_per_node}")
    if cluster.cpus_per_task:
        options.append(f"--cpus-per-task={cluster.cpus_per_task}")
    if cluster.mem_gb:
        options.append(f"--mem={cluster.mem_gb}G")
    if cluster.partition:
        options.append(f"--partition={cluster.partition}")
    if cluster.account:
        options.append(f"--account={cluster.account}")
    return options


def job_matches(cluster, environ=None) -> bool:
    environ = os.environ if environ is None else environ
    nodes = int(environ.get("SLURM_JOB_NUM_NODES", "0") or 0)
    gpus = int(environ.get("SLURM_GPUS_ON_NODE", "0") or 0)
    return nodes == cluster.nodes and gpus >= cluster.gpus_per_node


def main(argv: list[str]) -> int:
    """Prints the sbatch options; exit 0 when this job already has that shape, 3 when not."""
    cluster = compose_cluster(argv)
    print(" ".join(sbatch_options(cluster)))
    return 0 if job_matches(cluster) else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

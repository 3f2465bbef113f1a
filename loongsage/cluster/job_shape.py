"""`python -m loongsage.cluster.job_shape [overrides...]`: the sbatch options a run's `cluster.*`
asks for (nodes, GPUs, partition, account, time, signal), and whether the current job has them.

The sbatch template uses it so that `sbatch slurm/loongsage.sbatch recipe=X cluster.nodes=4`
gets 4 nodes: a job of another shape resubmits the script with these options and ends.

`python -m loongsage.cluster.job_shape --container [overrides...]`: the words, one a line, that go
in front of `python launch.py` so that the controller runs inside cluster.container (none for
runtime none).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from loongsage.config.container import command_prefix, srun_options
from loongsage.logs import setup_logging

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def compose_cluster(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from loongsage.config import register

    register()
    with initialize_config_dir(config_dir=str(RECIPES), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    return cfg.cluster


def sbatch_options(cluster) -> list[str]:
    # B: the warning goes to the batch shell, which the template replaces with the controller
    # (without it Slurm signals only job steps: here, the Ray workers on other nodes).
    options = [
        f"--nodes={cluster.nodes}",
        "--ntasks-per-node=1",
        f"--time={cluster.time_limit_min}",
        f"--signal=B:USR2@{cluster.signal_delay_s}",
        "--requeue",
    ]
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


def controller_words(cluster, workdir: str, environ) -> list[str]:
    """pyxis: a one-task srun step on this node, the head (the batch script runs on the job's
    first node, which the controller takes for the head); apptainer, enroot: their command."""
    options = srun_options(cluster.container, workdir)
    if not options:
        return command_prefix(cluster.container, workdir)
    node = environ.get("SLURMD_NODENAME")
    return ["srun", "--nodes=1", "--ntasks=1", *(["-w", node] if node else []), *options]


def main(argv: list[str]) -> int:
    """Prints the sbatch options; exit 0 when this job already has that shape, 3 when not.
    With --container first: prints the words that run the controller inside cluster.container.
    With --setup first: prints cluster.setup, the shell lines to run before the controller."""
    if argv[:1] == ["--setup"]:
        print("\n".join(compose_cluster(argv[1:]).setup))
        return 0
    if argv[:1] == ["--container"]:
        cluster = compose_cluster(argv[1:])
        try:
            words = controller_words(cluster, os.getcwd(), os.environ)
        except ValueError as error:
            print(f"loongsage: {error}", file=sys.stderr)  # the command's answer to bad input, like argparse's
            return 2
        print("\n".join(words))
        return 0
    cluster = compose_cluster(argv)
    print(" ".join(sbatch_options(cluster)))
    return 0 if job_matches(cluster) else 3


if __name__ == "__main__":
    setup_logging(results_on_stdout=True)  # the sbatch template reads stdout with $(...)
    sys.exit(main(sys.argv[1:]))

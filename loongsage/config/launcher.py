"""Glue for `hydra/launcher=slurm` (recipes/hydra/launcher/slurm.yaml): a schema with `srun_args`
and the resolver that fills it from `cluster.container`.

submitit's job script runs the task as `srun <srun_args> <python> -u -m submitit.core._submit`.
srun reads options up to the first word that is not one and runs that word as the program, so
srun_args carry pyxis' options, or apptainer's and enroot's command in front of submitit's
python (which must then exist at the same path inside the image: mount the environment, or
submit from the image's own python).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
from omegaconf import OmegaConf

from loongsage.config.container import command_prefix, srun_options

LAUNCHER_SCHEMA_NAME = "loongsage_submitit_slurm"


@dataclass
class SlurmQueueWithSrunArgs(SlurmQueueConf):
    # submitit's SlurmExecutor takes srun_args; hydra-submitit-launcher 1.2 does not declare the
    # key (later versions do) and passes keys of its own on as slurm_<key>. Any, not List[str]: a
    # list-typed node is resolved while Hydra composes its own config, where `cluster` is absent.
    srun_args: Any = None


def container_srun_args(container, workdir: str | None = None) -> list[str] | None:
    """`${container_srun_args:${cluster.container}}`: what runs submitit's task inside the
    container, resolved on the submitting machine (the job starts in its working directory)."""
    workdir = workdir or os.getcwd()
    words = [*srun_options(container, workdir), *command_prefix(container, workdir)]
    return words or None


def register_launcher() -> None:
    ConfigStore.instance().store(
        group="hydra/launcher", name=LAUNCHER_SCHEMA_NAME, node=SlurmQueueWithSrunArgs, provider="loongsage"
    )
    if not OmegaConf.has_resolver("container_srun_args"):
        OmegaConf.register_new_resolver("container_srun_args", container_srun_args)

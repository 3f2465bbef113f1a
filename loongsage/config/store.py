"""Hydra glue: register the schema, turn a composed DictConfig into a checked `Config`."""

from __future__ import annotations

import os
from datetime import datetime

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from loongsage.config.launcher import register_launcher
from loongsage.config.rules import check
from loongsage.config.schema import Config

SCHEMA_NAME = "loongsage_schema"


def register() -> None:
    ConfigStore.instance().store(name=SCHEMA_NAME, node=Config)
    # hydra/launcher=slurm's schema and `${container_srun_args:${cluster.container}}`.
    register_launcher()
    # `${none_if_empty:${cluster.partition}}`: launcher keys that must be absent, not "".
    if not OmegaConf.has_resolver("none_if_empty"):
        OmegaConf.register_new_resolver("none_if_empty", lambda value: None if value in ("", None, 0) else value)
    if not OmegaConf.has_resolver("run_stamp"):
        OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True)


def run_stamp(cluster_name: str, environ=None) -> str:
    """The default run dir's last part: `slurm-<job id>` in a Slurm job run with cluster=slurm (a
    requeued job keeps its id and so its run dir, unlike a clock time), else the start time."""
    job_id = (os.environ if environ is None else environ).get("SLURM_JOB_ID")
    if cluster_name == "slurm" and job_id:
        return f"slurm-{job_id}"
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def to_config(cfg: DictConfig) -> Config:
    """Resolve interpolations, convert to dataclasses and apply the cross-field rules."""
    config = OmegaConf.to_object(cfg)
    check(config)
    return config

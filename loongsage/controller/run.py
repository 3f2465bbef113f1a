"""Bring up the runtime around the controller: run dir, resolved config, Ray."""
from __future__ import annotations

import os
from pathlib import Path

import ray
from omegaconf import OmegaConf

from loongsage.config import Config


def run(cfg: Config) -> Path:
    run_dir = Path(cfg.run.dir).expanduser().resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    print(f"[loongsage] run dir: {run_dir}", flush=True)
    slurm_ray = _init_ray(cfg)
    try:
        from loongsage.controller.loop import Controller

        controller = Controller(cfg, run_dir)
        try:
            controller.run()
        finally:
            controller.shutdown()
    finally:
        ray.shutdown()
        if slurm_ray is not None:
            slurm_ray.stop()
    return run_dir


def _init_ray(cfg: Config):
    """Connect to Ray: on Slurm, first bring it up across the allocation (returned, to stop)."""
    if cfg.cluster.name == "slurm":
        from loongsage.cluster.bootstrap import allocation_from_env, check_allocation, start_ray

        allocation = allocation_from_env()
        check_allocation(allocation, cfg.cluster)
        cluster = start_ray(allocation, cfg.cluster.ray_timeout_s)
        print(f"[loongsage] ray up on {len(allocation.nodes)} node(s) of job {allocation.job_id}: {cluster.address}", flush=True)
        return cluster
    if cfg.run.ray_address:
        ray.init(address=cfg.run.ray_address)
        return None
    # Locally, actors share the machine's cores and take turns; Ray's CPU count is only a
    # scheduling token, so give enough of them for every actor to be placed.
    # address="local": always a Ray of our own, never one that `ray start` left on this machine.
    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, 8), include_dashboard=False, log_to_driver=True)
    return None

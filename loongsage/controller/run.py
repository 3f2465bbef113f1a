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
    _init_ray(cfg)
    from loongsage.controller.loop import Controller

    controller = Controller(cfg, run_dir)
    try:
        controller.run()
    finally:
        controller.shutdown()
        ray.shutdown()
    return run_dir


def _init_ray(cfg: Config) -> None:
    if cfg.run.ray_address:
        ray.init(address=cfg.run.ray_address)
        return
    # Locally, actors share the machine's cores and take turns; Ray's CPU count is only a
    # scheduling token, so give enough of them for every actor to be placed.
    ray.init(num_cpus=max(os.cpu_count() or 1, 8), include_dashboard=False, log_to_driver=True)

"""Bring up the runtime around the controller: run dir, resolved config, Ray."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import ray
from omegaconf import OmegaConf

from loongsage.cluster.preemption import PreemptionNotice
from loongsage.config import Config

# A run that stopped on the warning signal and saved; run it again (same run.dir) to go on.
PREEMPTED_EXIT_CODE = 3


def run(cfg: Config) -> Path | None:
    """The run dir, or None in a Slurm task that is not the job's first."""
    task = int(os.environ.get("SLURM_PROCID", "0") or 0)
    if cfg.cluster.name == "slurm" and task != 0:
        # submitit starts one task per node; the first runs the controller and starts Ray on the
        # other nodes itself.
        print(f"[loongsage] Slurm task {task}: task 0 runs the controller and starts Ray on this node; "
              f"nothing to do here", flush=True)
        return None
    run_dir = Path(cfg.run.dir).expanduser().resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    print(f"[loongsage] run dir: {run_dir}", flush=True)
    notice = PreemptionNotice()
    with notice.ignored_by_children():
        slurm_ray = _init_ray(cfg)
    notice.listen()
    try:
        from loongsage.controller.loop import Controller

        controller = Controller(cfg, run_dir)
        try:
            finished = controller.run(stop=lambda: notice.requested)
        finally:
            controller.shutdown()
    finally:
        ray.shutdown()
        if slurm_ray is not None:
            slurm_ray.stop()
        notice.close()
    if not finished:
        print(f"[loongsage] stopped on {signal.Signals(notice.signum).name}, {notice.seconds_since():.1f} s after it "
              f"(Slurm allows cluster.signal_delay_s={cfg.cluster.signal_delay_s}); the run goes on from {run_dir}",
              flush=True)
        notice.requeue(cfg.cluster.max_requeues)
        raise SystemExit(PREEMPTED_EXIT_CODE)
    return run_dir


def _init_ray(cfg: Config):
    """Connect to Ray: on Slurm, first bring it up across the allocation (returned, to stop)."""
    if cfg.cluster.name == "slurm":
        from loongsage.cluster.bootstrap import allocation_from_env, check_allocation, start_ray

        allocation = allocation_from_env()
        check_allocation(allocation, cfg.cluster)
        cluster = start_ray(allocation, cfg.cluster.ray_timeout_s, container=cfg.cluster.container)
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

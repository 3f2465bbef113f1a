"""Bring up the runtime around the controller: run dir, resolved config, Ray, signals.

Shutdown order, the one place it is written (each step needs the ones after it still up):
1. the controller's loop returns (finished, or stopped at a safe point: see stopping.py);
2. `Controller.shutdown()`: generation stops, rollout threads end, the trainer's actors go;
3. `ray.shutdown()`, then Slurm's Ray workers (when this run started them);
4. whatever the run started and is still alive is killed (Ray's agents can outlive it), and the
   shared-memory segments of processes gone are unlinked (`transfer/shm_owners.py`);
5. the signal handlers are put back, and a stopped run says how to go on and exits.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path

import ray
from omegaconf import OmegaConf

from loongsage.cluster.ray_settings import apply_ray_settings
from loongsage.config import Config
from loongsage.controller.checkpoint import CheckpointWriteError
from loongsage.controller.run_failures import EngineDied, TrainerGaveUp
from loongsage.controller.run_instance import ProcessRecord, RunDirInUse, claim_run_dir
from loongsage.controller.stopping import RunStop
from loongsage.tasks.swe.preflight import PreflightError
from loongsage.transfer.shm_owners import sweep_orphans

# A run that stopped on the warning signal and saved; run it again (same run.dir) to go on.
PREEMPTED_EXIT_CODE = 3
# A run that could not go on (an engine died, the trainer's restarts were spent, a checkpoint could
# not be written): its last checkpoint stands; fix, then run again.
FAILED_EXIT_CODE = 1
# A run refused before its first step (its sandboxes cannot grade, its run dir is in use): nothing trained.
REFUSED_EXIT_CODE = 2

log = logging.getLogger(__name__)


def run(cfg: Config) -> Path | None:
    """The run dir, or None in a Slurm task that is not the job's first."""
    task = int(os.environ.get("SLURM_PROCID", "0") or 0)
    if cfg.cluster.name == "slurm" and task != 0:
        # submitit starts one task per node; the first runs the controller and starts Ray on the
        # other nodes itself.
        log.info("Slurm task %d: task 0 runs the controller and starts Ray on this node; nothing to do here", task)
        return None
    run_dir = Path(cfg.run.dir).expanduser().resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        ended = claim_run_dir(run_dir)
    except RunDirInUse as in_use:
        log.error("%s", in_use)
        raise SystemExit(REFUSED_EXIT_CODE) from None
    if ended:
        log.info(
            "ended %d process(es) that an earlier run of this run dir left running (it was killed before it could): %s",
            len(ended),
            ", ".join(ended),
        )
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    log.info("run dir: %s", run_dir)
    _prepare_models(cfg)
    stop = RunStop()
    record = ProcessRecord(run_dir).start()
    with stop.ignored_by_children():
        slurm_ray = _init_ray(cfg)
    stop.listen()
    failure: EngineDied | TrainerGaveUp | CheckpointWriteError | PreflightError | None = None  # a paragraph, no traceback
    controller = None
    try:
        from loongsage.controller.loop import Controller

        try:
            controller = Controller(cfg, run_dir)
            finished = controller.run(stop=lambda: stop.requested, abandon=lambda: stop.urgent)
        except (EngineDied, TrainerGaveUp, CheckpointWriteError, PreflightError) as error:
            finished, failure = False, error
        finally:
            if controller is not None:
                controller.shutdown()
    finally:
        ray.shutdown()
        if slurm_ray is not None:
            slurm_ray.stop()
        leftovers = stop.kill_leftover_processes()
        if leftovers:
            # Routine (Ray's agents can outlive its shutdown), so not a warning: said, not alarmed.
            log.info("killed %d process(es) still running after Ray's shutdown: %s", len(leftovers), ", ".join(leftovers))
        # The trainer's workers were ray.kill-ed (their resource trackers with them): their
        # shared-memory segments are unlinked here, now that no process of the run is left.
        orphans = sweep_orphans()
        if orphans:
            log.info("unlinked %d shared-memory segment(s) of processes gone: %s", len(orphans), ", ".join(orphans))
        record.stop()
        stop.close()
    if isinstance(failure, PreflightError):
        log.error("%s", failure)
        log.error("nothing was trained; fix that, then run the same command again")
        raise SystemExit(REFUSED_EXIT_CODE)
    if failure is not None:
        log.error("%s", failure)
        log.error("to go on: %s", resume_command(run_dir))
        raise SystemExit(FAILED_EXIT_CODE)
    if not finished:
        _say_how_to_go_on(cfg, stop, run_dir)
    return run_dir


def _prepare_models(cfg: Config) -> None:
    """The student's and the teachers' model directories, each built first where it is missing
    (a registry model converted, a teacher trained by its own run), before this run starts Ray."""
    from loongsage.models import is_mixture_of_experts, resolve_model_path

    student = resolve_model_path(cfg.model.name)
    if cfg.algorithm.routing_replay and not is_mixture_of_experts(student):
        raise ValueError(
            f"algorithm.routing_replay=true replays the experts an MoE policy's engines routed each token to; "
            f"model.name={cfg.model.name!r} has no experts: leave it at false"
        )
    for index, teacher in enumerate(cfg.teachers.pool):
        try:
            resolve_model_path(teacher.model)
        except ValueError as exc:  # its message names model.name, the student's field
            raise ValueError(f"teachers.pool[{index}].model ({teacher.name}): {exc}") from None


def resume_command(run_dir: Path) -> str:
    """This run's own command line, with its run dir, so that it resumes."""
    args = [a for a in sys.argv[1:] if not a.startswith(("run.dir=", "hydra.run.dir="))]
    return shlex.join(["python", os.path.basename(sys.argv[0]) or "launch.py", *args, f"run.dir={run_dir}"])


def _say_how_to_go_on(cfg: Config, stop: RunStop, run_dir: Path) -> None:
    if stop.preemption.requested and stop.signum is None:
        log.info(
            "stopped on %s, %.1f s after it (Slurm allows cluster.signal_delay_s=%s); the run goes on from %s",
            stop.reason,
            stop.seconds_since(),
            cfg.cluster.signal_delay_s,
            run_dir,
        )
        stop.preemption.requeue(cfg.cluster.max_requeues)
        raise SystemExit(PREEMPTED_EXIT_CODE)
    # A stop someone asked for: status, like the preempted one above, not a warning.
    log.info("stopped on %s, %.1f s after it; to go on: %s", stop.reason, stop.seconds_since(), resume_command(run_dir))
    raise SystemExit(128 + stop.signum)


def _init_ray(cfg: Config):
    """Connect to Ray: on Slurm, first bring it up across the allocation (returned, to stop)."""
    apply_ray_settings()
    if cfg.cluster.name == "slurm":
        from loongsage.cluster.bootstrap import allocation_from_env, check_allocation, start_ray

        allocation = allocation_from_env()
        check_allocation(allocation, cfg.cluster)
        cluster = start_ray(allocation, cfg.cluster.ray_timeout_s, container=cfg.cluster.container)
        log.info("ray up on %d node(s) of job %s: %s", len(allocation.nodes), allocation.job_id, cluster.address)
        return cluster
    if cfg.run.ray_address:
        ray.init(address=cfg.run.ray_address)
        return None
    # Locally, actors share the machine's cores and take turns; Ray's CPU count is only a
    # scheduling token, so give enough of them for every actor to be placed.
    # address="local": always a Ray of our own, never one that `ray start` left on this machine.
    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, 8), include_dashboard=False, log_to_driver=True)
    return None

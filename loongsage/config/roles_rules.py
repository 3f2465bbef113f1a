"""The roles block on its own, before any allocation is known: which roles there are, whether
the run partitions devices among them at all, and what is wrong with the counts
(cluster/roles.py partitions an allocation once Ray is up)."""

from __future__ import annotations

from loongsage.config.schema import RolesConfig

ROLES = ("trainer", "rollout", "teacher")
# How messages name colocation: `auto` resolves to it for run.mode=sync.
COLOCATED = "colocated placement (run.placement=colocate, or auto with run.mode=sync)"


def is_partitioned(roles: RolesConfig) -> bool:
    """All zeros, the default: the local machine, every component where it always ran."""
    return any(getattr(roles, role).gpus > 0 for role in ROLES)


def config_problems(roles: RolesConfig, colocate: bool) -> list[str]:
    """What is wrong with the roles on their own, before any allocation is known. `colocate`:
    run.placement resolved to colocate (trainer and rollout share devices)."""
    problems = [f"roles.{role}.gpus={getattr(roles, role).gpus} must be >= 0" for role in ROLES if getattr(roles, role).gpus < 0]
    rollout = roles.rollout
    if rollout.tp < 1:
        problems.append(f"roles.rollout.tp={rollout.tp} must be >= 1")
    elif rollout.gpus % rollout.tp:
        problems.append(
            f"roles.rollout.gpus={rollout.gpus} must be divisible by roles.rollout.tp={rollout.tp} "
            f"(each rollout engine takes tp devices)"
        )
    if rollout.ep < 1 or rollout.tp % rollout.ep:
        problems.append(
            f"roles.rollout.ep={rollout.ep} must divide roles.rollout.tp={rollout.tp} (experts split over an engine's devices)"
        )
    if colocate and roles.trainer.gpus != rollout.gpus:
        problems.append(
            f"{COLOCATED} puts the rollout engines on the trainer's devices: roles.trainer.gpus="
            f"{roles.trainer.gpus} must equal roles.rollout.gpus={rollout.gpus}; set both to the same "
            f"number, or run.placement=disaggregated"
        )
    return problems

"""What `run.placement` means on a machine without accelerators: which CPU cores the trainer
ranks and the engines may use (the config rules check it up front; cluster/cpu_placement.py
pins the processes).

colocate: everyone may use every core; trainer and engines take turns (run.mode=sync), so
each gets the whole machine while it works. disaggregated: the cores are split, trainer ranks
first, so rollout and training can run at once without their thread pools fighting over the
same cores (OpenMP threads that share a core slow each other down several times over).
"""

from __future__ import annotations

import os

PLACEMENTS = ("auto", "colocate", "disaggregated")


def resolve_placement(placement: str, mode: str) -> str:
    """`auto`: colocate for the synchronous loop, disaggregated when rollout runs beside training."""
    if placement != "auto":
        return placement
    return "colocate" if mode == "sync" else "disaggregated"


def split_cores(
    placement: str,
    trainer_ranks: int,
    engines: int,
    cores: list[int] | None = None,
    ranks_named: tuple[str, str] | None = None,
) -> tuple[list[list[int]] | None, list[list[int]] | None]:
    """(cores of each trainer rank, cores of each engine); None: no pinning (colocate).
    `trainer_ranks`: `loongsage.config.parallel.train_ranks`; `ranks_named`: its `train_ranks_named`
    (the fields and values the message shows; default: trainer.world_size)."""
    if placement == "colocate":
        return None, None
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    actors = trainer_ranks + engines
    if len(cores) < actors:
        fields, values = ranks_named or ("trainer.world_size", str(trainer_ranks))
        raise ValueError(
            f"run.placement=disaggregated gives each trainer rank and each engine cores of its own: "
            f"{fields} + rollout.num_engines = {values} + {engines} = {actors} > {len(cores)} cores "
            f"on this machine; use fewer, or run.placement=colocate with run.mode=sync"
        )
    # The trainer's share follows its share of the actors, at least one core each side.
    trainer_cores = min(max(round(len(cores) * trainer_ranks / actors), trainer_ranks), len(cores) - engines)
    return _chunks(cores[:trainer_cores], trainer_ranks), _chunks(cores[trainer_cores:], engines)


def _chunks(cores: list[int], parts: int) -> list[list[int]]:
    size, extra = divmod(len(cores), parts)
    chunks, start = [], 0
    for part in range(parts):
        end = start + size + (1 if part < extra else 0)
        chunks.append(cores[start:end])
        start = end
    return chunks

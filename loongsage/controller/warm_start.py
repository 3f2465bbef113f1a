"""Warm start: supervised epochs on demonstration samples before RL.

GRPO learns only from groups whose rewards differ; a small model that never produces a valid
tool call gives it nothing to compare. A few hundred imitated episodes (SWE-Gym and
SWE-smith fine-tune on agent trajectories the same way) give RL a nonzero solve rate to start
from. The learning rate and epochs are the warm start's own; the RL schedule does not move.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable

from loongsage.config.schema import WarmStartConfig
from loongsage.sample import Sample

SupervisedStep = Callable[[list[Sample], float], dict[str, float]]


def warm_start(
    samples: list[Sample], cfg: WarmStartConfig, step_fn: SupervisedStep, seed: int, log: Callable[[int, dict[str, float]], None]
) -> dict[str, float]:
    """Runs `cfg.epochs` shuffled passes in batches of `cfg.batch_size`; `log(update, metrics)`
    gets each update's metrics. Returns the last update's."""
    if not samples:
        raise ValueError(f"warm_start.source={cfg.source!r} gave no demonstration samples")
    order = list(samples)
    rng = random.Random(seed)
    updates = cfg.epochs * -(-len(order) // cfg.batch_size)
    started, update, metrics = time.perf_counter(), 0, {}
    for epoch in range(cfg.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), cfg.batch_size):
            update += 1
            metrics = step_fn(order[start : start + cfg.batch_size], cfg.lr)
            log(update, metrics)
            elapsed = time.perf_counter() - started
            # Not a log record: the warm start's progress display, like the RL steps' (monitor.py).
            print(
                f"warm start {update}/{updates} (epoch {epoch + 1}/{cfg.epochs}) | nll {metrics['train/loss']:.4f}"
                f" | ETA {elapsed / update * (updates - update):.0f}s",
                file=sys.stderr,
                flush=True,
            )
    return metrics

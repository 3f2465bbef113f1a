"""The learning-rate schedule both backends follow: linear warmup to a constant rate."""

from __future__ import annotations


class Warmup:
    """Learning-rate factor per trainer step: (step + 1) / warmup_steps, then 1.

    A class, not a lambda, so a torch scheduler holding it can be saved and restored.
    """

    def __init__(self, warmup_steps: int):
        self.warmup_steps = warmup_steps

    def __call__(self, step: int) -> float:
        if step >= self.warmup_steps:
            return 1.0
        return (step + 1) / self.warmup_steps

"""The reference band and the comparison against it (pure functions).

A reference is one or more recorded runs of a recipe (different seeds). Per-step rewards
are noisy (a mean over a few dozen binary rewards), so curves are compared as trailing
moving averages. The band's center is the mean of the recorded runs' moving averages; its
half-width is the sampling error of such an average (`z` standard errors of the mean of
`samples_per_step * window` Bernoulli-like rewards), plus the widest distance of any
recorded run from the center (seed-to-seed spread), plus a small floor.
"""

from __future__ import annotations

import math


def moving_average(values: list[float], window: int) -> list[float]:
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def make_band(
    runs: list[list[float]], samples_per_step: int, window: int, z: float, floor: float
) -> tuple[list[float], list[float], list[float]]:
    """`runs`: per-step rewards of each recorded run, all over the same steps."""
    averages = [moving_average(rewards, window) for rewards in runs]
    center = [sum(column) / len(column) for column in zip(*averages)]
    low, high = [], []
    for i, mean in enumerate(center):
        n = samples_per_step * min(i + 1, window)
        p = min(max(mean, 0.0), 1.0)
        spread = max(abs(average[i] - mean) for average in averages)
        half = z * math.sqrt(max(p * (1 - p), 0.0625 * 0.25) / n) + spread + floor
        low.append(mean - half)
        high.append(mean + half)
    return center, low, high


def compare(run_rewards: dict[int, float], reference: dict) -> dict:
    """How much of the run sits inside the band; steps the run lacks count as outside."""
    steps = reference["steps"]
    present = [s for s in steps if s in run_rewards]
    missing = [s for s in steps if s not in run_rewards]
    smoothed = dict(zip(present, moving_average([run_rewards[s] for s in present], reference["window"])))
    outside = [
        s for s, low, high in zip(steps, reference["low"], reference["high"]) if s in smoothed and not low <= smoothed[s] <= high
    ]
    inside_frac = (len(present) - len(outside)) / len(steps)
    return {
        "steps": len(steps),
        "missing_steps": missing,
        "outside_steps": outside,
        "inside_frac": inside_frac,
        "passed": not missing and inside_frac >= reference["min_inside_frac"],
        "smoothed": smoothed,
    }

"""The reference band and the verdict against it (pure functions).

A reference is several recorded runs of a recipe (different seeds). A run is judged on two
smoothed views of its reward curve:
- the curve: trailing moving averages over `window` steps, inside the band at
  `min_inside_frac` of the steps;
- the level: its mean reward over all steps, inside the level band. Per-step rewards are means of
  a few dozen 0/1 rewards, so a recipe whose solve rate is 0.1 at 16 samples per step has a curve
  band that reaches 0 and passes a run that never solves anything; over all steps' samples the
  mean is known well enough to tell 0.1 from 0.

Each band is center ± z · sqrt(sampling variance + seed variance) · sqrt(1 + 1/runs):
- center: the mean of the recorded runs;
- sampling variance: that of a mean of n Bernoulli rewards at the center's rate (n: the samples
  the view averages);
- seed variance: how much more the recorded runs differ from each other than sampling explains.
  Three seeds give two degrees of freedom at one step, so it is pooled over the steps: one
  number per reference;
- sqrt(1 + 1/runs): a new run differs from the center by its own spread and the center's error.
"""

from __future__ import annotations

import math

# A rate of 0 or 1 has no Bernoulli variance; the recorded runs saw too few samples to tell it
# from one of 1.6%, whose variance this is.
MIN_BERNOULLI_VARIANCE = 0.0625 * 0.25


def moving_average(values: list[float], window: int) -> list[float]:
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def sampling_variance(rate: float, samples: int) -> float:
    p = min(max(rate, 0.0), 1.0)
    return max(p * (1 - p), MIN_BERNOULLI_VARIANCE) / samples


def seed_variance(runs: list[list[float]], samples_per_step: int, window: int) -> float:
    """Variance between the runs' moving averages beyond what sampling explains, pooled over
    steps; 0 with one run."""
    return _seed_variance([moving_average(rewards, window) for rewards in runs], samples_per_step, window)


def _seed_variance(averages: list[list[float]], samples_per_step: int, window: int) -> float:
    if len(averages) < 2:
        return 0.0
    excess = []
    for i, column in enumerate(zip(*averages)):
        mean = sum(column) / len(column)
        between = sum((value - mean) ** 2 for value in column) / (len(column) - 1)
        excess.append(between - sampling_variance(mean, samples_per_step * min(i + 1, window)))
    return max(sum(excess) / len(excess), 0.0)


def make_band(runs: list[list[float]], samples_per_step: int, window: int, z: float) -> dict:
    """`runs`: per-step rewards of each recorded run, all over the same steps."""
    averages = [moving_average(rewards, window) for rewards in runs]
    extra = _seed_variance(averages, samples_per_step, window)
    widen = z * math.sqrt(1 + 1 / len(runs))
    center = [sum(column) / len(column) for column in zip(*averages)]
    half = [
        widen * math.sqrt(sampling_variance(mean, samples_per_step * min(i + 1, window)) + extra) for i, mean in enumerate(center)
    ]
    level = sum(sum(rewards) / len(rewards) for rewards in runs) / len(runs)
    level_half = widen * math.sqrt(sampling_variance(level, samples_per_step * len(center)) + extra)
    return {
        "center": center,
        "low": [mean - h for mean, h in zip(center, half)],
        "high": [mean + h for mean, h in zip(center, half)],
        "seed_variance": extra,
        "level": {"center": level, "low": level - level_half, "high": level + level_half},
    }


def compare(run_rewards: dict[int, float], reference: dict) -> dict:
    """How much of the run's curve sits inside the band, and whether its level does; steps the
    run lacks count as outside."""
    steps = reference["steps"]
    present = [s for s in steps if s in run_rewards]
    missing = [s for s in steps if s not in run_rewards]
    smoothed = dict(zip(present, moving_average([run_rewards[s] for s in present], reference["window"])))
    outside = [
        s for s, low, high in zip(steps, reference["low"], reference["high"]) if s in smoothed and not low <= smoothed[s] <= high
    ]
    inside_frac = (len(present) - len(outside)) / len(steps)
    level = sum(run_rewards[s] for s in present) / len(present) if present else float("nan")
    level_inside = reference["level"]["low"] <= level <= reference["level"]["high"]
    return {
        "steps": len(steps),
        "missing_steps": missing,
        "outside_steps": outside,
        "inside_frac": inside_frac,
        "level": level,
        "level_inside": level_inside,
        "passed": not missing and inside_frac >= reference["min_inside_frac"] and level_inside,
        "smoothed": smoothed,
    }


def judge_checks(reference: dict) -> list[tuple[dict, dict]]:
    """Each run kept with the reference as a check, with its verdict against the band."""
    return [(check, compare(dict(zip(check["steps"], check["reward_mean"])), reference)) for check in reference.get("checks", [])]

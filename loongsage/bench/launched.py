"""A benchmark's run: `launch.py` in a fresh process with its own Ray (no run inherits a warm
model or engine from another), and what it logged, read back from its TensorBoard files."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def math_run(model: str, run_dir: Path, steps: int, seed: int) -> list[str]:
    """The overrides every benchmark run of math_grpo starts from: no checkpoint (nothing resumes
    a benchmark run), no progress line (the benchmark prints its own)."""
    return [
        "recipe=math_grpo",
        f"model={model}",
        f"run.dir={run_dir}",
        f"run.steps={steps}",
        f"run.seed={seed}",
        f"run.save_every={steps + 1}",
        "logging.progress=false",
    ]


def launch_run(overrides: list[str], what: str) -> None:
    """Run launch.py with `overrides`; a failed run ends the benchmark, its stderr's tail shown."""
    result = subprocess.run([sys.executable, "launch.py", *overrides], cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"the {what} run failed:\n{result.stderr[-3000:]}")


def logged(run_dir: Path, tag: str) -> dict[int, float]:
    """Step -> value of a scalar the run logged; {} when it logged none (a metric of another mode)."""
    from validate.scalars import read_scalar

    # A resumed or restarted run's purge of the steps it redid is expected here, not news.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    try:
        return read_scalar(run_dir, tag)
    except KeyError:
        return {}

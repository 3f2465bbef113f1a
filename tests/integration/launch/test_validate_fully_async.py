"""The fully asynchronous math_grpo run (real SmolLM2-135M) must learn like the synchronous one:
its first 12 steps inside the first 12 steps of the synchronous reference band, checked by
`python -m validate`, against the band the three recorded seeds' first 12 steps give. The band is
one of trailing moving averages, so a run's first steps compare exactly as they would in a whole
run, and by step 12 the band's low edge (0.37) is well above where the untrained model starts
(0.14), as is the low edge of its 12-step mean (0.19): half the recipe's 24 steps still shows it
learning, in half the time (~4 minutes on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.launch.launch_support import launch, scalars
from tests.paths import REPO_ROOT
from validate.band import make_band

FULLY_ASYNC = ["recipe=math_grpo", "run.mode=fully_async", "pipeline.max_staleness=1", "algorithm.is_level=token"]
STEPS = 12


def first_steps_of(reference: dict, steps: int) -> dict:
    """The band the recorded runs' first `steps` steps give."""
    runs = [run[:steps] for run in reference["reward_mean"]]
    band = make_band(runs, reference["samples_per_step"], reference["window"], reference["z"])
    return {**reference, **band, "steps": reference["steps"][:steps], "reward_mean": runs, "checks": []}


@pytest.mark.slow
def test_fully_async_math_grpo_sits_inside_the_synchronous_band(tmp_path):
    run_dir = tmp_path / "run"
    result = launch(*FULLY_ASYNC, f"run.steps={STEPS}", f"run.dir={run_dir}", timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]
    logged = scalars(run_dir)
    staleness = logged["async/staleness_max"]
    assert max(staleness.values()) <= 1 and sum(staleness.values()) > 0, "the run must actually train off-policy data"
    reference = json.loads((REPO_ROOT / "validate" / "references" / "math_grpo.json").read_text())
    first_steps = tmp_path / "math_grpo_first_steps.json"
    first_steps.write_text(json.dumps(first_steps_of(reference, STEPS)))
    check = subprocess.run(
        [sys.executable, "-m", "validate", str(run_dir), "--reference", str(first_steps)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"of {STEPS} steps inside" in check.stdout
    assert (run_dir / "validate.png").stat().st_size > 0

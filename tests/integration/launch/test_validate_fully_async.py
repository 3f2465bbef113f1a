"""The fully asynchronous math_grpo run (real SmolLM2-135M, 24 steps, about 10 minutes on 2
cores) must learn like the synchronous one: its reward curve inside the synchronous reference
band, checked by `python -m validate`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.launch.test_launch import launch, scalars
from tests.paths import REPO_ROOT

FULLY_ASYNC = ["recipe=math_grpo", "run.mode=fully_async", "pipeline.max_staleness=1", "algorithm.is_level=token"]


@pytest.mark.slow
def test_fully_async_math_grpo_sits_inside_the_synchronous_band(tmp_path):
    result = launch(*FULLY_ASYNC, f"run.dir={tmp_path}", timeout=2400)
    assert result.returncode == 0, result.stderr[-4000:]
    logged = scalars(tmp_path)
    staleness = logged["async/staleness_max"]
    assert max(staleness.values()) <= 1 and sum(staleness.values()) > 0, "the run must actually train off-policy data"
    check = subprocess.run([sys.executable, "-m", "validate", str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (tmp_path / "validate.png").stat().st_size > 0

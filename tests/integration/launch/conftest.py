"""The uninterrupted smoke run, shared: test_launch reads what it wrote, resumes against it,
and test_launch_async checks that max_staleness=0 reproduces it."""

from __future__ import annotations

import pytest

from tests.integration.launch.launch_support import SMOKE, launch


@pytest.fixture(scope="session")
def three_step_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    result = launch(*SMOKE, "run.steps=3", f"run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-4000:]
    return run_dir, result

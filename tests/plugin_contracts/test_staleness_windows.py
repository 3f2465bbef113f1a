"""Every staleness window is built as `window(batch_size, max_staleness)` (build_window) and
driven by the pipeline and the simulator through may_start(steps, accepted, running, ready)
and select(ready, version)."""

from __future__ import annotations

import pytest

from loongsage.algorithms.staleness_windows import WINDOWS
from tests.plugin_contracts.call_shapes import ANY, accepts, method_problems

PIPELINE_CALLS = {"may_start": (ANY, ANY, ANY, ANY), "select": (ANY, ANY)}


@pytest.mark.parametrize("name", sorted(WINDOWS))
def test_window_has_the_shape_the_pipeline_calls(name):
    window = WINDOWS[name]
    assert accepts(window, ANY, ANY), f"{name}: not constructible as window(batch_size, max_staleness)"
    assert method_problems(window, PIPELINE_CALLS) == []


@pytest.mark.parametrize("name", sorted(WINDOWS))
def test_window_lets_an_empty_pipeline_start_and_selects_nothing_from_nothing(name):
    # A window that refused the first group would stall the run before its first step.
    window = WINDOWS[name](4, 1)
    assert window.may_start(0, 0, 0, 0) is True
    assert window.select([], 0) == ([], [])

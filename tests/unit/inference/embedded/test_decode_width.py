"""How wide a decode step runs: padded to the widths MKL's skinny matmuls are fast at, never
wider than the cache's slots, and one row on its own fast path."""

from __future__ import annotations

import pytest

from loongsage.inference.embedded.scheduler import cache_slots, decode_width


@pytest.mark.parametrize(
    ("rows", "slots", "width"),
    [(0, 32, 0), (1, 32, 1), (2, 32, 16), (9, 32, 16), (16, 32, 16), (17, 32, 24), (25, 32, 32), (3, 4, 4), (12, 8, 8)],
)
def test_rows_run_at_the_fast_width_that_holds_them_within_the_slots(rows, slots, width):
    assert decode_width(rows, slots) == width


@pytest.mark.parametrize(("max_running", "slots"), [(1, 1), (2, 2), (3, 4), (5, 8), (32, 32), (33, 40)])
def test_the_cache_has_a_slot_per_sequence_rounded_up_to_a_width(max_running, slots):
    assert cache_slots(max_running) == slots

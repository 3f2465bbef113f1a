"""Scoring that a faulty reward function cannot crash: one bad response should cost one
sample's reward and bump an error metric, not stop the run."""
from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import Any

# Enough to recognise the failure in a log or metric label without flooding either.
_MAX_ERROR_CHARS = 500


def score_safely(reward_fn: Callable[[str, str], Any], response: str, label: str) -> tuple[float, str | None]:
    """(score, None) for a finite real-number reward, else (0.0, error text)."""
    try:
        raw = reward_fn(response, label)
        if not isinstance(raw, Real):
            return 0.0, f"reward function returned {type(raw).__name__}, not a number"
        score = float(raw)
    except Exception as exc:  # noqa: BLE001 - any failure of user code is scored, not raised
        return 0.0, _truncate(f"{type(exc).__name__}: {exc}")
    if not math.isfinite(score):
        return 0.0, f"reward function returned non-finite {score}"
    return score, None


def _truncate(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + "..."

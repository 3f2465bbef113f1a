"""Scoring that a faulty reward cannot crash: one bad response should cost one sample's
reward and bump an error metric, not stop the run."""

from __future__ import annotations

import math
import threading
from numbers import Real
from typing import Any, NamedTuple

from loongsage.tasks.registry import Reward

# Enough to recognise the failure in a log or metric label without flooding either.
_MAX_ERROR_CHARS = 500


def score_safely(reward: Reward, item: dict, result: Any) -> tuple[float, dict, str | None]:
    """(score, info, None) for a finite real-number score, else (0.0, {}, error text)."""
    try:
        returned = reward(item, result)
        if not (isinstance(returned, tuple) and len(returned) == 2 and isinstance(returned[1], dict)):
            return 0.0, {}, f"reward returned {type(returned).__name__}, not a (score, info dict) pair"
        raw, info = returned
        if not isinstance(raw, Real):
            return 0.0, {}, f"reward returned a score of type {type(raw).__name__}, not a number"
        score = float(raw)
    except Exception as exc:  # noqa: BLE001 - any failure of user code is scored, not raised
        return 0.0, {}, _truncate(f"{type(exc).__name__}: {exc}")
    if not math.isfinite(score):
        return 0.0, {}, f"reward returned non-finite score {score}"
    return score, info, None


class Scored(NamedTuple):
    score: float
    info: dict
    error: str | None
    timed_out: bool  # the reward was given up on; its thread may still be running


def score_within(reward: Reward, item: dict, result: Any, timeout_s: float) -> Scored:
    """`score_safely` on a thread of its own, given up after `timeout_s`: a reward that hangs
    scores 0 with the reason instead of holding its group forever. Python cannot stop a thread, so
    a hung one is left behind (daemon): a reward worker that reports one is replaced by its pool."""
    outcome: list[tuple[float, dict, str | None]] = []
    thread = threading.Thread(target=lambda: outcome.append(score_safely(reward, item, result)), name="reward-call", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        return Scored(0.0, {}, f"reward timed out: no score within data.reward_timeout_s={timeout_s:g} s", True)
    return Scored(*outcome[0], False)


def _truncate(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + "..."

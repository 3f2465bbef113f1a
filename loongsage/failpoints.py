"""Deaths at a chosen point of a real process, for the fault tests and `bench chaos`: a process
that reaches a point the environment names kills itself with SIGKILL, as the OOM killer would,
the first time only. An outside kill by pid cannot land inside a call that lasts milliseconds
(a weight push of the tiny model); this can.

    LOONGSAGE_KILL_AT='{"marks": DIR, "kills": [{"point": "train_step", "step": 2, "rank": 1}]}'

`point`: "train_step" (a rank with its shard, before its first update: its peers wait in the
gradient collective) or "push_weights" (after the first tensor gathered for the engines).
`step`: the trainer step in progress, from 1 (a push belongs to the step it follows). Each kill
leaves a file in DIR as it fires; a kill whose file is there does not fire again, so the rank that
replaces the dead one goes past the point. Without the variable nothing here does anything."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterable, Iterator
from pathlib import Path

KILL_AT_ENV = "LOONGSAGE_KILL_AT"
POINTS = ("train_step", "push_weights")


def die_here_if_asked(point: str, step: int, rank: int) -> None:
    text = os.environ.get(KILL_AT_ENV)
    if not text:
        return
    marks, kills = _read_plan(text)
    for kill in kills:
        if (kill["point"], kill["step"], kill["rank"]) == (point, step, rank) and _first_time(marks, kill):
            os.kill(os.getpid(), signal.SIGKILL)


def dying_after_first(named: Iterable, point: str, step: int, rank: int) -> Iterator:
    """`named`, with `die_here_if_asked` after its first item."""
    for index, item in enumerate(named):
        yield item
        if index == 0:
            die_here_if_asked(point, step, rank)


def _read_plan(text: str) -> tuple[Path, list[dict]]:
    """The marks folder and the kills; a malformed plan, or a point no code reaches (a typo that
    would fire nothing), is refused by name instead of the fault silently not happening."""
    try:
        plan = json.loads(text)
        kills = plan["kills"]
        for kill in kills:
            if kill["point"] not in POINTS:
                raise ValueError(f"point {kill['point']!r} is none of {', '.join(POINTS)}")
            if not (isinstance(kill["step"], int) and isinstance(kill["rank"], int)):
                raise ValueError(f"step and rank must be integers: {kill}")
        return Path(plan["marks"]), kills
    except (ValueError, KeyError, TypeError) as err:
        example = '{"marks": DIR, "kills": [{"point": "train_step", "step": 2, "rank": 1}]}'
        raise ValueError(f"{KILL_AT_ENV}={text!r}: {type(err).__name__}: {err}; expected {example}") from None


def _first_time(marks: Path, kill: dict) -> bool:
    marks.mkdir(parents=True, exist_ok=True)
    try:  # O_EXCL: only one process ever fires a kill
        os.close(os.open(marks / f"{kill['point']}.step{kill['step']}.rank{kill['rank']}", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True

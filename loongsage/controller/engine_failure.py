"""A dead inference engine, said in one paragraph instead of every rollout thread's traceback.

When an engine is dead for good (inference/engine_status.py says which) the run cannot go on:
the controller stops, names the engine and the step, and points at the checkpoint to resume
from."""

from __future__ import annotations

from pathlib import Path


class EngineDied(RuntimeError):
    def __init__(self, engines: list[str], step: int, checkpoint: Path | None, cause: BaseException | None = None):
        where = f"Last checkpoint: {checkpoint}" if checkpoint else "No checkpoint yet (the run starts over)"
        seen = f" (the first error it caused: {type(cause).__name__}: {_first_line(cause)})" if cause else ""
        super().__init__(
            f"inference engine {', '.join(engines)} died during step {step}{seen}. "
            f"The run stopped. {where}. "
            f"Its log says why it died (out of memory is the usual cause: lower rollout.max_running "
            f"or rollout.max_context)."
        )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"

"""Failures a run cannot go on from, each said in one paragraph instead of every thread's
traceback: an inference engine dead for good (inference/engine_status.py says which), a trainer
whose ranks died more often than run.max_restarts allows, or failed. The controller stops, names
what failed and the step, and points at the checkpoint to resume from."""

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


class TrainerGaveUp(RuntimeError):
    def __init__(self, error: BaseException, restarts: int, budget: int, checkpoint: Path | None):
        where = f"Last checkpoint: {checkpoint}" if checkpoint else "No checkpoint yet (the run starts over)"
        if getattr(error, "died", False):
            why = f"after {restarts} restart(s) of the trainer group (run.max_restarts={budget})"
        else:
            why = "(a rank that raised would raise again: the trainer is not restarted for it)"
        super().__init__(f"{error} {why}. The run stopped. {where}.")

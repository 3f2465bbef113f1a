from __future__ import annotations


class TrainerError(RuntimeError):
    """A train worker died or failed; the message names the rank, the call and the step."""

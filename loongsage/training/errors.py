from __future__ import annotations


class TrainerError(RuntimeError):
    """A train worker died or failed; the message names the rank, the call and the step.
    `died`: a rank's process is gone (killed, out of memory), which a fresh group may survive; a
    rank that raised would raise again on the same input."""

    def __init__(self, message: str, died: bool = False):
        super().__init__(message)
        self.died = died

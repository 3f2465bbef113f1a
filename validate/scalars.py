"""Read scalar curves back out of a run's TensorBoard files."""

from __future__ import annotations

from pathlib import Path


def read_scalar(run_dir: Path, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_dir = run_dir / "tensorboard"
    if not tb_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} has no tensorboard/ directory; is it a LoongSage run dir?")
    accumulator = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    if tag not in accumulator.Tags()["scalars"]:
        raise KeyError(f"{tb_dir} has no scalar {tag!r}")
    # Later events win: a resumed run rewrites the steps after its checkpoint.
    return {event.step: event.value for event in accumulator.Scalars(tag)}

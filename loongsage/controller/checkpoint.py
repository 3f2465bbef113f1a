"""Run checkpoints: the trainer's state plus the controller's (step, data position, weight
version). A checkpoint is written whole into a staging directory and then renamed into place,
so a `step_*` directory with a `controller.json` is complete whatever moment the writer died at;
the `latest` pointer moves after the rename, and older checkpoints are deleted only after that
(run.keep_checkpoints, run.keep_every)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from loongsage.training.errors import TrainerError

log = logging.getLogger(__name__)

STEP_PREFIX = "step_"
STAGING_PREFIX = ".staging_"


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk, most often); the previous one stands."""


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint `latest` names; the newest complete one where the pointer names none (a
    writer killed between the rename and the pointer's move, or while replacing a checkpoint of
    the same step)."""
    root = checkpoint_root(run_dir)
    pointer = root / "latest"
    if pointer.exists():
        named = root / pointer.read_text().strip()
        if _is_complete(named):
            return named
    complete = complete_checkpoints(run_dir)
    if pointer.exists():
        found = f"falling back to {complete[-1].name}" if complete else "and there is no other"
        log.warning("%s names %s, which is not a complete checkpoint; %s", pointer, pointer.read_text().strip(), found)
    return complete[-1] if complete else None


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Every complete checkpoint, oldest first."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    found = [path for path in root.glob(f"{STEP_PREFIX}*") if _is_complete(path)]
    return sorted(found, key=_step_of)


def save_checkpoint(
    run_dir: Path, step: int, controller_state: dict, save_trainer, keep_last: int = 0, keep_every: int = 0
) -> Path:
    """`save_trainer(dir)` writes the trainer's part. CheckpointWriteError, the staging directory
    removed and every earlier checkpoint untouched, when the write fails."""
    root = checkpoint_root(run_dir)
    final = root / f"{STEP_PREFIX}{step:06d}"
    staging = root / f"{STAGING_PREFIX}{final.name}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        save_trainer(str(staging / "trainer"))
        (staging / "controller.json").write_text(json.dumps(controller_state, indent=2))
    except Exception as error:  # noqa: BLE001 - any failure of the write is said the same way, then raised
        if isinstance(error, TrainerError) and error.died:  # not the disk's doing: the trainer restarts
            shutil.rmtree(staging, ignore_errors=True)
            raise
        raise CheckpointWriteError(_write_failure(run_dir, staging, step, error)) from error
    _move_into_place(staging, final)
    write_atomically(root / "latest", final.name)
    for old in checkpoints_to_delete(complete_checkpoints(run_dir), keep_last, keep_every):
        shutil.rmtree(old, ignore_errors=True)
    return final


def checkpoints_to_delete(complete: list[Path], keep_last: int, keep_every: int) -> list[Path]:
    """Of the complete checkpoints (oldest first), those past the newest `keep_last` whose step
    is not a multiple of `keep_every`; keep_last 0 keeps all."""
    if keep_last <= 0:
        return []
    older = complete[:-keep_last]
    return [path for path in older if not (keep_every > 0 and _step_of(path) % keep_every == 0)]


def clear_unfinished_saves(run_dir: Path) -> list[str]:
    """Remove the staging directories of saves a killed run left; their names, to be said."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    unfinished = sorted(root.glob(f"{STAGING_PREFIX}*"))
    for path in unfinished:
        shutil.rmtree(path, ignore_errors=True)
    return [path.name for path in unfinished]


def load_controller_state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "controller.json").read_text())


def _move_into_place(staging: Path, final: Path) -> None:
    """Rename the staging directory to `final`; a checkpoint of the same step already there (a
    run that saved step N, resumed from it and saved it again) is moved aside first and deleted
    after, so some complete copy exists at every moment."""
    replaced = final.with_name(f"{STAGING_PREFIX}replaced_{final.name}")
    if final.exists():
        shutil.rmtree(replaced, ignore_errors=True)
        final.rename(replaced)
    staging.rename(final)
    shutil.rmtree(replaced, ignore_errors=True)


def _write_failure(run_dir: Path, staging: Path, step: int, error: Exception) -> str:
    written = _tree_bytes(staging)
    shutil.rmtree(staging, ignore_errors=True)
    previous = complete_checkpoints(run_dir)
    free = shutil.disk_usage(checkpoint_root(run_dir)).free
    if previous:
        needed = f"about {_gib(_tree_bytes(previous[-1]))} (the size of {previous[-1].name})"
    else:  # the trainer may write through a scratch directory of its own, which it removed
        needed = f"more than {_gib(max(written, free))} (no earlier checkpoint to measure)"
    kept = f"the previous checkpoint, {previous[-1]}, is intact" if previous else "there is no earlier checkpoint"
    return (
        f"the checkpoint of step {step} could not be written to {staging} ({type(error).__name__}: {error}); "
        f"it needs {needed} and {checkpoint_root(run_dir)} has {_gib(free)} free; {kept}. Free space there, "
        f"or keep fewer checkpoints (run.keep_checkpoints)"
    )


def _tree_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def _gib(size: int) -> str:
    return f"{size} bytes ({size / 2**30:.2f} GiB)"


def _is_complete(path: Path) -> bool:
    step = path.name[len(STEP_PREFIX) :]
    return path.name.startswith(STEP_PREFIX) and step.isdigit() and (path / "controller.json").is_file()


def _step_of(path: Path) -> int:
    return int(path.name[len(STEP_PREFIX) :])


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old text or the new, never a part (a rename within one directory)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

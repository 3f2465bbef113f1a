"""Run checkpoints: the trainer's state plus the controller's (step, data position, weight
version), published atomically through a `latest` pointer."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = checkpoint_root(run_dir) / "latest"
    if not pointer.exists():
        return None
    path = checkpoint_root(run_dir) / pointer.read_text().strip()
    if not (path / "controller.json").exists():
        raise RuntimeError(f"{pointer} names {path.name}, which is not a complete checkpoint")
    return path


def save_checkpoint(run_dir: Path, step: int, controller_state: dict, save_trainer) -> Path:
    """`save_trainer(dir)` writes the trainer's part; the pointer moves only after both parts exist."""
    root = checkpoint_root(run_dir)
    final = root / f"step_{step:06d}"
    staging = root / f".staging_step_{step:06d}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_trainer(str(staging / "trainer"))
    (staging / "controller.json").write_text(json.dumps(controller_state, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    _write_atomically(root / "latest", final.name)
    return final


def load_controller_state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "controller.json").read_text())


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

"""Run checkpoints on real files: retention, a full disk (a size-limited tmpfs) and a writer
killed at random moments all leave a complete, loadable checkpoint."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from loongsage.controller import checkpoint as checkpoint_module
from loongsage.controller.checkpoint import (
    CheckpointWriteError,
    checkpoints_to_delete,
    clear_unfinished_saves,
    complete_checkpoints,
    latest_checkpoint,
    load_controller_state,
    save_checkpoint,
)
from tests.small_disk import mount_small_disk, unmount_small_disk

MIB = 2**20


def tensor_writer(step: int, mib: float = 0.25):
    """A trainer part of `mib` MiB whose every value is the step: a load shows which save it is."""

    def save_trainer(path: str) -> None:
        os.makedirs(path)
        torch.save(torch.full((int(mib * MIB) // 4,), float(step)), os.path.join(path, "weights.pt"))

    return save_trainer


def save(run_dir: Path, step: int, **retention) -> Path:
    return save_checkpoint(run_dir, step, {"step": step}, tensor_writer(step), **retention)


def steps_of(paths: list[Path]) -> list[int]:
    return [load_controller_state(path)["step"] for path in paths]


def assert_loads_as(checkpoint: Path, step: int) -> None:
    assert load_controller_state(checkpoint)["step"] == step
    weights = torch.load(checkpoint / "trainer" / "weights.pt")
    assert torch.equal(weights, torch.full_like(weights, float(step)))


def test_retention_keeps_the_newest_and_every_kth(tmp_path):
    for step in range(1, 10):
        save(tmp_path, step, keep_last=2, keep_every=4)
    assert steps_of(complete_checkpoints(tmp_path)) == [4, 8, 9]
    assert latest_checkpoint(tmp_path).name == "step_000009"


def test_keep_zero_keeps_everything(tmp_path):
    for step in range(1, 5):
        save(tmp_path, step)
    assert steps_of(complete_checkpoints(tmp_path)) == [1, 2, 3, 4]


def test_checkpoints_to_delete_never_touches_the_newest():
    paths = [Path(f"step_{step:06d}") for step in (2, 4, 6, 8, 10)]
    assert checkpoints_to_delete(paths, keep_last=1, keep_every=0) == paths[:-1]
    assert checkpoints_to_delete(paths, keep_last=2, keep_every=4) == [paths[0], paths[2]]
    assert checkpoints_to_delete(paths, keep_last=5, keep_every=0) == []
    assert checkpoints_to_delete(paths, keep_last=0, keep_every=0) == []


def test_saving_a_step_again_replaces_it(tmp_path):
    save(tmp_path, 3)
    save_checkpoint(tmp_path, 3, {"step": 3, "again": True}, tensor_writer(3))
    assert load_controller_state(latest_checkpoint(tmp_path))["again"] is True
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000003"]


def test_a_pointer_to_a_missing_checkpoint_falls_back_to_the_newest_complete(tmp_path, caplog):
    save(tmp_path, 1)
    save(tmp_path, 2)
    (tmp_path / "checkpoints" / "latest").write_text("step_000005")
    with caplog.at_level(logging.WARNING):
        assert latest_checkpoint(tmp_path).name == "step_000002"
    assert "names step_000005, which is not a complete checkpoint; falling back to step_000002" in caplog.text


def test_unfinished_saves_are_cleared_and_named(tmp_path):
    save(tmp_path, 1)
    staging = tmp_path / "checkpoints" / ".staging_step_000002"
    (staging / "trainer").mkdir(parents=True)
    assert clear_unfinished_saves(tmp_path) == [".staging_step_000002"]
    assert not staging.exists()
    assert latest_checkpoint(tmp_path).name == "step_000001"


def test_a_failing_trainer_write_leaves_the_previous_checkpoint(tmp_path):
    save(tmp_path, 1)

    def crash(path: str) -> None:
        os.makedirs(path)
        raise OSError("disk went away")

    with pytest.raises(CheckpointWriteError, match="disk went away"):
        save_checkpoint(tmp_path, 2, {"step": 2}, crash)
    assert_loads_as(latest_checkpoint(tmp_path), 1)
    assert not list((tmp_path / "checkpoints").glob(".staging*"))


@pytest.fixture
def small_disk(tmp_path):
    """A 1.27 MiB tmpfs: room for two 0.5 MiB checkpoints, not three."""
    mount_small_disk(tmp_path / "disk", "1300k")
    yield tmp_path / "disk"
    unmount_small_disk(tmp_path / "disk")


def test_a_full_disk_leaves_the_previous_checkpoints_and_says_what_it_needed(small_disk):
    run_dir = small_disk / "run"
    for step in (1, 2):
        save_checkpoint(run_dir, step, {"step": step}, tensor_writer(step, mib=0.5))
    with pytest.raises(CheckpointWriteError) as error:
        save_checkpoint(run_dir, 3, {"step": 3}, tensor_writer(3, mib=0.5))
    message = str(error.value)
    size = sum(f.stat().st_size for f in (run_dir / "checkpoints" / "step_000002").rglob("*") if f.is_file())
    assert f"could not be written to {run_dir / 'checkpoints' / '.staging_step_000003'}" in message
    assert f"it needs about {size} bytes" in message
    assert f"the previous checkpoint, {run_dir / 'checkpoints' / 'step_000002'}, is intact" in message
    assert_loads_as(latest_checkpoint(run_dir), 2)
    assert steps_of(complete_checkpoints(run_dir)) == [1, 2]
    assert not list((run_dir / "checkpoints").glob(".staging*"))


def test_retention_deletes_only_after_the_new_checkpoint_is_complete(small_disk):
    """keep_last=1 on a disk with room for two: every save fits beside the one it replaces; on a
    disk with room for one, the save fails and the one checkpoint stands."""
    run_dir = small_disk / "run"
    for step in range(1, 6):
        save_checkpoint(run_dir, step, {"step": step}, tensor_writer(step, mib=0.5), keep_last=1)
    assert steps_of(complete_checkpoints(run_dir)) == [5]
    with pytest.raises(CheckpointWriteError):
        save_checkpoint(run_dir, 6, {"step": 6}, tensor_writer(6, mib=1.0), keep_last=1)
    assert_loads_as(latest_checkpoint(run_dir), 5)


# The writer loads checkpoint.py by path (it needs only the standard library), so each trial's
# process starts in milliseconds rather than importing the package's Ray and torch.
SAVER = """
import importlib.util, os, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("checkpoint", sys.argv[1])
checkpoint = importlib.util.module_from_spec(spec)
spec.loader.exec_module(checkpoint)
run_dir = Path(sys.argv[2])
print("ready", flush=True)
step = 0
while True:
    step += 1
    def write(path, step=step):
        os.makedirs(path)
        for part in range(4):  # synced, as a trainer's write to a slow disk: most of the time goes here
            with open(Path(path, f"part{part}"), "wb") as out:
                out.write(bytes([step % 256]) * PART_BYTES)
                out.flush()
                os.fsync(out.fileno())
    checkpoint.save_checkpoint(run_dir, step, {"step": step}, write, keep_last=2)
""".replace("PART_BYTES", str(MIB // 4))


def test_a_writer_killed_at_any_moment_leaves_a_loadable_checkpoint(tmp_path):
    """SIGKILL at seeded random moments of a process that saves checkpoints back to back (and
    deletes old ones): after every kill, the newest complete checkpoint loads, whole."""
    rng = random.Random(0)
    run_dir = tmp_path / "run"
    trials = 20
    loadable = mid_save = 0
    for _ in range(trials):
        command = [sys.executable, "-c", SAVER, checkpoint_module.__file__, str(run_dir)]
        writer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        mid_save += bool(clear_unfinished_saves(run_dir))
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            continue  # killed before its first save finished: nothing to load, nothing claimed
        step = load_controller_state(checkpoint)["step"]
        parts = [(checkpoint / "trainer" / f"part{part}").read_bytes() for part in range(4)]
        assert parts == [bytes([step % 256]) * (MIB // 4)] * 4, f"{checkpoint.name} is not whole"
        loadable += 1
        # The next trial's writer starts over at step 1 in the same directory: its saves replace these.
    assert loadable >= trials // 2, f"only {loadable} of {trials} kills came after a first save"
    assert mid_save >= trials // 4, f"only {mid_save} of {trials} kills landed in the middle of a save"
    print(f"{trials} kills: {mid_save} in the middle of a save; after each of the {loadable} that followed a save, it loaded")

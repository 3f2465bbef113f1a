"""A disk that fills during a checkpoint, with the real trainer: the run stops naming the path and
the bytes it needed, and the previous checkpoint loads into the trainer."""

from __future__ import annotations

import shutil

import pytest

from loongsage.controller.checkpoint import CheckpointWriteError, complete_checkpoints, latest_checkpoint
from tests.small_disk import mount_small_disk, resize_small_disk, unmount_small_disk

RUN = [
    "recipe=math_grpo",
    "model=tiny",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "trainer.micro_batch_size=4",
    "run.save_every=1",
    "run.steps=3",
]


@pytest.fixture
def disk(tmp_path):
    mount_small_disk(tmp_path / "disk", "1g")
    yield tmp_path / "disk"
    unmount_small_disk(tmp_path / "disk")


def test_a_full_disk_stops_the_run_and_the_last_checkpoint_resumes_it(ray_runtime, disk):
    from loongsage.controller.loop import Controller
    from tests.unit.config.test_rules import compose_config

    run_dir = disk / "run"
    run_dir.mkdir()
    cfg = compose_config(*RUN, f"run.dir={run_dir}")
    controller = Controller(cfg, run_dir)
    real_save = controller.trainer.save_checkpoint

    def save_then_fill(path: str) -> None:
        """Step 1 saves; then the disk shrinks to leave half of a checkpoint's room."""
        real_save(path)
        if controller.step == 1:
            checkpoint_bytes = sum(f.stat().st_size for f in disk.rglob("*") if f.is_file() and "checkpoints" in f.parts)
            resize_small_disk(disk, shutil.disk_usage(disk).used + checkpoint_bytes // 2)

    controller.trainer.save_checkpoint = save_then_fill
    try:
        with pytest.raises(CheckpointWriteError) as error:
            controller.run()
    finally:
        controller.shutdown()
    message = str(error.value)
    checkpoints = run_dir / "checkpoints"
    assert f"the checkpoint of step 2 could not be written to {checkpoints / '.staging_step_000002'}" in message
    assert "it needs about " in message and " bytes (" in message and " free;" in message, message
    assert f"the previous checkpoint, {checkpoints / 'step_000001'}, is intact" in message
    assert [path.name for path in complete_checkpoints(run_dir)] == ["step_000001"]
    assert not list(checkpoints.glob(".staging*"))

    resize_small_disk(disk, 2**30)  # space freed: the same run goes on from step 1
    resumed = Controller(cfg, run_dir)
    try:
        assert resumed.step == 1
        assert resumed.run() is True
    finally:
        resumed.shutdown()
    assert latest_checkpoint(run_dir).name == "step_000003"

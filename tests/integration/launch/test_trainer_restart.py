"""A trainer rank killed outright (its process, by pid): the run names the rank, the call and the
step, builds a new trainer group from the last checkpoint and goes on, each step trained once in
what the run keeps; with no restarts left it stops with one paragraph and the resume command."""

from __future__ import annotations

import time

import pytest

from tests.integration.launch.launch_support import scalars
from tests.integration.launch.test_stopping import SLOW, Run


def wait_for_checkpoint(run_dir, step: int) -> None:
    """Until the save of `step` is complete (the step's line is printed before its save)."""
    latest = run_dir / "checkpoints" / "latest"
    deadline = time.monotonic() + 60
    while not (latest.exists() and latest.read_text().strip() == f"step_{step:06d}"):
        assert time.monotonic() < deadline, f"step {step} was not saved within 60 s"
        time.sleep(0.05)


TWO_RANKS = [*SLOW, "trainer.micro_batch_size=2", "run.save_every=1", "run.steps=4"]
FSDP_RANKS = ["trainer.world_size=2"]
MEGATRON_RANKS = ["trainer.backend=megatron", "trainer.megatron.dp=2"]


@pytest.mark.parametrize(
    ("ranks", "worker"), [(FSDP_RANKS, "TrainWorker"), (MEGATRON_RANKS, "MegatronWorker")], ids=["fsdp", "megatron"]
)
def test_a_killed_rank_is_replaced_from_the_last_checkpoint_and_the_run_finishes(ranks, worker, tmp_path):
    run = Run(*TWO_RANKS, *ranks, f"run.dir={tmp_path}")
    run.wait_for("step 1/")
    wait_for_checkpoint(tmp_path, 1)
    killed_at = time.monotonic()
    run.actors(worker)[1].kill()
    run.wait_for("step 2/")
    recovered_s = time.monotonic() - killed_at
    code, _ = run.finish(timeout=300)
    assert code == 0, run.output[-4000:]
    said = run.output
    # Seen while the controller waited for step 2's batch (the trainer is idle then), not at its training.
    assert "train worker rank 1 died during the wait for a batch at trainer step 1; restart 1 of run.max_restarts=3" in said
    assert f"a new trainer group from {tmp_path}/checkpoints/step_000001" in said
    assert "trainer restarted at step 1 in" in said
    logged = scalars(tmp_path)
    assert sorted(logged["rollout/reward_mean"]) == [1, 2, 3, 4]
    assert logged["faults/trainer_restarts"][4] == 1.0
    # The restarted trainer's weights are what the engines sample with: no gap between the two.
    assert max(logged["train/mismatch_k3_kl"].values()) < 1e-6
    print(f"from the kill to step 2 finished: {recovered_s:.1f} s")


def test_with_no_restarts_left_a_killed_rank_stops_the_run_with_one_paragraph(tmp_path):
    run = Run(*TWO_RANKS, *FSDP_RANKS, "run.max_restarts=0", f"run.dir={tmp_path}")
    run.wait_for("step 1/")
    wait_for_checkpoint(tmp_path, 1)
    before = len(run.lines)
    run.actors("TrainWorker")[0].kill()
    code, _ = run.finish(timeout=300)
    after = "".join(run.lines[before:])
    assert code == 1, run.output[-4000:]
    assert "died during" in after and "after 0 restart(s) of the trainer group (run.max_restarts=0)" in after, after[-4000:]
    assert f"Last checkpoint: {tmp_path}/checkpoints/step_000001" in after
    assert "to go on: python launch.py" in after and "Traceback" not in after, after[-4000:]

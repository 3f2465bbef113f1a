"""A trainer rank killed outright (SIGKILL: by pid from outside while the controller waits for a
batch, or by itself at a failpoint mid-step and mid-push): the run names the rank, the call and
the step, builds a new trainer group from the last checkpoint and goes on, each step trained once
in what the run keeps; with no restarts left it stops with one paragraph and the resume command."""

from __future__ import annotations

import json
import os
import re
import time

import psutil

from loongsage.failpoints import KILL_AT_ENV
from tests.integration.launch.launch_support import TINY_RUN, scalars, stream_items, trained_items
from tests.integration.launch.test_stopping import Run
from tests.toy_rewards import HOLD_ENV


def wait_for_checkpoint(run_dir, step: int) -> None:
    """Until the save of `step` is complete (the step's line is printed before its save)."""
    latest = run_dir / "checkpoints" / "latest"
    deadline = time.monotonic() + 60
    while not (latest.exists() and latest.read_text().strip() == f"step_{step:06d}"):
        assert time.monotonic() < deadline, f"step {step} was not saved within 60 s"
        time.sleep(0.05)


TWO_RANKS = [
    *TINY_RUN,
    "data.reward=tests.toy_rewards:e_fraction_held_after_16",
    "trainer.micro_batch_size=2",
    "run.save_every=1",
    "run.steps=4",
]
FSDP_RANKS = ["trainer.world_size=2"]
MEGATRON_RANKS = ["trainer.backend=megatron", "trainer.megatron.dp=2"]
# Rank 1 at step 2's training (its peer waits in the gradient collective); rank 0 after the first
# tensor of step 3's weight push (the engines hold part of version 3).
KILLS = [{"point": "train_step", "step": 2, "rank": 1}, {"point": "push_weights", "step": 3, "rank": 0}]


def rank_pids(output: str) -> list[list[int]]:
    """Each trainer group's rank processes, in the order the run built the groups."""
    return [
        [int(pid) for pid in re.findall(r"pid (\d+)", line)]
        for line in output.splitlines()
        if "trainer ranks' processes:" in line
    ]


def running_workers(run: Run, worker: str, count: int) -> set[int]:
    """The pids of the run's `count` `worker` processes (its ranks and their spares, which start
    once step 1 is done), once that many are running."""
    deadline = time.monotonic() + 60
    while len(pids := {process.pid for process in run.actors(worker)}) < count:
        assert time.monotonic() < deadline, f"{len(pids)} {worker} processes within 60 s, not {count}"
        time.sleep(0.1)
    return pids


def run_with_three_deaths(tmp_path, worker: str, *overrides: str) -> Run:
    """Rank 1 killed by pid while the controller waits for step 2's batch (held back by the reward
    until the death is seen), then the failpoints' two deaths. `run.running_at_kill`: the pids of
    the `worker` processes (ranks and any spares) just before."""
    hold = tmp_path / "hold"
    hold.touch()
    env = {**os.environ, HOLD_ENV: str(hold), KILL_AT_ENV: json.dumps({"marks": str(tmp_path / "kills"), "kills": KILLS})}
    run = Run(*TWO_RANKS, *overrides, f"run.dir={tmp_path / 'run'}", env=env)
    run.wait_for("step 1/")
    wait_for_checkpoint(tmp_path / "run", 1)
    run.running_at_kill = running_workers(run, worker, 4 if "run.spare_trainer=true" in overrides else 2)
    (ranks,) = rank_pids(run.output)
    psutil.Process(ranks[1]).kill()
    run.wait_for("train worker rank 1 died during the wait for a batch at trainer step 1; restart 1", anywhere=True)
    hold.unlink()
    return run


def test_megatron_ranks_killed_waiting_mid_step_and_mid_push_are_replaced_each_time_and_the_run_finishes(tmp_path):
    run = run_with_three_deaths(tmp_path, "MegatronWorker", *MEGATRON_RANKS, "logging.rollouts_per_step=16")
    code, _ = run.finish(timeout=300)
    assert code == 0, run.output[-4000:]
    said, run_dir = run.output, tmp_path / "run"
    assert sorted(path.name for path in (tmp_path / "kills").iterdir()) == ["push_weights.step3.rank0", "train_step.step2.rank1"]
    assert "train worker rank 1 died during train_step at trainer step 1; restart 2 of run.max_restarts=3" in said
    assert "train worker rank 0 died during push_weights at trainer step 3; restart 3 of run.max_restarts=3" in said
    assert said.count(f"a new trainer group from {run_dir}/checkpoints/step_000001") == 2
    assert f"a new trainer group from {run_dir}/checkpoints/step_000002" in said
    # Killed while waiting or mid-step, the checkpoint was the last finished step and the engines
    # held its weights: only the trainer's memory was lost. Rollout went on meanwhile; the step cut
    # short trained again on the batch it had. Mid-push, the engines held part of version 3: the
    # checkpoint's weights went to them first and step 3 was rolled out again.
    restarts = [line for line in said.splitlines() if "trainer restarted at step" in line]
    assert len(restarts) == 3, restarts
    assert "rollout went on meanwhile" in restarts[0] and "the step's batch kept" in restarts[1], restarts
    assert "weight push" in restarts[2], restarts
    logged = scalars(run_dir)
    assert sorted(logged["rollout/reward_mean"]) == [1, 2, 3, 4]
    assert logged["faults/trainer_restarts"][4] == 3.0
    # What the engines sample with is the restarted trainer's weights, each time: no gap.
    assert max(logged["train/mismatch_k3_kl"].values()) < 1e-6
    # Each step trained the data stream's next 4 items, none lost or taken twice across the deaths.
    stream = stream_items(16)
    by_step: dict[int, set[str]] = {}
    for step, item in trained_items(run_dir):
        by_step.setdefault(step, set()).add(item)
    assert by_step == {step: set(stream[4 * (step - 1) : 4 * step]) for step in range(1, 5)}, by_step


def test_fsdp_ranks_killed_until_no_restart_is_left_stop_the_run_with_one_paragraph(tmp_path):
    run = run_with_three_deaths(tmp_path, "TrainWorker", *FSDP_RANKS, "run.max_restarts=2", "run.spare_trainer=true")
    code, _ = run.finish(timeout=300)
    said, run_dir = run.output, tmp_path / "run"
    assert code == 1, said[-4000:]
    # run.spare_trainer: the first new group ran in the spares, running since step 1 was done. The
    # second death came in that group's first step, before it had started spares of its own.
    first, second, third = rank_pids(said)
    assert set(second) <= run.running_at_kill - set(first) and set(third).isdisjoint(first + second), (first, second, third)
    restarts = [line for line in said.splitlines() if "trainer restarted at step" in line]
    assert ["in its spare processes" in line for line in restarts] == [True, False], restarts
    assert "train worker rank 1 died during train_step at trainer step 1; restart 2 of run.max_restarts=2" in said
    after = said.split("died during push_weights")[1]
    assert "after 2 restart(s) of the trainer group (run.max_restarts=2)" in after, after[-4000:]
    assert f"Last checkpoint: {run_dir}/checkpoints/step_000002" in after
    assert "to go on: python launch.py" in after and "Traceback" not in after, after[-4000:]
    assert sorted(scalars(run_dir)["rollout/reward_mean"]) == [1, 2]

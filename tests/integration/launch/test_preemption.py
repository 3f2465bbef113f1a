"""The warning signal (SIGUSR2, what Slurm sends before a time limit or preemption) through the
real entry point, outside Slurm: the run saves the last finished step and stops, a step waiting
for its rollout is given up rather than finished, and the same command resumes with no prompt
lost or trained twice. A synchronous run's resume, step by step in the data's order, is
tests/slurm/test_requeue.py's (the same signal, through a real Slurm requeue)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.integration.launch.launch_support import TINY_RUN, checkpoint, items_at, launch, scalars, stream_items, trained_items
from tests.paths import REPO_ROOT

# 4 prompts x 4 samples, each scored after 0.25 s: the rollout phase of a step takes ~4 s.
SLOW = [
    *TINY_RUN,
    "data.reward=tests.toy_rewards:slow_e_fraction",
    "logging.rollouts_per_step=16",
    "run.save_every=100",
    "run.steps=5",
]
PREEMPTED_EXIT_CODE = 3


def _signal_after_step(run_dir, step: int, *overrides: str) -> tuple[int, str, float]:
    """Start a run, send SIGUSR2 once it has logged `step`; (exit code, output, seconds from the
    signal to the process's end)."""
    process = subprocess.Popen(
        [sys.executable, "launch.py", *SLOW, f"run.dir={run_dir}", *overrides],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith(f"step {step}/"):
            break
    signalled = time.monotonic()
    os.kill(process.pid, signal.SIGUSR2)
    rest, _ = process.communicate(timeout=120)
    return process.returncode, "".join(lines) + rest, time.monotonic() - signalled


def test_sync_run_stops_mid_rollout_keeping_what_it_had_taken(tmp_path):
    code, output, stop_s = _signal_after_step(tmp_path, 2)
    assert code == PREEMPTED_EXIT_CODE, output[-4000:]
    assert "[loongsage] stopping at step 2: checkpoint written" in output, output[-4000:]
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_000002"
    # Step 3's rollout (~4 s of scoring) was given up, not waited for.
    assert "step 3/" not in output
    assert stop_s < 15, f"stopping took {stop_s:.1f} s"
    data = checkpoint(tmp_path, 2)["data"]
    # Where step 2 left the stream: items 0-7 trained, any taken since (step 3's) unsettled, so
    # that a resume takes them first.
    assert sorted(index for _, index in data["pending"]) == list(range(8, data["next_index"][""]))
    stream = stream_items(8)
    assert set(trained_items(tmp_path)) == {(s, item) for s in (1, 2) for item in stream[4 * (s - 1) : 4 * s]}


def test_fully_async_run_keeps_what_was_in_flight(tmp_path):
    async_run = ["run.mode=fully_async", "pipeline.max_staleness=2", "pipeline.window=windowed_fifo"]
    code, output, _ = _signal_after_step(tmp_path, 2, *async_run)
    assert code == PREEMPTED_EXIT_CODE, output[-4000:]
    stopped_at = int((tmp_path / "checkpoints" / "latest").read_text().strip().removeprefix("step_"))
    assert stopped_at >= 2
    pending = checkpoint(tmp_path, stopped_at)["data"]["pending"]
    assert pending, "rollout runs ahead of training: the checkpoint must hold the items in flight"
    before = [item for step, item in trained_items(tmp_path) if step <= stopped_at]

    resumed = launch(*SLOW, f"run.dir={tmp_path}", *async_run)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    after = [item for step, item in trained_items(tmp_path) if step > stopped_at]
    assert len(before + after) == len(set(before + after)) == 20, "an item was trained twice"
    assert set(items_at(pending)) <= set(after) | set(items_at(checkpoint(tmp_path, 5)["data"]["pending"]))
    # Conservation: every item taken from the stream was trained or is pending in the last checkpoint.
    last = checkpoint(tmp_path, 5)
    assert max(scalars(tmp_path)["async/dropped_total"].values()) == 0
    assert set(before) | set(after) | set(items_at(last["data"]["pending"])) == set(stream_items(last["data"]["next_index"][""]))


def test_stop_after_the_warm_start_keeps_its_weights(tmp_path):
    """A warm start is training too: stopped right after it, the run saves step 0 with the
    warm-started weights, and the resumed run goes straight to RL."""
    agentic = [
        "recipe=agentic_swe",
        "model=tiny",
        "run.steps=2",
        "rollout.prompts_per_step=1",
        "rollout.group_size=2",
        "trainer.lr=1e-3",
        "agent.options.max_turns=2",
        "agent.options.max_tokens=16",
        "warm_start.options.count=4",
        "warm_start.batch_size=2",
        "warm_start.lr=1e-2",
        f"run.dir={tmp_path}",
    ]
    process = subprocess.Popen(
        [sys.executable, "launch.py", *agentic], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("warm start 4/4"):
            break
    os.kill(process.pid, signal.SIGUSR2)
    rest, _ = process.communicate(timeout=300)
    output = "".join(lines) + rest
    assert process.returncode == PREEMPTED_EXIT_CODE, output[-4000:]
    assert "[loongsage] stopping at step 0: checkpoint written" in output, output[-4000:]
    assert checkpoint(tmp_path, 0)["warm_started"] is True

    resumed = launch(*agentic, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "at step 0" in resumed.stdout and "warm start" not in resumed.stdout + resumed.stderr
    logged = scalars(tmp_path)
    assert sorted(logged["train/loss"]) == [1, 2]
    assert logged["rollout/weight_version"][1] == 2.0  # the warm start's weights (version 1), then step 1

"""The controller killed outright (SIGKILL of launch.py, here in the middle of a checkpoint save):
the same command resumes from the last complete checkpoint, ends every process the dead run left
running and says so, trains each item of the data stream once (the steps after that checkpoint
once more), and its TensorBoard curves go on without a step twice."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil

from tests.integration.launch.launch_support import TINY_RUN, launch, stream_items
from tests.paths import REPO_ROOT

RUN = [
    *TINY_RUN,
    "data.reward=tests.toy_rewards:e_fraction",
    "logging.rollouts_per_step=16",
    "run.save_every=1",
    "run.steps=4",
]


def items_by_step(rollouts: str) -> dict[int, set[str]]:
    steps: dict[int, set[str]] = {}
    for line in rollouts.splitlines():
        row = json.loads(line)
        steps.setdefault(row["step"], set()).add(row["item_id"])
    return steps


def kill_during_save(run_dir, step: int) -> list[psutil.Process]:
    """Start the run; SIGKILL launch.py (and nothing else) as soon as the save of `step` has
    begun. What it had started up to then."""
    process = subprocess.Popen(
        [sys.executable, "launch.py", *RUN, f"run.dir={run_dir}"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in this test's process group: only the kill ends it
    )
    staging = run_dir / "checkpoints" / f".staging_step_{step:06d}"
    deadline = time.monotonic() + 300
    started: dict[int, psutil.Process] = {}
    listed_at = 0.0
    while not staging.exists():
        assert process.poll() is None, "the run ended before it saved"
        assert time.monotonic() < deadline, f"no save of step {step} within 300 s"
        # Listed while waiting, not after the save has begun: on a busy machine listing them took
        # long enough for the tiny model's save to finish before the kill.
        if time.monotonic() - listed_at > 0.2:
            started.update({child.pid: child for child in psutil.Process(process.pid).children(recursive=True)})
            listed_at = time.monotonic()
        time.sleep(0.002)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return list(started.values())


def test_a_killed_controller_resumes_with_nothing_lost_or_left(tmp_path):
    started = kill_during_save(tmp_path, step=2)
    survivors = [p for p in started if p.is_running()]
    assert survivors, "nothing outlived the controller: the test shows nothing"
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_000001"
    killed_run = items_by_step((tmp_path / "rollouts.jsonl").read_text())

    resumed = launch(*RUN, f"run.dir={tmp_path}")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    said = resumed.stdout
    # Most of Ray's processes end on their own within seconds of the controller; its agents do not.
    ended = re.search(r"ended (\d+) process\(es\) that an earlier run of this run dir left running [^:]*: (.*)", said)
    assert ended, said[-4000:]
    ended_pids = {int(pid) for pid in re.findall(r"(\d+) \(", ended.group(2))}
    assert len(ended_pids) == int(ended.group(1)) and ended_pids <= {p.pid for p in started}
    assert "removed 1 unfinished checkpoint save(s) of an earlier run: .staging_step_000002" in said
    assert f"resumed from {tmp_path}/checkpoints/step_000001 at step 1" in said
    assert not [p for p in survivors if p.is_running()], "a process of the killed run is still alive"

    # Each item once over the two runs; step 2, trained before the kill but not saved, once more.
    resumed_run = items_by_step((tmp_path / "rollouts.jsonl").read_text())
    assert sorted(resumed_run) == [1, 2, 3, 4] and resumed_run[1] == killed_run[1]
    once = [item for step in (1, 2, 3, 4) for item in (killed_run if step == 1 else resumed_run)[step]]
    assert sorted(once) == sorted(stream_items(16))
    assert killed_run[2] == resumed_run[2]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [event.step for event in events.Scalars("rollout/reward_mean")] == [1, 2, 3, 4]

"""How the launch tests run the entry point and read what a run wrote: the tiny run they set
out from, `launch` (launch.py in a child process, its stacks shown if it hangs) and `scalars`
(a run's TensorBoard scalars), and what a run's checkpoints and rollouts say of the data
stream's items."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

TINY_RUN = [  # the tiny math run each launch test sets out from
    "recipe=math_grpo",
    "model=tiny",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=16",
    "trainer.micro_batch_size=4",
    "trainer.lr=1e-3",
]
SMOKE = [
    *TINY_RUN,
    "data.reward=tests.toy_rewards:digit_fraction",
    "trainer.weight_sync=mesh",
]


def launch(*overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """A run through the entry point. One that hangs past `timeout` is aborted with every
    thread's stack on its stderr (faulthandler), which the failure shows."""
    args = [sys.executable, "launch.py", *overrides]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            stdout, stderr = process.communicate()
            pytest.fail(
                f"launch.py did not end within {timeout} s\n--- stdout ---\n{stdout[-3000:]}\n"
                f"--- stderr (thread stacks at the abort) ---\n{stderr[-30000:]}"
            )
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def scalars(run_dir) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: {e.step: e.value for e in accumulator.Scalars(tag)} for tag in accumulator.Tags()["scalars"]}


def checkpoint(run_dir, step: int) -> dict:
    return json.loads((run_dir / "checkpoints" / f"step_{step:06d}" / "controller.json").read_text())


def trained_items(run_dir) -> list[tuple[int, str]]:
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    return sorted({(r["step"], r["item_id"]) for r in rows})


def data_stream():
    """The synthetic arithmetic stream the tiny runs read (4 prompts a step, seed 0)."""
    from loongsage.config import DataConfig
    from loongsage.controller.data_stream import DataStream

    return DataStream(DataConfig(source="synthetic_arithmetic"), 4, seed=0)


def stream_items(count: int) -> list[str]:
    stream = data_stream()
    return [stream.take().id for _ in range(count)]


def items_at(cursors) -> list[str]:
    """The item ids at checkpointed cursors (source, index), read the way the controller reads them."""
    stream = data_stream()
    return [stream.sources[source].item_at(index).id for source, index in cursors]

"""Stopping a run as people do, through the real entry point: Ctrl-C (SIGINT to the whole
process group, as a terminal sends it) in each phase, SIGTERM, Ctrl-C twice, and an engine
that dies. Each run must end within seconds, say how to go on, keep only complete
checkpoints, and leave no process of its own behind (Ray's agents included).

A phase is made to last by stopping a process with SIGSTOP (the trainer, the engine), so the
signal is known to arrive in that phase rather than hoped to."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from loongsage.controller.stopping import still_running
from tests.integration.launch.launch_support import TINY_RUN
from tests.paths import REPO_ROOT

# 4 prompts x 4 samples, each scored after 0.25 s: the rollout phase of a step takes ~4 s.
SLOW = [
    *TINY_RUN,
    "data.reward=tests.toy_rewards:slow_e_fraction",
    "run.save_every=100",
    "run.steps=4",
]
WARM_START = [
    "recipe=agentic_swe",
    "model=tiny",
    "run.steps=2",
    "rollout.prompts_per_step=1",
    "rollout.group_size=2",
    "agent.options.max_turns=2",
    "agent.options.max_tokens=16",
    "warm_start.options.count=4",
    "warm_start.batch_size=2",
]
# Bounds a hang, not a speed claim: a quiet machine stops in 2-5 s (13 s for agentic_swe's
# 135M checkpoint beside CI load), and a loaded 2-core CI machine may take several times that.
STOP_BOUND_S = 45
CTRL_C_EXIT = 128 + signal.SIGINT
TERM_EXIT = 128 + signal.SIGTERM


class Run:
    """launch.py in a session of its own (like a terminal's foreground job), read line by line."""

    def __init__(self, *overrides: str, env: dict | None = None):
        self.args = [sys.executable, "launch.py", *overrides]
        self.process = subprocess.Popen(
            self.args,
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.signalled_at = 0.0

    def wait_for(self, prefix: str, anywhere: bool = False) -> None:
        """Until a line starts with `prefix` (`anywhere`: holds it)."""
        for line in self.process.stdout:
            self.lines.append(line)
            if prefix in line if anywhere else line.startswith(prefix):
                return
        pytest.fail(f"the run ended before printing {prefix!r}:\n{self.output[-4000:]}")

    def processes(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def actors(self, name: str) -> list[psutil.Process]:
        found = []
        for process in self.processes():
            try:
                if f"ray::{name}" in " ".join(process.cmdline()):
                    found.append(process)
            except psutil.Error:
                continue
        return found or pytest.fail(f"no ray::{name} process among the run's")

    def actor(self, name: str) -> psutil.Process:
        return self.actors(name)[0]

    def ctrl_c(self) -> None:
        self.signalled_at = time.monotonic()
        os.killpg(self.process.pid, signal.SIGINT)  # what a terminal does: the whole foreground group

    def finish(self, timeout: float = 120) -> tuple[int, float]:
        """(exit code, seconds from the last signal to the end)."""
        rest, _ = self.process.communicate(timeout=timeout)
        self.lines.append(rest)
        return self.process.returncode, time.monotonic() - self.signalled_at

    @property
    def output(self) -> str:
        return "".join(self.lines)


def assert_all_ended(processes: list[psutil.Process], wait_s: float = 10.0) -> None:
    """Every one of `processes` ends (a zombie has ended) within `wait_s` of the run's exit:
    what the run killed last may take a moment to go."""
    alive = still_running(processes, wait_s)
    described = [f"{p.pid} {' '.join(_cmdline(p))[:80]}" for p in alive]
    for process in alive:  # do not leave them to the next test
        try:
            process.kill()
        except psutil.Error:
            pass
    assert not described, f"outlived the run: {described}"


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def latest(run_dir: Path) -> str | None:
    pointer = run_dir / "checkpoints" / "latest"
    return pointer.read_text().strip() if pointer.exists() else None


def test_ctrl_c_while_rolling_out_saves_the_last_step_and_the_printed_command_resumes(tmp_path):
    run = Run(*SLOW, f"run.dir={tmp_path}")
    run.wait_for("step 2/")
    for worker in run.actors("RewardWorker"):
        worker.suspend()  # step 3's rollout now waits for its rewards until the run stops
    started = run.processes()
    run.ctrl_c()
    code, stop_s = run.finish()
    assert code == CTRL_C_EXIT, run.output[-4000:]
    assert "[loongsage] stopping at step 2: checkpoint written" in run.output, run.output[-4000:]
    assert latest(tmp_path) == "step_000002"
    assert stop_s < STOP_BOUND_S, f"stopping took {stop_s:.1f} s"
    assert_all_ended(started)

    command = run.output.split("to go on: ", 1)[1].splitlines()[0]
    argv = shlex.split(command)
    assert argv[:2] == ["python", "launch.py"] and f"run.dir={tmp_path}" in argv
    resumed = subprocess.run([sys.executable, *argv[1:]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "at step 2" in resumed.stdout and "step 4/4" in resumed.stderr


def test_ctrl_c_during_the_warm_start_abandons_it_unsaved(tmp_path):
    run = Run(*WARM_START, f"run.dir={tmp_path}")
    run.wait_for("warm start 1/")
    run.actor("TrainWorker").suspend()  # the rest of the warm start now waits forever
    started = run.processes()
    run.ctrl_c()
    code, stop_s = run.finish()
    assert code == CTRL_C_EXIT, run.output[-4000:]
    assert "stopped waiting for the warm start, nothing saved" in run.output, run.output[-4000:]
    assert latest(tmp_path) is None
    assert stop_s < STOP_BOUND_S, f"stopping took {stop_s:.1f} s"
    assert_all_ended(started)


def test_sigterm_finishes_the_step_and_saves_it(tmp_path):
    run = Run(*SLOW, f"run.dir={tmp_path}")
    run.wait_for("step 2/")
    started = run.processes()
    run.signalled_at = time.monotonic()
    run.process.terminate()  # to the controller alone, as `kill <pid>` does
    code, stop_s = run.finish()
    assert code == TERM_EXIT, run.output[-4000:]
    assert "[loongsage] stopping at step 2: checkpoint written" in run.output, run.output[-4000:]
    assert "to go on: python launch.py" in run.output
    assert latest(tmp_path) == "step_000002"
    assert "Traceback" not in run.output and "SIGTERM received at time" not in run.output  # Ray's native dump
    assert_all_ended(started)


def test_second_ctrl_c_exits_at_once_even_with_every_actor_stuck(tmp_path):
    run = Run(*SLOW, f"run.dir={tmp_path}")
    run.wait_for("step 1/")
    for name in ("TrainWorker", "EmbeddedEngineActor"):
        run.actor(name).suspend()
    started = run.processes()
    run.ctrl_c()
    run.wait_for("[loongsage] Ctrl-C (SIGINT) received")  # two signals sent at once would merge into one
    run.ctrl_c()
    code, stop_s = run.finish(timeout=60)
    assert code == CTRL_C_EXIT, run.output[-4000:]
    assert "SIGINT again: exiting now" in run.output, run.output[-4000:]
    assert stop_s < STOP_BOUND_S, f"the second Ctrl-C took {stop_s:.1f} s"
    assert_all_ended(started)


def test_a_dead_engine_stops_the_run_with_one_paragraph(tmp_path):
    """With no restarts left (rollout.max_engine_restarts=0; test_engine_restart.py has one)."""
    run = Run(*SLOW, "run.save_every=1", "rollout.max_engine_restarts=0", f"run.dir={tmp_path}")
    run.wait_for("step 1/")
    started = run.processes()
    before = len(run.lines)
    run.signalled_at = time.monotonic()
    run.actor("EmbeddedEngineActor").kill()
    code, _ = run.finish()
    after = "".join(run.lines[before:])
    assert code == 1, run.output[-4000:]
    assert "inference engine 0 (http://" in after and "died during step 2" in after, after[-4000:]
    assert f"Last checkpoint: {tmp_path}/checkpoints/step_000001" in after
    assert "to go on: python launch.py" in after and f"run.dir={tmp_path}" in after
    assert "Traceback" not in after and len(after.splitlines()) < 40, after[-6000:]
    assert_all_ended(started)


@pytest.mark.parametrize("phase", ["train_step", "push_weights"])
def test_ctrl_c_while_training_or_syncing_abandons_the_step_unsaved(phase, ray_runtime, tmp_path, capsys):
    """In process, with the real trainer and engine: the phase is held open (the trainer's call
    waits on an event) and Ctrl-C is signalled from inside it, so it is known to land there."""
    from loongsage.controller.loop import Controller
    from tests.unit.config.test_rules import compose_config

    cfg = compose_config(
        *SLOW[:-2],
        "data.reward=tests.toy_rewards:e_fraction",
        "run.save_every=1",
        "run.steps=5",
        f"run.dir={tmp_path}",
    )
    controller = Controller(cfg, tmp_path)
    entered, release = threading.Event(), threading.Event()
    real = getattr(controller.trainer, phase)

    def held(*args, **kwargs):
        if controller.step == 1:  # step 2's call: step 1 is trained and saved
            entered.set()
            release.wait(60)
        return real(*args, **kwargs)

    setattr(controller.trainer, phase, held)
    try:
        started = time.monotonic()
        finished = controller.run(stop=entered.is_set, abandon=entered.is_set)
        stop_s = time.monotonic() - started
    finally:
        release.set()
        controller.shutdown()
    assert finished is False and entered.is_set()
    said = capsys.readouterr().out
    where = "training step 2" if phase == "train_step" else "the weight sync of step 2"
    assert f"stopping at step 1: stopped waiting for {where}, nothing saved" in said, said
    assert latest(tmp_path) == "step_000001" and not (tmp_path / "checkpoints" / "step_000002").exists()
    assert stop_s < STOP_BOUND_S


@pytest.mark.skipif(shutil.which("opencode") is None, reason="OpenCode is not installed")
def test_ctrl_c_ends_black_box_episodes_in_flight(tmp_path):
    """A black-box program whose endpoint went away retries it for a minute (OpenCode: ~65-75 s);
    the stop destroys the episodes' sandboxes instead of waiting for it."""
    run = Run(
        "recipe=blackbox_opencode",
        "model=tiny",
        "run.steps=4",
        "rollout.prompts_per_step=1",
        "rollout.group_size=2",
        "warm_start.source=",
        "agent.options.max_tokens=16",
        f"run.dir={tmp_path}",
    )
    run.wait_for("step 1/")
    run.actor("EmbeddedEngineActor").suspend()  # step 2's episodes now wait on the model
    # 60 s was not enough once on a CI run 15% slower than usual: the wait ends when one is seen.
    deadline = time.monotonic() + 120
    while not any("opencode" in " ".join(_cmdline(p)) for p in run.processes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    started = run.processes()
    assert any("opencode" in " ".join(_cmdline(p)) for p in started), "no OpenCode episode in flight"
    run.ctrl_c()
    code, stop_s = run.finish()
    assert code == CTRL_C_EXIT, run.output[-4000:]
    assert stop_s < STOP_BOUND_S, f"stopping took {stop_s:.1f} s"
    assert_all_ended(started)

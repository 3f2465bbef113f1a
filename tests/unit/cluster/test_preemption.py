"""The warning signal as a flag, the children that must not die of it, the requeue hand-off,
and the waits a stopping run gives up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from loongsage.algorithms.staleness_windows import build_window
from loongsage.cluster.preemption import PreemptionNotice
from loongsage.config.store import run_stamp
from loongsage.controller.interruptible import InterruptibleCalls, StepInterrupted
from loongsage.controller.pipeline import FinishedGroup, PipelineBuffer, ThreadedPipeline


@pytest.fixture
def notice():
    notice = PreemptionNotice()
    yield notice
    notice.close()


def _wait(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_the_signal_only_sets_a_flag(notice):
    notice.listen()
    assert not notice.requested and notice.seconds_since() == 0.0
    os.kill(os.getpid(), signal.SIGUSR2)
    assert _wait(lambda: notice.requested)
    first = notice.received_at
    os.kill(os.getpid(), signal.SIGUSR2)  # a second warning keeps the first's time
    time.sleep(0.05)
    assert notice.received_at == first and notice.seconds_since() > 0


def test_children_started_while_ignored_survive_the_signal_and_the_parent_still_hears_it(notice):
    notice.listen()
    with notice.ignored_by_children():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert signal.getsignal(signal.SIGUSR2) == notice._on_signal  # back to listening
        os.kill(child.pid, signal.SIGUSR2)
        time.sleep(0.5)
        assert child.poll() is None, "the child died of SIGUSR2 (default action: terminate)"
        os.kill(os.getpid(), signal.SIGUSR2)
        assert _wait(lambda: notice.requested)
    finally:
        child.kill()
        child.wait()


def test_requeue_hands_the_signal_back_to_the_handler_it_replaced(capsys):
    calls = []

    def submitit_like(signum, frame):
        calls.append(signum)
        raise SystemExit(-1)

    previous = signal.signal(signal.SIGUSR2, submitit_like)
    try:
        notice = PreemptionNotice()
        notice.listen()
        os.kill(os.getpid(), signal.SIGUSR2)
        assert _wait(lambda: notice.requested) and calls == []  # ours ran, not submitit's
        notice.close()
        assert signal.getsignal(signal.SIGUSR2) is submitit_like
        with pytest.raises(SystemExit):
            notice.requeue(3)
        assert calls == [signal.SIGUSR2]
        assert "submitit requeues job" in capsys.readouterr().out
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_requeue_outside_slurm_only_says_how_to_go_on(notice, monkeypatch, capsys):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    notice.requeue(3)
    assert "not a Slurm job" in capsys.readouterr().out


def test_requeue_failure_names_the_command_and_what_to_do(notice, monkeypatch, tmp_path, capsys):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho 'Requested operation is presently disabled' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    notice.requeue(3)
    out = capsys.readouterr().out
    assert "`scontrol requeue 77` failed (Requested operation is presently disabled)" in out
    assert "same run.dir" in out


def test_run_stamp_is_the_job_id_on_slurm_and_the_time_elsewhere():
    assert run_stamp("slurm", {"SLURM_JOB_ID": "4242"}) == "slurm-4242"
    assert run_stamp("slurm", {}).replace("-", "").isdigit()
    # cluster=local inside someone's allocation: every run gets its own dir, as on a laptop.
    assert run_stamp("local", {"SLURM_JOB_ID": "4242"}).replace("-", "").isdigit()


def test_interruptible_calls_return_raise_or_give_up():
    calls = InterruptibleCalls("controller")
    assert calls.call(lambda: 7, lambda: False, "seven") == 7
    with pytest.raises(ZeroDivisionError):
        calls.call(lambda: 1 / 0, lambda: False, "division")
    release = threading.Event()
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    with pytest.raises(StepInterrupted, match="stopped waiting for a long rollout"):
        calls.call(lambda: release.wait(30), stop.is_set, "a long rollout")
    assert time.monotonic() - started < 5
    still_running = calls.close(timeout=0.1)  # left for shutdown to wait for
    assert still_running is not None and still_running.daemon and "a long rollout" in still_running.name
    release.set()
    assert calls.close(timeout=5) is None


def test_pipeline_take_gives_up_when_asked_and_takes_nothing():
    pipeline = ThreadedPipeline(PipelineBuffer(build_window("window_gated", 2, 0), 4))
    first, second = pipeline.start(0), pipeline.start(0)
    pipeline.finish(FinishedGroup(first, 0, 0, ["a"], 1))
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    with pytest.raises(StepInterrupted):
        pipeline.take(0, timeout=30, stop=stop.is_set)  # half a batch: would wait for the other group
    pipeline.finish(FinishedGroup(second, 0, 0, ["b"], 1))
    groups, _, _ = pipeline.take(0, timeout=5)
    assert sorted(g.payload[0] for g in groups) == ["a", "b"]


def test_requeue_stops_after_max_requeues(notice, monkeypatch, tmp_path, capsys):
    called = tmp_path / "called"
    fake = tmp_path / "scontrol"
    fake.write_text(f"#!/bin/sh\ntouch {called}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "3")
    notice.requeue(3)
    assert not called.exists()
    assert "requeued 3 times (cluster.max_requeues=3)" in capsys.readouterr().out
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    notice.requeue(3)
    assert called.exists() and "requeued Slurm job 77" in capsys.readouterr().out

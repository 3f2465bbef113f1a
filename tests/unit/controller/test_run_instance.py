"""A run dir's next start ends what a run killed outright left running, found by the mark in
their environment, and refuses a run dir whose run is alive; real processes, killed by pid."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from loongsage.controller.run_instance import INSTANCE_FILE, ProcessRecord, RunDirInUse, claim_run_dir
from loongsage.run_marker import RUN_MARKER


@pytest.fixture(autouse=True)
def unmarked(monkeypatch):
    """Each test's claim sets the mark in this process's environment; it is put back after."""
    monkeypatch.delenv(RUN_MARKER, raising=False)


def sleeper(env: dict | None = None) -> subprocess.Popen:
    """A process of its own session (as Ray's and the sandboxes' are), orphaned like theirs when
    the run that started it is killed."""
    code = "import time; time.sleep(120)"
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def write_instance(run_dir, token: str, process: psutil.Process) -> None:
    record = {"token": token, "pid": process.pid, "create_time": process.create_time(), "host": socket.gethostname()}
    (run_dir / INSTANCE_FILE).write_text(json.dumps(record))


def test_the_next_start_ends_what_a_killed_run_left_and_says_so(tmp_path):
    dead_controller = sleeper()
    marked = [sleeper({**os.environ, RUN_MARKER: "killed-run"}) for _ in range(2)]
    unmarked = sleeper({**os.environ, RUN_MARKER: "another-run"})
    write_instance(tmp_path, "killed-run", psutil.Process(dead_controller.pid))
    dead_controller.kill()
    dead_controller.wait()
    try:
        ended = claim_run_dir(tmp_path)
        assert {int(text.split()[0]) for text in ended} == {p.pid for p in marked}
        for process in marked:
            assert process.wait(timeout=10) is not None
        assert unmarked.poll() is None  # another run's process is not this run dir's
    finally:
        for process in [*marked, unmarked]:
            process.kill()
            process.wait()
    record = json.loads((tmp_path / INSTANCE_FILE).read_text())
    assert record["pid"] == os.getpid() and os.environ[RUN_MARKER] == record["token"] != "killed-run"


def test_processes_started_after_the_claim_carry_its_mark(tmp_path):
    claim_run_dir(tmp_path)
    child = sleeper()
    try:
        assert psutil.Process(child.pid).environ()[RUN_MARKER] == json.loads((tmp_path / INSTANCE_FILE).read_text())["token"]
    finally:
        child.kill()
        child.wait()


def test_a_run_dir_whose_run_is_alive_is_refused(tmp_path):
    live_controller = sleeper()
    try:
        write_instance(tmp_path, "live-run", psutil.Process(live_controller.pid))
        with pytest.raises(RunDirInUse, match=rf"run.dir={tmp_path} belongs to a run still alive \(pid {live_controller.pid}"):
            claim_run_dir(tmp_path)
        assert live_controller.poll() is None
    finally:
        live_controller.kill()
        live_controller.wait()


def test_a_recorded_process_whose_mark_is_unreadable_is_ended_too(tmp_path):
    """Ray's agents write their titles over their environment: the record, refreshed while the run
    lives, names them by pid and start time; a pid reused since is left alone."""
    claim_run_dir(tmp_path)
    record = ProcessRecord(tmp_path, every_s=0.05).start()
    retitled = sleeper({"PATH": os.environ["PATH"]})  # no mark at all
    deadline = time.monotonic() + 10
    while retitled.pid not in [pid for pid, _ in json.loads((tmp_path / INSTANCE_FILE).read_text())["processes"]]:
        assert time.monotonic() < deadline, "the record never listed the child"
        time.sleep(0.05)
    record.stop()
    try:
        saved = json.loads((tmp_path / INSTANCE_FILE).read_text())
        saved["pid"] = 1  # the run that wrote it is "dead": pid 1 never started at that time
        (tmp_path / INSTANCE_FILE).write_text(json.dumps(saved))
        assert [int(text.split()[0]) for text in claim_run_dir(tmp_path)] == [retitled.pid]
        assert retitled.wait(timeout=10) is not None
    finally:
        retitled.kill()
        retitled.wait()

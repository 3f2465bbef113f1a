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
    the run that started it is killed. Returned once its interpreter runs: on a loaded machine
    /proc/<pid>/environ can still show the parent's environment from before the exec."""
    code = "import time; print('up', flush=True); time.sleep(120)"
    process = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stdout.readline() == "up\n"
    return process


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


KILLED_RUN = """
import subprocess, sys, time
from pathlib import Path
from loongsage.controller.run_instance import ProcessRecord, claim_run_dir
run_dir = Path(sys.argv[1])
claim_run_dir(run_dir)
ProcessRecord(run_dir, every_s=0.05).start()
# no mark at all, as a Ray agent that wrote its title over its environment
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={"PATH": sys.argv[2]}, start_new_session=True)
time.sleep(120)
"""


def test_a_recorded_process_whose_mark_is_unreadable_is_ended_too(tmp_path):
    """Ray's agents write their titles over their environment: the record, refreshed while the run
    lives, names them by pid and start time. The run is a process of its own, killed outright; the
    processes it had before its record began (here: none) are not listed."""
    run = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(tmp_path), os.environ["PATH"]])
    deadline = time.monotonic() + 30
    listed: list[int] = []
    while not listed:
        assert time.monotonic() < deadline, "the record never listed the child"
        time.sleep(0.05)
        if (tmp_path / INSTANCE_FILE).exists():
            listed = [pid for pid, _ in json.loads((tmp_path / INSTANCE_FILE).read_text())["processes"]]
    run.kill()
    run.wait()
    orphan = psutil.Process(listed[0])
    try:
        assert RUN_MARKER not in orphan.environ()
        assert [int(text.split()[0]) for text in claim_run_dir(tmp_path)] == listed
        orphan.wait(timeout=10)  # not our child: psutil polls until it is gone
        assert not orphan.is_running()
    finally:
        if orphan.is_running():
            orphan.kill()


def test_the_record_lists_only_what_was_started_since_it_began(tmp_path):
    """A run inside a longer-lived process (a notebook, this test worker) does not take that
    process's older children for its own: a later claim of its run dir would end them."""
    older = sleeper()
    time.sleep(0.2)
    claim_run_dir(tmp_path)
    record = ProcessRecord(tmp_path, every_s=0.05).start()
    newer = sleeper()
    try:
        deadline = time.monotonic() + 10
        while newer.pid not in (listed := [pid for pid, _ in json.loads((tmp_path / INSTANCE_FILE).read_text())["processes"]]):
            assert time.monotonic() < deadline, "the record never listed the newer child"
            time.sleep(0.05)
        assert older.pid not in listed
    finally:
        record.stop()
        for process in (older, newer):
            process.kill()
            process.wait()

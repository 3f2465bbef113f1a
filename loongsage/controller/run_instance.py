"""One run at a time in a run dir, and nothing left of the one before.

A run writes `instance.json` (its token, pid and start time) and puts the token in its
environment before it starts anything (loongsage/run_marker.py), so every process it starts
carries it; every few seconds it adds the processes it has started (pid and start time) to the
file, because Ray's agents rewrite their titles over their environment, where the mark lived. A
run killed outright (SIGKILL, the OOM killer) cannot end its processes: Ray's agents, engines,
relays and sandboxes go on. The next start of the same run dir finds them on this machine, by
their mark or in the file, ends them and says so; a run dir whose run is still alive is refused."""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from pathlib import Path

import psutil

from loongsage.controller.checkpoint import write_atomically
from loongsage.controller.stopping import describe_process, kill_processes
from loongsage.run_marker import RUN_MARKER

INSTANCE_FILE = "instance.json"
RECORD_EVERY_S = 5.0  # how stale the file's process list may be when the run is killed


class RunDirInUse(RuntimeError):
    """Another live run owns this run dir."""


def claim_run_dir(run_dir: Path) -> list[str]:
    """Make this process the run dir's run, after ending what an earlier run of it left on this
    machine; their descriptions (pid and name)."""
    path = run_dir / INSTANCE_FILE
    leftovers: list[psutil.Process] = []
    if path.exists():
        earlier = json.loads(path.read_text())
        # An earlier run in this very process (a test, a notebook) ended its own processes.
        if earlier.get("host") == socket.gethostname() and earlier["pid"] != os.getpid():
            _refuse_if_alive(run_dir, earlier)
            leftovers = _left_by(earlier)
    described = [describe_process(process) for process in leftovers]
    # Killed outright, their run cannot end them; those still here have outlived it already (Ray's
    # agents ignore SIGTERM for seconds: a grace period only delayed this start by 3 s).
    kill_processes(leftovers)
    os.environ[RUN_MARKER] = uuid.uuid4().hex
    _write_record(path, [])
    return described


class ProcessRecord:
    """Keeps instance.json's list of the processes this run has started up to date, on a thread.
    Not the children this process had before the record began, nor theirs: a run inside a
    longer-lived process (a notebook, a test worker) must not list that process's Ray or torch's
    shm manager as its own, or the next claim of the run dir would end them."""

    def __init__(self, run_dir: Path, every_s: float = RECORD_EVERY_S):
        self.path = run_dir / INSTANCE_FILE
        self.every_s = every_s
        self._older = psutil.Process().children()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="process-record", daemon=True)

    def start(self) -> ProcessRecord:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _keep(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                _write_record(self.path, [[child.pid, child.create_time()] for child in self._started_since()])
            except (psutil.Error, OSError):
                continue  # a child gone mid-walk: the next round has it right

    def _started_since(self) -> list[psutil.Process]:
        not_ours = {process.pid for process in self._older if process.is_running()}
        for process in self._older:
            if process.pid in not_ours:
                not_ours.update(descendant.pid for descendant in process.children(recursive=True))
        return [child for child in psutil.Process().children(recursive=True) if child.pid not in not_ours]


def marked_processes(token: str) -> list[psutil.Process]:
    """The processes on this machine whose environment carries `token`, other than this one."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get(RUN_MARKER) == token:
                found.append(process)
        except psutil.Error:  # gone meanwhile, or not ours to read
            continue
    return found


def _left_by(earlier: dict) -> list[psutil.Process]:
    found = {process.pid: process for process in marked_processes(earlier["token"])}
    for pid, create_time in earlier.get("processes", []):
        if pid not in found and _same_process(pid, create_time):
            found[pid] = psutil.Process(pid)
    return list(found.values())


def _same_process(pid: int, create_time: float) -> bool:
    """Whether `pid` is still the process that started at `create_time` (pids are reused)."""
    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 1e-3
    except psutil.Error:
        return False


def _refuse_if_alive(run_dir: Path, earlier: dict) -> None:
    if not _same_process(earlier["pid"], earlier["create_time"]):
        return
    owner = psutil.Process(earlier["pid"])
    raise RunDirInUse(
        f"run.dir={run_dir} belongs to a run still alive (pid {owner.pid}, {' '.join(owner.cmdline())[:200]}): "
        f"stop that run first, or choose another run.dir"
    )


def _write_record(path: Path, processes: list[list]) -> None:
    me = psutil.Process()
    record = {
        "token": os.environ[RUN_MARKER],
        "pid": me.pid,
        "create_time": me.create_time(),
        "host": socket.gethostname(),
        "processes": processes,
    }
    write_atomically(path, json.dumps(record, indent=2))
